"""The Unix-socket client API server: accepts clients, routes ops, fans out events.

Strategy: each connection (`conn.ClientConn`) decodes and role-checks requests and
hands them to `dispatch`. Calls go to the session with a callback that writes the
reply back to the asking connection only. Events are encoded once and written to
every subscriber; a subscriber that lags loses events (counted, then `overflow`)
and is dropped past `api.max_backlog`, so nobody else waits for it. Leases and the
traffic/wire taps live here too: both are about which connection sees what.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from verld import API_VERSION, __version__, wire
from verld.calls import Call, CallResult
from verld.config import Config, tcp_target
from verld.conn import ClientConn
from verld.link import Transition
from verld.logs import RING, Record
from verld.metrics import prometheus_text
from verld.roles import role_for
from verld.session import Session
from verld.sockfile import clear_stale_socket, set_group

log = structlog.get_logger("verld.server")


@dataclass
class Lease:
    """One connection's exclusive hold on the device."""

    conn: ClientConn
    token: str
    expires: float  # loop time
    timer: asyncio.TimerHandle


class ApiServer:
    """Accepts clients, routes their requests, fans out events."""

    def __init__(
        self, cfg: Config, session: Session, *, on_reload: Callable[[], list[str]] | None = None
    ) -> None:
        self.cfg = cfg
        self.session = session
        self.clients: set[ClientConn] = set()
        self.subscribers: dict[str, set[ClientConn]] = {t: set() for t in wire.TOPICS}
        self.events_dropped = 0
        self.started = time.time()
        self.on_reload = on_reload
        self.on_clients_changed: Callable[[], None] | None = None
        self._serial = 0
        self._server: asyncio.AbstractServer | None = None
        self._owned_path: tuple[str, int, int] | None = None
        self.lease: Lease | None = None
        #: times each limit was hit (max_clients, max_message, max_backlog, no_role)
        self.limits_hit: dict[str, int] = {}
        #: error replies to malformed or refused requests, by code
        self.api_errors: dict[str, int] = {}
        self.debug = False
        RING.listener = self._on_log

    def count_limit(self, name: str) -> None:
        self.limits_hit[name] = self.limits_hit.get(name, 0) + 1

    def next_serial(self) -> int:
        self._serial += 1
        return self._serial

    # --- listening ------------------------------------------------------------------
    async def start(self, listen_sock: socket.socket | None = None) -> None:
        """Serve the given (socket-activated) socket, or bind `api.socket`."""
        loop = asyncio.get_running_loop()
        if listen_sock is not None:
            self._server = await loop.create_unix_server(lambda: ClientConn(self), sock=listen_sock)
            return
        path = self.cfg.api.socket
        clear_stale_socket(path)
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._server = await loop.create_unix_server(lambda: ClientConn(self), path=path)
        os.chmod(path, self.cfg.api.mode)  # after bind: correct under any umask
        if self.cfg.api.group is not None:
            set_group(path, self.cfg.api.group)
        st = os.stat(path)
        self._owned_path = (path, st.st_dev, st.st_ino)

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Close every client and remove the socket file we created."""
        await self.stop_accepting()
        for conn in list(self.clients):
            conn.close()
        if self._owned_path is not None:
            path, dev, ino = self._owned_path
            try:
                st = os.stat(path)
                if (st.st_dev, st.st_ino) == (dev, ino):
                    os.unlink(path)
            except OSError:
                pass
        RING.listener = None

    # --- clients --------------------------------------------------------------------------
    def attach(self, conn: ClientConn) -> None:
        if len(self.clients) >= self.cfg.api.max_clients:
            log.info("client_refused", pid=conn.pid, uid=conn.uid, reason="max_clients")
            self.count_limit("max_clients")
            conn.refuse("busy", f"too many clients (max_clients={self.cfg.api.max_clients})")
            return
        role = role_for(conn.uid, conn.gid, self.cfg.api.roles)
        if role is None:
            log.info("client_refused", pid=conn.pid, uid=conn.uid, reason="no role")
            self.count_limit("no_role")
            conn.refuse("forbidden", "your uid/gid matches no role in api.roles")
            return
        conn.role = role
        self.clients.add(conn)
        log.info(
            "client_connected",
            client=repr(conn),
            client_pid=conn.pid,
            client_uid=conn.uid,
            client_gid=conn.gid,
            role=role,
        )
        if self.on_clients_changed is not None:
            self.on_clients_changed()

    def reevaluate_roles(self) -> None:
        """After a reload: every connected client gets the role the new lists give it."""
        for conn in list(self.clients):
            role = role_for(conn.uid, conn.gid, self.cfg.api.roles)
            if role is None:
                log.info("client_refused", client=repr(conn), client_pid=conn.pid, reason="no role")
                self.count_limit("no_role")
                conn.refuse("forbidden", "after a reload your uid/gid matches no role")
            elif role != conn.role:
                log.info("client_role_changed", client=repr(conn), old=conn.role, new=role)
                conn.role = role

    def detach(self, conn: ClientConn) -> None:
        if conn not in self.clients:
            return
        self.clients.discard(conn)
        for subs in self.subscribers.values():
            subs.discard(conn)
        self._update_taps()
        if self.lease is not None and self.lease.conn is conn:
            self._end_lease("holder disconnected")
        self.session.forget_owner(conn)
        log.info("client_disconnected", client=repr(conn), client_pid=conn.pid)
        if self.on_clients_changed is not None:
            self.on_clients_changed()

    # --- ops ------------------------------------------------------------------------------
    def dispatch(self, conn: ClientConn, req: wire.Request) -> None:
        op = req.op
        if op == "call":
            self.call(conn, req)
        elif op == "status":
            conn.send({"id": req.id, "ok": True, **self.status()})
        elif op == "hello":
            self._hello(conn, req)
        elif op == "subscribe":
            topics = wire.topics_field(req, required=True)
            assert topics is not None
            conn.topics |= topics
            for topic in topics:
                self.subscribers[topic].add(conn)
            self._update_taps()
            conn.send({"id": req.id, "ok": True, "topics": sorted(conn.topics)})
        elif op == "unsubscribe":
            topics = wire.topics_field(req, required=False)
            if topics is None:  # absent: all; an empty list: none
                topics = wire.TOPICS
            conn.topics -= topics
            for topic in topics:
                self.subscribers[topic].discard(conn)
            self._update_taps()
            conn.send({"id": req.id, "ok": True, "topics": sorted(conn.topics)})
        elif op == "logs":
            lines = req.body.get("lines", 100)
            if isinstance(lines, bool) or not isinstance(lines, int) or lines < 0:
                raise wire.ApiError("bad_request", "'lines' must be a non-negative integer", req.id)
            conn.send({"id": req.id, "ok": True, "records": RING.tail(lines)})
        elif op == "metrics":
            conn.send({"id": req.id, "ok": True, "text": self.metrics_text()})
        elif op == "reconnect":
            self.session.request_reconnect(f"reconnect requested by {conn!r}")
            conn.send({"id": req.id, "ok": True})
        elif op == "reload":
            self._reload(conn, req)
        elif op == "lease":
            self._lease(conn, req)
        else:
            self._release(conn, req)

    # --- leases -----------------------------------------------------------------------
    def _lease(self, conn: ClientConn, req: wire.Request) -> None:
        seconds = req.body.get("seconds")
        limit = self.cfg.api.lease_max
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 1 <= seconds <= limit
        ):
            raise wire.ApiError("bad_request", f"'seconds' must be a number 1..{limit:g}", req.id)
        held = self.lease
        if held is not None and held.conn is not conn:
            raise wire.ApiError("busy", f"the device is leased to {held.conn!r}", req.id)
        loop = asyncio.get_running_loop()
        if held is not None:
            held.timer.cancel()
        token = held.token if held is not None else secrets.token_hex(8)
        expires = loop.time() + float(seconds)
        timer = loop.call_at(expires, self._end_lease, "expired")
        self.lease = Lease(conn, token, expires, timer)
        self.session.set_exclusive(conn)
        log.info("lease_taken", client=repr(conn), pid=conn.pid, uid=conn.uid, seconds=seconds)
        conn.send({"id": req.id, "ok": True, "lease": token, "seconds": seconds})

    def _release(self, conn: ClientConn, req: wire.Request) -> None:
        token = req.body.get("lease")
        if token is not None and not isinstance(token, str):
            raise wire.ApiError("bad_request", "'lease' must be a string token", req.id)
        held = self.lease
        if held is None or held.conn is not conn or (token is not None and token != held.token):
            raise wire.ApiError("bad_request", "you hold no lease (or not this one)", req.id)
        self._end_lease("released")
        conn.send({"id": req.id, "ok": True})

    def _end_lease(self, reason: str) -> None:
        held, self.lease = self.lease, None
        if held is None:
            return
        held.timer.cancel()
        log.info("lease_ended", client=repr(held.conn), reason=reason)
        self.session.set_exclusive(None)

    def lease_status(self) -> dict[str, Any] | None:
        held = self.lease
        if held is None:
            return None
        left = held.expires - asyncio.get_running_loop().time()
        return {
            "pid": held.conn.pid,
            "uid": held.conn.uid,
            "client": held.conn.name,
            "seconds_left": round(max(0.0, left), 3),
        }

    # --- taps -------------------------------------------------------------------------
    def _update_taps(self) -> None:
        """Ask the session for frames/bytes only while someone listens."""
        self.session.traffic = self._traffic if self.subscribers["traffic"] else None
        self.session.set_wire_tap(self._wire if self.subscribers["wire"] else None)

    def _traffic(
        self, direction: str, kind: str, seq: int | None, status: int | None, payload: bytes
    ) -> None:
        self.broadcast(
            "traffic",
            {
                "event": "traffic",
                "dir": direction,
                "t": round(time.time(), 6),
                "kind": kind,
                "seq": seq,
                "status": status,
                "len": len(payload),
                "hex": payload.hex(),
            },
        )

    def _wire(self, direction: str, data: bytes) -> None:
        self.broadcast(
            "wire",
            {"event": "wire", "dir": direction, "t": round(time.time(), 6), "hex": data.hex()},
        )

    def _hello(self, conn: ClientConn, req: wire.Request) -> None:
        name = req.body.get("client")
        if name is not None and not isinstance(name, str):
            raise wire.ApiError("bad_request", "'client' must be a string", req.id)
        conn.name = (name or "")[:128]
        dev = self.cfg.device
        conn.send(
            {
                "id": req.id,
                "ok": True,
                "version": API_VERSION,
                "daemon": f"verld {__version__}",
                "device": {
                    "port": self.session.port,
                    "codec": dev.codec,
                    "max_payload": dev.max_payload,
                    "window": self.session.window,
                },
                "role": conn.role,
            }
        )

    def _reload(self, conn: ClientConn, req: wire.Request) -> None:
        if self.on_reload is None:
            raise wire.ApiError("unknown_op", "reload is not available", req.id)
        try:
            changed = self.on_reload()
        except Exception as exc:
            raise wire.ApiError("bad_config", str(exc), req.id) from None
        conn.send({"id": req.id, "ok": True, "changed": changed})

    def call(self, conn: ClientConn, req: wire.Request) -> None:
        """The `call` op (its role already checked): submit, answer when it ends."""
        payload, timeout, retry, wait = wire.call_fields(req)
        dev = self.cfg.device
        if len(payload) > dev.max_payload:
            raise wire.ApiError(
                "too_large",
                f"data of {len(payload)} bytes exceeds max_payload ({dev.max_payload})",
                req.id,
            )
        req_id = req.id
        text_codec = dev.codec == "line"

        def done(result: CallResult) -> None:
            if conn.closed:
                return
            if result.error is None and not text_codec:
                conn.write(wire.ok_call_reply(req_id, 0, result.data, result.ms, result.generation))
                return
            if result.error is None or result.status is not None:
                reply: dict[str, Any] = {
                    "id": req_id,
                    "ok": result.error is None,
                    "status": result.status,
                    "data": wire.b64(result.data),
                    "ms": round(result.ms, 3),
                    "generation": result.generation,
                }
                if text_codec:
                    reply["text"] = result.text
                if result.error is not None:
                    reply["error"] = {"code": result.error, "message": result.message}
            else:
                reply = wire.error_reply(
                    req_id, result.error, result.message, generation=result.generation
                )
            conn.write(wire.encode(reply))

        self.session.submit(
            Call(
                conn,
                payload,
                done,
                timeout=timeout or dev.timeout,
                retry=dev.retry if retry is None else retry,
                wait=wait,
                req_id=req_id,
            )
        )

    # --- status and metrics ------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        st = self.session.status()
        st["uptime"] = round(time.time() - self.started, 3)
        st["clients"] = len(self.clients)
        st["lease"] = self.lease_status()
        st["events_dropped"] = self.events_dropped
        st["limits_hit"] = dict(self.limits_hit)
        st["api_errors"] = dict(self.api_errors)
        dev = self.cfg.device
        if tcp_target(self.session.port) is None:  # serial: show the line settings
            st["link"]["settings"] = (
                f"{dev.baudrate} {dev.bytesize}{dev.parity[0].upper()}{dev.stopbits:g}"
                + (" rtscts" if dev.rtscts else "")
            )
        return st

    def metrics_text(self) -> str:
        return prometheus_text(self.status(), self.session.latency)

    # --- fan-out ----------------------------------------------------------------------------------
    def broadcast(self, topic: str, obj: dict[str, Any]) -> None:
        subs = self.subscribers[topic]
        if not subs:
            return
        data = wire.encode(obj)
        for conn in list(subs):
            conn.send_event(data)

    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        if not self.subscribers["events"]:
            return
        event: dict[str, Any] = {
            "event": "device",
            "data": wire.b64(data),
            "generation": generation,
        }
        if text is not None:
            event["text"] = text
        self.broadcast("events", event)

    def link_event(self, t: Transition) -> None:
        self.broadcast(
            "link",
            {
                "event": "link",
                "state": t.state.value,
                "reason": t.reason,
                "generation": t.generation,
            },
        )

    def _on_log(self, record: Record) -> None:
        if self.subscribers["logs"]:
            self.broadcast("logs", {"event": "log", "record": record})
