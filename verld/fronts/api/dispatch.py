"""The JSON API's dispatcher: requests in, replies and events out, for any transport.

Strategy: a transport (the Unix socket: `server.py` listens, `conn.py` frames) hands
each message body to `request` with the `Peer` it came from. The dispatcher parses
it (`wire`), looks its op up in the table it was given (`ops.OPS`: role and
handler), checks the peer's role and runs the handler, which answers on that peer
only or raises `ApiError` (the error reply is sent here). It owns what the API's
clients share whatever carries them: the fan-out of events (`fanout.Fanout`) and
the `inhibit` op's holder (`inhibit.Inhibits`); the lease is Core's. It knows no
socket, no framing and no back-pressure, so a test drives it with a plain object
for a peer (tests/test_dispatch.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import structlog

from verld import wire
from verld.codec.registry import spec_of
from verld.config import Config
from verld.errors import ApiError, ErrorCode
from verld.fronts.api.fanout import Fanout
from verld.fronts.api.inhibit import Inhibits
from verld.fronts.api.peer import Peer
from verld.fronts.base import Core
from verld.logs import RING, level_enabled

log = structlog.get_logger("verld.server")


class Dispatcher:
    """The API's ops over one core, for the peers of every transport."""

    def __init__(self, cfg: Config, core: Core, ops: Mapping[str, Op]) -> None:
        self.cfg = cfg
        self.core = core
        self.ops = ops
        self.counts = core.front("api")  #: the API's calls by outcome
        self.fanout = Fanout(core)
        self.inhibits = Inhibits(core)
        self.debug = level_enabled(cfg.log.level)
        self.text = spec_of(cfg).text  #: call replies carry `text` (the line codec)
        #: error replies to malformed or refused requests, by code (`status.api_errors`)
        self.api_errors: dict[str, int] = {}

    def start(self) -> None:
        """Events begin to flow: the core's device events and link changes, and the
        log ring's records."""
        self.core.listeners.append(self.fanout)
        RING.listener = self.fanout.log_record

    def reload(self, cfg: Config) -> None:
        """The new settings (limits, the log level, the codec's `text`)."""
        self.cfg = cfg
        self.debug = level_enabled(cfg.log.level)
        self.text = spec_of(cfg).text

    async def close(self) -> None:
        """verld stops: a pending inhibit is cancelled, log records stop."""
        await self.inhibits.close()
        RING.listener = None

    # --- peers ----------------------------------------------------------------------
    def request(self, peer: Peer, body: bytes) -> None:
        """One message from `peer`: parsed, looked up, role-checked, run."""
        try:
            req = wire.parse_request(body)
            op = self.ops.get(req.op)
            if op is None:
                raise ApiError(ErrorCode.UNKNOWN_OP, f"unknown op {req.op!r}", req.id)
            if peer.rank < op.rank:
                raise ApiError(
                    ErrorCode.FORBIDDEN,
                    f"'{req.op}' needs role {op.role}; you are {peer.role}",
                    req.id,
                )
            op.handler(self, peer, req)
        except ApiError as exc:
            errors = self.api_errors
            errors[exc.code] = errors.get(exc.code, 0) + 1
            if self.debug:
                log.debug("request_refused", client=repr(peer), code=exc.code, why=exc.message)
            peer.send(wire.error_reply(exc.req_id, exc.code, exc.message))

    def requests(self, peer: Peer, bodies: list[bytes]) -> None:
        """A burst of messages from one read: their calls go to the device in one write."""
        with self.core.burst():
            for body in bodies:
                if peer.closed:
                    break
                self.request(peer, body)

    def leave(self, peer: Peer) -> None:
        """`peer` went away: its subscriptions, its inhibition, its lease and its calls
        end."""
        self.fanout.unsubscribe(peer, wire.TOPICS)
        self.inhibits.end(peer, "holder disconnected")
        self.core.forget(peer)

    def programs(self, peers: Iterable[Peer]) -> list[dict[str, Any]]:
        """One `programs` row per peer."""
        rows = []
        for peer in peers:
            waiting = self.core.waiting(peer)
            rows.append(
                {
                    "front": "api",
                    "who": f"pid {peer.pid} {peer.name}".rstrip(),
                    "pid": peer.pid,
                    "uid": peer.uid,
                    "name": peer.name,
                    "role": peer.role,
                    "calls": peer.ok + peer.failed + waiting,
                    "ok": peer.ok,
                    "failed": peer.failed,
                    "waiting": waiting,
                }
            )
        return rows


#: an op's handler: answers on the peer (`Peer.send`) or raises ApiError
Handler = Callable[[Dispatcher, Peer, wire.Request], None]


class Op(NamedTuple):
    role: str
    rank: int  #: ROLE_RANK[role], compared with the peer's on every request
    handler: Handler
