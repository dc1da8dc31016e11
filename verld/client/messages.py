"""What both clients share on the wire: errors, `Reply`, request/reply shapes, framing.

Framing is `verld.wire`'s (the 4-byte big-endian length + JSON of docs/protocol.md
section 2.2): `encode_message` frames a request, `new_decoder` splits the reply
stream into bodies and `parse_message` turns one body into a message.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from verld import wire
from verld.errors import VerldError

DEFAULT_SOCKET = "/run/verld/verld.sock"
#: the largest reply a client accepts: anything the 4-byte length can announce (the
#: daemon is trusted; its own max_message bounds requests, not replies)
MAX_REPLY = 0xFFFF_FFFF


class ClientError(VerldError):
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
    #: a non-zero status's error code (`device_error`, `remote_failure`) and message
    #: (e.g. "modbus exception 0x02 (illegal data address)"); None on success
    error: str | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 0


def default_socket() -> str:
    """$VERLD_SOCKET, else the system default."""
    return os.environ.get("VERLD_SOCKET") or DEFAULT_SOCKET


def encode_message(obj: Mapping[str, Any]) -> bytes:
    """One framed request (`wire.encode`: compact, ASCII-escaped JSON)."""
    return wire.encode(obj if isinstance(obj, dict) else dict(obj))


def new_decoder() -> wire.MessageDecoder:
    """A fresh decoder for one connection's reply stream."""
    return wire.MessageDecoder(MAX_REPLY)


def parse_message(body: bytes) -> dict[str, Any]:
    """One reply or event body → its JSON object; ValueError if it is not one."""
    msg = wire.decode_json(body)
    if not isinstance(msg, dict):
        raise ValueError("a message from verld must be a JSON object")
    return msg


def is_event(msg: Mapping[str, Any]) -> bool:
    """An event (pushed to subscribers), not a reply to a request."""
    return "event" in msg and "id" not in msg


def is_connection_error(msg: Mapping[str, Any]) -> bool:
    """An error answering no request: busy, forbidden, too_large, shutting_down."""
    return msg.get("id") is None and msg.get("ok") is False


def error_from(msg: Mapping[str, Any]) -> ClientError:
    """The ClientError an error reply stands for."""
    err = msg.get("error") or {}
    return ClientError(str(err.get("code", "unknown")), str(err.get("message", "")), msg)


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
        raise error_from(msg)
    error = msg.get("error")
    code, message = (
        (error.get("code"), error.get("message")) if isinstance(error, dict) else (None, None)
    )
    return Reply(
        status=int(status),
        data=base64.b64decode(msg.get("data") or ""),
        ms=float(msg.get("ms", 0.0)),
        generation=int(msg.get("generation", 0)),
        text=msg.get("text"),
        error=code if isinstance(code, str) else None,
        message=message if isinstance(message, str) else None,
    )


def check(msg: dict[str, Any]) -> dict[str, Any]:
    """A non-call reply, or raise ClientError if it is an error reply."""
    if msg.get("ok") is False and "status" not in msg:
        raise error_from(msg)
    return msg
