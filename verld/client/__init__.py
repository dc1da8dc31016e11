"""Client library for verld's API: a blocking `Client` and an asyncio `AsyncClient`.

Both speak the framed JSON protocol of docs/protocol.md, framed by `verld.wire`.
`Client` keeps the reference engine's shape: `Client.from_config(path)` and
`execute({"action": ..., "params": ...})` → `{"ok": True, "data": ...}` /
`{"ok": False, "code": status, "data": ...}`, raising `RemoteFailure` on 0xFF.

The pieces: `messages` (errors, `Reply`, request and reply shapes, framing),
`engine` (the reference engine's steps, shared settings), `blocking` (`Client`)
and `aio` (`AsyncClient`). docs/client.md is the reference of every public name.
"""

from verld.client.aio import AsyncClient
from verld.client.blocking import Client
from verld.client.messages import (
    DEFAULT_SOCKET,
    ClientError,
    PermissionDenied,
    RemoteFailure,
    Reply,
    Unreachable,
    call_request,
    default_socket,
    encode_message,
    reply_from,
)

__all__ = [
    "DEFAULT_SOCKET",
    "AsyncClient",
    "Client",
    "ClientError",
    "PermissionDenied",
    "RemoteFailure",
    "Reply",
    "Unreachable",
    "call_request",
    "default_socket",
    "encode_message",
    "reply_from",
]
