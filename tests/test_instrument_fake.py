"""The instrument fake (tests/instrument.py) itself: its answers, its order, its control.

Driven through its pty with pyserial (as a program or verld opens it: exclusive), and
once with PyVISA, the client lab users script instruments with, over ASRL and over a
TCPIP SOCKET, so the verld tests built on both know the fake and PyVISA work here.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import pyvisa
import serial
from instrument import Instrument
from pyvisa.resources import MessageBasedResource

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def scpi(tmp_path: Path) -> Iterator[Instrument]:
    """The power supply, started in tmp_path, stopped after the test."""
    with Instrument.start(tmp_path) as inst:
        yield inst


@pytest.fixture
def psu(scpi: Instrument) -> Iterator[serial.Serial]:
    """The power supply's pty, opened as verld opens a port (exclusive, raw)."""
    with serial.Serial(scpi.link, timeout=5, exclusive=True) as port:
        yield port


@pytest.fixture
def modem(tmp_path: Path) -> Iterator[tuple[Instrument, serial.Serial]]:
    """The modem (replies end in CRLF) and its opened pty."""
    with (
        Instrument.start(tmp_path, mode="at", eol="\r\n") as inst,
        serial.Serial(inst.link, timeout=5, exclusive=True) as port,
    ):
        yield inst, port


def ask(port: serial.Serial, line: str) -> str:
    """Write one line, read one line back (without its line end)."""
    port.write(line.encode() + b"\n")
    return read_line(port)


def read_line(port: serial.Serial) -> str:
    raw = port.readline()
    assert raw.endswith(b"\n"), f"no full line within the timeout: {raw!r}"
    return raw.decode().removesuffix("\n").removesuffix("\r")


def quiet(port: serial.Serial, seconds: float = 0.2) -> bytes:
    """Whatever the device end writes within `seconds` (b"": it stayed quiet)."""
    port.timeout = seconds
    try:
        return port.read(4096)
    finally:
        port.timeout = 5


@pytest.mark.parametrize(
    ("commands", "answers"),
    [
        (["*IDN?"], ["ACME,PSU-1,0,1.0"]),
        (["VOLT 5", "VOLT?"], ["5.000"]),
        (["VOLT 12.3456", "MEAS:VOLT?"], ["12.346"]),
        (["CURR 0.25", "CURR?"], ["0.250"]),
        (["OUTP?", "OUTP ON", "OUTP?", "OUTP OFF", "OUTP?"], ["0", "1", "0"]),
        (["VOLT 5", "OUTP ON", "*RST", "VOLT?", "OUTP?"], ["0.000", "0"]),
        (["*TRG", "INIT", "ECHO after triggers"], ["after triggers"]),
        (["ECHO  two  spaces "], [" two  spaces "]),
        (["SLOW 50 measured"], ["measured"]),
        (["volt 7", "volt?"], ["7.000"]),
    ],
)
def test_scpi_answers(psu: serial.Serial, commands: list[str], answers: list[str]) -> None:
    """Each SCPI command gets exactly its answer, and set commands answer nothing."""
    psu.write(b"".join(c.encode() + b"\n" for c in commands))
    assert [read_line(psu) for _ in answers] == answers
    assert quiet(psu) == b""


def test_set_command_answers_nothing(scpi: Instrument, psu: serial.Serial) -> None:
    """A set command (VOLT 5) is applied and answers nothing at all."""
    psu.write(b"VOLT 5\n")
    scpi.wait_count("VOLT 5")
    scpi.wait_idle()
    assert quiet(psu, 0.3) == b""
    assert scpi.state()["volt"] == 5.0


def test_unknown_command_goes_to_the_error_queue(psu: serial.Serial) -> None:
    """An unknown command answers nothing and SYST:ERR? then reports -113 once."""
    psu.write(b"BOGUS 1\n")
    assert quiet(psu) == b""
    assert ask(psu, "SYST:ERR?") == '-113,"Undefined header"'
    assert ask(psu, "SYST:ERR?") == '0,"No error"'


def test_crlf_line_is_one_command(scpi: Instrument, psu: serial.Serial) -> None:
    """A line ending in CRLF is one command, recorded without its line end."""
    psu.write(b"*IDN?\r\n")
    assert read_line(psu) == "ACME,PSU-1,0,1.0"
    assert scpi.received() == ["*IDN?"]


def test_commands_wait_behind_a_slow_one(scpi: Instrument, psu: serial.Serial) -> None:
    """Commands behind a slow one are answered after it, in order, but recorded on arrival."""
    start = time.monotonic()
    psu.write(b"SLOW 600 first\nECHO second\n*IDN?\n")
    first = read_line(psu)
    answered = time.monotonic()
    assert [first, read_line(psu), read_line(psu)] == ["first", "second", "ACME,PSU-1,0,1.0"]
    assert answered - start >= 0.6
    records = scpi.records()
    assert [r.line for r in records] == ["SLOW 600 first", "ECHO second", "*IDN?"]
    assert all(start <= r.t < answered - 0.3 for r in records)


def test_count_received_and_clear(scpi: Instrument, psu: serial.Serial) -> None:
    """count tells how often an exact line arrived; received lists all in order; clear resets."""
    psu.write(b"VOLT 5\nVOLT 5\nVOLT 5.0\nCURR 1\n")
    scpi.wait_count("CURR 1")
    assert scpi.count("VOLT 5") == 2
    assert scpi.count("VOLT 5.0") == 1
    assert scpi.count("VOLT") == 0
    assert scpi.received() == ["VOLT 5", "VOLT 5", "VOLT 5.0", "CURR 1"]
    scpi.clear()
    assert scpi.received() == []
    assert scpi.count("VOLT 5") == 0


def test_emit_writes_an_unsolicited_line(scpi: Instrument, psu: serial.Serial) -> None:
    """emit writes the line to the device end at once, before a slow answer still pending."""
    psu.write(b"SLOW 300 late answer\n")
    scpi.wait_count("SLOW 300 late answer")
    scpi.emit("ALARM OVP")
    assert read_line(psu) == "ALARM OVP"
    assert read_line(psu) == "late answer"


def test_modem_answers_with_crlf(modem: tuple[Instrument, serial.Serial]) -> None:
    """The AT modem answers each command with its lines and OK (or ERROR), CRLF-ended."""
    _, port = modem
    port.write(b"AT\r\nATI\r\nAT+CSQ\r\nATE0\r\nAT+NOPE\r\nat\r\n")
    want = ["OK", "ACME MODEM 1.0", "OK", "+CSQ: 20,99", "OK", "OK", "ERROR", "OK"]
    assert [port.readline() for _ in want] == [w.encode() + b"\r\n" for w in want]
    assert quiet(port) == b""


def test_modem_slow_command_holds_the_next(modem: tuple[Instrument, serial.Serial]) -> None:
    """AT+SLOW answers OK after its delay and the command behind it waits for it."""
    inst, port = modem
    start = time.monotonic()
    port.write(b"AT+SLOW=300\r\nATI\r\n")
    inst.wait_count("ATI")
    inst.emit("RING")
    assert [read_line(port) for _ in range(4)] == ["RING", "OK", "ACME MODEM 1.0", "OK"]
    assert time.monotonic() - start >= 0.3


def test_link_is_exclusive_like_a_port(scpi: Instrument, psu: serial.Serial) -> None:
    """The link opens with exclusive=True, as verld opens it, and a second such open fails."""
    assert os.path.realpath(scpi.link).startswith("/dev/pts/")
    with pytest.raises(serial.SerialException):
        serial.Serial(scpi.link, timeout=1, exclusive=True)


def test_stop_leaves_nothing(tmp_path: Path) -> None:
    """stop ends the process with exit 0 and removes its link and control socket."""
    inst = Instrument.start(tmp_path)
    assert os.path.islink(inst.link)
    assert os.path.exists(inst.control_path)
    assert inst.stop() == 0
    assert not os.path.lexists(inst.link)
    assert not os.path.exists(inst.control_path)
    assert inst.proc.stdout is not None
    assert inst.proc.stdout.closed


def _visa(rm: pyvisa.ResourceManager, name: str) -> MessageBasedResource:
    res = rm.open_resource(name, read_termination="\n", write_termination="\n", timeout=5000)
    assert isinstance(res, MessageBasedResource)
    return res


def test_pyvisa_drives_the_fake_over_asrl(scpi: Instrument) -> None:
    """PyVISA's @py backend opens ASRL<link>::INSTR and queries and sets the supply."""
    rm = pyvisa.ResourceManager("@py")
    try:
        psu = _visa(rm, f"ASRL{scpi.link}::INSTR")
        try:
            assert psu.query("*IDN?") == "ACME,PSU-1,0,1.0"
            psu.write("VOLT 5")
            assert psu.query("VOLT?") == "5.000"
        finally:
            psu.close()
    finally:
        rm.close()
    assert scpi.received() == ["*IDN?", "VOLT 5", "VOLT?"]


def _relay(server: socket.socket, port: serial.Serial, stop: threading.Event) -> None:
    """Accept one TCP connection and copy bytes both ways between it and `port`."""
    server.settimeout(5)
    conn, _ = server.accept()
    with conn:
        while not stop.is_set():
            ready = select.select([conn.fileno(), port.fileno()], [], [], 0.05)[0]
            if conn.fileno() in ready:
                data = conn.recv(4096)
                if not data:
                    return
                port.write(data)
            if port.fileno() in ready:
                conn.sendall(port.read(port.in_waiting or 1))


def test_pyvisa_drives_a_tcpip_socket(scpi: Instrument, psu: serial.Serial) -> None:
    """PyVISA's @py backend opens TCPIP::127.0.0.1::PORT::SOCKET and queries through it."""
    # A plain TCP relay onto the fake's pty stands in for a network front.
    stop = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        relay = threading.Thread(target=_relay, args=(server, psu, stop), daemon=True)
        relay.start()
        rm = pyvisa.ResourceManager("@py")
        try:
            inst = _visa(rm, f"TCPIP::127.0.0.1::{port}::SOCKET")
            try:
                assert inst.query("*IDN?") == "ACME,PSU-1,0,1.0"
                inst.write("VOLT 5")
                assert inst.query("MEAS:VOLT?") == "5.000"
            finally:
                inst.close()
        finally:
            rm.close()
            stop.set()
            relay.join(5)
    assert not relay.is_alive()
