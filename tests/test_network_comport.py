"""RFC 2217's server side (`verld.fronts.network.comport`): commands in, answers out.

Strategy: sans-I/O, so the tests feed commands and read answers; shared mode needs
no port, passthrough gets a real pyserial `Serial` on a pty pair (whose termios the
test reads back). The property test pushes any bytes through the telnet codec and
every COM-PORT command it yields through the server: nothing raises, and every
answer is a server code with a value of the right size.
"""

from __future__ import annotations

import os
import pty
import termios
from collections.abc import Iterator

import pytest
import serial
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from verld.codec.rfc2217 import CONTROL, SERVER, Cmd
from verld.codec.telnet import ComPort, Telnet
from verld.config import DeviceConfig
from verld.fronts.network.comport import ComPortServer

DEV = DeviceConfig(baudrate=115200)
BAUD = (0, 1, 0xC2, 0)  # 115200, big-endian


def shared() -> ComPortServer:
    return ComPortServer(DEV, apply=False)


def test_shared_answers_the_configured_baud_rate_to_any_other() -> None:
    """Shared: SET-BAUDRATE 9600 is answered with 115200 (refused, as pyserial reads it)."""
    assert shared().handle(Cmd.SET_BAUDRATE, (9600).to_bytes(4, "big")) == [
        (SERVER + Cmd.SET_BAUDRATE, bytes(BAUD))
    ]


@pytest.mark.parametrize(
    ("code", "value", "answer"),
    [
        (Cmd.SET_DATASIZE, 0, 8),
        (Cmd.SET_PARITY, 0, 1),
        (Cmd.SET_STOPSIZE, 0, 1),
        (Cmd.SET_DATASIZE, 7, 8),
        (Cmd.SET_PARITY, 3, 1),
        (Cmd.SET_STOPSIZE, 2, 1),
    ],
)
def test_shared_answers_the_configured_line_settings(code: int, value: int, answer: int) -> None:
    """Shared: a query (0) or another value is answered with the configured 8N1."""
    assert shared().handle(code, bytes((value,))) == [(SERVER + code, bytes((answer,)))]


@pytest.mark.parametrize(
    ("asked", "answer"),
    [
        ("dtr_on", "dtr_on"),
        ("dtr_off", "dtr_on"),
        ("rts_off", "rts_on"),
        ("break_on", "break_off"),
        ("dtr_request", "dtr_on"),
        ("flow_hardware", "flow_none"),
    ],
)
def test_shared_reports_dtr_rts_on_break_off_flow_as_configured(asked: str, answer: str) -> None:
    """Shared: DTR and RTS are ON, BREAK OFF, flow control as device.rtscts, whatever is asked."""
    out = shared().handle(Cmd.SET_CONTROL, bytes((CONTROL[asked],)))
    assert out == [(SERVER + Cmd.SET_CONTROL, bytes((CONTROL[answer],)))]


def test_purge_is_answered_with_its_value_and_purges() -> None:
    """PURGE-DATA 3 is answered 3 and discards both directions."""
    seen: list[tuple[bool, bool]] = []
    server = ComPortServer(DEV, apply=False, purge=lambda r, s: seen.append((r, s)))
    assert server.handle(Cmd.PURGE_DATA, b"\x03") == [(SERVER + Cmd.PURGE_DATA, b"\x03")]
    assert seen == [(True, True)]


def test_signature_query_is_verld_and_a_client_signature_is_kept() -> None:
    """An empty SIGNATURE gets "verld"; a client's own text is kept for the log, unanswered."""
    server = shared()
    assert server.handle(Cmd.SIGNATURE, b"") == [(SERVER, b"verld")]
    assert server.handle(Cmd.SIGNATURE, b"pyserial\xff") == []
    assert server.signature == b"pyserial\xff"


def test_flowcontrol_suspend_and_resume_get_no_answer() -> None:
    """A client's FLOWCONTROL-SUSPEND/-RESUME are not answered."""
    assert shared().handle(Cmd.FLOWCONTROL_SUSPEND, b"") == []
    assert shared().handle(Cmd.FLOWCONTROL_RESUME, b"") == []


def test_bad_values_and_unknown_commands_are_counted() -> None:
    """A wrong-sized value or an unknown code is counted ignored, never answered."""
    server = shared()
    assert server.handle(Cmd.SET_BAUDRATE, b"\x01") == []
    assert server.handle(99, b"\x00") == []
    assert server.handle(Cmd.PURGE_DATA, b"\x07") == []
    assert server.ignored == 3


def test_modem_state_first_zero_once_then_changes_with_deltas() -> None:
    """No modem lines: 0 once. Lines: sent when they change, with the delta bits."""
    server = shared()
    assert server.modem(None) == (SERVER + Cmd.NOTIFY_MODEMSTATE, b"\x00")
    assert server.modem(None) is None
    assert server.modem(0x10) == (SERVER + Cmd.NOTIFY_MODEMSTATE, b"\x11")  # CTS + delta CTS
    assert server.modem(0x10) is None


def test_modem_state_mask_is_honoured() -> None:
    """SET-MODEMSTATE-MASK is answered and masks what NOTIFY-MODEMSTATE carries."""
    server = shared()
    assert server.handle(Cmd.SET_MODEMSTATE_MASK, b"\x20") == [(SERVER + 11, b"\x20")]
    assert server.modem(0x10) == (SERVER + Cmd.NOTIFY_MODEMSTATE, b"\x00")
    assert server.modem(0x30) == (SERVER + Cmd.NOTIFY_MODEMSTATE, b"\x20")  # (no delta bit in mask)


@pytest.fixture
def pty_serial() -> Iterator[tuple[serial.Serial, int]]:
    master, slave = pty.openpty()
    ser = serial.Serial(os.ttyname(slave), 115200, timeout=0)
    yield ser, slave
    ser.close()
    os.close(slave)
    os.close(master)


def test_passthrough_applies_the_baud_rate_to_the_port(
    pty_serial: tuple[serial.Serial, int],
) -> None:
    """Passthrough: SET-BAUDRATE 9600 reaches the port's termios and is answered 9600."""
    ser, slave = pty_serial
    server = ComPortServer(DEV, apply=True, port=ser)
    assert server.handle(Cmd.SET_BAUDRATE, (9600).to_bytes(4, "big")) == [
        (SERVER + Cmd.SET_BAUDRATE, (9600).to_bytes(4, "big"))
    ]
    assert termios.tcgetattr(slave)[4] == termios.B9600


def test_passthrough_dtr_on_a_pty_is_answered_as_asked_and_noted(
    pty_serial: tuple[serial.Serial, int],
) -> None:
    """Passthrough on a pty: DTR OFF is answered OFF and noted as not applied."""
    server = ComPortServer(DEV, apply=True, port=pty_serial[0])
    out = server.handle(Cmd.SET_CONTROL, bytes((CONTROL["dtr_off"],)))
    assert out == [(SERVER + Cmd.SET_CONTROL, bytes((CONTROL["dtr_off"],)))]
    assert server.not_applied == ["dtr"]


def _pty_refuses_even_parity() -> bool:
    master, slave = pty.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[2] |= termios.PARENB
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
    except termios.error:
        return True
    finally:
        os.close(slave)
        os.close(master)
    return False


@pytest.mark.timeout(10)
@pytest.mark.skipif(not _pty_refuses_even_parity(), reason="this kernel's ptys take even parity")
def test_passthrough_setting_the_pty_refuses_is_answered_in_force_logged_once_not_reapplied(
    pty_serial: tuple[serial.Serial, int],
) -> None:
    """Passthrough: even parity and 7 bits (tcsetattr EINVAL on a pty) answered N/8, warned once."""
    ser, slave = pty_serial
    server = ComPortServer(DEV, apply=True, port=ser)
    with capture_logs() as logs:
        for _ in range(2):
            assert server.handle(Cmd.SET_PARITY, b"\x03") == [(SERVER + Cmd.SET_PARITY, b"\x01")]
        assert server.handle(Cmd.SET_DATASIZE, b"\x07") == [(SERVER + Cmd.SET_DATASIZE, b"\x08")]
        assert server.handle(Cmd.SET_BAUDRATE, (9600).to_bytes(4, "big")) == [
            (SERVER + Cmd.SET_BAUDRATE, (9600).to_bytes(4, "big"))
        ]
    assert (ser.parity, ser.bytesize) == ("N", 8)  # (pyserial's store holds what is in effect)
    attrs = termios.tcgetattr(slave)
    assert attrs[4] == termios.B9600  # (the next change applied, the refused values not with it)
    assert not attrs[2] & termios.PARENB and attrs[2] & termios.CSIZE == termios.CS8
    refused = [e for e in logs if e["event"] == "network_setting_refused"]
    assert [(e["log_level"], e["setting"], e["value"]) for e in refused] == [
        ("warning", "parity", "even"),
        ("warning", "bytesize", 7),
    ]
    assert all(e["error"] == "[Errno 22] Invalid argument" for e in refused)


class _Unsettable(serial.Serial):
    """A pyserial Serial (never opened) whose every reconfigure fails as tcsetattr does."""

    def __init__(self) -> None:
        super().__init__(baudrate=115200)
        self.is_open = True  # (so that the setters reconfigure)

    def _reconfigure_port(self, force_update: bool = False) -> None:
        raise termios.error(22, "Invalid argument")


@pytest.mark.timeout(10)
def test_passthrough_refused_setting_is_put_back_even_when_reapplying_fails() -> None:
    """A port refusing every change: the answer and pyserial's store keep the value in effect."""
    port = _Unsettable()
    try:
        server = ComPortServer(DEV, apply=True, port=port)
        with capture_logs() as logs:
            assert server.handle(Cmd.SET_PARITY, b"\x03") == [(SERVER + Cmd.SET_PARITY, b"\x01")]
            assert server.handle(Cmd.SET_BAUDRATE, (9600).to_bytes(4, "big"))[0][1] == bytes(BAUD)
        assert (port.parity, port.baudrate) == ("N", 115200)
        assert [e["setting"] for e in logs] == ["parity", "baudrate"]
    finally:
        port.is_open = False


def test_passthrough_without_a_port_answers_the_values_in_effect() -> None:
    """Passthrough on a tcp:// link (no port): the configured values are the answer."""
    server = ComPortServer(DEV, apply=True)
    assert server.handle(Cmd.SET_BAUDRATE, (9600).to_bytes(4, "big"))[0][1] == bytes(BAUD)


_SIZE = {Cmd.SET_BAUDRATE: 4}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.booleans())
def test_any_client_bytes_are_answered_or_counted(data: bytes, apply: bool) -> None:
    """Any bytes through telnet and the server: no exception, only well-formed answers."""
    telnet = Telnet(server=True, comport=True)
    telnet.start()
    server = ComPortServer(DEV, apply=apply)
    for event in telnet.feed(data):
        if isinstance(event, ComPort):
            for code, value in server.handle(event.code, event.value):
                assert code >= SERVER
                base = code - SERVER
                assert base == Cmd.SIGNATURE or len(value) == _SIZE.get(base, 1)
                assert telnet.comport(code, value).startswith(b"\xff\xfa\x2c")
