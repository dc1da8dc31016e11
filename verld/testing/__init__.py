"""Helpers for testing against verld: real verld-sim and verld processes, no mocks.

verld's own tests (tests/), its tools (tools/bench, tools/soak) and third-party
tests of programs that talk to verld share these, which is why they ship in the
package (`from verld.testing import SimProc, DaemonProc, write_config`):

- `SimProc`: verld-sim (docs/sim.md) as a subprocess on a pty (or TCP) with a
  control socket, started from `verld.sim.launch` and waited for (READY line);
- `sim_control` / `sim_control_async`: the client of the sim's control socket
  (one text command per line, one JSON line back; docs/sim.md, "Runtime control");
- `write_config`: a daemon config for tests (socket in a temp dir, quick
  heartbeat and reconnect; docs/config.md for every key);
- `DaemonProc`: verld as a subprocess, waited for until it listens (and, by
  default, until its link is up), with connected `verld.client.Client`s;
- `Processes`: the owner of what a test starts (sims, daemons, other programs,
  anything `Stoppable`), which stops it all at its end;
- `wait_for`: poll a condition with a deadline;
- `ManualClock` and the session rig (`verld.testing.session`): a
  `verld.alarm.Clock` whose time moves only when told, a fake transport and
  device, and `SessionRig`, the one way tests drive a session and its supervisor
  without ports or sleeps.

Everything a helper starts is stopped by pid in its `stop()`, which may be called
again; the one way to be sure it is called is to let something own the process:
`with SimProc(tmp) as sim:` stops it when the block ends, whatever happens in it, and
`Processes` (verld's suite has it as the `procs` fixture) owns all a test starts and
stops them, newest first, at its own end. As a safety net for a test that
fails before its clean-up, `running()` and `stop_leftovers(before)` stop whatever
was started since (verld's own suite does so after every test). Failures raise
HarnessError, an AssertionError, so a test meeting one fails rather than errors.

Unix socket paths are limited to 107 bytes: give these helpers a short directory
(`tempfile.mkdtemp()`; pytest's `tmp_path` is usually short enough).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol, Self, TypeVar

import yaml

from verld.client import Client
from verld.sim.launch import SimError, sim_command, wait_ready
from verld.testing.clock import ManualClock

__all__ = [
    "DaemonProc",
    "HarnessError",
    "ManualClock",
    "Processes",
    "SimProc",
    "Stoppable",
    "running",
    "sim_control",
    "sim_control_async",
    "stop_leftovers",
    "stop_process",
    "wait_for",
    "write_config",
]


class HarnessError(AssertionError):
    """A helper's process did not start, or a wait timed out."""


def wait_for(
    pred: Callable[[], bool],
    timeout: float = 10.0,
    what: str | Callable[[], str] = "condition",
) -> None:
    """Poll `pred` every 10 ms until it is true; HarnessError after `timeout` seconds.

    `what` names the condition in the error; a callable is asked only then (so it
    can say what was last seen).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise HarnessError(f"timed out waiting for {what() if callable(what) else what}")


#: every process a helper here started and nobody stopped yet, by pid
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def _started(proc: subprocess.Popen[bytes]) -> None:
    _STARTED[proc.pid] = proc


def running() -> set[int]:
    """The pids of the processes the helpers here started and nobody stopped (but
    those started `shared`)."""
    return set(_STARTED)


def stop_leftovers(before: set[int]) -> list[int]:
    """Stop the helpers' processes started since `running()` said `before` (a test
    that failed before its own clean-up, say); their pids."""
    left = [pid for pid in _STARTED if pid not in before]
    for pid in left:
        stop_process(_STARTED[pid], grace=5.0)
    return left


def stop_process(
    proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, grace: float = 10.0
) -> int:
    """Send `sig`, wait up to `grace` seconds, then SIGKILL; close its pipes; the exit code."""
    _STARTED.pop(proc.pid, None)
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
            proc.wait(grace)
        except ProcessLookupError:
            proc.wait()
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    return proc.returncode


# --- the sim's control socket -------------------------------------------------------------


def sim_control(path: str, command: str, *, timeout: float = 5.0) -> dict[str, Any]:
    """One command to verld-sim's control socket `path`; its JSON answer.

    The answer is returned whether or not it says `"ok": true` (the caller
    decides); a connection closed before the answer's end is HarnessError.
    """
    if "\n" in command:
        raise ValueError(f"a control command is one line: {command!r}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(command.encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                raise HarnessError(f"verld-sim's control socket closed, no answer to {command!r}")
            reply += chunk
    answer: dict[str, Any] = json.loads(reply)
    return answer


async def sim_control_async(
    path: str,
    command: str,
    *,
    timeout: float = 5.0,  # noqa: ASYNC109 - the socket's timeout, as in sim_control
) -> dict[str, Any]:
    """`sim_control` from a coroutine (run in a worker thread: the loop never blocks)."""
    return await asyncio.to_thread(sim_control, path, command, timeout=timeout)


# --- verld-sim ---------------------------------------------------------------------------


class SimProc:
    """verld-sim as a subprocess, its link, control socket and log in `tmp`.

    `args` go to verld-sim as they are (faults, `--seed`, `--tcp 0`, ...); with
    `tcp=True` (or `--tcp` in `args`) it listens on TCP instead of a pty. `codec`
    None leaves verld-sim's default (verl). `address` is what its READY line
    announced: the link path, or `tcp://127.0.0.1:PORT`.
    """

    def __init__(
        self,
        tmp: Path,
        *args: str,
        codec: str | None = "verl",
        tcp: bool = False,
        timeout: float = 15.0,
        shared: bool = False,
    ) -> None:
        """`shared`: it outlives the test that starts it (a pool of rigs): never one of
        `stop_leftovers`'s."""
        self.link = str(tmp / "dev.tty")  #: the pty's link (unused with TCP)
        self.control_path = str(tmp / "sim.ctl")
        self.log_path = tmp / "sim.log"  #: verld-sim's stderr (its structured log)
        on_tcp = tcp or "--tcp" in args
        cmd = sim_command(
            link=None if on_tcp else self.link,
            tcp=0 if tcp and "--tcp" not in args else None,
            codec=codec,
            control=self.control_path,
            extra_args=args,
        )
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
        if not shared:
            _started(self.proc)
        try:
            self.address = wait_ready(self.proc, timeout)
        except SimError as exc:
            self.stop()
            raise HarnessError(f"{exc}:\n{self.log()[-4000:]}") from None
        self.ready = f"READY {self.address}"  #: the READY line, stripped

    @property
    def pid(self) -> int:
        return self.proc.pid

    def control(self, command: str) -> dict[str, Any]:
        """One control command (docs/sim.md, "Runtime control"); its JSON answer."""
        return sim_control(self.control_path, command)

    def status(self) -> dict[str, Any]:
        """The `status` answer: faults, counters, plugged state."""
        return self.control("status")

    def counters(self) -> dict[str, int]:
        """What the sim counted so far (frames, drops, corruptions, unplugs, ...)."""
        counters: dict[str, int] = self.status()["counters"]
        return counters

    def log(self) -> str:
        """verld-sim's stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stop it (SIGKILL after 5 s); its exit code (0: a clean stop)."""
        return stop_process(self.proc, sig, grace=5.0)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- verld -------------------------------------------------------------------------------


def write_config(tmp: Path, port: str, overrides: Mapping[str, Any] | None = None) -> Path:
    """`tmp/verld.yaml` for a test daemon on `port`; its path.

    The defaults: socket `tmp/verld.sock`, 1 s call timeout without retries, 1 s
    heartbeat (3 misses, 0.5 s timeout), reconnect 0.05..0.5 s, DEBUG logs in JSON.
    `overrides` maps a section to the keys to change in it (or to a whole value).
    """
    cfg: dict[str, Any] = {
        "device": {"port": port, "timeout": 1.0, "retry": 0},
        "heartbeat": {"interval": 1.0, "misses": 3, "timeout": 0.5},
        "reconnect": {"initial": 0.05, "max": 0.5},
        "api": {"socket": str(tmp / "verld.sock")},
        "log": {"level": "DEBUG", "format": "json"},
    }
    for section, values in (overrides or {}).items():
        if isinstance(values, dict):
            cfg.setdefault(section, {}).update(values)
        else:
            cfg[section] = values
    path = tmp / "verld.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class DaemonProc:
    """verld as a subprocess on `config`; `client()` gives connected blocking clients.

    Its stdout and stderr go to `verld.log` beside the config. The constructor
    returns once the API socket accepts connections and, with `wait_up`, once the
    link is up; `env` adds to the environment.
    """

    def __init__(
        self,
        config: Path,
        *,
        wait_up: bool = True,
        env: Mapping[str, str] | None = None,
        timeout: float = 15.0,
        shared: bool = False,
        args: Sequence[str] = (),
    ) -> None:
        """`args`: more of verld's options, after `--config` (they win over the file)."""
        self.config = config
        self.socket: str = yaml.safe_load(config.read_text())["api"]["socket"]
        self.log_path = config.parent / "verld.log"
        self._log: IO[bytes] = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "verld", "--config", str(config), *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        if not shared:  # (`shared`: as SimProc's)
            _started(self.proc)
        self._clients: list[Client] = []
        try:
            wait_for(self._listening, timeout, "verld to listen")
            if wait_up:
                self.wait_state("up")
        except BaseException:
            self.stop()
            raise

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise HarnessError(f"verld exited {self.proc.returncode}:\n{self.log()}")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(self.socket)
        except OSError:
            return False
        return True

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, **kw: Any) -> Client:
        """A connected `Client` (10 s timeout), closed by `stop()`; `kw` go to Client."""
        c = Client(self.socket, timeout=10.0, **kw).connect()
        self._clients.append(c)
        return c

    def status(self) -> dict[str, Any]:
        """The `status` reply, on a connection of its own."""
        with Client(self.socket, timeout=5.0) as c:
            return c.status()

    def wait_state(
        self, state: str, timeout: float = 10.0, min_generation: int = 0
    ) -> dict[str, Any]:
        """Wait until the link is in `state` at `min_generation` or later; its status."""
        seen: dict[str, Any] = {}

        def check() -> bool:
            nonlocal seen
            seen = self.status()["link"]
            return bool(seen["state"] == state and seen["generation"] >= min_generation)

        wait_for(check, timeout, lambda: f"link {state} (last seen {seen})")
        return seen

    def log(self) -> str:
        """verld's output so far."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def fd_count(self) -> int:
        """Open file descriptors of the daemon (Linux /proc)."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Close the clients, send `sig` (SIGKILL after 10 s); the exit code."""
        for c in self._clients:
            c.close()
        code = stop_process(self.proc, sig, grace=10.0)
        self._log.close()
        return code

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- an owner ----------------------------------------------------------------------------


class Stoppable(Protocol):
    """What `Processes` owns: anything with a `stop()` that may be called again."""

    def stop(self) -> object: ...


_P = TypeVar("_P", bound=Stoppable)


class Processes:
    """The owner of the processes a test starts: each is stopped when the owner is
    (`stop()`, the end of its `with` block, or the `procs` fixture's teardown), newest
    first, whether the test passed or not.

    `sim(...)` and `daemon(...)` start and own a SimProc and a DaemonProc; `own(x)` takes
    any other thing with a `stop()` (a rig of tests/, say) and `popen(cmd)` starts a
    plain subprocess, stopped by `stop_process` (SIGTERM, SIGKILL after 10 s).
    """

    def __init__(self) -> None:
        self._stops: list[Callable[[], object]] = []  #: in the order they were owned

    def own(self, thing: _P) -> _P:
        """Own `thing` (already started): stopped with the rest; `thing` itself."""
        self._stops.append(thing.stop)
        return thing

    def sim(self, tmp: Path, *args: str, **kw: Any) -> SimProc:
        """A started `SimProc(tmp, *args, **kw)`, owned."""
        return self.own(SimProc(tmp, *args, **kw))

    def daemon(self, config: Path, **kw: Any) -> DaemonProc:
        """A started `DaemonProc(config, **kw)`, owned."""
        return self.own(DaemonProc(config, **kw))

    def popen(self, cmd: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """`subprocess.Popen(cmd, **kw)`, owned (and one of `running()` until stopped)."""
        proc: subprocess.Popen[Any] = subprocess.Popen(cmd, **kw)
        _started(proc)
        self._stops.append(lambda: stop_process(proc))
        return proc

    def stop(self) -> None:
        """Stop everything owned, newest first; every one is stopped even if one fails
        to (the first failure is raised after)."""
        failure: BaseException | None = None
        while self._stops:
            try:
                self._stops.pop()()
            except BaseException as exc:  # raised once the others are stopped
                failure = failure or exc
        if failure is not None:
            raise failure

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
