"""The processes a bench run starts, and what /proc says about them.

Strategy: every child goes through `Procs.spawn`, which remembers it; `stop_all`
(called from the runner's `finally`, so also on Ctrl-C, SIGTERM or a failure)
stops each one by pid: SIGTERM, a grace period, then SIGKILL. Children run in
their own session, so a Ctrl-C in the terminal reaches only the bench, which then
stops them in order; and they get SIGTERM from the kernel if the bench dies
without cleaning up (PR_SET_PDEATHSIG).

CPU comes from /proc/PID/stat (utime+stime, in clock ticks of 10 ms) and, where
ticks are too coarse (idle), from /proc/PID/task/*/schedstat (nanoseconds on CPU).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
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
from verld.testing import sim_control

_TICK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """The bench cannot go on (a process did not start, a worker failed to report)."""


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
        """SIGTERM, wait up to `grace` seconds, then SIGKILL; the exit code."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):  # stdin: a pipe the child left
                    stream.close()
        if proc in self._live:
            self._live.remove(proc)
        return proc.returncode

    def stop_all(self) -> None:
        """Stop every child still known, newest first (workers before bridges before sim)."""
        for proc in reversed(list(self._live)):
            self.stop(proc, grace=3.0)


class LineReader:
    """Lines from a child's stdout pipe, with a deadline (a hung child cannot hang the bench)."""

    def __init__(self, proc: subprocess.Popen[bytes], what: str) -> None:
        assert proc.stdout is not None
        self.proc, self.what = proc, what
        self.fd = proc.stdout.fileno()
        self.buf = b""

    def line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{self.what}: no output within {timeout:.0f} s")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    code = self.proc.wait()
                    raise BenchError(f"{self.what} exited {code} without finishing its output")
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")


# --- /proc ----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime, stime) of every thread of `pid`, in seconds (10 ms resolution)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


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
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


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
                stat[pid] = cpu_seconds(pid)
                sched[pid] = sched_ns(pid)
        return cls(time.monotonic(), stat, sched)

    def since(self, earlier: CpuMark, pid: int) -> CpuUse | None:
        """What `pid` used between the marks (None if it was not there at both)."""
        if pid not in self.stat or pid not in earlier.stat:
            return None
        (u1, s1), (u0, s0) = self.stat[pid], earlier.stat[pid]
        return CpuUse(u1 - u0, s1 - s0, (self.sched[pid] - earlier.sched[pid]) / 1e9)


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds used: user and system time from stat (10 ms ticks), schedstat total."""

    user: float
    system: float
    sched: float

    @property
    def stat(self) -> float:
        return self.user + self.system


# --- the simulator ----------------------------------------------------------------------------


class Sim:
    """verld-sim on a pty: the one device every path of the run talks to.

    `codec` and `extra_args` (e.g. `--units 1,2`) for a sim of another kind (the Modbus
    rounds' slave); `name` keeps its link and control socket apart from another sim's.
    """

    def __init__(
        self,
        procs: Procs,
        tmp: Path,
        max_payload: int | None,
        *,
        codec: str | None = None,
        extra_args: Sequence[str] = (),
        name: str = "dev",
    ) -> None:
        self.link = str(tmp / f"{name}.tty")
        self.control_path = str(tmp / ("sim.ctl" if name == "dev" else f"{name}.ctl"))
        args = sim_command(
            link=self.link,
            control=self.control_path,
            codec=codec,
            max_payload=max_payload,
            extra_args=extra_args,
        )
        self.proc = procs.spawn(args, stdout=subprocess.PIPE)
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


def flush_pty(path: str) -> None:
    """Drop whatever waits in the pty for the link end (before a relay opens it)."""
    import termios

    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        termios.tcflush(fd, termios.TCIOFLUSH)
    finally:
        os.close(fd)


# --- the bridges -------------------------------------------------------------------------------


class Socat:
    """socat relaying one Unix-socket client to the pty (it cannot multiplex clients)."""

    def __init__(self, procs: Procs, tmp: Path, link: str) -> None:
        self.socket = str(tmp / "socat.sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
        pts = os.path.realpath(link)
        args = ["socat", f"UNIX-LISTEN:{self.socket}", f"FILE:{pts},raw,echo=0"]
        self.procs = procs
        self.proc = procs.spawn(args, stderr=subprocess.PIPE)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"socat did not listen: {self.stderr()}")
            time.sleep(0.005)

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace").strip()

    def stop(self) -> None:
        """socat leaves once its client closes; make sure, and remove its socket file."""
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            pass
        self.procs.stop(self.proc)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)


class Verld:
    """verld on the sim's pty; `ready_s` is process start → READY=1 on $NOTIFY_SOCKET.

    `checkout`: run the verld package of another checkout (tools/bench-ab) instead of
    the one `python -m verld` finds first. `config`: the whole config to run with
    (`socket` is filled in as `api.socket`) instead of the bench's verl one. `ports`:
    links of virtual serial ports to add to the bench's config (`ports:`).
    """

    def __init__(
        self,
        procs: Procs,
        tmp: Path,
        link: str,
        window: int,
        serial: int,
        checkout: Path | None = None,
        *,
        config: dict[str, Any] | None = None,
        ports: Sequence[str] = (),
    ) -> None:
        self.procs = procs
        self.socket = str(tmp / "verld.sock")
        self.log_path = tmp / f"verld-{serial}.log"
        settings = _verld_config(link, self.socket, window)
        if ports:
            settings["ports"] = [{"link": port, "mode": "0600"} for port in ports]
        if config is not None:
            settings = {**config, "api": {**config.get("api", {}), "socket": self.socket}}
        config_path = tmp / f"verld-{serial}.yaml"
        config_path.write_text(yaml.safe_dump(settings))
        notify_path = str(tmp / f"notify-{serial}.sock")
        with (
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify,
            open(self.log_path, "wb") as log,
        ):
            notify.bind(notify_path)
            env = {**os.environ, "NOTIFY_SOCKET": notify_path}
            started = time.perf_counter()
            self.proc = procs.spawn(
                [*_verld_command(checkout), "--config", str(config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            self.ready_s = self._await_ready(notify, started)
        os.unlink(notify_path)
        self.pid = self.proc.pid
        self._await_link_up()

    def _await_ready(self, notify: socket.socket, started: float) -> float:
        deadline = started + 30
        while (left := deadline - time.perf_counter()) > 0:
            ready, _, _ = select.select([notify], [], [], min(left, 0.2))
            if not ready:
                if self.proc.poll() is not None:
                    raise BenchError(f"verld exited {self.proc.returncode}:\n{self.log_tail()}")
                continue
            message = notify.recv(4096).decode(errors="replace")
            if "READY=1" in message.split("\n"):
                return time.perf_counter() - started
        raise BenchError(f"verld sent no READY=1 within 30 s:\n{self.log_tail()}")

    def _await_link_up(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.status()["link"]["state"] == "up":
                return
            time.sleep(0.02)
        raise BenchError(f"verld's link did not come up:\n{self.log_tail()}")

    def status(self) -> dict[str, Any]:
        try:
            with Client(self.socket, timeout=10.0) as c:
                return c.status()
        except (ClientError, OSError) as exc:
            raise BenchError(f"verld status failed: {exc}\n{self.log_tail()}") from None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> int:
        """SIGTERM (verld drains and exits 0); its exit code."""
        return self.procs.stop(self.proc)


def _verld_command(checkout: Path | None) -> list[str]:
    if checkout is None:
        return [sys.executable, "-m", "verld"]
    # `python -m verld` would import the verld of the current directory first
    run = (
        "import sys, runpy; sys.path.insert(0, sys.argv.pop(1)); "
        "runpy.run_module('verld', run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", run, str(checkout)]


def _verld_config(link: str, sock: str, window: int) -> dict[str, Any]:
    """No retries (a lost frame must show up as an error), a 1 s heartbeat, INFO logs."""
    return {
        "device": {"port": link, "timeout": 10.0, "retry": 0, "window": window},
        "heartbeat": {"interval": 1.0, "misses": 3, "timeout": 1.0},
        "api": {"socket": sock, "mode": "0600"},
        "log": {"level": "INFO", "format": "json"},
    }
