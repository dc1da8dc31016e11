"""Leases: one API connection's exclusive hold on the device, for `seconds`.

While a lease is held only its holder's calls reach the device; every other owner,
on every front, gets `busy` (or waits, if it asked to). A lease ends on `release`,
on expiry, or when its holder disconnects.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

import structlog

from verld.errors import ApiError, ErrorCode
from verld.fronts.api.conn import ClientConn
from verld.fronts.base import Core

log = structlog.get_logger("verld.server")


@dataclass
class Lease:
    conn: ClientConn
    token: str
    expires: float  # loop time
    timer: asyncio.TimerHandle


class Leases:
    """The one lease there can be."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.held: Lease | None = None

    def take(self, conn: ClientConn, seconds: float, req_id: int | str) -> str:
        """Take (or renew) the lease for `seconds`; its token. ApiError busy if held."""
        held = self.held
        if held is not None and held.conn is not conn:
            raise ApiError(ErrorCode.BUSY, f"the device is leased to {held.conn!r}", req_id)
        loop = asyncio.get_running_loop()
        if held is not None:
            held.timer.cancel()
        token = held.token if held is not None else secrets.token_hex(8)
        expires = loop.time() + float(seconds)
        self.held = Lease(conn, token, expires, loop.call_at(expires, self.end, "expired"))
        self.core.set_exclusive(conn)
        log.info("lease_taken", client=repr(conn), pid=conn.pid, uid=conn.uid, seconds=seconds)
        return token

    def release(self, conn: ClientConn, token: str | None) -> bool:
        """End `conn`'s lease (this token's, if given); False when it holds none."""
        held = self.held
        if held is None or held.conn is not conn or (token is not None and token != held.token):
            return False
        self.end("released")
        return True

    def forget(self, conn: ClientConn) -> None:
        """`conn` disconnected: its lease ends."""
        if self.held is not None and self.held.conn is conn:
            self.end("holder disconnected")

    def end(self, reason: str) -> None:
        held, self.held = self.held, None
        if held is None:
            return
        held.timer.cancel()
        log.info("lease_ended", client=repr(held.conn), reason=reason)
        self.core.set_exclusive(None)

    def status(self) -> dict[str, Any] | None:
        held = self.held
        if held is None:
            return None
        left = held.expires - asyncio.get_running_loop().time()
        return {
            "pid": held.conn.pid,
            "uid": held.conn.uid,
            "client": held.conn.name,
            "seconds_left": round(max(0.0, left), 3),
        }
