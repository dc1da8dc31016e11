"""Starting verld-sim: its command line, its READY line, and the daemon's sim child.

The one place that knows how `python -m verld.sim` is invoked and what it prints
once it serves (`READY <address>`, one line on stdout, then nothing more there):

- `sim_command` builds the argv (`python -P -m verld.sim`: `-P` keeps the working
  directory off the import path, so nothing there can shadow verld or its
  dependencies), `sim_env` the environment for it;
- `parse_ready` turns the READY line into the address (a link path or
  `tcp://127.0.0.1:PORT`), or raises `SimError`;
- `wait_ready` reads that line from a `subprocess.Popen` with a deadline;
- `SimChild` is verld-sim as the daemon's own child on a pty pair
  (`device.port: sim`), started and stopped from asyncio.

Used by the daemon, by `verld.testing` and by the tools (tools/bench, tools/soak).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import verld
from verld.codec.frame.declaration import FrameDeclaration
from verld.config.framefile import dump_declaration
from verld.errors import ServeError

READY = "READY"  #: the first word of the line verld-sim prints once it serves
READY_TIMEOUT = 15.0  #: seconds `SimChild.start` waits for the READY line


class SimError(ServeError):
    """verld-sim did not start (no READY line, a malformed one, or it exited)."""


def sim_command(
    *,
    link: str | None = None,
    tcp: int | None = None,
    codec: str | None = None,
    max_payload: int | None = None,
    control: str | None = None,
    frame: str | None = None,
    extra_args: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """The argv of one verld-sim; options left None are left to its defaults.

    `-P`: the working directory is not put first on its import path (a `verld/` or
    `serial.py` there is never imported); PYTHONPATH and the interpreter's own
    site-packages still count (`sim_env` when verld is found through neither).
    `link`: the symlink to the pty's device end; `tcp`: listen on 127.0.0.1:PORT
    instead (0: any free port); `control`: the control socket's path; `frame`: the
    file of the frame codec's declaration (`--frame`). `extra_args`
    go last (faults, `--seed`, ...; see docs/sim.md for every option).
    """
    if link is not None and tcp is not None:
        raise ValueError("verld-sim takes --link or --tcp, not both")
    argv = [python, "-P", "-m", "verld.sim"]
    if link is not None:
        argv += ["--link", link]
    if tcp is not None:
        argv += ["--tcp", str(tcp)]
    if codec is not None:
        argv += ["--codec", codec]
    if max_payload is not None:
        argv += ["--max-payload", str(max_payload)]
    if control is not None:
        argv += ["--control", control]
    if frame is not None:
        argv += ["--frame", frame]
    argv += list(extra_args)
    return argv


def sim_env() -> dict[str, str] | None:
    """The environment for the verld-sim of `sim_command`: None (this process's) when the
    directory this verld was imported from is on the import path the child gets too,
    else this one with that directory first on PYTHONPATH (verld run from a checkout
    not installed into its Python, found through the working directory `-P` leaves out,
    or an editable install). Adds no trust: whoever may write that directory may
    replace verld itself."""
    root = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(verld.__file__))))
    found = sys.path if sys.flags.safe_path else sys.path[1:]  # ([0]: script or cwd)
    if root in {os.path.realpath(p) for p in found if p}:
        return None
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def parse_ready(line: str | bytes) -> str:
    """The address announced by a READY line (`READY <address>`); SimError otherwise."""
    text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
    word, _, address = text.strip().partition(" ")
    address = address.strip()
    if word != READY or not address:
        got = repr(text) if text else "nothing (end of output)"
        raise SimError(f"verld-sim did not announce 'READY <address>': got {got}")
    return address


def wait_ready(proc: subprocess.Popen[bytes], timeout: float = READY_TIMEOUT) -> str:
    """Read verld-sim's READY line from `proc.stdout` (a pipe); the address.

    SimError when the line is malformed, when the sim exits first, or after
    `timeout` seconds. The process is left running either way: stopping it is
    the caller's business.
    """
    if proc.stdout is None:
        raise ValueError("wait_ready needs the sim's stdout as a pipe")
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SimError(f"verld-sim printed no READY line within {timeout:g} s")
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            code = proc.wait()
            if not buf:
                raise SimError(f"verld-sim exited {code} before it was ready")
            break
        buf += chunk
    return parse_ready(buf.partition(b"\n")[0])


def die_with_parent() -> None:
    """In a child before exec: get SIGTERM when the parent dies, even by SIGKILL.

    For `preexec_fn` (Linux prctl PR_SET_PDEATHSIG; a no-op where it is missing).
    """
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _frame_file(directory: str, frame: FrameDeclaration) -> str:
    """The frame codec's declaration written for the sim's `--frame` (a few hundred bytes
    into its own fresh directory: no wait worth a thread)."""
    path = Path(directory) / "frame.yaml"
    path.write_text(dump_declaration(frame), encoding="utf-8")
    return str(path)


@dataclass
class SimChild:
    """verld-sim running as our child on a pty pair (the daemon's `device.port: sim`).

    `start` makes a private temp dir for the link, starts the sim in its own
    session with `die_with_parent`, and waits up to READY_TIMEOUT for its READY
    line (SimError otherwise, with the child killed and the dir removed); `stop`
    terminates it (SIGKILL after 3 s) and removes the dir.
    """

    proc: asyncio.subprocess.Process
    link: str
    tmpdir: str

    @classmethod
    async def start(
        cls,
        codec: str = "verl",
        max_payload: int = 4096,
        extra_args: Sequence[str] = (),
        frame: FrameDeclaration | None = None,
    ) -> SimChild:
        tmpdir = tempfile.mkdtemp(prefix="verld-sim-")
        link = os.path.join(tmpdir, "tty")
        frame_file = None if frame is None else _frame_file(tmpdir, frame)
        argv = sim_command(
            link=link,
            codec=codec,
            max_payload=max_payload,
            frame=frame_file,
            extra_args=extra_args,
        )
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=asyncio.subprocess.PIPE,
                env=sim_env(),
                preexec_fn=die_with_parent,
                # Its own session: Ctrl-C on `make run` reaches verld, which then stops the
                # sim itself after draining, instead of the sim vanishing first.
                start_new_session=True,
            )
        except BaseException:
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), READY_TIMEOUT)
        except TimeoutError:
            line = b""
        try:
            parse_ready(line)
        except SimError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise SimError(f"verld-sim did not start (exit {proc.returncode})") from None
        return cls(proc, link, tmpdir)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 3)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        shutil.rmtree(self.tmpdir, ignore_errors=True)
