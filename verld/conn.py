"""One API client connection: framing in, role checks, replies and events out.

A connection decodes length-prefixed JSON (`wire`), checks each op against its
role and hands it to the server. Replies go back to this connection only. Events
are dropped (and counted) while the client lags; an `overflow` event tells it how
many once it drains; past `api.max_backlog` bytes it is disconnected.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import TYPE_CHECKING, Any, cast

import structlog

from verld import wire
from verld.roles import ROLE_RANK

if TYPE_CHECKING:
    from verld.server import ApiServer

log = structlog.get_logger("verld.server")

_OP_ROLE = {
    "hello": "observer",
    "status": "observer",
    "subscribe": "observer",
    "unsubscribe": "observer",
    "logs": "observer",
    "metrics": "observer",
    "call": "controller",
    "lease": "controller",
    "release": "controller",
    "reconnect": "admin",
    "reload": "admin",
}
_PEERCRED = struct.Struct("3i")


class ClientConn(asyncio.Protocol):
    """One API client."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.decoder = wire.MessageDecoder(server.cfg.api.max_message)
        self.pid = self.uid = self.gid = -1
        self.role = "observer"
        self.name = ""
        self.topics: frozenset[str] = frozenset()
        self.paused = False
        self.dropped = 0
        self.closed = False
        self.serial = server.next_serial()

    def __repr__(self) -> str:
        return f"client#{self.serial}(pid={self.pid})"

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
        backlog = self.server.cfg.api.max_backlog
        high = max(64 * 1024, backlog // 4)
        transport.set_write_buffer_limits(high=high, low=high // 4)
        self.server.attach(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.detach(self)

    def refuse(self, code: str, message: str) -> None:
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
        if transport.get_write_buffer_size() > self.server.cfg.api.max_backlog:
            log.warning(
                "client_dropped",
                client=repr(self),
                reason="max_backlog exceeded",
                backlog=transport.get_write_buffer_size(),
            )
            self.server.count_limit("max_backlog")
            self.closed = True
            transport.abort()

    def send(self, obj: dict[str, Any]) -> None:
        self.write(wire.encode(obj))

    def send_event(self, data: bytes) -> None:
        """An already-encoded event; dropped (and counted) while this client lags."""
        if self.paused or self.dropped:
            self.dropped += 1
            self.server.events_dropped += 1
            return
        self.write(data)

    # --- input --------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        oversize = None
        try:
            bodies = self.decoder.feed(data)
        except wire.Oversize as exc:
            oversize, bodies = exc, exc.bodies
        if len(bodies) == 1:
            self.handle(bodies[0])
        elif bodies:
            session = self.server.session
            session.hold()  # a burst of requests becomes one write to the device
            try:
                for body in bodies:
                    if self.closed:
                        break
                    self.handle(body)
            finally:
                session.flush()
        if oversize is not None and not self.closed:
            log.info("message_too_large", client=repr(self), length=oversize.length)
            self.server.count_limit("max_message")
            self.send(wire.error_reply(None, "too_large", str(oversize)))
            self.close()

    def handle(self, body: bytes) -> None:
        try:
            req = wire.parse_request(body)
            if req.op == "call" and self.role != "observer":  # the hot path: allowed
                self.server.call(self, req)
                return
            need = _OP_ROLE[req.op]
            if ROLE_RANK[self.role] < ROLE_RANK[need]:
                raise wire.ApiError(
                    "forbidden", f"'{req.op}' needs role {need}; you are {self.role}", req.id
                )
            self.server.dispatch(self, req)
        except wire.ApiError as exc:
            self.server.api_errors[exc.code] = self.server.api_errors.get(exc.code, 0) + 1
            if self.server.debug:
                log.debug("request_refused", client=repr(self), code=exc.code, why=exc.message)
            self.send(wire.error_reply(exc.req_id, exc.code, exc.message))
