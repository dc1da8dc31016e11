"""The processes of a bench run and what /proc says about them: the one place for both.

Every child goes through `Procs.spawn`: in its own session (a Ctrl-C in the terminal
reaches only the bench, which then stops its children in order), with SIGTERM from the
kernel if the bench dies (PR_SET_PDEATHSIG, `verld.sim.launch.die_with_parent`), and
stopped by pid at the end (`stop_all`, from the run's `finally`) with
`verld.testing.stop_process`. The sim's control socket is `verld.testing.sim_control`.
verld.testing's `SimProc` and `DaemonProc` start children in the caller's session with
no death signal, and DaemonProc neither runs another checkout's verld (tools/bench-ab)
nor times READY=1, so `Sim` and `Verld` here are the bench's own, on `verld.sim.launch`.

CPU is read at two marks (`CpuMark`): /proc/PID/stat (utime + stime of every thread,
10 ms ticks) and /proc/PID/task/*/schedstat (nanoseconds on CPU, every thread).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from verld.client import Client, ClientError
from verld.sim.launch import SimError, die_with_parent, sim_command, wait_ready
from verld.testing import sim_control, stop_process

_TICK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """The bench cannot go on (a process did not start, a generator failed to report)."""


class Procs:
    """Every child process of the run, stopped by pid at the end."""

    def __init__(self) -> None:
        self._live: list[subprocess.Popen[bytes]] = []

    def spawn(
        self,
        args: Sequence[str],
        *,
        stdin: int | IO[bytes] | None = subprocess.DEVNULL,
        stdout: int | IO[bytes] | None = subprocess.DEVNULL,
        stderr: int | IO[bytes] | None = subprocess.DEVNULL,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            list(args),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - no threads here; cleanup if we die
        )
        self._live.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace: float = 10.0) -> int:
        """SIGTERM, up to `grace` seconds, then SIGKILL; the exit code."""
        if proc in self._live:
            self._live.remove(proc)
        with contextlib.suppress(OSError):  # a pipe the child left
            return stop_process(proc, grace=grace)
        return proc.wait()

    def stop_all(self) -> None:
        """Stop every child still known, newest first (generators, bridges, then sims)."""
        for proc in reversed(list(self._live)):
            self.stop(proc, grace=3.0)


class LineReader:
    """Lines from a child's stdout pipe, with a deadline (a hung child cannot hang the bench)."""

    def __init__(self, proc: subprocess.Popen[bytes], what: str) -> None:
        assert proc.stdout is not None
        self.proc, self.what, self.fd, self.buf = proc, what, proc.stdout.fileno(), b""

    def line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{self.what}: no output within {timeout:.0f} s")
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    code = self.proc.wait()
                    raise BenchError(f"{self.what} exited {code} without finishing its output")
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")

    def expect(self, prefix: str, timeout: float) -> str:
        line = self.line(timeout)
        if not line.startswith(prefix):
            raise BenchError(f"{self.what}: expected {prefix.strip()}, got {line[:300]!r}")
        return line


# --- /proc ----------------------------------------------------------------------------------


def sched_ns(pid: int) -> int:
    """Nanoseconds on CPU, summed over the threads of `pid` (schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with (
            contextlib.suppress(FileNotFoundError, ProcessLookupError),
            open(f"/proc/{pid}/task/{tid}/schedstat") as f,
        ):
            total += int(f.read().split()[0])
    return total


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) in KiB."""
    with open(f"/proc/{pid}/status") as f:
        pairs = (line.partition(":") for line in f)
        return {k: int(v.split()[0]) for k, _, v in pairs if k in ("VmRSS", "VmHWM")}


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds used: user and system time from stat (10 ms ticks), schedstat total."""

    user: float
    system: float
    sched: float

    @property
    def stat(self) -> float:
        return self.user + self.system


@dataclass
class CpuMark:
    """CPU counters of some processes at one instant."""

    t: float
    stat: dict[int, tuple[float, float]]  #: pid → (user, system) seconds
    sched: dict[int, int]

    @classmethod
    def take(cls, pids: Sequence[int]) -> CpuMark:
        stat: dict[int, tuple[float, float]] = {}
        sched: dict[int, int] = {}
        for pid in pids:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
                stat[pid] = int(fields[11]) / _TICK, int(fields[12]) / _TICK
                sched[pid] = sched_ns(pid)
        return cls(time.monotonic(), stat, sched)

    def since(self, earlier: CpuMark, pids: Sequence[int]) -> CpuUse | None:
        """What `pids` used together between the marks (None if none was there at both)."""
        both = [p for p in pids if p in self.stat and p in earlier.stat]
        if not both:
            return None
        return CpuUse(
            sum(self.stat[p][0] - earlier.stat[p][0] for p in both),
            sum(self.stat[p][1] - earlier.stat[p][1] for p in both),
            sum(self.sched[p] - earlier.sched[p] for p in both) / 1e9,
        )


# --- helpers ------------------------------------------------------------------------------------


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def free_port() -> int:
    """A TCP port on loopback nobody listens on (yet)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def await_listening(proc: subprocess.Popen[bytes], port: int, what: str, log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited {proc.returncode}:\n{tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.02)
    raise BenchError(f"{what} did not listen on 127.0.0.1:{port}:\n{tail(log)}")


def flush_pty(path: str) -> None:
    """Drop whatever waits in the pty for the link end (before a path opens it)."""
    import termios

    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        termios.tcflush(fd, termios.TCIOFLUSH)
    finally:
        os.close(fd)


class Server:
    """A program listening on a loopback TCP port or a Unix socket (socat, mbusd, mosquitto),
    its output in `log`; ready once it accepts a connection."""

    def __init__(
        self, procs: Procs, args: Sequence[str], log: Path, *, port: int = 0, sock: str = ""
    ) -> None:
        self.procs, self.log_path, self.port, self.socket = procs, log, port, sock
        with open(log, "ab") as out:
            self.proc = procs.spawn(args, stdout=out, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        if port:
            await_listening(self.proc, port, Path(args[0]).name, log)
        deadline = time.monotonic() + 10
        while sock and not os.path.exists(sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"{args[0]} did not listen on {sock}:\n{tail(log)}")
            time.sleep(0.005)

    def stop(self, grace: float = 10.0) -> int:
        code = self.procs.stop(self.proc, grace)
        if self.socket:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket)
        return code


# --- the simulator and verld ---------------------------------------------------------------------


class Sim:
    """verld-sim on a pty in `tmp` (`name` keeps its link and control socket apart)."""

    def __init__(
        self,
        procs: Procs,
        tmp: Path,
        *,
        max_payload: int | None = None,
        codec: str | None = None,
        extra_args: Sequence[str] = (),
        name: str = "dev",
    ) -> None:
        self.link, self.control_path = str(tmp / f"{name}.tty"), str(tmp / f"{name}.ctl")
        args = sim_command(
            link=self.link,
            control=self.control_path,
            codec=codec,
            max_payload=max_payload,
            extra_args=extra_args,
        )
        with open(tmp / f"{name}-sim.log", "ab") as log:
            self.proc = procs.spawn(args, stdout=subprocess.PIPE, stderr=log)
        try:
            wait_ready(self.proc, 20)
        except SimError as exc:
            raise BenchError(str(exc)) from None
        self.pid = self.proc.pid

    def control(self, command: str) -> dict[str, Any]:
        """One control command; its JSON answer (BenchError when it says not ok)."""
        answer = sim_control(self.control_path, command)
        if not answer.get("ok"):
            raise BenchError(f"verld-sim refused {command!r}: {answer}")
        return answer


def verl_config(link: str, window: int, heartbeat: float = 1.0) -> dict[str, Any]:
    """The bench's verl daemon: no retries (a lost frame must show up as an error), INFO logs."""
    return {
        "device": {"port": link, "timeout": 10.0, "retry": 0, "window": window},
        "heartbeat": {"interval": heartbeat, "misses": 3, "timeout": 1.0},
        "api": {"mode": "0600"},
        "log": {"level": "INFO", "format": "json"},
    }


class Verld:
    """verld on `config` (its `api.socket` set to `dir/verld.sock`); `ready_s` is process
    start → READY=1 on a $NOTIFY_SOCKET the bench binds. `checkout`: run the verld package
    of another checkout (tools/bench-ab) instead of the one `python -m verld` finds first."""

    def __init__(
        self, procs: Procs, dir: Path, config: dict[str, Any], checkout: Path | None = None
    ) -> None:
        dir.mkdir(parents=True, exist_ok=True)
        self.procs, self.dir = procs, dir
        self.socket, self.log_path = str(dir / "verld.sock"), dir / "verld.log"
        config = {**config, "api": {**config.get("api", {}), "socket": self.socket}}
        (dir / "verld.yaml").write_text(yaml.safe_dump(config))
        notify_path = str(dir / "notify.sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(notify_path)
        with (
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify,
            open(self.log_path, "wb") as log,
        ):
            notify.bind(notify_path)
            started = time.perf_counter()
            self.proc = procs.spawn(
                [*verld_command(checkout), "--config", str(dir / "verld.yaml")],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "NOTIFY_SOCKET": notify_path},
            )
            self.pid = self.proc.pid
            self.ready_s = self._await_ready(notify, started)
        os.unlink(notify_path)
        deadline = time.monotonic() + 20
        while self.status()["link"]["state"] != "up":
            if time.monotonic() > deadline:
                raise BenchError(f"verld's link did not come up:\n{tail(self.log_path)}")
            time.sleep(0.02)

    def _await_ready(self, notify: socket.socket, started: float) -> float:
        while (left := started + 30 - time.perf_counter()) > 0:
            if not select.select([notify], [], [], min(left, 0.2))[0]:
                if self.proc.poll() is not None:
                    raise BenchError(f"verld exited {self.proc.returncode}:\n{tail(self.log_path)}")
                continue
            if "READY=1" in notify.recv(4096).decode(errors="replace").split("\n"):
                return time.perf_counter() - started
        raise BenchError(f"verld sent no READY=1 within 30 s:\n{tail(self.log_path)}")

    def status(self) -> dict[str, Any]:
        try:
            with Client(self.socket, timeout=10.0) as c:
                return c.status()
        except (ClientError, OSError) as exc:
            raise BenchError(f"verld status failed: {exc}\n{tail(self.log_path)}") from None

    def stop(self) -> int:
        """SIGTERM (verld drains and exits 0); its exit code."""
        return self.procs.stop(self.proc)


def verld_command(checkout: Path | None, module: str = "verld") -> list[str]:
    """`python -m MODULE`, or MODULE from another checkout (`-m` would import the verld
    of the current directory first)."""
    if checkout is None:
        return [sys.executable, "-m", module]
    run = (
        "import sys, runpy; sys.path.insert(0, sys.argv.pop(1)); "
        f"runpy.run_module('{module}', run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", run, str(checkout)]
