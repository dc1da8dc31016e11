"""A text instrument for tests: a sequential SCPI power supply or AT modem on a real pty.

Run as its own process (`Instrument` below does it for you):

    python tests/instrument.py --link PATH --control SOCKPATH [--mode scpi|at] [--eol "\\n"]

It makes a pty pair, puts the slave in raw mode and points the symlink `--link` at it
(the same way verld-sim does: verld opens it with pyserial, `exclusive=True`, like real
hardware), keeps its own slave fd open (so the master never sees a hang-up while
nobody has the device open), then prints one line, `READY <link>`, to stdout and
nothing more there. SIGTERM or SIGINT: the link and the control socket are removed,
exit 0.

Like a real instrument it reads lines (a line ends at LF; a CR just before it is
dropped, so CRLF works) and handles **one command at a time, strictly in order**: a
slow command delays every one after it. Every line is recorded, with its exact text
(without the line end) and the `time.monotonic()` of its arrival (system-wide on
Linux: comparable with the test process's own), the moment it is read, whether or
not it was handled yet. An empty line is recorded and otherwise ignored. Every reply
line ends with `--eol` (backslash escapes allowed; default `\\n`).

`--mode scpi`, a bench power supply (headers are case-insensitive, as in SCPI):

    *IDN?            ACME,PSU-1,0,1.0
    VOLT <x>         sets the voltage; no answer        (CURR <x>: the current)
    VOLT?            the voltage as %.3f                (MEAS:VOLT?, CURR?, MEAS:CURR?)
    OUTP ON|OFF|1|0  no answer;  OUTP?  0 or 1
    *RST             voltage, current 0, output off; no answer
    *TRG, INIT       no answer (counted: `state`'s triggers)
    *CLS             empties the error queue; no answer
    SLOW <ms> <text> waits ms (a measurement slower than its caller waits), then <text>
    ECHO <text>      <text>
    SYST:ERR?        the oldest queued error, or 0,"No error"
    anything else    no answer; queues -113,"Undefined header" (a bad or missing
                     number: -104,"Data type error" / -109,"Missing parameter")

`--mode at`, a modem (case-insensitive): `AT`, `ATE0` → `OK`; `ATI` → `ACME MODEM 1.0`,
`OK`; `AT+CSQ` → `+CSQ: 20,99`, `OK`; `AT+SLOW=<ms>` → waits, then `OK`; anything else
→ `ERROR`. A reply of several lines is written in one piece.

The control socket (`--control`, Unix stream, one JSON object a line each way, any
number of requests per connection; every answer has `"ok"`):

    {"op": "received"}                 {"ok": true, "lines": [{"line": "VOLT 5", "t": T}, ...]}
    {"op": "count", "line": "VOLT 5"}  {"ok": true, "count": N}   (exact text)
    {"op": "emit", "line": "ALARM OVP"} writes the line (+ eol) to the device end at once:
                                       between two answers, never inside one
    {"op": "clear"}                    forgets the lines received so far
    {"op": "state"}                    {"ok": true, "volt", "curr", "output", "errors",
                                        "triggers", "pending" (commands not yet answered)}
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

__all__ = ["SCRIPT", "Instrument", "InstrumentError", "Received"]

SCRIPT = Path(__file__).resolve()
IDN = "ACME,PSU-1,0,1.0"
MODEM_ID = "ACME MODEM 1.0"
NO_ERROR = '0,"No error"'
UNDEFINED_HEADER = '-113,"Undefined header"'
DATA_TYPE_ERROR = '-104,"Data type error"'
MISSING_PARAMETER = '-109,"Missing parameter"'
MAX_LINE = 1 << 16  #: bytes without a line end after which the partial line is recorded


# --- the instrument process ----------------------------------------------------------------


@dataclass
class Scpi:
    """The bench power supply's state and command set."""

    volt: float = 0.0
    curr: float = 0.0
    output: bool = False
    triggers: int = 0
    errors: list[str] = field(default_factory=list)

    async def handle(self, line: str) -> list[str]:
        """The reply lines to one command (none for a set command or an unknown one)."""
        header, _, arg = line.strip().partition(" ")
        header = header.upper()
        arg = arg.strip()
        if header in {"ECHO", "SLOW"}:
            rest = line.lstrip()[len(header) + 1 :]
            if header == "ECHO":
                return [rest]
            ms, _, text = rest.lstrip().partition(" ")
            delay = _number(ms)
            if delay is None or delay < 0:
                self.errors.append(DATA_TYPE_ERROR)
                return []
            await asyncio.sleep(delay / 1000)
            return [text]
        return self._simple(header, arg)

    def _simple(self, header: str, arg: str) -> list[str]:
        if header == "*IDN?":
            return [IDN]
        if header in {"VOLT?", "MEAS:VOLT?"}:
            return [f"{self.volt:.3f}"]
        if header in {"CURR?", "MEAS:CURR?"}:
            return [f"{self.curr:.3f}"]
        if header == "OUTP?":
            return ["1" if self.output else "0"]
        if header == "SYST:ERR?":
            return [self.errors.pop(0) if self.errors else NO_ERROR]
        if header in {"VOLT", "CURR"}:
            value = _number(arg)
            if value is None:
                self.errors.append(DATA_TYPE_ERROR if arg else MISSING_PARAMETER)
            elif header == "VOLT":
                self.volt = value
            else:
                self.curr = value
        elif header == "OUTP":
            if arg.upper() in {"ON", "1"}:
                self.output = True
            elif arg.upper() in {"OFF", "0"}:
                self.output = False
            else:
                self.errors.append(DATA_TYPE_ERROR if arg else MISSING_PARAMETER)
        elif header == "*RST":
            self.volt = self.curr = 0.0
            self.output = False
        elif header in {"*TRG", "INIT"}:
            self.triggers += 1
        elif header == "*CLS":
            self.errors.clear()
        elif header:
            self.errors.append(UNDEFINED_HEADER)
        return []

    def state(self) -> dict[str, Any]:
        return {
            "volt": self.volt,
            "curr": self.curr,
            "output": self.output,
            "errors": list(self.errors),
            "triggers": self.triggers,
        }


@dataclass
class Modem:
    """The modem's command set (no state worth keeping: it never echoes)."""

    async def handle(self, line: str) -> list[str]:
        command = line.strip().upper()
        if not command:
            return []
        if command in {"AT", "ATE0"}:
            return ["OK"]
        if command == "ATI":
            return [MODEM_ID, "OK"]
        if command == "AT+CSQ":
            return ["+CSQ: 20,99", "OK"]
        if command.startswith("AT+SLOW="):
            delay = _number(command.removeprefix("AT+SLOW="))
            if delay is None or delay < 0:
                return ["ERROR"]
            await asyncio.sleep(delay / 1000)
            return ["OK"]
        return ["ERROR"]

    def state(self) -> dict[str, Any]:
        return {}


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class Server:
    """The pty, the command queue worked in order, the output and the control socket."""

    def __init__(self, link: str, control: str, device: Scpi | Modem, eol: bytes) -> None:
        self.link, self.control, self.device, self.eol = link, control, device, eol
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        os.set_blocking(self.master, False)
        self.lines: list[tuple[str, float]] = []  #: (text, arrival) since the last clear
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.busy = False
        self._inbuf = b""
        self._out = bytearray()
        self._writing = False

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        _replace_symlink(os.ttyname(self.slave), self.link)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.control)
        server = await asyncio.start_unix_server(self._client, self.control)
        loop.add_reader(self.master, self._readable)
        worker = asyncio.create_task(self._work())
        print(f"READY {self.link}", flush=True)
        try:
            await stop.wait()
        finally:
            worker.cancel()
            loop.remove_reader(self.master)
            if self._writing:
                loop.remove_writer(self.master)
            server.close()
            for path in (self.control, self.link):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            os.close(self.master)
            os.close(self.slave)
        return 0

    def _readable(self) -> None:
        try:
            chunk = os.read(self.master, 4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # EIO: cannot happen while we hold the slave, but never spin
            chunk = b""
        now = time.monotonic()
        self._inbuf += chunk
        *lines, self._inbuf = self._inbuf.split(b"\n")
        if len(self._inbuf) > MAX_LINE:
            lines.append(self._inbuf)
            self._inbuf = b""
        for raw in lines:
            text = raw.removesuffix(b"\r").decode("utf-8", errors="replace")
            self.lines.append((text, now))
            self.queue.put_nowait(text)

    async def _work(self) -> None:
        """One command at a time, in arrival order: a slow one holds up the rest."""
        while True:
            text = await self.queue.get()
            self.busy = True
            try:
                reply = await self.device.handle(text)
            finally:
                self.busy = False
            if reply:
                self.write(b"".join(line.encode() + self.eol for line in reply))

    def write(self, data: bytes) -> None:
        """Queue whole lines for the device end (never interleaved with another write)."""
        self._out += data
        self._flush()

    def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._out:
            try:
                n = os.write(self.master, self._out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # nobody can read it: drop it, as a wire would
                self._out.clear()
                break
            del self._out[:n]
        if self._out and not self._writing:
            loop.add_writer(self.master, self._flush)
            self._writing = True
        elif not self._out and self._writing:
            loop.remove_writer(self.master)
            self._writing = False

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    request = json.loads(line)
                    answer = self._control(request)
                except (ValueError, TypeError, KeyError) as exc:
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def _control(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "received":
            return {"ok": True, "lines": [{"line": text, "t": t} for text, t in self.lines]}
        if op == "count":
            wanted = request["line"]
            return {"ok": True, "count": sum(1 for text, _ in self.lines if text == wanted)}
        if op == "emit":
            line = request["line"]
            if not isinstance(line, str) or "\n" in line:
                raise ValueError("emit takes one line of text")
            self.write(line.encode() + self.eol)
            return {"ok": True}
        if op == "clear":
            self.lines.clear()
            return {"ok": True}
        if op == "state":
            pending = self.queue.qsize() + self.busy
            return {"ok": True, "pending": pending, **self.device.state()}
        raise ValueError(f"unknown op {op!r}")


def _replace_symlink(target: str, link: str) -> None:
    """Point `link` at `target` atomically (a symlink to a temp name, then rename)."""
    if os.path.lexists(link) and not os.path.islink(link):
        raise FileExistsError(f"{link} exists and is not a symlink: not replacing it")
    tmp = f"{link}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def _eol(text: str) -> bytes:
    value = codecs.decode(text, "unicode_escape").encode("latin-1")
    if not value:
        raise argparse.ArgumentTypeError("the eol must not be empty")
    return value


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; the exit code."""
    p = argparse.ArgumentParser(prog="instrument", description="A text instrument on a pty.")
    p.add_argument("--link", required=True, metavar="PATH", help="symlink to the pty's slave")
    p.add_argument("--control", required=True, metavar="SOCKPATH", help="control socket")
    p.add_argument("--mode", choices=("scpi", "at"), default="scpi")
    p.add_argument("--eol", type=_eol, default=b"\n", help="reply line end (default \\n)")
    args = p.parse_args(argv)
    device: Scpi | Modem = Scpi() if args.mode == "scpi" else Modem()
    try:
        return asyncio.run(Server(args.link, args.control, device, args.eol).run())
    except OSError as exc:
        print(f"instrument: {exc}", file=sys.stderr)
        return 1


# --- the helper tests use ------------------------------------------------------------------


class InstrumentError(AssertionError):
    """The instrument did not start, its control socket failed, or a wait timed out."""


class Received(NamedTuple):
    """One line the instrument read: its exact text and `time.monotonic()` on arrival."""

    line: str
    t: float


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Instrument:
    """tests/instrument.py as a subprocess: its pty link and control socket in `directory`.

        with Instrument.start(tmp_path, mode="scpi") as inst:
            ...  # open inst.link (pyserial, verld); inst.count("VOLT 5"), inst.emit("ALARM")

    Started and READY on construction (`start` is the same, read as a context manager);
    `stop()` (or leaving the `with`) stops it by pid and closes its pipe and log. Its
    stderr is kept in `directory/<name>.log`. Keep `directory` short: a Unix socket
    path is at most 107 bytes.
    """

    def __init__(
        self,
        directory: Path,
        *,
        mode: str = "scpi",
        eol: str = "\n",
        name: str = "instr",
        timeout: float = 10.0,
    ) -> None:
        self.mode, self.eol, self.timeout = mode, eol, timeout
        self.link = str(directory / f"{name}.tty")  #: the symlink to the pty's slave
        self.control_path = str(directory / f"{name}.ctl")
        self.log_path = directory / f"{name}.log"
        escaped = eol.encode("unicode_escape").decode()
        argv = [
            sys.executable,
            str(SCRIPT),
            "--link",
            self.link,
            "--control",
            self.control_path,
            "--mode",
            mode,
            "--eol",
            escaped,
        ]
        with open(self.log_path, "ab") as log:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl; no leak if we die
            )
        try:
            self._wait_ready()
        except InstrumentError as exc:
            self.stop()
            raise InstrumentError(f"{exc}; its stderr:\n{self.log()[-4000:]}") from None

    @classmethod
    def start(cls, directory: Path, mode: str = "scpi", eol: str = "\n", **kw: Any) -> Self:
        """A started instrument (`with Instrument.start(tmp_path) as inst:`)."""
        return cls(directory, mode=mode, eol=eol, **kw)

    def _wait_ready(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + self.timeout
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise InstrumentError(f"instrument printed no READY within {self.timeout:g} s")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise InstrumentError(f"instrument exited {self.proc.wait()} before READY")
                buf += chunk
        if buf.partition(b"\n")[0].decode(errors="replace").strip() != f"READY {self.link}":
            raise InstrumentError(f"instrument printed {buf!r}, not READY {self.link}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """One control request; its answer (InstrumentError unless it says ok)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout)
            sock.connect(self.control_path)
            sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise InstrumentError(f"the control socket closed, no answer to {op!r}")
                reply += chunk
        answer: dict[str, Any] = json.loads(reply)
        if not answer.get("ok"):
            raise InstrumentError(f"control {op!r} {fields}: {answer}")
        return answer

    def records(self) -> list[Received]:
        """Every line received since the start (or `clear`), in order, with arrival times."""
        return [Received(r["line"], r["t"]) for r in self.request("received")["lines"]]

    def received(self) -> list[str]:
        """The text of every line received since the start (or `clear`), in order."""
        return [r.line for r in self.records()]

    def count(self, line: str) -> int:
        """How many times exactly `line` arrived (since the start or `clear`)."""
        n: int = self.request("count", line=line)["count"]
        return n

    def emit(self, line: str) -> None:
        """Write an unsolicited line (an alarm, a URC) to the device end, between answers."""
        self.request("emit", line=line)

    def clear(self) -> None:
        """Forget the lines received so far."""
        self.request("clear")

    def state(self) -> dict[str, Any]:
        """The device's state (scpi: volt, curr, output, errors, triggers) and `pending`."""
        answer = self.request("state")
        del answer["ok"]
        return answer

    def wait_count(self, line: str, n: int = 1, timeout: float = 5.0) -> None:
        """Wait until `line` has arrived at least `n` times; InstrumentError after `timeout`."""
        self._wait(lambda: self.count(line) >= n, timeout, f"{line!r} received {n} times")

    def wait_idle(self, timeout: float = 5.0) -> None:
        """Wait until every line received so far is handled (answered, if it answers)."""
        self._wait(lambda: self.state()["pending"] == 0, timeout, "no command pending")

    def _wait(self, pred: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise InstrumentError(f"timed out waiting for {what}; received {self.received()}")
            time.sleep(0.01)

    def log(self) -> str:
        """Its stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stop it by pid (SIGKILL after `timeout`), pipe closed; its exit code (0: clean)."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
                self.proc.wait(self.timeout)
            except ProcessLookupError:
                self.proc.wait()
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode

    close = stop

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
