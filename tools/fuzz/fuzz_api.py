#!/usr/bin/env python3
"""Fuzz target: the client-API message parser (`verld.wire`).

Invariants, for any input:
- `MessageDecoder.feed` returns bodies of at most max_message bytes or raises
  `wire.Oversize` (length above max_message), never anything else; it never
  holds more than one incomplete message (max_message + 3 bytes);
- cutting the stream differently never changes the bodies or the Oversize (which
  carries the bodies completed before it in the same feed);
- `parse_request`, `call_fields` and `topics_field` either return well-typed
  values or raise `ApiError` with a known code and the right id.

Run: `tools/fuzz/fuzz_api.py -max_total_time=60` (or `tools/fuzz/run`).
"""

from __future__ import annotations

import json
import math
from typing import Any

import _harness

from verld import wire
from verld.errors import ApiError, ErrorCode
from verld.fronts.api.ops import OPS

MAX = 256  #: max_message here: small, so Oversize is reachable
#: members glued into requests (`{"op": OP, "id": 1, <input>}`): reaches field checks
OPS_WITH_FIELDS = ("call", "subscribe", "unsubscribe")


def check(data: bytes) -> None:
    """Every invariant above, on `data` as one body, as members of a request, as a stream."""
    check_body(data)
    for op in OPS_WITH_FIELDS:
        check_body(b'{"op":"' + op.encode() + b'","id":1,' + data + b"}")
    control, stream = _harness.split(data)
    whole = _decode([stream])
    pieces = _decode(_harness.cut(stream, control))
    assert whole == pieces, (whole, pieces)
    for body in pieces[0]:
        check_body(body)


def _decode(chunks: list[bytes]) -> tuple[list[bytes], int | None]:
    """(bodies, oversize length or None) of a stream fed in `chunks`."""
    decoder = wire.MessageDecoder(MAX)
    bodies: list[bytes] = []
    for chunk in chunks:
        try:
            out = decoder.feed(chunk)
        except wire.Oversize as exc:  # it carries the bodies completed before it
            assert exc.length > MAX and all(len(body) <= MAX for body in exc.bodies)
            return bodies + exc.bodies, exc.length
        assert all(len(body) <= MAX for body in out)
        assert decoder.buffered <= MAX + 3, decoder.buffered
        bodies += out
    return bodies, None


def _valid_id(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


def check_body(body: bytes) -> None:
    """parse_request and the field accessors: typed results or ApiError, nothing else."""
    try:
        req = wire.parse_request(body)
    except ApiError as exc:
        assert exc.code in ("bad_request", "unknown_op"), exc.code
        assert exc.req_id is None or _valid_id(exc.req_id)
        assert exc.code == "bad_request" or exc.req_id is not None
        return
    assert _valid_id(req.id)
    if req.op not in OPS:
        return  # the API front answers unknown_op with this id
    try:
        if req.op == "call":
            _check_call(req)
        elif req.op in ("subscribe", "unsubscribe"):
            topics = wire.topics_field(req, required=req.op == "subscribe")
            assert topics is None or topics <= wire.TOPICS
            assert topics is not None or req.op == "unsubscribe"
    except ApiError as exc:
        assert (exc.code, exc.req_id) == ("bad_request", req.id), (exc.code, exc.req_id)
    reply = wire.encode(wire.error_reply(req.id, ErrorCode.BAD_REQUEST, "x"))
    assert json.loads(reply[4:])["id"] == req.id  # every id can be echoed


def _check_call(req: wire.Request) -> None:
    payload, timeout, retry, wait, reply = wire.call_fields(req)
    assert isinstance(payload, bytes)
    assert timeout is None or (isinstance(timeout, float) and math.isfinite(timeout))
    assert timeout is None or 0 < timeout <= wire.MAX_SECONDS
    assert retry is None or (type(retry) is int and retry >= 0)
    assert isinstance(wait, bool)
    assert reply is None or isinstance(reply, bool)


def seeds() -> list[bytes]:
    """Valid and nearly valid requests of every op, framed and bare."""
    reqs: list[dict[str, Any]] = [
        {"op": "hello", "id": 1, "client": "fuzz"},
        {"op": "status", "id": "s"},
        {"op": "subscribe", "id": 2, "topics": ["events", "link"]},
        {"op": "unsubscribe", "id": 3},
        {"op": "logs", "id": 4, "lines": 10},
        {"op": "call", "id": 5, "data": "AaoB", "timeout": 1.5, "retry": 2, "wait": True},
        {"op": "call", "id": 6, "text": "PING"},
        {"op": "lease", "id": 7, "seconds": 5},
        {"op": "release", "id": 8, "lease": "00ff"},
    ]
    bodies = [json.dumps(r).encode() for r in reqs]
    framed = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    members = [b'"data":"AQ==","timeout":5', b'"text":"x","retry":0', b'"topics":["logs"]']
    return [*bodies, *members, b"\x02\x40\xc0" + framed, b"\x00" + framed[:40]]


if __name__ == "__main__":
    _harness.main(check, seeds(), "api")
