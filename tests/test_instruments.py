"""Text instruments behind verld: a SCPI power supply on a real pty, real clients.

docs/config.md (`device.line.no_reply`, `heartbeat.expect`, "Late answers on line
devices", `api.max_timeout`), docs/protocol.md (`call`'s `reply`), docs/ports.md and
docs/network.md (programs' lines). The device is tests/instrument.py, a sequential
instrument (one command at a time, in order; `VOLT x` answers nothing, `SLOW ms
text` answers late); verld is a real daemon on its pty; the clients are the API
client, pyserial and picocom on virtual ports, plain sockets and PyVISA on network
ports, and the quick start's command line.

Most tests run on the SCPI supply's config (`SCPI_DEVICE`, `SCPI_HEARTBEAT`). Tests of
behaviour that needs none of its new keys (a program's CR ending a line, the API's
limits, a refused request's WARNING) run on `PLAIN_DEVICE` / `PLAIN_HEARTBEAT`, keys
any verld knows, so they show the behaviour itself rather than a config refused.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import pytest
import pyvisa
import serial
from instrument import IDN, Instrument
from pyvisa.resources import MessageBasedResource
from support import DaemonProc, free_port, need, stop_process, wait_for, write_config

from verld.client import Client, ClientError, Reply, Unreachable
from verld.testing import Processes

pytestmark = pytest.mark.timeout(30)

#: the SCPI supply: a command without `?` gets no answer; ALARM lines are events
SCPI_DEVICE: dict[str, Any] = {
    "codec": "line",
    "timeout": 1.0,
    "line": {"no_reply": "^[^?]*$", "event": "^ALARM"},
}
#: its ping and the line that answers it (a late answer never passes for it)
SCPI_HEARTBEAT: dict[str, Any] = {
    "payload": "*IDN?",
    "expect": "^ACME,",
    "interval": 2.0,
    "timeout": 1.0,
    "misses": 3,
}
#: the same device with only keys every verld knows (no no_reply, no expect)
PLAIN_DEVICE: dict[str, Any] = {"codec": "line", "timeout": 1.0}
PLAIN_HEARTBEAT: dict[str, Any] = {"payload": "*IDN?", "interval": 2.0, "timeout": 1.0}
NUMBER = re.compile(r"^-?\d+\.\d{3}$")  #: a `VOLT?` / `MEAS:VOLT?` answer


# --- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture
def inst(tmp_path: Path) -> Iterator[Instrument]:
    """The SCPI power supply on a pty in tmp_path, stopped after the test."""
    with Instrument.start(tmp_path) as instrument:
        yield instrument


Verld = Callable[..., DaemonProc]


@pytest.fixture
def verld(tmp_path: Path, inst: Instrument, procs: Processes) -> Verld:
    """`verld(**sections)`: a daemon on `inst` (SCPI config unless a section is given),
    its link up; stopped after the test."""

    def make(**sections: Any) -> DaemonProc:
        overrides = {"device": SCPI_DEVICE, "heartbeat": SCPI_HEARTBEAT, **sections}
        return procs.daemon(write_config(tmp_path, inst.link, overrides))

    return make


def settled(inst: Instrument, seconds: float = 0.3) -> None:
    """The instrument handled all it got, and `seconds` more passed (for a stray retry)."""
    inst.wait_idle()
    time.sleep(seconds)


class Background:
    """A blocking call run in a thread; once joined, its `reply` or its `error`."""

    def __init__(self, call: Callable[[], Reply]) -> None:
        self.reply: Reply | None = None
        self.error: ClientError | None = None
        self._thread = threading.Thread(target=self._run, args=(call,))
        self._thread.start()

    def _run(self, call: Callable[[], Reply]) -> None:
        try:
            self.reply = call()
        except ClientError as exc:
            self.error = exc

    def join(self) -> None:
        self._thread.join(15)
        assert not self._thread.is_alive(), "the call in the background still runs"


def device_event(sub: Client) -> dict[str, Any]:
    """The next device event on a subscribed client (ClientError after its timeout)."""
    for ev in sub.events():
        if ev["event"] == "device":
            return ev
    raise AssertionError("the event stream ended")


def device_texts(sub: Client, seconds: float) -> list[str]:
    """The text of every device event a subscribed client gets within `seconds`."""
    texts, saved = [], sub.timeout
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            sub.timeout = left
            try:
                texts.append(device_event(sub)["text"])
            except ClientError as exc:
                assert exc.code == "timeout", exc
                break
    finally:
        sub.timeout = saved
    return texts


def pty_quiet(port: serial.Serial, seconds: float) -> bytes:
    """Whatever comes on an open port within `seconds` (b"": nothing)."""
    port.timeout = seconds
    try:
        return bytes(port.read(4096))
    finally:
        port.timeout = 5


def until_eof(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """All the peer sends until it closes (TimeoutError if it stays open)."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def records(c: Client, msg: str) -> list[dict[str, Any]]:
    """The daemon's log records (the `logs` op) whose msg is `msg`."""
    found: list[dict[str, Any]] = c.request("logs", lines=1000)["records"]
    return [r for r in found if r["msg"] == msg]


def ports_of(tmp: Path, *names: str) -> list[dict[str, Any]]:
    """`ports:` entries, one a link `tmp/NAME`."""
    return [{"link": str(tmp / name)} for name in names]


# --- 1. a set command is written once, on every front -------------------------------------


class TestSetCommandWrittenOnce:
    def test_api_call(self, inst: Instrument, verld: Verld) -> None:
        """An API call matching no_reply ends ok with reply false, written once despite retry 2."""
        d = verld(device={**SCPI_DEVICE, "retry": 2})
        reply = d.client().call("VOLT 7.5")
        assert (reply.reply, reply.status, reply.data) == (False, 0, b"")
        assert reply.ms < 1000  # (the quiet guard, not the timeout)
        settled(inst)
        assert inst.count("VOLT 7.5") == 1
        assert inst.state()["volt"] == 7.5

    def test_virtual_port(self, tmp_path: Path, inst: Instrument, verld: Verld) -> None:
        """A program's VOLT 8.5 on a virtual port reaches the device once and nothing comes back."""
        verld(device={**SCPI_DEVICE, "retry": 2}, ports=ports_of(tmp_path, "ttyV0"))
        with serial.Serial(str(tmp_path / "ttyV0"), timeout=5) as port:
            port.write(b"VOLT 8.5\n")
            inst.wait_count("VOLT 8.5")
            assert pty_quiet(port, 0.5) == b""
            port.write(b"VOLT?\n")  # the next line back is this query's own answer
            assert port.readline() == b"8.500\n"
        assert inst.count("VOLT 8.5") == 1

    def test_network_port(self, inst: Instrument, verld: Verld) -> None:
        """`printf 'VOLT 9.5\\n' | nc` on a network port: written once, nothing comes back."""
        port = free_port()
        verld(device={**SCPI_DEVICE, "retry": 2}, network=[{"listen": f"127.0.0.1:{port}"}])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"VOLT 9.5\n")
            sock.shutdown(socket.SHUT_WR)
            assert until_eof(sock) == b""
        settled(inst)
        assert inst.count("VOLT 9.5") == 1
        assert inst.state()["volt"] == 9.5

    def test_reply_false_without_no_reply(self, inst: Instrument, verld: Verld) -> None:
        """A call with reply=False on a config without no_reply is written once and ends ok."""
        d = verld(device={**PLAIN_DEVICE, "retry": 2}, heartbeat=PLAIN_HEARTBEAT)
        reply = d.client().call("VOLT 7.5", reply=False)
        assert (reply.reply, reply.status, reply.data) == (False, 0, b"")
        assert reply.ms < 1000
        settled(inst)
        assert inst.count("VOLT 7.5") == 1


# --- 2. a late answer never reaches the next client ----------------------------------------


class TestLateAnswers:
    def test_late_answers_never_reach_the_next_client(self, inst: Instrument, verld: Verld) -> None:
        """After a timed-out call the ping goes first and the next client gets its own answer."""
        # Each round: A asks `SLOW 1300 SECRET-An` with a 1 s timeout; B asks 0.2 s later and
        # waits behind it. The device answers SECRET at 1.3 s, then the ping, then B's query.
        # (SLOW and ECHO have no `?`: no_reply matches them, so both calls say reply=True.)
        d = verld()
        a, b = d.client(), d.client()
        queries = [("ECHO mine0", "mine0"), ("VOLT?", "0.000"), ("ECHO mine2", "mine2")]
        for n, (query, want) in enumerate(queries):
            secret = f"SLOW 1300 SECRET-A{n}"
            slow = Background(partial(a.call, secret, timeout=1.0, retry=0, reply=True))
            try:
                inst.wait_count(secret)
                time.sleep(0.2)
                got = b.call(query, timeout=5.0, reply=True)
            finally:
                slow.join()
            assert got.text == want, f"round {n}: B got {got.text!r}"
            assert slow.error is not None and slow.error.code == "timeout"
            assert d.status()["link"]["late"] == n + 1
            lines = inst.received()
            asked = lines.index(secret)
            assert "*IDN?" in lines[asked : lines.index(query, asked)], lines
        link = d.status()["link"]
        assert (link["state"], link["generation"]) == ("up", 1)


# --- 3. events in a resync and in a no-reply quiet time ------------------------------------


class TestEventsStayEvents:
    def test_alarm_in_a_resync_is_an_event(self, inst: Instrument, verld: Verld) -> None:
        """An ALARM arriving during a resync goes out as an event and is not counted late."""
        d = verld()
        sub, a = d.client(), d.client()
        sub.subscribe(["events"])
        slow = Background(lambda: a.call("SLOW 1300 SECRET", timeout=1.0, retry=0, reply=True))
        try:
            inst.wait_count("SLOW 1300 SECRET")
            inst.wait_count("*IDN?", inst.count("*IDN?") + 1)  # the resync's ping
            inst.emit("ALARM OVP")  # before SECRET (the device is still busy with SLOW)
            assert device_event(sub)["text"] == "ALARM OVP"
        finally:
            slow.join()
        assert slow.error is not None and slow.error.code == "timeout"
        assert device_texts(sub, 0.6) == []  # (SECRET and the ping's answer are no events)
        assert d.client().call("*IDN?").text == IDN
        link = d.status()["link"]
        assert (link["late"], link["unexpected"]) == (1, 0)

    def test_alarm_after_a_set_command_is_an_event(self, inst: Instrument, verld: Verld) -> None:
        """An ALARM right after a no-reply VOLT 5.0 is an event, not that command's answer."""
        d = verld(device={**SCPI_DEVICE, "guard": 0.5})
        sub, c = d.client(), d.client()
        sub.subscribe(["events"])
        volt = Background(lambda: c.call("VOLT 5.0"))
        try:
            inst.wait_count("VOLT 5.0")
            inst.emit("ALARM OVP")  # within the 0.5 s quiet time
            assert device_event(sub)["text"] == "ALARM OVP"
        finally:
            volt.join()
        assert volt.reply is not None and (volt.reply.reply, volt.reply.text) == (False, "")
        assert c.call("VOLT?").text == "5.000"
        link = d.status()["link"]
        assert (link["late"], link["unexpected"]) == (0, 0)


# --- 4. the quick start --------------------------------------------------------------------


def test_quick_start_flags_serve_the_supply(
    tmp_path: Path, inst: Instrument, procs: Processes
) -> None:
    """`verld LINK --codec line --no-reply --ping --expect --event --socket` serves the supply."""
    sock, err = str(tmp_path / "q.sock"), tmp_path / "quick.err"
    line_options = [
        "--no-reply",
        "^[^?]*$",
        "--ping",
        "*IDN?",
        "--expect",
        "^ACME,",
        "--event",
        "^ALARM",
    ]
    argv = [
        sys.executable,
        "-m",
        "verld",
        inst.link,
        "--codec",
        "line",
        *line_options,
        "--socket",
        sock,
    ]
    drop = {"VERLD_SOCKET", "VERLD_DEFAULT_CONFIG", "XDG_RUNTIME_DIR", "LISTEN_FDS", "LISTEN_PID"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    with open(err, "wb") as f:
        proc = procs.popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=f, env=env
        )

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"verld exited {proc.returncode}: {err.read_text()}")
        try:
            with Client(sock, timeout=2.0) as c:
                return bool(c.status()["link"]["state"] == "up")
        except (OSError, Unreachable):
            return False

    wait_for(up, 15, "the quick start's link up")
    with Client(sock, timeout=10.0) as c, Client(sock, timeout=10.0) as sub:
        reply = c.call("VOLT 1")
        assert (reply.reply, reply.status) == (False, 0)
        assert c.call("*IDN?").text == IDN
        sub.subscribe(["events"])
        inst.emit("ALARM OVP")
        assert device_event(sub)["text"] == "ALARM OVP"
    assert stop_process(proc) == 0, err.read_text()
    assert inst.count("VOLT 1") == 1


# --- 5. picocom's Enter -------------------------------------------------------------------


class Picocom:
    """picocom on `link` as a user runs it (Enter sends CR alone), its terminal our pty."""

    def __init__(self, link: str) -> None:
        cmd = [need("picocom"), "-q", "--imap", "lfcrlf", "-b", "115200", link]
        self.master, slave = os.openpty()
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
            )
        finally:
            os.close(slave)
        self.screen = b""
        try:  # picocom sets its terminal raw once the port is open
            wait_for(lambda: self._drain(0.0) and self._raw(), 10.0, "picocom's raw terminal")
        except BaseException:
            self.close()
            raise

    def _raw(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"picocom exited {self.proc.returncode}: {self.screen!r}")
        return not termios.tcgetattr(self.master)[3] & termios.ICANON

    def _drain(self, seconds: float) -> bool:
        if select.select([self.master], [], [], seconds)[0]:
            try:
                self.screen += os.read(self.master, 65536)
            except OSError:  # EIO: picocom left
                return False
        return True

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def read_until(self, want: bytes, timeout: float = 5.0) -> bytes:
        deadline = time.monotonic() + timeout
        while want not in self.screen:
            left = deadline - time.monotonic()
            assert left > 0, f"{want!r} not on picocom's screen: {self.screen!r}"
            assert self._drain(min(left, 0.1)), f"picocom left: {self.screen!r}"
        return self.screen

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1

    def __enter__(self) -> Picocom:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_picocom_enter_sends_a_line(tmp_path: Path, inst: Instrument, verld: Verld) -> None:
    """picocom's Enter (a lone CR) after `*IDN?` on a virtual port shows the ACME line."""
    need("picocom")
    d = verld(device=PLAIN_DEVICE, heartbeat=PLAIN_HEARTBEAT, ports=ports_of(tmp_path, "ttyV0"))
    with Picocom(str(tmp_path / "ttyV0")) as term:
        wait_for(lambda: bool(d.status()["ports"][0]["open"]), 10, "verld to see picocom")
        term.type(b"*IDN?\r")
        assert term.read_until(IDN.encode() + b"\r\n") == IDN.encode() + b"\r\n"


# --- 6. PyVISA, two sessions at once -------------------------------------------------------


def visa_session(rm: pyvisa.ResourceManager, name: str, volt: int, rounds: int) -> list[str]:
    """One PyVISA session: `rounds` of *IDN?, VOLT <volt>, MEAS:VOLT?; what went wrong."""
    wrong: list[str] = []
    try:
        res = rm.open_resource(name, read_termination="\n", write_termination="\n", timeout=5000)
        assert isinstance(res, MessageBasedResource)
        try:
            for i in range(rounds):
                if (idn := res.query("*IDN?")) != IDN:
                    wrong.append(f"{volt}/{i}: *IDN? -> {idn!r}")
                res.write(f"VOLT {volt}")
                # the other session may have set its own voltage since: either value
                meas = res.query("MEAS:VOLT?")
                if not NUMBER.match(meas) or float(meas) not in (5.0, 6.0):
                    wrong.append(f"{volt}/{i}: MEAS:VOLT? -> {meas!r}")
        finally:
            res.close()
    except Exception as exc:  # (reported as the session's failure)
        wrong.append(f"{volt}: {type(exc).__name__}: {exc}")
    return wrong


def two_sessions(names: tuple[str, str], rounds: int) -> list[str]:
    """Both sessions at once (threads), volt 5 and 6; what went wrong in either."""
    # One ResourceManager: pyvisa hands every ResourceManager("@py") the same one, and
    # its close() closes every session it opened.
    rm = pyvisa.ResourceManager("@py")
    results: list[list[str]] = [[], []]

    def run(k: int) -> None:
        results[k] = visa_session(rm, names[k], 5 + k, rounds)

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(25)
        assert not any(t.is_alive() for t in threads), "a PyVISA session hung"
    finally:
        rm.close()
    return results[0] + results[1]


class TestPyVisa:
    ROUNDS = 5

    def test_two_asrl_sessions(self, tmp_path: Path, inst: Instrument, verld: Verld) -> None:
        """Two PyVISA ASRL sessions on two virtual ports get their own answers; writes go once."""
        verld(ports=ports_of(tmp_path, "ttyA", "ttyB"))
        names = (f"ASRL{tmp_path / 'ttyA'}::INSTR", f"ASRL{tmp_path / 'ttyB'}::INSTR")
        assert two_sessions(names, self.ROUNDS) == []
        assert (inst.count("VOLT 5"), inst.count("VOLT 6")) == (self.ROUNDS, self.ROUNDS)

    def test_two_tcpip_sessions(self, inst: Instrument, verld: Verld) -> None:
        """Two PyVISA TCPIP SOCKET sessions on one network port get own answers; writes go once."""
        port = free_port()
        verld(network=[{"listen": f"127.0.0.1:{port}"}])
        name = f"TCPIP::127.0.0.1::{port}::SOCKET"
        assert two_sessions((name, name), self.ROUNDS) == []
        assert (inst.count("VOLT 5"), inst.count("VOLT 6")) == (self.ROUNDS, self.ROUNDS)


# --- 7. the API's limits -------------------------------------------------------------------


class TestApiLimits:
    @pytest.mark.parametrize(
        ("option", "message"),
        [
            ({"timeout": 3600}, "timeout 3600 is above api.max_timeout 600"),
            ({"retry": 100}, "retry 100 is above api.max_retry 10"),
        ],
        ids=["timeout", "retry"],
    )
    def test_above_the_limit_is_bad_request(
        self, inst: Instrument, verld: Verld, option: dict[str, Any], message: str
    ) -> None:
        """A call asking more than api.max_timeout or api.max_retry is a bad_request, unsent."""
        c = verld(device=PLAIN_DEVICE, heartbeat=PLAIN_HEARTBEAT).client()
        with pytest.raises(ClientError) as info:
            c.call("ECHO long", **option)
        assert (info.value.code, info.value.message) == ("bad_request", message)
        assert c.call("ECHO at-limit", timeout=600, retry=10).text == "at-limit"
        assert inst.count("ECHO long") == 0


# --- 8. a refused request is told once -----------------------------------------------------


class TestRefusedTold:
    OVERLONG = b"X" * 100 + b"\n"  #: beyond max_payload 64
    DEVICE: ClassVar[dict[str, Any]] = {**PLAIN_DEVICE, "max_payload": 64}

    def test_virtual_port(self, tmp_path: Path, verld: Verld) -> None:
        """Two overlong lines on a virtual port: port_request_refused once at warning."""
        d = verld(device=self.DEVICE, heartbeat=PLAIN_HEARTBEAT, ports=ports_of(tmp_path, "ttyV0"))
        with serial.Serial(str(tmp_path / "ttyV0"), timeout=5) as port:
            for _ in range(2):
                port.write(self.OVERLONG)
                time.sleep(0.4)  # quiet for device.guard: in step again
            port.write(b"ECHO after\n")
            assert port.readline() == b"after\n"
        found = records(d.client(), "port_request_refused")
        assert [r["level"] for r in found] == ["warning", "debug"], found

    def test_network_connection(self, verld: Verld) -> None:
        """Two overlong lines on a network connection: network_request_refused once at warning."""
        port = free_port()
        d = verld(
            device=self.DEVICE, heartbeat=PLAIN_HEARTBEAT, network=[{"listen": f"127.0.0.1:{port}"}]
        )
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            for _ in range(2):
                sock.sendall(self.OVERLONG)
                time.sleep(0.4)
            sock.sendall(b"ECHO after\n")
            sock.shutdown(socket.SHUT_WR)
            assert until_eof(sock) == b"after\n"
        found = records(d.client(), "network_request_refused")
        assert [r["level"] for r in found] == ["warning", "debug"], found
