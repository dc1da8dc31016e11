"""The asyncio `AsyncClient`: the blocking client's verbs, many calls in flight at once.

One reader task splits the stream with `verld.wire`'s decoder (via `messages`),
resolves each reply's future by id and queues events for `events()`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

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

_READ_SIZE = 65536


class AsyncClient(Engine):
    """asyncio client with the same verbs; many calls may be in flight at once."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        actions: Mapping[str, int] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(socket_path, actions=actions, name=name)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._ids = itertools.count(1)
        self._lost: ClientError | None = None

    async def connect(self) -> AsyncClient:
        if self._writer is not None:
            return self
        try:
            self._reader, self._writer = await asyncio.open_unix_connection(self.socket_path)
        except OSError as exc:
            raise connect_failed(self.socket_path, exc) from None
        self._task = asyncio.create_task(self._read_loop(self._reader))
        if self.name is not None:
            await self.request("hello", client=self.name)
        return self

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
            self._writer = None
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def __aenter__(self) -> AsyncClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the reader task -----------------------------------------------------------
    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        """Dispatch every message until the stream ends, then fail what is pending."""
        decoder = new_decoder()
        try:
            while chunk := await reader.read(_READ_SIZE):
                for body in decoder.feed(chunk):
                    self._dispatch(parse_message(body))
        except OSError:
            pass
        self._fail_pending(self._lost or Unreachable("verld closed the connection"))

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if is_event(msg):
            self._events.put_nowait(msg)
            return
        fut = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
        if fut is not None and not fut.done():
            fut.set_result(msg)
        elif is_connection_error(msg):
            self._lost = error_from(msg)  # the daemon is about to close this connection

    def _fail_pending(self, lost: ClientError) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(lost)
        self._pending.clear()
        self._events.put_nowait(None)

    async def _roundtrip(self, obj: dict[str, Any]) -> dict[str, Any]:
        await self.connect()
        writer = self._writer
        assert writer is not None
        req_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        writer.write(encode_message({**obj, "id": req_id}))
        return await fut

    # --- verbs -----------------------------------------------------------------------
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
