"""The API's ops: one table, name → (role, handler).

Every request is looked up here once: an unknown op is `unknown_op`, an op above
the connection's role is `forbidden`, anything else runs its handler with the
server's `OpContext`. A handler answers on `conn` or raises `ApiError` (the server
turns that into the error reply). Roles and fields: docs/protocol.md, "Ops".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from verld import API_VERSION, __version__, wire
from verld.config import Config
from verld.errors import ApiError, ErrorCode
from verld.fronts.api.conn import ClientConn
from verld.fronts.api.fanout import Fanout
from verld.fronts.api.inhibit import Inhibits
from verld.fronts.api.leases import Leases
from verld.fronts.base import Core, FrontCounts
from verld.logs import RING
from verld.metrics import as_json
from verld.roles import ROLE_RANK
from verld.session.calls import CallResult


class OpContext(Protocol):
    """What a handler may use: the server's parts."""

    cfg: Config
    core: Core
    counts: FrontCounts
    fanout: Fanout
    leases: Leases
    inhibits: Inhibits
    text: bool  #: call replies carry `text` (the line codec)


Handler = Callable[[OpContext, ClientConn, wire.Request], None]


class Op(NamedTuple):
    role: str
    rank: int  #: ROLE_RANK[role], compared with the connection's on every request
    handler: Handler


def _ok(conn: ClientConn, req: wire.Request, **fields: Any) -> None:
    conn.send({"id": req.id, "ok": True, **fields})


def call(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    """Submit the call; answer on `conn` when it ends (the per-call hot path)."""
    payload, timeout, retry, wait, reply = wire.call_fields(req)
    cfg = api.cfg
    max_payload = cfg.device.max_payload
    if len(payload) > max_payload:
        raise ApiError(
            ErrorCode.TOO_LARGE,
            f"data of {len(payload)} bytes exceeds max_payload ({max_payload})",
            req.id,
        )
    if timeout is not None and timeout > cfg.api.max_timeout:
        message = f"timeout {timeout:g} is above api.max_timeout {cfg.api.max_timeout:g}"
        raise ApiError(ErrorCode.BAD_REQUEST, message, req.id)
    if retry is not None and retry > cfg.api.max_retry:
        message = f"retry {retry} is above api.max_retry {cfg.api.max_retry}"
        raise ApiError(ErrorCode.BAD_REQUEST, message, req.id)
    req_id, text, core = req.id, api.text, api.core

    def done(result: CallResult) -> None:
        if conn.closed:
            return
        awaited = submitted.reply
        if result.error is None and not text and awaited:
            conn.ok += 1
            conn.write(wire.ok_call_reply(req_id, 0, result.data, result.ms, result.generation))
        else:
            if result.error is None:
                conn.ok += 1
            else:
                conn.failed += 1
            conn.write(wire.encode(wire.call_reply(req_id, result, text=text, awaited=awaited)))

    submitted = core.make_call(api.counts, conn, payload, done, timeout, retry, wait, req_id, reply)
    core.submit(submitted)


def status(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    conn.send({"id": req.id, "ok": True, **api.core.status()})


def programs(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    """Who is using the device now, through every front, and the last link changes."""
    conn.send({"id": req.id, "ok": True, **api.core.programs()})


def hello(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    name = req.body.get("client")
    if name is not None and not isinstance(name, str):
        raise ApiError(ErrorCode.BAD_REQUEST, "'client' must be a string", req.id)
    conn.name = (name or "")[:128]
    core, dev = api.core, api.cfg.device
    ping = core.spec.device_ping(api.cfg)
    device = {
        "port": core.port,
        "codec": dev.codec,
        "max_payload": dev.max_payload,
        "window": core.window,
        "ping": None if ping is None else ping.hex(),
    }
    _ok(
        conn, req, version=API_VERSION, daemon=f"verld {__version__}", device=device, role=conn.role
    )


def subscribe(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    topics = wire.topics_field(req, required=True)
    assert topics is not None
    api.fanout.subscribe(conn, topics)
    _ok(conn, req, topics=sorted(conn.topics))


def unsubscribe(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    topics = wire.topics_field(req, required=False)
    api.fanout.unsubscribe(conn, wire.TOPICS if topics is None else topics)  # absent: all
    _ok(conn, req, topics=sorted(conn.topics))


def logs(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    lines = req.body.get("lines", 100)
    if isinstance(lines, bool) or not isinstance(lines, int) or lines < 0:
        raise ApiError(ErrorCode.BAD_REQUEST, "'lines' must be a non-negative integer", req.id)
    _ok(conn, req, records=RING.tail(lines))


def metrics(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    """The Prometheus text, or with `"format": "json"` the same metrics as data."""
    form = req.body.get("format", "text")
    if form == "json":
        _ok(conn, req, families=as_json(api.core.metrics()))
    elif form == "text":
        _ok(conn, req, text=api.core.metrics_text())
    else:
        raise ApiError(ErrorCode.BAD_REQUEST, '\'format\' must be "text" or "json"', req.id)


def reconnect(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    api.core.request_reconnect(f"reconnect requested by {conn!r}")
    _ok(conn, req)


def reload(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    reload_config = api.core.reload_config
    if reload_config is None:
        raise ApiError(ErrorCode.UNKNOWN_OP, "reload is not available", req.id)
    try:
        changed = reload_config()
    except Exception as exc:
        raise ApiError(ErrorCode.BAD_CONFIG, str(exc), req.id) from None
    _ok(conn, req, changed=changed)


def lease(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    seconds = req.body.get("seconds")
    limit = api.cfg.api.lease_max
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not (1 <= seconds <= limit)
    ):
        raise ApiError(ErrorCode.BAD_REQUEST, f"'seconds' must be a number 1..{limit:g}", req.id)
    inhibited_by = api.core.inhibited_by
    if inhibited_by is not None:
        raise ApiError(ErrorCode.BUSY, inhibited_by or "inhibited", req.id)
    _ok(conn, req, lease=api.leases.take(conn, seconds, req.id), seconds=seconds)


def release(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    token = req.body.get("lease")
    if token is not None and not isinstance(token, str):
        raise ApiError(ErrorCode.BAD_REQUEST, "'lease' must be a string token", req.id)
    if not api.leases.release(conn, token):
        raise ApiError(ErrorCode.BAD_REQUEST, "you hold no lease (or not this one)", req.id)
    _ok(conn, req)


def inhibit(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    """Let go of the port; the reply (its path) comes once it is closed."""
    api.inhibits.take(conn, req.id, lambda port: _ok(conn, req, port=port))  # (ends a lease)


def uninhibit(api: OpContext, conn: ClientConn, req: wire.Request) -> None:
    api.core.end_hold(f"uninhibit by {conn!r}")
    _ok(conn, req)


def _table(**ops: tuple[str, Handler]) -> dict[str, Op]:
    return {name: Op(role, ROLE_RANK[role], handler) for name, (role, handler) in ops.items()}


#: every op of the API: its least role and its handler
OPS = _table(
    hello=("observer", hello),
    status=("observer", status),
    programs=("observer", programs),
    subscribe=("observer", subscribe),
    unsubscribe=("observer", unsubscribe),
    logs=("observer", logs),
    metrics=("observer", metrics),
    call=("controller", call),
    lease=("controller", lease),
    release=("controller", release),
    reconnect=("admin", reconnect),
    reload=("admin", reload),
    inhibit=("admin", inhibit),
    uninhibit=("admin", uninhibit),
)
