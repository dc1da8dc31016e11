"""Client library for verld's API: a blocking `Client` and an asyncio `AsyncClient`.

Both speak the framed JSON protocol of docs/protocol.md. `Client` keeps the
reference engine's shape: `Client.from_config(path)` and
`execute({"action": ..., "params": ...})` → `{"ok": True, "data": ...}` /
`{"ok": False, "code": status, "data": ...}`, raising `RemoteFailure` on 0xFF.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import socket
import struct
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from verld.config import DEFAULT_ACTIONS, actions_table, load_config

DEFAULT_SOCKET = "/run/verld/verld.sock"
_HEADER = struct.Struct(">I")


class ClientError(Exception):
    """An error reply from verld (`code` is one of the API's error codes)."""

    def __init__(self, code: str, message: str, reply: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reply = dict(reply or {})


class Unreachable(ClientError):
    """verld is not running or the socket cannot be reached."""

    def __init__(self, message: str) -> None:
        super().__init__("unreachable", message)


class RemoteFailure(ClientError):
    """The device answered status 0xFF (remote execution failed)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A device's answer to one call."""

    status: int
    data: bytes
    ms: float
    generation: int
    text: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 0


def default_socket() -> str:
    """$VERLD_SOCKET, else the system default."""
    return os.environ.get("VERLD_SOCKET") or DEFAULT_SOCKET


def encode_message(obj: Mapping[str, Any]) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return _HEADER.pack(len(body)) + body


def call_request(
    data: bytes | str, timeout: float | None, retry: int | None, wait: bool
) -> dict[str, Any]:
    """The fields of a `call` request."""
    req: dict[str, Any] = {"op": "call"}
    if isinstance(data, str):
        req["text"] = data
    else:
        req["data"] = base64.b64encode(data).decode("ascii")
    if timeout is not None:
        req["timeout"] = timeout
    if retry is not None:
        req["retry"] = retry
    if wait:
        req["wait"] = True
    return req


def reply_from(msg: Mapping[str, Any]) -> Reply:
    """A call's reply message → Reply, or raise ClientError for API-level errors."""
    status = msg.get("status")
    if status is None:
        err = msg.get("error") or {}
        raise ClientError(str(err.get("code", "unknown")), str(err.get("message", "")), msg)
    return Reply(
        status=int(status),
        data=base64.b64decode(msg.get("data") or ""),
        ms=float(msg.get("ms", 0.0)),
        generation=int(msg.get("generation", 0)),
        text=msg.get("text"),
    )


def _check(msg: dict[str, Any]) -> dict[str, Any]:
    if msg.get("ok") is False and "status" not in msg:
        err = msg.get("error") or {}
        raise ClientError(str(err.get("code", "unknown")), str(err.get("message", "")), msg)
    return msg


class _Engine:
    """The reference engine's four steps, shared by both clients."""

    def __init__(self, actions: Mapping[str, int]) -> None:
        self.actions = dict(actions)

    def to_packet(self, payload: Mapping[str, Any]) -> bytes:
        """normalize + to_packet: {"action", "params"} → request bytes."""
        if not isinstance(payload, Mapping):
            raise ValueError("payload must be a dict with 'action' and optional 'params'")
        action = payload.get("action")
        params = payload.get("params")
        if action == "ping" and not params:
            return b""
        if isinstance(action, bool) or not isinstance(action, str | int):
            raise ValueError("'action' must be a name or an opcode 0..255")
        if isinstance(action, str):
            if action not in self.actions:
                raise ValueError(
                    f"unknown action {action!r} (known: {', '.join(sorted(self.actions))})"
                )
            opcode = self.actions[action]
        else:
            opcode = action
        if not 0 <= opcode <= 255:
            raise ValueError("an opcode must be 0..255")
        return bytes([opcode]) + _param_bytes(params)

    @staticmethod
    def interpret(reply: Reply) -> dict[str, Any]:
        """Reply → the reference result shape; 0xFF raises RemoteFailure."""
        if reply.status == 0:
            return {"ok": True, "data": reply.data}
        if reply.status == 0xFF:
            raise RemoteFailure(
                "remote_failure", "remote execution failed (status 0xff)", {"data": reply.data}
            )
        return {"ok": False, "code": reply.status, "data": reply.data}


def _connect_unix(path: str, timeout: float | None) -> socket.socket:
    """Connect, riding out a full listen backlog (EAGAIN on AF_UNIX) for up to `timeout`."""
    deadline = time.monotonic() + (timeout if timeout is not None else 30.0)
    delay = 0.005
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except BlockingIOError:
            sock.close()
            if time.monotonic() >= deadline:
                raise Unreachable(f"cannot connect to {path}: verld is not accepting") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
            continue
        except OSError as exc:
            sock.close()
            raise Unreachable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        return sock


def _param_bytes(params: Any) -> bytes:
    if params is None or (isinstance(params, dict | list | bytes | str) and not params):
        return b""
    if isinstance(params, bytes | bytearray | memoryview):
        return bytes(params)
    if isinstance(params, str):
        return params.encode("utf-8")
    if isinstance(params, dict | list):
        return json.dumps(params, separators=(",", ":")).encode()
    raise ValueError("'params' must be bytes, str, a JSON-able dict/list, or empty")


class Client(_Engine):
    """Blocking client. Replies are matched by id; events are buffered for `events()`."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        timeout: float | None = 30.0,
        actions: Mapping[str, int] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(actions if actions is not None else DEFAULT_ACTIONS)
        self.socket_path = socket_path or default_socket()
        self.timeout = timeout
        self.name = name
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._ids = itertools.count(1)
        self._events: deque[dict[str, Any]] = deque()
        self._replies: dict[int | str, dict[str, Any]] = {}

    @classmethod
    def from_config(cls, path: str, **kwargs: Any) -> Client:
        """A client for the daemon a config file describes (its socket and actions)."""
        cfg = load_config(path)
        return cls(cfg.api.socket, actions=actions_table(cfg.device), **kwargs)

    # --- connection -------------------------------------------------------------
    def connect(self) -> Client:
        if self._sock is not None:
            return self
        sock = _connect_unix(self.socket_path, self.timeout)
        sock.settimeout(self.timeout)
        self._sock = sock
        if self.name is not None:
            self.request("hello", client=self.name)
        return self

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Client:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- messages -----------------------------------------------------------------
    def send(self, obj: Mapping[str, Any]) -> None:
        """Send one raw message (the caller picks the id)."""
        sock = self.connect()._sock
        assert sock is not None
        try:
            sock.sendall(encode_message(obj))
        except OSError as exc:
            self.close()
            raise Unreachable(f"connection to verld lost: {exc.strerror or exc}") from None

    def receive(self) -> dict[str, Any]:
        """The next message (reply or event), blocking up to the client timeout."""
        sock = self._sock
        if sock is None:
            raise Unreachable("not connected")
        while True:
            if len(self._buf) >= 4:
                (n,) = _HEADER.unpack_from(self._buf)
                if len(self._buf) >= 4 + n:
                    body = bytes(self._buf[4 : 4 + n])
                    del self._buf[: 4 + n]
                    msg: dict[str, Any] = json.loads(body)
                    return msg
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise ClientError("timeout", "no answer from verld in time") from None
            except OSError as exc:
                self.close()
                raise Unreachable(f"connection to verld lost: {exc.strerror or exc}") from None
            if not chunk:
                self.close()
                raise Unreachable("verld closed the connection")
            self._buf += chunk

    def _wait_reply(self, req_id: int | str) -> dict[str, Any]:
        if req_id in self._replies:
            return self._replies.pop(req_id)
        while True:
            msg = self.receive()
            if "event" in msg and "id" not in msg:
                self._events.append(msg)
                continue
            if msg.get("id") == req_id:
                return msg
            if msg.get("id") is None and msg.get("ok") is False:
                _check(msg)  # connection-level error (busy, forbidden, too_large)
            self._replies[msg["id"]] = msg

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request, wait for its reply; ClientError on an error reply."""
        req_id = next(self._ids)
        self.send({"op": op, "id": req_id, **fields})
        return _check(self._wait_reply(req_id))

    # --- verbs -----------------------------------------------------------------------
    def hello(self, name: str | None = None) -> dict[str, Any]:
        return self.request("hello", **({"client": name} if name else {}))

    def status(self) -> dict[str, Any]:
        return self.request("status")

    def call(
        self,
        data: bytes | str,
        *,
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool = False,
    ) -> Reply:
        """One call; a device status is in the Reply, API errors raise ClientError."""
        req_id = next(self._ids)
        self.send({**call_request(data, timeout, retry, wait), "id": req_id})
        return reply_from(self._wait_reply(req_id))

    def ping(self, timeout: float | None = None) -> Reply:
        return self.call(b"", timeout=timeout)

    def execute(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The reference engine: normalize, to_packet, send, interpret."""
        return self.interpret(self.call(self.to_packet(payload)))

    def subscribe(self, topics: Iterable[str] = ("events",)) -> dict[str, Any]:
        return self.request("subscribe", topics=list(topics))

    def events(self) -> Iterator[dict[str, Any]]:
        """Events as they arrive (subscribe first); blocks between them."""
        while True:
            while self._events:
                yield self._events.popleft()
            msg = self.receive()
            if "event" in msg and "id" not in msg:
                yield msg
            elif "id" in msg:
                self._replies[msg["id"]] = msg


class AsyncClient(_Engine):
    """asyncio client with the same verbs; many calls may be in flight at once."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        actions: Mapping[str, int] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(actions if actions is not None else DEFAULT_ACTIONS)
        self.socket_path = socket_path or default_socket()
        self.name = name
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._ids = itertools.count(1)
        self._lost: ClientError | None = None

    @classmethod
    def from_config(cls, path: str, **kwargs: Any) -> AsyncClient:
        cfg = load_config(path)
        return cls(cfg.api.socket, actions=actions_table(cfg.device), **kwargs)

    async def connect(self) -> AsyncClient:
        if self._writer is not None:
            return self
        try:
            self._reader, self._writer = await asyncio.open_unix_connection(self.socket_path)
        except OSError as exc:
            raise Unreachable(
                f"cannot connect to {self.socket_path}: {exc.strerror or exc}"
            ) from None
        self._task = asyncio.create_task(self._read_loop())
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

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                header = await reader.readexactly(4)
                body = await reader.readexactly(_HEADER.unpack(header)[0])
                msg: dict[str, Any] = json.loads(body)
                if "event" in msg and "id" not in msg:
                    self._events.put_nowait(msg)
                    continue
                fut = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
                if fut is not None and not fut.done():
                    fut.set_result(msg)
                elif msg.get("id") is None and msg.get("ok") is False:
                    err = msg.get("error") or {}
                    self._lost = ClientError(str(err.get("code")), str(err.get("message")), msg)
        except (asyncio.IncompleteReadError, OSError):
            pass
        lost = self._lost or Unreachable("verld closed the connection")
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

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        return _check(await self._roundtrip({"op": op, **fields}))

    async def hello(self, name: str | None = None) -> dict[str, Any]:
        return await self.request("hello", **({"client": name} if name else {}))

    async def status(self) -> dict[str, Any]:
        return await self.request("status")

    async def call(
        self,
        data: bytes | str,
        *,
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool = False,
    ) -> Reply:
        return reply_from(await self._roundtrip(call_request(data, timeout, retry, wait)))

    async def ping(self, timeout: float | None = None) -> Reply:
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
