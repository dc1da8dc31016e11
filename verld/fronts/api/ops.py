"""The API's ops: one table, name → (role, handler).

The dispatcher looks every request up here once: an unknown op is `unknown_op`, an
op above the peer's role is `forbidden`, anything else runs its handler with the
`Dispatcher` (the core and the API's shared parts). A handler answers on `peer` or
raises `ApiError` (the dispatcher turns that into the error reply); it knows no
transport. Roles and fields: docs/protocol.md, "Ops".
"""

from __future__ import annotations

from typing import Any

import structlog

from verld import API_VERSION, __version__, wire
from verld.errors import ApiError, ErrorCode
from verld.fronts.api.dispatch import Dispatcher, Handler, Op
from verld.fronts.api.peer import Peer
from verld.fronts.leases import LeaseRefused
from verld.logs import RING
from verld.metrics import as_json
from verld.roles import ROLE_RANK
from verld.session.calls import CallResult

log = structlog.get_logger("verld.server")


def _ok(peer: Peer, req: wire.Request, **fields: Any) -> None:
    peer.send({"id": req.id, "ok": True, **fields})


def call(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    """Submit the call; answer on `peer` when it ends (the per-call hot path)."""
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
    awaited = core.awaits(payload, reply)

    def done(result: CallResult) -> None:
        if peer.closed:
            return
        if result.error is None and not text and awaited:
            peer.ok += 1
            peer.write(wire.ok_call_reply(req_id, 0, result.data, result.ms, result.generation))
        else:
            if result.error is None:
                peer.ok += 1
            else:
                peer.failed += 1
            peer.write(wire.encode(wire.call_reply(req_id, result, text=text, awaited=awaited)))

    core.submit(
        core.make_call(api.counts, peer, payload, done, timeout, retry, wait, req_id, awaited)
    )


def status(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    peer.send({"id": req.id, "ok": True, **api.core.status()})


def programs(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    """Who is using the device now, through every front, and the last link changes."""
    peer.send({"id": req.id, "ok": True, **api.core.programs()})


def hello(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    name = req.body.get("client")
    if name is not None and not isinstance(name, str):
        raise ApiError(ErrorCode.BAD_REQUEST, "'client' must be a string", req.id)
    peer.name = (name or "")[:128]
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
        peer, req, version=API_VERSION, daemon=f"verld {__version__}", device=device, role=peer.role
    )


def subscribe(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    topics = wire.topics_field(req, required=True)
    assert topics is not None
    api.fanout.subscribe(peer, topics)
    _ok(peer, req, topics=api.fanout.topics_of(peer))


def unsubscribe(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    topics = wire.topics_field(req, required=False)
    api.fanout.unsubscribe(peer, wire.TOPICS if topics is None else topics)  # absent: all
    _ok(peer, req, topics=api.fanout.topics_of(peer))


def logs(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    lines = req.body.get("lines", 100)
    if isinstance(lines, bool) or not isinstance(lines, int) or lines < 0:
        raise ApiError(ErrorCode.BAD_REQUEST, "'lines' must be a non-negative integer", req.id)
    _ok(peer, req, records=RING.tail(lines))


def metrics(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    """The Prometheus text, or with `"format": "json"` the same metrics as data."""
    form = req.body.get("format", "text")
    if form == "json":
        _ok(peer, req, families=as_json(api.core.metrics()))
    elif form == "text":
        _ok(peer, req, text=api.core.metrics_text())
    else:
        raise ApiError(ErrorCode.BAD_REQUEST, '\'format\' must be "text" or "json"', req.id)


def reconnect(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    api.core.request_reconnect(f"reconnect requested by {peer!r}")
    _ok(peer, req)


def reload(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    reload_config = api.core.reload_config
    if reload_config is None:
        raise ApiError(ErrorCode.UNKNOWN_OP, "reload is not available", req.id)
    try:
        changed = reload_config()
    except Exception as exc:
        raise ApiError(ErrorCode.BAD_CONFIG, str(exc), req.id) from None
    _ok(peer, req, changed=changed)


def lease(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    seconds = req.body.get("seconds")
    limit = api.cfg.api.lease_max
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not (1 <= seconds <= limit)
    ):
        raise ApiError(ErrorCode.BAD_REQUEST, f"'seconds' must be a number 1..{limit:g}", req.id)
    try:
        token = api.core.take_lease(peer, seconds, lambda: _shown(peer))
    except LeaseRefused as exc:
        raise ApiError(ErrorCode.BUSY, str(exc), req.id) from None
    log.info("lease_taken", client=repr(peer), pid=peer.pid, uid=peer.uid, seconds=seconds)
    _ok(peer, req, lease=token, seconds=seconds)


def _shown(peer: Peer) -> dict[str, Any]:
    """The lease's holder as `status.lease` shows it."""
    return {"pid": peer.pid, "uid": peer.uid, "client": peer.name}


def release(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    token = req.body.get("lease")
    if token is not None and not isinstance(token, str):
        raise ApiError(ErrorCode.BAD_REQUEST, "'lease' must be a string token", req.id)
    if not api.core.release_lease(peer, token):
        raise ApiError(ErrorCode.BAD_REQUEST, "you hold no lease (or not this one)", req.id)
    _ok(peer, req)


def inhibit(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    """Let go of the port; the reply (its path) comes once it is closed."""
    api.inhibits.take(peer, req.id, lambda port: _ok(peer, req, port=port))  # (ends a lease)


def uninhibit(api: Dispatcher, peer: Peer, req: wire.Request) -> None:
    api.core.end_hold(f"uninhibit by {peer!r}")
    _ok(peer, req)


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
