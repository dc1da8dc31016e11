"""A real Modbus RTU bus for tests: a pty pair (socat) and pymodbus's slave on one end.

    with PtyCable(tmp_path) as cable, PymodbusSlave(cable.device_path, units=(1, 2)):
        ...  # the master (verld, or pymodbus's client) opens cable.host_path

- `PtyCable`: two linked ptys from socat, `host_path` for the master and
  `device_path` for the slave; `unplug()` ends socat, so both ptys vanish and
  whoever holds them open sees a hang-up (EIO), as with a USB-serial adapter
  pulled out; `replug()` makes a new pair on the same paths.
- `PymodbusSlave`: tests/modbus_slave.py (pymodbus's RTU server, tables and
  options described there) as a subprocess, waited for until it prints READY.

Both stop only the process they started, by pid, and are context managers; the
children get SIGTERM if the test process dies (`die_with_parent`, PR_SET_PDEATHSIG:
strictly, when the *thread* that started them ends, so start, replug and restart
them from a thread that outlives them, such as the main one fixtures run in, not
from `asyncio.to_thread`). A hang-up ends
the slave (exit 3, one line on stderr): after `unplug()`, `replug()` the cable and
`restart()` the slave.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from verld.sim.launch import die_with_parent
from verld.testing import HarnessError, stop_process, wait_for

__all__ = ["SLAVE_EXIT_HANGUP", "SLAVE_SCRIPT", "SOCAT", "PtyCable", "PymodbusSlave"]

SOCAT = shutil.which("socat") or "/usr/bin/socat"
SLAVE_SCRIPT = Path(__file__).resolve().with_name("modbus_slave.py")
SLAVE_EXIT_HANGUP = 3  #: modbus_slave.py's exit code when its tty hangs up


class PtyCable:
    """A pair of linked ptys, `host_path` ↔ `device_path`, made by socat (raw, no echo).

    Both paths are symlinks in `directory` (`<name>-host.tty`, `<name>-device.tty`)
    that exist exactly while the cable is plugged. Plugged on construction.
    """

    def __init__(self, directory: Path, *, name: str = "cable", timeout: float = 5.0) -> None:
        self.host_path = str(directory / f"{name}-host.tty")  #: the master's end (verld)
        self.device_path = str(directory / f"{name}-device.tty")  #: the slave's end
        self.log_path = directory / f"{name}-socat.log"  #: socat's stderr (-d -d)
        self.timeout = timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.replug()

    @property
    def plugged(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _links(self) -> tuple[str, str]:
        return self.host_path, self.device_path

    def replug(self) -> None:
        """Start socat (if it is not running) and wait until both ends exist."""
        if self.plugged:
            return
        self._reap()
        for link in self._links():  # left by a socat that was killed hard
            if os.path.islink(link):
                os.unlink(link)
        cmd = [SOCAT, "-d", "-d"] + [f"pty,rawer,link={link}" for link in self._links()]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl; no leak if we die
            )
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise HarnessError(f"socat exited {proc.returncode}:\n{self.log()[-2000:]}")
            return all(os.path.exists(link) for link in self._links())

        try:
            wait_for(ready, self.timeout, "socat's two ptys")
        except BaseException:
            self.unplug()
            raise

    plug = replug

    def unplug(self) -> None:
        """End socat: both ptys vanish, their holders see a hang-up; the links go too."""
        self._reap()
        for link in self._links():
            if os.path.islink(link):
                os.unlink(link)

    close = unplug

    def _reap(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace=self.timeout)
            self.proc = None

    def log(self) -> str:
        """socat's stderr so far (its -d -d notices: the pts names, its exit)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class PymodbusSlave:
    """tests/modbus_slave.py serving `units` on the tty `port`, started and READY.

    `silent` units get no answer at all; units in neither list get pymodbus's
    default answer (exception 4). Its stderr (pymodbus's warnings, the hang-up
    line, requests with `log_requests`) is kept in a temporary file: `log()`.
    """

    def __init__(
        self,
        port: str,
        units: Iterable[int] = (1,),
        silent: Iterable[int] = (),
        baudrate: int = 115200,
        *,
        log_requests: bool = False,
        timeout: float = 10.0,
    ) -> None:
        self.port = port
        self.units = tuple(units)
        self.silent = tuple(silent)
        self.baudrate = baudrate
        self.log_requests = log_requests
        self.timeout = timeout  #: seconds to wait for READY, and for an exit in stop()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._old_log = ""
        self.start()

    @property
    def argv(self) -> list[str]:
        argv = [sys.executable, str(SLAVE_SCRIPT), "--port", self.port]
        argv += ["--units", ",".join(map(str, self.units)), "--baudrate", str(self.baudrate)]
        if self.silent:
            argv += ["--silent", ",".join(map(str, self.silent))]
        if self.log_requests:
            argv.append("--log-requests")
        return argv

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise HarnessError("the pymodbus slave is not started")
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """Its exit code once it exited (None while it runs, or before start)."""
        return None if self.proc is None else self.proc.poll()

    def start(self) -> None:
        """Start it (it must not be running) and wait for its READY line."""
        if self.running:
            raise HarnessError("the pymodbus slave is already running")
        self._close_log()
        # open for the process's life, closed by _close_log (stop, the next start)
        self._log = tempfile.TemporaryFile(prefix="modbus-slave-")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl; no leak if we die
        )
        try:
            self._wait_ready(self.proc)
        except HarnessError as exc:
            self.stop()
            raise HarnessError(f"{exc}; its stderr:\n{self.log()[-4000:]}") from None

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + self.timeout
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HarnessError(f"modbus_slave printed no READY within {self.timeout:g} s")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise HarnessError(f"modbus_slave exited {proc.wait()} before READY")
                buf += chunk
        if buf.partition(b"\n")[0].strip() != b"READY":
            raise HarnessError(f"modbus_slave printed {buf!r}, not READY")

    def wait(self, timeout: float = 5.0) -> int:
        """Wait for it to exit on its own (a hang-up: SLAVE_EXIT_HANGUP); its exit code."""
        if self.proc is None:
            raise HarnessError("the pymodbus slave is not started")
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"modbus_slave still runs after {timeout:g} s") from None

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """SIGTERM (SIGKILL after `timeout`), pipes closed; its exit code (None: never started)."""
        code = None
        if self.proc is not None:
            code = stop_process(self.proc, sig, grace=self.timeout)
        self._close_log()
        return code

    close = stop

    def restart(self) -> None:
        """Stop it if it runs, start it again (same options, fresh tables), wait for READY."""
        self.stop()
        self.start()

    def log(self) -> str:
        """Its stderr: of the current run, or of the last one once stopped."""
        if self._log is None:
            return self._old_log
        return os.pread(self._log.fileno(), 1 << 20, 0).decode(errors="replace")

    def _close_log(self) -> None:
        if self._log is not None:
            self._old_log = self.log()
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
