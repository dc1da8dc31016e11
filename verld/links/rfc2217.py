"""`rfc2217://HOST:PORT` device links: a serial port served over telnet with its line settings.

Strategy: the link is a TCP connection like `tcp://` (an `FdTransport` on the
socket), with the sans-I/O telnet codec (`verld.codec.telnet`, client side)
between it and the session: bytes in are fed to the codec, whose `Data` goes on to
the session and whose COM-PORT answers and NOTIFY-MODEMSTATE stay here; bytes out
have 0xFF doubled. Opening negotiates first (`negotiate`): BINARY, SGA and
COM-PORT-OPTION offered, then every line setting from `device` and PURGE-DATA both
ways sent at once (one round trip) and each answer awaited (within
`device.timeout`, at most 5 s) — an answer with another value, or none, fails the
open with a reason naming the setting as in the config and both values — then DTR
ON (and RTS ON unless `rtscts`) without waiting (a server on a pty answers none).
The server's modem lines are kept in `modem` for `status.link.modem`. Malformed
telnet from the server is dropped and counted (`ignored`), never raised.
`ComPortClient` is that protocol without I/O; `Rfc2217Link` the transport around it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from verld.codec.rfc2217 import CONTROL, PARITY, SERVER, STOPSIZE, Cmd, pack_value
from verld.codec.telnet import COM_PORT, ComPort, Data, Telnet, escape
from verld.config import DeviceConfig
from verld.config.model import host_port
from verld.errors import OpenError
from verld.links.transport import FdTransport, LinkHandler, open_tcp

#: the longest any one answer is waited for, whatever `device.timeout` says
MAX_WAIT = 5.0
_PARITY = {"none": "N", "odd": "O", "even": "E", "mark": "M", "space": "S"}
_MODEM_BITS = (("cts", 0x10), ("dsr", 0x20), ("ri", 0x40), ("cd", 0x80))


def rfc2217_target(port: str) -> tuple[str, int] | None:
    """`rfc2217://HOST:PORT` → (HOST, PORT); None for any other port."""
    if not port.startswith("rfc2217://"):
        return None
    try:
        return host_port(port.removeprefix("rfc2217://"))
    except ValueError as exc:
        raise OpenError(f"{port}: {exc}") from None


def settings(cfg: DeviceConfig) -> list[tuple[str, int, int, str]]:
    """What is asked at open, in order: (config name, command, value, value as shown)."""
    stop = f"{cfg.stopbits:g}"
    flow = CONTROL["flow_hardware"] if cfg.rtscts else CONTROL["flow_none"]
    return [
        ("baudrate", Cmd.SET_BAUDRATE, cfg.baudrate, str(cfg.baudrate)),
        ("bytesize", Cmd.SET_DATASIZE, cfg.bytesize, str(cfg.bytesize)),
        ("parity", Cmd.SET_PARITY, PARITY[_PARITY[cfg.parity]], cfg.parity),
        ("stopbits", Cmd.SET_STOPSIZE, STOPSIZE[stop], stop),
        ("rtscts", Cmd.SET_CONTROL, flow, "true" if cfg.rtscts else "false"),
        ("purge", Cmd.PURGE_DATA, 3, "both"),
    ]


class ComPortClient:
    """The client side of COM-PORT-OPTION over telnet, sans-I/O: `feed` the server's
    bytes, get the stream's data back; answers and modem lines are kept here, and what
    is to be sent waits in `take_output`."""

    def __init__(self) -> None:
        self.telnet = Telnet(server=False, comport=True)
        self.modem = {name: False for name, _ in _MODEM_BITS}
        self.answers: dict[int, bytes] = {}  #: the server's last answer to each command
        self.ignored = 0  #: server commands that made no sense (the codec counts its own)
        #: every COM-PORT command the server sends, as it comes (a passthrough forwards them)
        self.on_command: Callable[[int, bytes], None] | None = None
        self._out = bytearray()

    @property
    def agreed(self) -> bool:
        """COM-PORT-OPTION is in force (either way)."""
        return self.telnet.local(COM_PORT) or self.telnet.remote(COM_PORT)

    def start(self) -> None:
        self._out += self.telnet.start()

    def command(self, code: int, value: bytes) -> None:
        self._out += self.telnet.comport(code, value)

    def take_output(self) -> bytes:
        out = self.telnet.take_output()
        if self._out:
            out, self._out = bytes(self._out) + out, bytearray()
        return out

    def feed(self, data: bytes) -> bytes:
        """The stream's bytes in `data` (commands taken out and kept)."""
        plain = b""
        for event in self.telnet.feed(data):
            if isinstance(event, Data):
                plain += event.data
            elif isinstance(event, ComPort):
                self._server_said(event)
        return plain

    def _server_said(self, event: ComPort) -> None:
        code = event.code
        if self.on_command is not None:
            self.on_command(code, event.value)
        if code == SERVER + Cmd.NOTIFY_MODEMSTATE and len(event.value) == 1:
            bits = event.value[0]
            for name, bit in _MODEM_BITS:
                self.modem[name] = bool(bits & bit)
        elif SERVER <= code <= SERVER + Cmd.PURGE_DATA:
            self.answers[code] = event.value
        elif code not in (Cmd.FLOWCONTROL_SUSPEND, Cmd.FLOWCONTROL_RESUME):
            self.ignored += 1  # (flow control by the server: TCP's window does that here)


class Rfc2217Link:
    """The transport of an `rfc2217://` link (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.client = ComPortClient()
        self.handler: LinkHandler | None = None  #: the session, once negotiated
        self._changed: asyncio.Event = asyncio.Event()
        self._lost: str | None = None
        self._inner = FdTransport(loop, sock.fileno(), sock.close, self)

    @property
    def modem(self) -> dict[str, bool]:
        """The server's modem lines as it last told (`status.link.modem`)."""
        return self.client.modem

    # --- the LinkTransport the session drives ------------------------------------------
    @property
    def tap(self) -> Callable[[str, bytes], None] | None:
        return self._inner.tap

    @tap.setter
    def tap(self, tap: Callable[[str, bytes], None] | None) -> None:
        self._inner.tap = tap

    @property
    def bytes_tx(self) -> int:
        return self._inner.bytes_tx

    @property
    def bytes_rx(self) -> int:
        return self._inner.bytes_rx

    def write(self, data: bytes) -> None:
        self._inner.write(escape(data))

    def close(self) -> None:
        self._inner.close()

    # --- the rest of a RawPort: the server has the port -----------------------------------
    serial = None  #: (the line settings are the server's: a client's go on as commands)
    comport_server = True

    @property
    def flow(self) -> Callable[[bool], None] | None:
        return self._inner.flow

    @flow.setter
    def flow(self, flow: Callable[[bool], None] | None) -> None:
        self._inner.flow = flow

    @property
    def on_command(self) -> Callable[[int, bytes], None] | None:
        """Told every COM-PORT command the server sends, as it comes."""
        return self.client.on_command

    @on_command.setter
    def on_command(self, on_command: Callable[[int, bytes], None] | None) -> None:
        self.client.on_command = on_command

    def pause_reading(self) -> None:
        self._inner.pause_reading()

    def resume_reading(self) -> None:
        self._inner.resume_reading()

    def command(self, code: int, value: bytes) -> None:
        """A COM-PORT command for the server, sent now (a passthrough client's)."""
        self.client.command(code, value)
        self._inner.write(self.client.take_output())

    def purge(self, received: bool, sent: bool) -> None:
        return None  # (a client's PURGE-DATA goes to the server as a command)

    def modem_bits(self) -> int | None:
        return None  # (the server's lines are in `modem`; a client is forwarded its own)

    def restore(self, cfg: DeviceConfig) -> None:
        return None  # (the link's next open negotiates the line again)

    # --- the FdTransport's handler --------------------------------------------------------
    def link_data(self, data: bytes) -> None:
        client = self.client
        plain = client.feed(data)
        out = client.take_output()
        if out:
            self._inner.write(out)
        if plain and self.handler is not None:  # (bytes before the open is done: stale)
            self.handler.link_data(plain)
        self._changed.set()

    def link_lost(self, reason: str) -> None:
        self._lost = reason
        self._changed.set()
        if self.handler is not None:
            self.handler.link_lost(reason)

    # --- opening ----------------------------------------------------------------------------
    async def negotiate(self, cfg: DeviceConfig) -> None:
        """Agree on COM-PORT-OPTION and set the line as `cfg` says; `OpenError` naming
        the setting, the value asked and the value answered (or "no answer")."""
        wait = min(cfg.timeout, MAX_WAIT)
        client = self.client
        client.start()
        self._inner.write(client.take_output())
        if not await self._until(lambda: client.agreed, wait):
            raise OpenError(
                self._lost
                or f"rfc2217: COM-PORT-OPTION not agreed within {wait:g} s "
                "(is the server in telnet(rfc2217) mode?)"
            )
        asked = settings(cfg)
        for _, code, value, _ in asked:  # (all at once: one round trip, not six)
            client.answers.pop(SERVER + code, None)
            client.command(code, pack_value(code, value))
        self._inner.write(client.take_output())
        for name, code, value, shown in asked:
            answered = await self._answer(SERVER + code, wait)
            want = pack_value(code, value)
            if answered != want:
                got = "no answer" if answered is None else f"answered {_shown(name, answered)}"
                raise OpenError(self._lost or f"rfc2217: {name} {shown} {got}")
        for line in ("dtr_on",) + (() if cfg.rtscts else ("rts_on",)):
            client.command(Cmd.SET_CONTROL, bytes((CONTROL[line],)))
        self._inner.write(client.take_output())

    async def _answer(self, code: int, wait: float) -> bytes | None:
        await self._until(lambda: code in self.client.answers, wait)
        return self.client.answers.get(code)

    async def _until(self, done: Callable[[], bool], wait: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while not done() and self._lost is None:
            self._changed.clear()
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return done()
        return done()


def _shown(name: str, value: bytes) -> str:
    """An answer's value as the config writes it (9600, even, 1.5, true)."""
    number = int.from_bytes(value, "big") if value else -1
    if name == "parity":
        letters = {v: k for k, v in PARITY.items()}
        names = {v: k for k, v in _PARITY.items()}
        return names.get(letters.get(number, ""), str(number))
    if name == "stopbits":
        return {1: "1", 2: "2", 3: "1.5"}.get(number, str(number))
    if name == "rtscts":
        return {CONTROL["flow_hardware"]: "true", CONTROL["flow_none"]: "false"}.get(
            number, str(number)
        )
    return str(number)


async def open_rfc2217(
    cfg: DeviceConfig, port: str, handler: LinkHandler, connect_timeout: float
) -> Rfc2217Link:
    """Connect to `port` (rfc2217://HOST:PORT) and negotiate the line (`negotiate`);
    `OpenError` says why not, and nothing stays open then."""
    target = rfc2217_target(port)
    if target is None:
        raise OpenError(f"{port}: not an rfc2217://HOST:PORT URL")
    sock = await open_tcp(*target, connect_timeout)
    link = Rfc2217Link(asyncio.get_running_loop(), sock)
    try:
        await link.negotiate(cfg)
    except BaseException:
        link.close()
        raise
    link.handler = handler
    return link
