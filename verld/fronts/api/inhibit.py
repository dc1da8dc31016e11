"""Inhibit: one admin connection has verld let go of the device port for a while.

A flasher or vendor tool needs the real port (its baud rate, DTR/RTS, exclusive
access). `inhibit` asks the core to finish what is on the link and close the port,
then answers `{"port": PATH}`; the port stays closed while the asking connection
stays open. `uninhibit` (any admin) or that connection closing — however it
closes, SIGKILL included — ends it, and verld reopens the port with a new
generation. One holder at a time: while the port is held (by an `inhibit` or by a
network port in passthrough, `Core.hold`), an `inhibit` gets `busy`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from verld import wire
from verld.errors import ApiError, ErrorCode
from verld.fronts.api.peer import Peer
from verld.fronts.base import Core

log = structlog.get_logger("verld.server")


@dataclass
class Holder:
    peer: Peer
    req_id: int | str
    since: float  #: unix time the inhibit was asked for
    task: asyncio.Task[None] | None = None  #: letting go of the port, until it is closed


class Inhibits:
    """The one inhibition there can be."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.holder: Holder | None = None

    def take(self, peer: Peer, req_id: int | str, answer: Callable[[str], None]) -> None:
        """Start letting go of the port for `peer`; `answer(port)` once it is closed."""
        core = self.core
        if self.holder is not None or core.holder is not None:
            why = core.inhibited_by or "inhibited"
            raise ApiError(ErrorCode.BUSY, f"already {why}", req_id)
        holder = self.holder = Holder(peer, req_id, time.time())
        reason = f"inhibited by pid {peer.pid}"
        log.info("inhibit_asked", client=repr(peer), pid=peer.pid, uid=peer.uid)
        shown = {
            "pid": peer.pid,
            "uid": peer.uid,
            "client": peer.name,
            "since": round(holder.since, 3),
            "front": "api",
        }
        closed = core.hold(shown, reason, lambda why: self._ended(holder, why))
        holder.task = asyncio.get_running_loop().create_task(self._let_go(holder, closed, answer))

    async def _let_go(
        self, holder: Holder, closed: Coroutine[Any, Any, str], answer: Callable[[str], None]
    ) -> None:
        port = await closed
        if self.holder is holder:
            log.info("inhibited", client=repr(holder.peer), pid=holder.peer.pid, port=port)
            answer(port)

    def _ended(self, holder: Holder, why: str) -> None:
        """An `uninhibit` (`Core.end_hold`)."""
        if self.holder is holder:
            self.end(None, why)

    def end(self, peer: Peer | None, why: str) -> bool:
        """End the inhibition (only if `peer` holds it, when given); False: none ended."""
        holder = self.holder
        if holder is None or (peer is not None and holder.peer is not peer):
            return False
        self.holder = None
        log.info("uninhibited", client=repr(holder.peer), pid=holder.peer.pid, reason=why)
        if holder.task is not None and not holder.task.done():
            holder.task.cancel()  # ended before the port was let go of: it stays ours
            message = f"uninhibited ({why}) before the port was let go of"
            holder.peer.send(wire.error_reply(holder.req_id, ErrorCode.BUSY, message))
        self.core.unhold()
        return True

    async def close(self) -> None:
        """verld stops: a pending letting-go is cancelled (the core drains anyway)."""
        holder, self.holder = self.holder, None
        if holder is not None and holder.task is not None and not holder.task.done():
            holder.task.cancel()
            try:
                await holder.task
            except asyncio.CancelledError:
                pass
