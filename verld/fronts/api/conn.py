"""One API client connection on the Unix socket: framing, credentials, backpressure.

A connection decodes length-prefixed JSON (`wire`) and hands each message body to
its host (the server, which passes it to the dispatcher with the connection as its
`Peer`). Replies go back to this connection only. Events are dropped (and counted)
while the client lags; an `overflow` event tells it how many once it drains; past
`api.max_backlog` bytes it is disconnected. The connection knows nothing of the
session or of ops.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import deque
from typing import Any, Protocol, cast

import structlog

from verld import wire
from verld.config import Config
from verld.errors import ErrorCode
from verld.roles import ROLE_RANK

log = structlog.get_logger("verld.server")

_PEERCRED = struct.Struct("3i")
#: messages of one connection handled per turn of the event loop
BURST = 64


class ApiStats:
    """The socket's own counters (in `status`)."""

    __slots__ = ("events_dropped", "limits_hit")

    def __init__(self) -> None:
        self.events_dropped = 0
        #: times each limit was hit (max_clients, max_message, max_backlog, no_role)
        self.limits_hit: dict[str, int] = {}

    def limit(self, name: str) -> None:
        self.limits_hit[name] = self.limits_hit.get(name, 0) + 1


class ConnHost(Protocol):
    """What a connection needs from the server it belongs to (`request` and
    `requests`: the dispatcher's)."""

    cfg: Config
    stats: ApiStats

    def attach(self, conn: ClientConn) -> None: ...

    def detach(self, conn: ClientConn) -> None: ...

    def requests(self, conn: ClientConn, bodies: list[bytes]) -> None: ...

    def request(self, conn: ClientConn, body: bytes) -> None: ...


class ClientConn(asyncio.Protocol):
    """One API client: the dispatcher's `Peer` (`peer.Peer`) on the Unix socket."""

    def __init__(self, host: ConnHost, serial: int) -> None:
        self.host = host
        self.stats = host.stats
        self.transport: asyncio.Transport | None = None
        self.decoder = wire.MessageDecoder(host.cfg.api.max_message)
        self.pid = self.uid = self.gid = -1
        self.role = "observer"
        self.name = ""
        self.paused = False
        self._watch = True
        self.dropped = 0
        self.ok = self.failed = 0  #: its calls that ended answered / failed (`programs`)
        self.closed = False
        self.serial = serial
        self._rest: deque[bytes] = deque()  #: messages of a large read still to handle
        self._oversize: wire.Oversize | None = None  #: what ended that read, if anything

    def __repr__(self) -> str:
        return f"client#{self.serial}(pid={self.pid})"

    @property
    def role(self) -> str:
        return self._role

    @role.setter
    def role(self, role: str) -> None:
        self._role = role
        self.rank = ROLE_RANK[role]  #: the role's rank, compared on every request

    # --- lifecycle --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: asyncio's or uvloop's (which is not an asyncio.Transport).
        transport = self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
                self.pid, self.uid, self.gid = _PEERCRED.unpack(raw)
            except OSError:
                pass
        max_backlog = self.host.cfg.api.max_backlog
        high = max(64 * 1024, max_backlog // 4)
        transport.set_write_buffer_limits(high=high, low=high // 4)
        #: the backlog is read after each write only while it may be over max_backlog:
        #: past the high-water mark (paused), or always when max_backlog is below it
        self._watch = max_backlog < high
        self.host.attach(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.host.detach(self)

    def refuse(self, code: ErrorCode, message: str) -> None:
        """Answer one error (id null) and close: used at connect."""
        self.send(wire.error_reply(None, code, message))
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.dropped:
            dropped, self.dropped = self.dropped, 0
            self.write(wire.encode({"event": "overflow", "dropped": dropped}))

    # --- output -------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return
        transport.write(data)
        if not (self.paused or self._watch):
            return
        backlog = transport.get_write_buffer_size()
        if backlog > self.host.cfg.api.max_backlog:
            log.warning(
                "client_dropped", client=repr(self), reason="max_backlog exceeded", backlog=backlog
            )
            self.stats.limit("max_backlog")
            self.closed = True
            transport.abort()

    def send(self, obj: dict[str, Any]) -> None:
        self.write(wire.encode(obj))

    def send_event(self, data: bytes) -> None:
        """An already-encoded event; dropped (and counted) while this client lags."""
        if self.paused or self.dropped:
            self.dropped += 1
            self.stats.events_dropped += 1
            return
        self.write(data)

    # --- input --------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        oversize = None
        try:
            bodies = self.decoder.feed(data)
        except wire.Oversize as exc:
            oversize, bodies = exc, exc.bodies
        else:
            if len(bodies) == 1 and not self._rest:  # the usual read: one message
                self.host.request(self, bodies[0])
                return
        if self._rest:  # (reading is paused, but a transport may deliver what it had)
            self._rest.extend(bodies)
            self._oversize = self._oversize or oversize
            return
        if len(bodies) > BURST:
            # One read can hold thousands of messages: a turn of the loop handles
            # BURST of them, so other clients and the device are served in between
            # (reading stops until the rest are done).
            self._rest.extend(bodies[BURST:])
            self._oversize = oversize
            del bodies[BURST:]
            oversize = None
            if self.transport is not None:
                self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._next_burst)
        self._handle(bodies, oversize)

    def _next_burst(self) -> None:
        """The next BURST messages of a large read; reading resumes after the last."""
        rest = self._rest
        bodies = [rest.popleft() for _ in range(min(BURST, len(rest)))]
        oversize = None
        if rest and not self.closed:
            asyncio.get_running_loop().call_soon(self._next_burst)
        else:
            rest.clear()
            oversize, self._oversize = self._oversize, None
            if self.transport is not None and not self.closed:
                self.transport.resume_reading()
        if not self.closed:
            self._handle(bodies, oversize)

    def _handle(self, bodies: list[bytes], oversize: wire.Oversize | None) -> None:
        if len(bodies) == 1:
            self.host.request(self, bodies[0])
        elif bodies:
            self.host.requests(self, bodies)
        if oversize is not None and not self.closed:
            log.info("message_too_large", client=repr(self), length=oversize.length)
            self.stats.limit("max_message")
            self.send(wire.error_reply(None, ErrorCode.TOO_LARGE, str(oversize)))
            self.close()
