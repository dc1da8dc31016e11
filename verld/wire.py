"""Client-API framing and request parsing, sans-I/O.

Every message is a 4-byte big-endian length N, then N bytes of one UTF-8 JSON
object. `MessageDecoder.feed` returns complete bodies; `parse_request` turns one
body into a validated `Request` or raises `ApiError` carrying the code and the
id to answer with. Nothing here touches a socket.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from verld.errors import ApiError, ErrorCode, RemoteProtocolError
from verld.session.calls import CallResult

_HEADER = 4
_LENGTH = struct.Struct(">I")

TOPICS = frozenset({"events", "link", "logs", "traffic", "wire"})

Id = int | str | None
#: the longest per-try timeout a call may ask for (one hour): a call cannot hold a
#: window slot, and so the device, longer than this per try
MAX_SECONDS = 3600
#: the most extra tries a call may ask for: with MAX_SECONDS per try, a call cannot
#: hold its window slot for ever on a device that never answers
MAX_RETRY = 100


class Oversize(RemoteProtocolError):
    """A frame announced a length above max_message: answer too_large, then close."""

    def __init__(self, length: int, bodies: list[bytes] | None = None) -> None:
        super().__init__(f"message of {length} bytes exceeds max_message")
        self.length = length
        self.bodies = bodies or []  #: complete messages that came before the oversize one


def encode(obj: dict[str, Any]) -> bytes:
    """One framed message. ASCII-escaped JSON, so no client string can break UTF-8."""
    body = json.dumps(obj, separators=(",", ":")).encode()
    return len(body).to_bytes(4, "big") + body


def error_reply(req_id: Id, code: ErrorCode, message: str, **extra: Any) -> dict[str, Any]:
    """The reply object for an error."""
    reply: dict[str, Any] = {"id": req_id, "ok": False, "error": {"code": code, "message": message}}
    reply.update(extra)
    return reply


class MessageDecoder:
    """Splits a byte stream into message bodies.

    A length above max_message raises Oversize, carrying the bodies completed before
    it in the same feed (`bodies`): the server answers those, then too_large, then
    closes.
    """

    def __init__(self, max_message: int) -> None:
        self.max_message = max_message
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        if not buf and len(data) > _HEADER:  # the usual read: exactly one whole message
            n = int.from_bytes(data[:_HEADER], "big")
            if n == len(data) - _HEADER and n <= self.max_message:
                return [data[_HEADER:]]
        buf += data
        out: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= _HEADER:
            n = int.from_bytes(buf[pos : pos + _HEADER], "big")
            if n > self.max_message:
                del buf[:]
                raise Oversize(n, out)
            if end - pos - _HEADER < n:
                break
            out.append(bytes(buf[pos + _HEADER : pos + _HEADER + n]))
            pos += _HEADER + n
        if pos:
            del buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete message."""
        return len(self._buf)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder for every message: json.loads with an argument builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
#: the C scanner under `decode`, without its whitespace regexes: (text, index) → (obj, end)
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def decode_json(body: bytes) -> Any:
    """Parse one body; any failure (bad UTF-8, deep nesting, NaN, huge ints) is ValueError."""
    try:  # the fast path: a message with no whitespace around it
        text = body.decode("utf-8")
        obj, end = _SCAN(text, 0)
        if end == len(text):
            return obj
    except (StopIteration, ValueError, RecursionError, MemoryError):
        pass  # the full decoder below says what is wrong (or accepts the whitespace)
    try:
        return _DECODER.decode(body.decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError, MemoryError) as exc:
        raise ValueError(str(exc) or type(exc).__name__) from None


_new_tuple = tuple.__new__


class Request(NamedTuple):
    """A parsed request; op-specific fields are validated by the accessors below."""

    op: str
    id: int | str
    body: dict[str, Any]


def parse_request(body: bytes) -> Request:
    """Validate the envelope (object, id, op a string) of one message; which ops
    exist, and who may run them, is the front's table (`fronts.api.ops`)."""
    try:  # decode_json's fast path, inlined: once per message
        text = body.decode("utf-8")
        obj, end = _SCAN(text, 0)
        if end != len(text):
            raise ValueError
    except (StopIteration, ValueError, RecursionError, MemoryError):
        try:
            obj = decode_json(body)
        except ValueError as exc:
            raise ApiError(ErrorCode.BAD_REQUEST, f"not valid JSON: {exc}") from None
    if type(obj) is not dict:  # JSON makes exactly these types: no subclasses to allow
        raise ApiError(ErrorCode.BAD_REQUEST, "a message must be a JSON object")
    req_id = obj.get("id")
    if type(req_id) is not int and type(req_id) is not str:  # bool is not int here
        raise ApiError(ErrorCode.BAD_REQUEST, "'id' must be an integer or a string")
    op = obj.get("op")
    if type(op) is not str:
        raise ApiError(ErrorCode.BAD_REQUEST, "'op' must be a string", req_id)
    return _new_tuple(Request, (op, req_id, obj))  # Request's __new__ is Python: skip it


def _positive_number(req: Request, key: str) -> float | None:
    if key not in req.body:
        return None
    value = req.body[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
        or not 0 < value <= MAX_SECONDS
    ):
        raise ApiError(
            ErrorCode.BAD_REQUEST,
            f"'{key}' must be a number of seconds, 0 < {key} <= {MAX_SECONDS}",
            req.id,
        )
    return float(value)


def call_fields(req: Request) -> tuple[bytes, float | None, int | None, bool, bool | None]:
    """(payload, timeout, retry, wait, reply) of a call; ApiError when any is malformed."""
    body = req.body
    if len(body) == 3:  # id, op and data (the usual call): nothing else to check
        data = body.get("data")
        if type(data) is str:
            try:
                payload = binascii.a2b_base64(data.encode("ascii"), strict_mode=True)
            except (binascii.Error, ValueError):
                pass  # the full checks below say what is wrong
            else:
                return payload, None, None, False, None
    get = body.get
    data, text, retry = get("data"), get("text"), get("retry")
    if data is None or text is None or retry is None:
        for key in ("data", "text", "retry"):
            if key in body and body[key] is None:
                raise ApiError(ErrorCode.BAD_REQUEST, f"'{key}' must not be null", req.id)
    if data is not None and text is not None:
        raise ApiError(ErrorCode.BAD_REQUEST, "give 'data' or 'text', not both", req.id)
    if data is not None:
        if not isinstance(data, str):
            raise ApiError(ErrorCode.BAD_REQUEST, "'data' must be a base64 string", req.id)
        try:  # what base64.b64decode(validate=True) does, without its wrapper
            payload = binascii.a2b_base64(data.encode("ascii"), strict_mode=True)
        except (binascii.Error, ValueError):
            raise ApiError(ErrorCode.BAD_REQUEST, "'data' is not valid base64", req.id) from None
    elif text is not None:
        if not isinstance(text, str):
            raise ApiError(ErrorCode.BAD_REQUEST, "'text' must be a string", req.id)
        try:
            payload = text.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(ErrorCode.BAD_REQUEST, "'text' is not valid Unicode", req.id) from None
    else:
        raise ApiError(ErrorCode.BAD_REQUEST, "a call needs 'data' (base64) or 'text'", req.id)
    timeout = _positive_number(req, "timeout") if "timeout" in body else None
    if retry is not None and (
        isinstance(retry, bool) or not isinstance(retry, int) or not 0 <= retry <= MAX_RETRY
    ):
        raise ApiError(ErrorCode.BAD_REQUEST, f"'retry' must be an integer 0..{MAX_RETRY}", req.id)
    wait = get("wait", False)
    if wait is not False and wait is not True:
        raise ApiError(ErrorCode.BAD_REQUEST, "'wait' must be a boolean", req.id)
    reply = get("reply")
    if reply is not None and reply is not False and reply is not True:
        raise ApiError(ErrorCode.BAD_REQUEST, "'reply' must be a boolean", req.id)
    if "reply" in body and reply is None:
        raise ApiError(ErrorCode.BAD_REQUEST, "'reply' must not be null", req.id)
    return payload, timeout, retry, wait, reply


def topics_field(req: Request, *, required: bool) -> frozenset[str] | None:
    """The `topics` list of subscribe/unsubscribe (None: all, for unsubscribe)."""
    topics = req.body.get("topics")
    if topics is None:
        if required:
            raise ApiError(ErrorCode.BAD_REQUEST, "'topics' is required", req.id)
        return None
    if isinstance(topics, str):
        topics = [topics]
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise ApiError(ErrorCode.BAD_REQUEST, "'topics' must be a list of strings", req.id)
    unknown = sorted(set(topics) - TOPICS)
    if unknown:
        known = ", ".join(sorted(TOPICS))
        raise ApiError(
            ErrorCode.BAD_REQUEST, f"unknown topic {unknown[0]!r} (known: {known})", req.id
        )
    return frozenset(topics)


def ok_call_reply(req_id: int | str, status: int, data: bytes, ms: float, generation: int) -> bytes:
    """The framed success reply of a call, formatted directly (the per-call hot path).

    The same JSON as `encode` makes of the same dict (same keys, order and values);
    `ms` is written with exactly three decimals (`0.410`, where json.dumps writes
    `0.41`), which skips two float-to-text conversions per call.
    """
    rid = b"%d" % req_id if type(req_id) is int else json.dumps(req_id).encode()
    body = b'{"id":%s,"ok":true,"status":%d,"data":"%s","ms":%.3f,"generation":%d}' % (
        rid,
        status,
        binascii.b2a_base64(data, newline=False),
        ms,
        generation,
    )
    return _LENGTH.pack(len(body)) + body


def call_reply(
    req_id: int | str, result: CallResult, *, text: bool, awaited: bool = True
) -> dict[str, Any]:
    """The reply object of a call that ended (the general form; see `ok_call_reply`).

    A call the device answered carries status, data and ms, on success or failure;
    one that never got an answer (timeout, link down, busy...) is a plain error reply.
    A call whose answer was not `awaited` (`reply: false`) says so: `"reply": false`.
    """
    if result.error is not None and result.status is None:
        return error_reply(
            req_id, ErrorCode(result.error), result.message, generation=result.generation
        )
    reply: dict[str, Any] = {
        "id": req_id,
        "ok": result.error is None,
        "status": result.status,
        "data": b64(result.data),
        "ms": round(result.ms, 3),
        "generation": result.generation,
    }
    if text:
        reply["text"] = result.text
    if result.error is not None:
        reply["error"] = {"code": result.error, "message": result.message}
    if not awaited:
        reply["reply"] = False
    return reply


def b64(data: bytes) -> str:
    """Standard base64 text of bytes."""
    return base64.b64encode(data).decode("ascii")
