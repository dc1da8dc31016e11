"""One connection to a verld socket, as lean as a call path can be: an asyncio Protocol.

Strategy: the bridge's calls are its hot path, so its verld connection has no reader
task and no stream layer (`verld.client.AsyncClient` has both, for general use). A
request is framed and written at once (`request` returns the future of its reply);
`data_received` splits the stream with `verld.wire`'s decoder, resolves each reply's
future by id and hands each event to `on_event`, in the same callback. When the
connection ends (verld closed it, or a frame could not be decoded), every request
still waiting fails with `Unreachable` (or with the connection error verld announced
before closing) and `lost` is resolved, so nothing waits for ever. Replies are not
checked here: a call's error reply is what the bridge publishes; `ask` checks the
others (hello, subscribe, status) the way `verld.client` does.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any, cast

from verld.client.messages import (
    ClientError,
    Unreachable,
    check,
    connect_failed,
    encode_message,
    error_from,
    is_connection_error,
    is_event,
    new_decoder,
    parse_message,
)

__all__ = ["VerldConn"]


class VerldConn(asyncio.Protocol):
    """A verld API connection; see the module docstring."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.on_event = on_event
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transport: asyncio.Transport | None = None
        self._decoder = new_decoder()
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._error: ClientError | None = None  #: what verld said before it closed

    @classmethod
    async def open(cls, path: str, on_event: Callable[[dict[str, Any]], None]) -> VerldConn:
        """Connect to verld's socket at `path` (Unreachable if that fails)."""
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_unix_connection(lambda: cls(on_event), path)
        except OSError as exc:
            raise connect_failed(path, exc) from None
        return conn

    # --- requests --------------------------------------------------------------------
    def request(self, op: str, **fields: Any) -> asyncio.Future[dict[str, Any]]:
        """Write one request now; the future of verld's reply (unchecked)."""
        fut: asyncio.Future[dict[str, Any]] = self.lost.get_loop().create_future()
        transport = self._transport
        if transport is None or transport.is_closing():
            fut.set_exception(self._error or Unreachable("the connection to verld is closed"))
            return fut
        req_id = next(self._ids)
        self._pending[req_id] = fut
        transport.write(encode_message({"op": op, **fields, "id": req_id}))
        return fut

    async def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        """A request whose error reply raises ClientError (hello, subscribe, status)."""
        return check(await self.request(op, **fields))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # --- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)

    def data_received(self, data: bytes) -> None:
        try:
            bodies = self._decoder.feed(data)
            messages = [parse_message(body) for body in bodies]
        except ValueError as exc:  # (not verld's framing: nothing more can be trusted)
            self._error = Unreachable(f"verld sent what is not a message: {exc}")
            self.close()
            return
        pending = self._pending
        for msg in messages:
            if is_event(msg):
                self.on_event(msg)
                continue
            fut = pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
            if fut is not None:
                if not fut.done():
                    fut.set_result(msg)
            elif is_connection_error(msg):
                self._error = error_from(msg)  # (verld is about to close this connection)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        error = self._error or Unreachable("verld closed the connection")
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)
        if not self.lost.done():
            self.lost.set_result(None)
