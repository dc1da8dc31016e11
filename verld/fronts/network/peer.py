"""A network connection's side of the wire: raw bytes, or telnet with RFC 2217's COM-PORT.

Strategy: both kinds of connection (`conn.SharedConn`, `passthrough.PassthroughConn`)
talk to their peer through one `PeerIO` over the asyncio transport. Bytes in (`feed`)
go through the telnet codec when the entry speaks telnet or RFC 2217
(`verld.codec.telnet`: negotiation answered here, COM-PORT commands to the
connection's `comport.ComPortServer` unless `forward` takes them, data on to
`on_data`); bytes out (`send`) are IAC-doubled under telnet. What telnet sends on its
own (negotiation, COM-PORT answers, NOTIFY-MODEMSTATE: `control`) counts toward
`api.max_backlog` and is dropped beyond it. The modem lines come from `modem` (the
link's, or the held port's) and are told when they change (`modem_lines`); `modem`
None: the port's own RFC 2217 server tells them, forwarded. It also keeps what every
connection has: its counts, its TLS subject, the idle timer, and `close`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import structlog

from verld.codec.telnet import COM_PORT, Agreed, ComPort, Data, Telnet, escape
from verld.fronts.network.access import tls_subject
from verld.fronts.network.comport import ComPortServer

if TYPE_CHECKING:
    from verld.fronts.network.state import EntryState

log = structlog.get_logger("verld.network")


def _answered_here(code: int, value: bytes) -> bool:
    return False


class PeerIO:
    """One connection's bytes with its peer (see the module docstring)."""

    def __init__(
        self,
        entry: EntryState,
        peer: str,
        comport: ComPortServer,
        on_data: Callable[[bytes], None],
        modem: Callable[[], int | None] | None,
    ) -> None:
        self.entry = entry
        self.peer = peer  #: "HOST:PORT"
        self.loop = entry.loop
        self.transport: asyncio.Transport | None = None
        protocol = entry.conf.protocol
        self.telnet = (
            None if protocol == "raw" else Telnet(server=True, comport=protocol == "rfc2217")
        )
        self.comport = comport
        self.on_data = on_data  #: the stream's bytes from the peer (telnet taken out)
        #: a client's COM-PORT command for the port's own server: True when it took it
        self.forward: Callable[[int, bytes], bool] = _answered_here
        #: where the modem lines come from (None: the port's server tells them, forwarded)
        self.modem = modem
        self.last = self.loop.time()  #: when it last sent something (idle_timeout)
        self.reason: str | None = None  #: why verld closed it
        self.dropped = 0  #: telnet's own output dropped (backlog full)
        self.bytes_in = self.bytes_out = 0  #: from and to the peer, telnet included
        self.subject: str | None = None  #: the TLS client certificate's subject
        self._idle: asyncio.TimerHandle | None = None
        self._commanded = False  #: a COM-PORT command came (the option is in use)

    # --- the transport's life -------------------------------------------------------------------
    def made(self, transport: asyncio.BaseTransport) -> asyncio.Transport:
        """The connection is made: its transport kept, its TLS subject read."""
        self.transport = made = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)
        self.subject = tls_subject(made)
        return made

    def start(self) -> None:
        """Telnet's offers out, the idle timer armed."""
        if self.telnet is not None:
            self.control(self.telnet.start())
        self._arm_idle()

    def lost(self, exc: Exception | None) -> str:
        """The connection is gone: the idle timer stops; why it ended."""
        if self._idle is not None:
            self._idle.cancel()
        return self.reason or ("closed by the peer" if exc is None else f"lost: {exc}")

    def close(self, reason: str) -> None:
        """verld closes it (idle, reload, uninhibit, the port failed, refused)."""
        if self.reason is None:
            self.reason = reason
        if self.transport is not None:
            self.transport.abort()

    # --- in ---------------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Bytes from the peer: counted, telnet handled, the stream's bytes to `on_data`."""
        self.last = self.loop.time()
        self.entry.bytes_in += len(data)
        self.bytes_in += len(data)
        telnet = self.telnet
        if telnet is None:
            self.on_data(data)
            return
        events = telnet.feed(data)
        out = telnet.take_output()
        if out:
            self.control(out)
        for event in events:
            if isinstance(event, Data):
                self.on_data(event.data)
            elif isinstance(event, ComPort):
                self._command(event)
            elif isinstance(event, Agreed) and event.option == COM_PORT:
                self.modem_lines()

    def _command(self, event: ComPort) -> None:
        telnet, comport = self.telnet, self.comport
        if telnet is None:
            return
        if self.forward(event.code, event.value):
            return  # (an rfc2217:// port: its server answers)
        if not self._commanded:  # (pyserial may never answer our WILL: a command agrees)
            self._commanded = True
            self.modem_lines()
        for code, value in comport.handle(event.code, event.value):
            self.control(telnet.comport(code, value))
        if comport.signature is not None:
            log.info(
                "network_client_signature",
                name=self.entry.label,
                peer=self.peer,
                signature=comport.signature.decode("ascii", "backslashreplace"),
            )
            comport.signature = None
        while comport.not_applied:
            line = comport.not_applied.pop()
            log.info(
                "network_line_not_applied",
                name=self.entry.label,
                peer=self.peer,
                line=line,
                reason="the port has no modem lines (a pty or a TCP link)",
            )

    def modem_lines(self) -> None:
        """Send NOTIFY-MODEMSTATE when the lines changed (or first, once agreed)."""
        telnet, modem = self.telnet, self.modem
        if telnet is None or not telnet.rfc2217 or modem is None:
            return
        if not (self._commanded or telnet.local(COM_PORT) or telnet.remote(COM_PORT)):
            return
        answer = self.comport.modem(modem())
        if answer is not None:
            self.control(telnet.comport(*answer))

    # --- out --------------------------------------------------------------------------------------
    def control(self, data: bytes) -> None:
        """Telnet's own bytes (already encoded): dropped when the backlog is full."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if transport.get_write_buffer_size() + len(data) > self.entry.cfg.api.max_backlog:
            self.dropped += 1
            return
        transport.write(data)
        self.entry.bytes_out += len(data)
        self.bytes_out += len(data)

    def forward_command(self, code: int, value: bytes) -> None:
        """A COM-PORT command from an rfc2217:// port's server, passed on as it came."""
        if self.telnet is not None and self.telnet.rfc2217:
            self.control(self.telnet.comport(code, value))

    def send(self, data: bytes) -> None:
        """Stream bytes for the peer: IAC-doubled under telnet."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        payload = escape(data) if self.telnet is not None else data
        transport.write(payload)
        self.entry.bytes_out += len(payload)
        self.bytes_out += len(payload)

    # --- idle -------------------------------------------------------------------------------------
    def _arm_idle(self) -> None:
        idle = self.entry.conf.idle
        if idle > 0 and self.transport is not None:
            self._idle = self.loop.call_at(self.last + idle, self._idle_check)

    def _idle_check(self) -> None:
        idle = self.entry.conf.idle
        if idle <= 0:
            self._idle = None
        elif self.loop.time() - self.last >= idle:
            self.close(f"silent for idle_timeout ({idle:g} s)")
        else:
            self._arm_idle()

    def rearm_idle(self) -> None:
        """A reload changed `idle_timeout`."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self._arm_idle()

    # --- figures ----------------------------------------------------------------------------------
    def figures(self) -> dict[str, int]:
        """What the wire adds to the connection's figures: telnet's output dropped, and
        telnet and COM-PORT commands that made no sense."""
        ignored = self.comport.ignored + (self.telnet.ignored if self.telnet is not None else 0)
        return {"dropped": self.dropped, "ignored": ignored}
