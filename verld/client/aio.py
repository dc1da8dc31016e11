"""The asyncio `AsyncClient`: the blocking client's verbs, many calls in flight at once.

Strategy: a connection is an asyncio Protocol (`_Connection`), with no reader task and
no stream layer, because a program forwarding many calls and events (verld-mqtt) makes
this its hot path. A request is framed and written at once (`send` returns the future
of its reply); `data_received` splits the stream with `verld.wire`'s decoder (via
`messages`), resolves each reply's future by id and hands each event on in the same
callback: to the client's `on_event` when it has one, else to the queue `events()`
reads. When the connection ends (verld closed it, `close()` closed it, or a frame
could not be decoded), every request still waiting fails with `Unreachable` (or with
the connection error verld announced before closing), a request made after that
fails at once, and `wait_closed()` returns, so nothing waits for ever.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, cast

from verld.client.engine import Engine
from verld.client.messages import (
    ClientError,
    Reply,
    Unreachable,
    call_request,
    check,
    connect_failed,
    encode_message,
    error_from,
    is_connection_error,
    is_event,
    new_decoder,
    parse_message,
    reply_from,
)

EventSink = Callable[[dict[str, Any]], None]


class _Connection(asyncio.Protocol):
    """One open connection to verld's socket; see the module docstring."""

    def __init__(self, on_event: EventSink, on_lost: Callable[[], None]) -> None:
        self.on_event, self.on_lost = on_event, on_lost
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transport: asyncio.Transport | None = None
        self._decoder = new_decoder()
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._error: ClientError | None = None  #: what verld said before it closed
        self._closed_here = False  #: close() ended it (not verld, not a bad frame)

    def send(self, obj: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Write one request now (`obj`, a dict of the caller's own, gets its id); the
        future of verld's reply (unchecked)."""
        fut: asyncio.Future[dict[str, Any]] = self.lost.get_loop().create_future()
        transport = self._transport
        if transport is None or transport.is_closing():
            fut.set_exception(self._error or Unreachable("the connection to verld is closed"))
            return fut
        req_id = next(self._ids)
        self._pending[req_id] = fut
        obj["id"] = req_id
        transport.write(encode_message(obj))
        return fut

    def close(self) -> None:
        if self._transport is not None:
            self._closed_here = True
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
            if self._transport is not None:
                self._transport.close()
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
        if not self._closed_here:
            self.on_lost()


class AsyncClient(Engine):
    """asyncio client with the same verbs; many calls may be in flight at once."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        actions: Mapping[str, int] | None = None,
        name: str | None = None,
        on_event: EventSink | None = None,
    ) -> None:
        super().__init__(socket_path, actions=actions, name=name)
        self._events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._on_event: EventSink = on_event or self._events.put_nowait
        self._conn: _Connection | None = None

    async def connect(self) -> AsyncClient:
        if self._conn is not None:
            return self
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_unix_connection(
                lambda: _Connection(self._on_event, self._ended), self.socket_path
            )
        except OSError as exc:
            raise connect_failed(self.socket_path, exc) from None
        self._conn = conn
        if self.name is not None:
            await self.request("hello", client=self.name)
        return self

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await asyncio.shield(conn.lost)  # (the calls still waiting have failed)

    async def wait_closed(self) -> None:
        """Until the connection ends (verld closed it, it was lost, `close()`)."""
        if self._conn is not None:
            await asyncio.shield(self._conn.lost)

    async def __aenter__(self) -> AsyncClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _ended(self) -> None:
        """The connection ended other than by `close()`: `events()` ends."""
        self._events.put_nowait(None)

    # --- verbs -----------------------------------------------------------------------
    def send(self, op: str, **fields: Any) -> asyncio.Future[dict[str, Any]]:
        """Write one request now; the future of verld's reply as it came (not checked)."""
        conn = self._conn
        if conn is None:
            fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            fut.set_exception(Unreachable("not connected to verld"))
            return fut
        return conn.send({"op": op, **fields})

    async def _roundtrip(self, obj: dict[str, Any]) -> dict[str, Any]:
        await self.connect()
        assert self._conn is not None
        return await self._conn.send(obj)

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        return check(await self._roundtrip({"op": op, **fields}))

    async def hello(self, name: str | None = None) -> dict[str, Any]:
        return await self.request("hello", **({"client": name} if name else {}))

    async def status(self) -> dict[str, Any]:
        return await self.request("status")

    async def inhibit(self) -> str:
        """Have verld let go of the device port (admin); see `Client.inhibit`."""
        return str((await self.request("inhibit"))["port"])

    async def uninhibit(self) -> None:
        await self.request("uninhibit")

    async def call(
        self,
        data: bytes | str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the daemon's per-try timeout, sent)
        retry: int | None = None,
        wait: bool = False,
        reply: bool | None = None,
    ) -> Reply:
        """One call; `timeout`, `retry` and `reply` go to verld in the request (see
        `Client.call`)."""
        return reply_from(await self._roundtrip(call_request(data, timeout, retry, wait, reply)))

    async def ping(self, timeout: float | None = None) -> Reply:  # noqa: ASYNC109 (sent)
        return await self.call(b"", timeout=timeout)

    async def execute(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        return self.interpret(await self.call(self.to_packet(payload)))

    async def subscribe(self, topics: Iterable[str] = ("events",)) -> dict[str, Any]:
        return await self.request("subscribe", topics=list(topics))

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            msg = await self._events.get()
            if msg is None:
                return
            yield msg
