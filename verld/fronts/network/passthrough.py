"""A passthrough network connection: the one holder of the real port, bytes relayed.

Strategy: an asyncio `Protocol` like a shared connection, over the same wire
(`peer.PeerIO`: raw, or telnet with COM-PORT applied to the port), but with no
program stream: its bytes go to a `relay.Relay`, which holds the port and relays
both ways. Nothing is read from the peer until the relay has the port open
(`held`): reading is paused when the connection is made, and what a transport read
before that (uvloop starts reading once `connection_made` returns) waits in `_early`.
The transport's flow control holds the port: a peer reading slowly pauses reading
the port.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from verld.fronts.network.comport import ComPortServer
from verld.fronts.network.figures import FIGURES
from verld.fronts.network.peer import PeerIO
from verld.fronts.network.relay import Relay
from verld.fronts.network.state import EntryState
from verld.fronts.protocol import StreamFigures


class PassthroughConn(asyncio.Protocol):
    """One accepted connection of a `passthrough` entry (see the module docstring):
    `admit` takes it once made (False: refused, closed), `detach` is told why it ended."""

    def __init__(
        self,
        entry: EntryState,
        peer: str,
        admit: Callable[[PassthroughConn], bool],
        detach: Callable[[PassthroughConn, str], None],
    ) -> None:
        self.entry = entry
        self.peer = peer  #: "HOST:PORT"
        self._admit, self._detach = admit, detach
        self.loop = entry.loop
        comport = ComPortServer(entry.cfg.device, apply=True, purge=self._purge)
        self.io = PeerIO(entry, peer, comport, self._data, self._modem_bits)
        self.relay = Relay(self.io, self.held)
        self._early = bytearray()  #: bytes read before the port was handed over

    def __repr__(self) -> str:
        return f"network:{self.entry.label}:{self.peer}"

    # --- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        made = self.io.made(transport)
        if not self._admit(self):
            return
        # nothing is read until the port is handed over (uvloop starts reading once this
        # returns: paused again then, and a read that came first waits in `_early`)
        made.pause_reading()
        self.loop.call_soon(self._hold_reading)
        self.io.start()
        self.relay.start()

    def data_received(self, data: bytes) -> None:
        if not self.relay.ready:  # (read before the port is handed over)
            self._early += data
            self._hold_reading()
            return
        self.io.feed(data)

    def _hold_reading(self) -> None:
        if self.io.transport is not None and not self.relay.ready:
            self.io.transport.pause_reading()

    def held(self) -> None:
        """The relay holds the port: what came meanwhile goes to it, then the rest."""
        early, self._early = bytes(self._early), bytearray()
        if early:
            self.io.feed(early)
        transport = self.io.transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self.io.lost(exc)
        self.relay.end(reason)
        self._detach(self, reason)
        self.io.transport = None

    def pause_writing(self) -> None:
        self.relay.pause_port()

    def resume_writing(self) -> None:
        self.relay.resume_port()

    # --- the wire's stream bytes, PURGE-DATA and modem lines --------------------------------------
    def _data(self, data: bytes) -> None:
        self.relay.to_port(data)

    def _purge(self, received: bool, sent: bool) -> None:
        self.relay.purge(received, sent)

    def _modem_bits(self) -> int | None:
        return self.relay.modem_bits()

    # --- for the entry and the front --------------------------------------------------------------
    def close(self, reason: str) -> None:
        """verld closes it (idle, reload, uninhibit, the port failed, refused)."""
        self.io.close(reason)

    def row(self) -> dict[str, Any]:
        """Its `programs` row: the bytes relayed."""
        return {
            "front": FIGURES.name,
            "who": f"{self.entry.label} {self.peer}",
            "passthrough": True,
            "calls": 0,
            "ok": 0,
            "failed": 0,
            "waiting": 0,
            "bytes_in": self.io.bytes_in,
            "bytes_out": self.io.bytes_out,
        }

    def figures(self) -> StreamFigures:
        """Its drops so far (it makes no calls), for the entry's totals."""
        wire = self.io.figures()
        return {
            "calls": 0,
            "ok": 0,
            "failed": {},
            "dropped": wire["dropped"],
            "ignored": wire["ignored"],
            "bad_frames": 0,
        }
