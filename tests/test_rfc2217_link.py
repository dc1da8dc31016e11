"""`rfc2217://` device links against a small scripted RFC 2217 server in the test.

Strategy: the server is a real TCP listener on loopback, run by a thread; it speaks
telnet through verld's own sans-I/O codec (server side) and answers each COM-PORT
command as the test scripts it (the value asked, another value, nothing), can send
NOTIFY-MODEMSTATE or garbage, and echoes data. verld's side is `open_rfc2217` itself,
run on an event loop in the test, with a handler that records what reaches the
session. tests/test_rfc2217_ser2net.py has the same link against a real ser2net.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verld.codec.rfc2217 import SERVER, Cmd
from verld.codec.telnet import ComPort, Data, Telnet
from verld.config import DeviceConfig
from verld.errors import OpenError
from verld.links.rfc2217 import ComPortClient, Rfc2217Link, open_rfc2217

pytestmark = pytest.mark.timeout(30)

#: a script: command code → the value to answer with (None: no answer); absent: echo it
Script = dict[int, bytes | None]


class Server:
    """One-connection scripted RFC 2217 server (see the module docstring)."""

    def __init__(self, script: Script | None = None, greeting: bytes = b"") -> None:
        self.script = script or {}
        self.greeting = greeting
        self.asked: list[tuple[int, bytes]] = []
        self.data = bytearray()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conn: socket.socket | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        self.conn = conn
        telnet = Telnet(server=True, comport=True)
        conn.sendall(telnet.start() + self.greeting)
        while True:
            try:
                chunk = conn.recv(4096)
            except OSError:
                return
            if not chunk:
                return
            out = bytearray()
            for event in telnet.feed(chunk):
                if isinstance(event, ComPort):
                    self.asked.append((event.code, event.value))
                    answer = self.script.get(event.code, event.value)
                    if answer is not None:
                        out += telnet.comport(SERVER + event.code, answer)
                elif isinstance(event, Data):
                    self.data += event.data
                    out += telnet.data(event.data)  # (an echoing device)
            out = bytearray(telnet.take_output()) + out
            if out:
                conn.sendall(bytes(out))

    def send(self, raw: bytes) -> None:
        assert self.conn is not None
        self.conn.sendall(raw)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.sock.close()
        self.thread.join(5)


class Recorder:
    """The session's side: what the link hands on."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.lost: list[str] = []

    def link_data(self, data: bytes) -> None:
        self.data += data

    def link_lost(self, reason: str) -> None:
        self.lost.append(reason)


@pytest.fixture
def server_factory() -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def make(script: Script | None = None, greeting: bytes = b"") -> Server:
        made.append(Server(script, greeting))
        return made[-1]

    yield make
    for server in made:
        server.close()


DEV = DeviceConfig(port="rfc2217://x:1", baudrate=115200, timeout=0.5)


def opened(server: Server, cfg: DeviceConfig = DEV) -> tuple[Rfc2217Link, Recorder]:
    async def run() -> tuple[Rfc2217Link, Recorder]:
        rec = Recorder()
        link = await open_rfc2217(cfg, f"rfc2217://127.0.0.1:{server.port}", rec, 2.0)
        return link, rec

    return asyncio.run(run())


def open_error(server: Server, cfg: DeviceConfig = DEV) -> str:
    with pytest.raises(OpenError) as info:
        opened(server, cfg)
    return str(info.value)


def test_open_sends_every_setting_and_purge_then_dtr_and_rts(
    server_factory: Callable[..., Server],
) -> None:
    """The open asks baud, size, parity, stop, flow, purge, then DTR and RTS ON."""
    server = server_factory()
    link, _ = opened(server)
    link.close()
    codes = [code for code, _ in server.asked]
    assert codes[:6] == [
        Cmd.SET_BAUDRATE,
        Cmd.SET_DATASIZE,
        Cmd.SET_PARITY,
        Cmd.SET_STOPSIZE,
        Cmd.SET_CONTROL,
        Cmd.PURGE_DATA,
    ]
    assert server.asked[0][1] == (115200).to_bytes(4, "big")
    assert server.asked[5][1] == b"\x03"


def test_an_answer_with_another_value_fails_naming_both(
    server_factory: Callable[..., Server],
) -> None:
    """A server answering 9600 to 115200 fails the open naming the setting and both values."""
    server = server_factory({Cmd.SET_BAUDRATE: (9600).to_bytes(4, "big")})
    assert open_error(server) == "rfc2217: baudrate 115200 answered 9600"


def test_parity_is_named_as_in_the_config(server_factory: Callable[..., Server]) -> None:
    """A parity answered otherwise names both as the config writes them."""
    server = server_factory({Cmd.SET_PARITY: b"\x03"})
    assert open_error(server) == "rfc2217: parity none answered even"


def test_no_answer_fails_after_the_timeout(server_factory: Callable[..., Server]) -> None:
    """A setting never answered fails the open after device.timeout: "no answer"."""
    server = server_factory({Cmd.SET_DATASIZE: None})
    assert open_error(server) == "rfc2217: bytesize 8 no answer"


def test_a_server_without_com_port_option_is_named(server_factory: Callable[..., Server]) -> None:
    """A plain TCP server that never negotiates fails the open saying so."""
    plain = socket.create_server(("127.0.0.1", 0))
    try:
        port = plain.getsockname()[1]

        async def run() -> None:
            await open_rfc2217(DEV, f"rfc2217://127.0.0.1:{port}", Recorder(), 2.0)

        with pytest.raises(OpenError, match="COM-PORT-OPTION not agreed"):
            asyncio.run(run())
    finally:
        plain.close()


def test_data_with_0xff_is_doubled_out_and_undoubled_in(
    server_factory: Callable[..., Server],
) -> None:
    """0xFF goes out as IAC IAC and what comes back reaches the session as 0xFF."""
    server = server_factory()

    async def run() -> bytes:
        rec = Recorder()
        link = await open_rfc2217(DEV, f"rfc2217://127.0.0.1:{server.port}", rec, 2.0)
        link.write(b"a\xffb\xff\xff")
        for _ in range(100):
            if len(rec.data) >= 5:
                break
            await asyncio.sleep(0.01)
        link.close()
        return bytes(rec.data)

    assert asyncio.run(run()) == b"a\xffb\xff\xff"
    assert bytes(server.data) == b"a\xffb\xff\xff"


def test_notify_modemstate_sets_the_modem_lines(server_factory: Callable[..., Server]) -> None:
    """NOTIFY-MODEMSTATE with CTS set shows cts true, the others false."""
    notify = Telnet(server=True, comport=True).comport(SERVER + Cmd.NOTIFY_MODEMSTATE, b"\x10")
    server = server_factory(greeting=notify)
    link, _ = opened(server)
    link.close()
    assert link.modem == {"cts": True, "dsr": False, "ri": False, "cd": False}


def test_garbage_and_half_commands_from_the_server_are_counted(
    server_factory: Callable[..., Server],
) -> None:
    """Garbage from the server (stray SE, unknown codes, other options) is counted; it opens."""
    junk = (  # a stray SE, an unknown COM-PORT code, another option's subnegotiation
        b"\xff\xf0"
        + Telnet(server=True, comport=True).comport(77, b"x")
        + b"\xff\xfa\x18\x00\xff\xf0"
    )
    server = server_factory(greeting=junk)
    link, rec = opened(server)
    link.close()
    assert link.client.telnet.ignored + link.client.ignored == 3
    assert rec.lost == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_from_the_server_never_raise(data: bytes) -> None:
    """Any bytes fed to the client side: no exception, and no more data out than in."""
    client = ComPortClient()
    client.start()
    plain = client.feed(data)
    client.take_output()
    assert len(plain) <= len(data)
