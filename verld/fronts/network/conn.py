"""One network connection: a program on another host, or a passthrough holder.

Strategy: an asyncio `Protocol` (so TLS is the loop's), thin like a virtual port's
pty edge. Bytes in go through the telnet codec first when the entry speaks telnet
or RFC 2217 (`verld.codec.telnet`: negotiation answered here, COM-PORT commands to
`comport.ComPortServer`, data on), then, in `shared` mode, to a `ProgramStream`
(the same program-behind-a-byte-stream a virtual port has: its own calls, its own
answers, bounded output), or in `passthrough` to the `relay.Relay` that holds the
real port. Bytes out are the stream's answers or the port's bytes, IAC-doubled
under telnet. The transport's own flow control (`pause_writing`) is the stream's
"none fit now"; what telnet sends on its own (negotiation, COM-PORT answers)
counts toward `api.max_backlog` too and is dropped beyond it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import structlog

from verld.codec.registry import retry_of
from verld.codec.telnet import COM_PORT, Agreed, ComPort, Data, Telnet, escape
from verld.fronts.network.comport import ComPortServer
from verld.fronts.network.figures import FIGURES
from verld.fronts.protocol import StreamFigures
from verld.fronts.stream import GONE, ProgramStream

if TYPE_CHECKING:
    from verld.fronts.network.shapes import Entry, Relay

log = structlog.get_logger("verld.network")

#: bytes of one shared connection handled in one turn of the event loop
TURN = 16384
#: bytes read ahead of the turns before reading pauses: pausing at every turn made
#: uvloop 0.22+ (Python 3.13) read a flood at ~75 KB/s on a busy machine
HELD_MAX = 16 * TURN
#: the network front (`verld_front_calls_total{front}`) and its log events' prefix
KIND = FIGURES.name


class NetConn(asyncio.Protocol):
    """One accepted connection of a network entry (see the module docstring)."""

    def __init__(self, entry: Entry, peer: str) -> None:
        self.entry = entry
        self.peer = peer  #: "HOST:PORT"
        self.loop = entry.loop
        self.transport: asyncio.Transport | None = None
        protocol = entry.conf.protocol
        self.telnet = (
            None if protocol == "raw" else Telnet(server=True, comport=protocol == "rfc2217")
        )
        self.comport: ComPortServer | None = None
        self.stream: ProgramStream | None = None
        self.relay: Relay | None = None
        self.last = self.loop.time()  #: when it last sent something (idle_timeout)
        self.reason: str | None = None  #: why verld closed it
        self.dropped = 0  #: telnet's own output dropped (backlog full)
        self.bytes_in = self.bytes_out = 0  #: from and to the peer, telnet included
        self.subject: str | None = None  #: the TLS client certificate's subject
        self._paused = False
        self._want = False
        self._idle: asyncio.TimerHandle | None = None
        self._commanded = False  #: a COM-PORT command came (the option is in use)
        self._early = bytearray()  #: passthrough: bytes read before the port was handed over
        self._drain_until = 0.0  #: the peer closed its side: its answers are awaited till then
        self._turn = 0  #: bytes handled this turn of the loop (shared)
        self._yielding = False  #: a turn is due (the rest waits in `_held`)
        self._read_paused = False  #: reading paused: HELD_MAX bytes wait
        self._held = bytearray()  #: bytes read this turn beyond TURN

    def __repr__(self) -> str:
        return f"network:{self.entry.label}:{self.peer}"

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)
        cert = transport.get_extra_info("peercert")
        if cert:
            self.subject = ",".join(f"{k}={v}" for rdn in cert.get("subject", ()) for k, v in rdn)
        entry = self.entry
        if not entry.admit(self):
            return
        cfg = entry.cfg
        if entry.conf.mode == "passthrough":
            # nothing is read until the port is handed over (uvloop starts reading once this
            # returns: paused again then, and a read that came first waits in `_early`)
            transport.pause_reading()
            self.loop.call_soon(self._hold_reading)
            self.relay = entry.relay(self)
            self.comport = ComPortServer(cfg.device, apply=True, purge=self.relay.purge)
        else:
            self.stream = ProgramStream(
                entry.core,
                cfg,
                self,
                self.loop,
                kind=KIND,
                where={"name": entry.label, "peer": self.peer},
                write=entry.conf.write,
                events=entry.conf.events,
                share=entry.share,
            )
            self.stream.attach()
            stream = self.stream

            def purge(received: bool, sent: bool) -> None:
                stream.purge(received=received, sent=sent)

            self.comport = ComPortServer(cfg.device, apply=False, purge=purge)
        if self.telnet is not None:
            self._control(self.telnet.start())
        self._arm_idle()
        if self.relay is not None:
            self.relay.start()

    def data_received(self, data: bytes) -> None:
        relay = self.relay
        if relay is not None and not relay.ready:  # (read before the port is handed over)
            self._early += data
            self._hold_reading()
            return
        if relay is None:  # shared: at most TURN bytes a turn of the loop (see `_bounded`)
            self._bounded(data)
        else:
            self._handle(data)

    def _bounded(self, data: bytes) -> None:
        """A flood on one connection must not hold the loop (uvloop reads a busy socket
        up to 32 times in one go): TURN bytes are handled a turn; the rest waits in
        `_held` for the next turns, and past HELD_MAX of it reading pauses (the rest
        waits in TCP)."""
        if self._yielding or self._held:
            self._held += data
            self._hold_back()
            return
        head = data[: TURN - self._turn]
        if len(head) < len(data):
            self._held += data[len(head) :]
        self._turn += len(head)
        self._handle(head)
        if self._held or self._turn >= TURN:
            self._yield()

    def _hold_back(self) -> None:
        transport = self.transport
        if len(self._held) > HELD_MAX and not self._read_paused and transport is not None:
            self._read_paused = True
            transport.pause_reading()

    def _yield(self) -> None:
        if self.transport is not None and not self._yielding:
            self._yielding = True
            self._hold_back()
            self.loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._yielding, self._turn = False, 0
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._held:
            chunk = bytes(self._held[:TURN])
            del self._held[:TURN]
            self._turn = len(chunk)
            self._handle(chunk)
            if self._held or self._turn >= TURN:
                self._yield()
                return
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()

    def _handle(self, data: bytes) -> None:
        self.last = self.loop.time()
        self.entry.bytes_in += len(data)
        self.bytes_in += len(data)
        telnet = self.telnet
        if telnet is None:
            self._data(data)
            return
        events = telnet.feed(data)
        out = telnet.take_output()
        if out:
            self._control(out)
        for event in events:
            if isinstance(event, Data):
                self._data(event.data)
            elif isinstance(event, ComPort):
                self._command(event)
            elif isinstance(event, Agreed) and event.option == COM_PORT:
                self.modem_lines()

    def eof_received(self) -> bool:
        """The peer sent all it will (`printf 'PING\n' | nc HOST PORT`): the answers to
        its calls still go out, then the connection closes."""
        stream = self.stream
        if stream is None or not (stream.waiting or self._held):
            return False  # (closed now)
        cfg = self.entry.cfg
        self._drain_until = self.loop.time() + cfg.device.timeout * (retry_of(cfg) + 1) + 1.0
        self._drain()
        return True

    def _drain(self) -> None:
        transport, stream = self.transport, self.stream
        if transport is None or stream is None:
            return
        if (stream.waiting or self._held) and self.loop.time() < self._drain_until:
            self.loop.call_later(0.05, self._drain)
            return
        self.reason = self.reason or "closed by the peer (its calls answered)"
        transport.close()  # (after what is written)

    def _hold_reading(self) -> None:
        if self.transport is not None and self.relay is not None and not self.relay.ready:
            self.transport.pause_reading()

    def held(self) -> None:
        """The relay holds the port: what came meanwhile goes to it, then the rest."""
        early, self._early = bytes(self._early), bytearray()
        if early:
            self._handle(early)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
        reason = self.reason or ("closed by the peer" if exc is None else f"lost: {exc}")
        if self.stream is not None:
            self.stream.close()
        if self.relay is not None:
            self.relay.end(reason)
        self.entry.detach(self, reason)
        self.transport = None

    def pause_writing(self) -> None:
        self._paused = True
        if self.relay is not None:
            self.relay.pause_port()

    def resume_writing(self) -> None:
        self._paused = False
        if self.relay is not None:
            self.relay.resume_port()
        if self._want and self.stream is not None:
            self.stream.writable()

    # --- in ---------------------------------------------------------------------------------------
    def _data(self, data: bytes) -> None:
        if self.stream is not None:
            self.stream.feed(data)
        elif self.relay is not None:
            self.relay.to_port(data)

    def _command(self, event: ComPort) -> None:
        comport = self.comport
        if comport is None or self.telnet is None:
            return
        if self.relay is not None and self.relay.forward(event.code, event.value):
            return  # (an rfc2217:// link: the server answers)
        if not self._commanded:  # (pyserial may never answer our WILL: a command agrees)
            self._commanded = True
            self.modem_lines()
        for code, value in comport.handle(event.code, event.value):
            self._control(self.telnet.comport(code, value))
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
        telnet, comport = self.telnet, self.comport
        if telnet is None or comport is None or not telnet.rfc2217:
            return
        if self.relay is not None and self.relay.forwards:
            return  # (the server's own NOTIFY-MODEMSTATE is forwarded)
        if not (self._commanded or telnet.local(COM_PORT) or telnet.remote(COM_PORT)):
            return
        bits = self.relay.modem_bits() if self.relay is not None else self.entry.core.modem_bits()
        answer = comport.modem(bits)
        if answer is not None:
            self._control(telnet.comport(*answer))

    # --- out --------------------------------------------------------------------------------------
    def _control(self, data: bytes) -> None:
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
        """A COM-PORT command from an rfc2217:// link's server, passed on as it came."""
        if self.telnet is not None and self.telnet.rfc2217:
            self._control(self.telnet.comport(code, value))

    def send_data(self, data: bytes) -> None:
        """Stream bytes for the peer (the relay's): IAC-doubled under telnet."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        payload = escape(data) if self.telnet is not None else data
        transport.write(payload)
        self.entry.bytes_out += len(payload)
        self.bytes_out += len(payload)

    # --- the stream's Edge --------------------------------------------------------------------
    def write(self, data: bytes | bytearray) -> int:
        transport = self.transport
        if transport is None or transport.is_closing():
            return GONE
        if self._paused:
            return 0
        self.send_data(bytes(data))
        return len(data)

    def want_writable(self, want: bool) -> None:
        self._want = want

    # --- the end --------------------------------------------------------------------------------
    def close(self, reason: str) -> None:
        """verld closes it (idle, reload, uninhibit, the port failed, refused)."""
        if self.reason is None:
            self.reason = reason
        if self.transport is not None:
            self.transport.abort()

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

    def event(self, data: bytes, text: str | None) -> None:
        if self.stream is not None:
            self.stream.event(data, text)

    def row(self) -> dict[str, Any]:
        """Its `programs` row: calls, or, holding the port, the bytes relayed."""
        fig = self.figures()
        waiting = self.stream.waiting if self.stream is not None else 0
        return {
            "front": KIND,
            "who": f"{self.entry.label} {self.peer}",
            "passthrough": self.relay is not None,
            "calls": fig["calls"],
            "ok": fig["ok"],
            "failed": sum(fig["failed"].values()),
            "waiting": waiting,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
        }

    def figures(self) -> StreamFigures:
        """Its calls and drops so far (shared), for the entry's totals."""
        fig: StreamFigures = {
            "calls": 0,
            "ok": 0,
            "failed": {},
            "dropped": 0,
            "ignored": 0,
            "bad_frames": 0,
        }
        if self.stream is not None:
            fig = self.stream.figures()
        fig["dropped"] += self.dropped
        fig["ignored"] += self.telnet.ignored if self.telnet is not None else 0
        fig["ignored"] += self.comport.ignored if self.comport is not None else 0
        return fig
