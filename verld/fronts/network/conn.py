"""A shared network connection: a program on another host, over the device's link.

Strategy: an asyncio `Protocol` (so TLS is the loop's), thin like a virtual port's
pty edge. Its wire is a `peer.PeerIO` (raw, or telnet with COM-PORT answered from the
configured settings: nothing is applied); the stream's bytes go to a `ProgramStream`
(the same program-behind-a-byte-stream a virtual port has: its own calls, its own
answers, bounded output), whose answers go back through the wire. The transport's
own flow control (`pause_writing`) is the stream's "none fit now". A flood is handled
at most `TURN` bytes a turn of the loop (`_bounded`); the peer's EOF lets the answers
to its calls go out before the connection closes (`eof_received`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from verld.codec.registry import retry_of
from verld.fronts.network.comport import ComPortServer
from verld.fronts.network.figures import FIGURES
from verld.fronts.network.peer import PeerIO
from verld.fronts.network.state import EntryState
from verld.fronts.protocol import StreamFigures
from verld.fronts.stream import GONE, ProgramStream

#: bytes of one shared connection handled in one turn of the event loop
TURN = 16384
#: bytes read ahead of the turns before reading pauses: pausing at every turn made
#: uvloop 0.22+ (Python 3.13) read a flood at ~75 KB/s on a busy machine
HELD_MAX = 16 * TURN
#: the network front (`verld_front_calls_total{front}`) and its log events' prefix
KIND = FIGURES.name


class SharedConn(asyncio.Protocol):
    """One accepted connection of a `shared` entry (see the module docstring): `admit`
    takes it once made (False: refused, closed), `detach` is told why it ended."""

    def __init__(
        self,
        entry: EntryState,
        peer: str,
        admit: Callable[[SharedConn], bool],
        detach: Callable[[SharedConn, str], None],
    ) -> None:
        self.entry = entry
        self.peer = peer  #: "HOST:PORT"
        self._admit, self._detach = admit, detach
        self.loop = entry.loop
        comport = ComPortServer(entry.cfg.device, apply=False, purge=self._purge)
        self.io = PeerIO(entry, peer, comport, self._data, entry.core.modem_bits)
        self.stream: ProgramStream | None = None
        self._paused = False
        self._want = False
        self._drain_until = 0.0  #: the peer closed its side: its answers are awaited till then
        self._turn = 0  #: bytes handled this turn of the loop
        self._yielding = False  #: a turn is due (the rest waits in `_held`)
        self._read_paused = False  #: reading paused: HELD_MAX bytes wait
        self._held = bytearray()  #: bytes read this turn beyond TURN

    def __repr__(self) -> str:
        return f"network:{self.entry.label}:{self.peer}"

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.io.made(transport)
        entry = self.entry
        if not self._admit(self):
            return
        self.stream = ProgramStream(
            entry.core,
            entry.cfg,
            self,
            self.loop,
            kind=KIND,
            where={"name": entry.label, "peer": self.peer},
            write=entry.conf.write,
            events=entry.conf.events,
            share=entry.share,
        )
        self.stream.attach()
        self.io.start()

    def data_received(self, data: bytes) -> None:
        self._bounded(data)

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
        self.io.feed(head)
        if self._held or self._turn >= TURN:
            self._yield()

    def _hold_back(self) -> None:
        transport = self.io.transport
        if len(self._held) > HELD_MAX and not self._read_paused and transport is not None:
            self._read_paused = True
            transport.pause_reading()

    def _yield(self) -> None:
        if self.io.transport is not None and not self._yielding:
            self._yielding = True
            self._hold_back()
            self.loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._yielding, self._turn = False, 0
        transport = self.io.transport
        if transport is None or transport.is_closing():
            return
        if self._held:
            chunk = bytes(self._held[:TURN])
            del self._held[:TURN]
            self._turn = len(chunk)
            self.io.feed(chunk)
            if self._held or self._turn >= TURN:
                self._yield()
                return
        if self._read_paused:
            self._read_paused = False
            transport.resume_reading()

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
        transport, stream = self.io.transport, self.stream
        if transport is None or stream is None:
            return
        if (stream.waiting or self._held) and self.loop.time() < self._drain_until:
            self.loop.call_later(0.05, self._drain)
            return
        self.io.reason = self.io.reason or "closed by the peer (its calls answered)"
        transport.close()  # (after what is written)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self.io.lost(exc)
        if self.stream is not None:
            self.stream.close()
        self._detach(self, reason)
        self.io.transport = None

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._want and self.stream is not None:
            self.stream.writable()

    # --- the wire's stream bytes and PURGE-DATA ---------------------------------------------------
    def _data(self, data: bytes) -> None:
        if self.stream is not None:
            self.stream.feed(data)

    def _purge(self, received: bool, sent: bool) -> None:
        if self.stream is not None:
            self.stream.purge(received=received, sent=sent)

    # --- the stream's Edge --------------------------------------------------------------------
    def write(self, data: bytes | bytearray) -> int:
        transport = self.io.transport
        if transport is None or transport.is_closing():
            return GONE
        if self._paused:
            return 0
        self.io.send(bytes(data))
        return len(data)

    def want_writable(self, want: bool) -> None:
        self._want = want

    # --- for the entry and the front --------------------------------------------------------------
    def close(self, reason: str) -> None:
        """verld closes it (idle, reload, the entry closing, refused)."""
        self.io.close(reason)

    def event(self, data: bytes, text: str | None) -> None:
        if self.stream is not None:
            self.stream.event(data, text)

    def row(self) -> dict[str, Any]:
        """Its `programs` row."""
        fig = self.figures()
        return {
            "front": KIND,
            "who": f"{self.entry.label} {self.peer}",
            "passthrough": False,
            "calls": fig["calls"],
            "ok": fig["ok"],
            "failed": sum(fig["failed"].values()),
            "waiting": self.stream.waiting if self.stream is not None else 0,
            "bytes_in": self.io.bytes_in,
            "bytes_out": self.io.bytes_out,
        }

    def figures(self) -> StreamFigures:
        """Its calls and drops so far, for the entry's totals."""
        fig: StreamFigures = (
            self.stream.figures()
            if self.stream is not None
            else {"calls": 0, "ok": 0, "failed": {}, "dropped": 0, "ignored": 0, "bad_frames": 0}
        )
        wire = self.io.figures()
        fig["dropped"] += wire["dropped"]
        fig["ignored"] += wire["ignored"]
        return fig
