"""The Unix-socket JSON API front: the listening socket and its clients.

Strategy: this is the API's transport on the Unix socket. It owns the listening
socket and the set of connected clients: who gets in (`api.max_clients`), each
one's role from its peer credentials (`roles.role_for`, re-evaluated after a
reload). Each connection (`conn.ClientConn`) frames bytes into message bodies and
hands them, itself as the `Peer`, to the dispatcher (`dispatch.Dispatcher`), which
runs them through the op table (`ops.OPS`) and knows no socket. It is a `Front` like
the others: claim (the socket's lock, unless systemd passed the socket), start,
reload, status (its keys: clients, lease, ...), close.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import structlog

from verld.config import Config
from verld.errors import ErrorCode, ServeError, SocketInUse
from verld.fronts.api.conn import ApiStats, ClientConn
from verld.fronts.api.dispatch import Dispatcher
from verld.fronts.api.ops import OPS
from verld.fronts.base import CannotServe, Core
from verld.ownership import Lock
from verld.roles import role_for
from verld.sockfile import bind_socket, claim_socket, clear_stale_socket

log = structlog.get_logger("verld.server")


class ApiServer:
    """The API front over one core."""

    name = "api"

    def __init__(self, cfg: Config, core: Core) -> None:
        self.cfg = cfg
        self.core = core
        self.stats = ApiStats()
        self.dispatcher = Dispatcher(cfg, core, OPS)
        #: a connection's messages go straight to the dispatcher (the per-call hot path)
        self.request = self.dispatcher.request
        self.requests = self.dispatcher.requests
        self.clients: set[ClientConn] = set()
        self._serial = 0
        self._server: asyncio.AbstractServer | None = None
        self._owned_path: tuple[str, int, int] | None = None
        self._lock: Lock | None = None  #: SOCKET.lock while we own api.socket
        self._passed: socket.socket | None = None  #: the socket systemd passed, if any

    # --- listening ------------------------------------------------------------------
    def _new_conn(self) -> ClientConn:
        self._serial += 1
        return ClientConn(self, self._serial)

    async def claim(self) -> None:
        """The socket systemd passed, else `api.socket`'s lock (`sockfile.claim_socket`):
        `CannotServe` when another process serves that path."""
        self._passed = self.core.take_socket("api")
        if self._passed is None and self._lock is None:
            try:
                self._lock = claim_socket(self.cfg.api.socket)
            except SocketInUse as exc:
                raise CannotServe(str(exc), socket=self.cfg.api.socket) from None

    async def start(self) -> None:
        """Serve the passed socket, or bind `api.socket` (claimed here if `claim` was
        not called; `close` releases the lock, and removes the file once bound, even
        when `start` failed after the bind). `CannotServe` when it cannot."""
        self.dispatcher.start()
        try:
            await self._listen()
        except (OSError, ServeError) as exc:  # SocketInUse included
            raise CannotServe(str(exc), socket=self.cfg.api.socket) from None

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        if self._passed is not None:  # systemd's: its file is never verld's to remove
            self._server = await _unix_server(loop, self._new_conn, self._passed)
            return
        path = self.cfg.api.socket
        if self._lock is None:
            self._lock = claim_socket(path)
        clear_stale_socket(path)  # (a leftover: nobody holds its lock)
        # mode and group given by fd, never by path (sockfile.bind_socket); listens below
        sock, (dev, ino) = bind_socket(path, self.cfg.api.mode, self.cfg.api.group)
        self._owned_path = (path, dev, ino)
        try:
            self._server = await _unix_server(loop, self._new_conn, sock)
        except BaseException:
            sock.close()
            raise

    def reload(self, cfg: Config, changed: list[str]) -> None:
        """The new settings; every connected client gets the role they give it
        (`api.socket` itself needs a restart)."""
        self.cfg = cfg
        self.dispatcher.reload(cfg)
        self.reevaluate_roles()

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Close every client and remove the socket file we created."""
        self.stop_accepting()
        await self.dispatcher.close()
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
            self._owned_path = None
        if self._lock is not None:
            self._lock.release()  # (after the unlink: the next verld finds the path free)
            self._lock = None

    # --- clients --------------------------------------------------------------------------
    def attach(self, conn: ClientConn) -> None:
        limit = self.cfg.api.max_clients
        if len(self.clients) >= limit:
            self._refuse(
                conn, "max_clients", ErrorCode.BUSY, f"too many clients (max_clients={limit})"
            )
            return
        role = role_for(conn.uid, conn.gid, self.cfg.api.roles)
        if role is None:
            self._refuse(
                conn, "no_role", ErrorCode.FORBIDDEN, "your uid/gid matches no role in api.roles"
            )
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
        self.core.clients_changed()

    def _refuse(self, conn: ClientConn, limit: str, code: ErrorCode, message: str) -> None:
        reason = "no role" if limit == "no_role" else limit
        log.info("client_refused", pid=conn.pid, uid=conn.uid, reason=reason)
        self.stats.limit(limit)
        conn.refuse(code, message)

    def reevaluate_roles(self) -> None:
        """After a reload: every connected client gets the role the new lists give it."""
        for conn in list(self.clients):
            role = role_for(conn.uid, conn.gid, self.cfg.api.roles)
            if role is None:
                log.info("client_refused", client=repr(conn), client_pid=conn.pid, reason="no role")
                self.stats.limit("no_role")
                conn.refuse(ErrorCode.FORBIDDEN, "after a reload your uid/gid matches no role")
            elif role != conn.role:
                log.info("client_role_changed", client=repr(conn), old=conn.role, new=role)
                conn.role = role

    def detach(self, conn: ClientConn) -> None:
        if conn not in self.clients:
            return
        self.clients.discard(conn)
        self.dispatcher.leave(conn)
        log.info("client_disconnected", client=repr(conn), client_pid=conn.pid)
        self.core.clients_changed()

    # --- figures ------------------------------------------------------------------------
    def programs(self) -> list[dict[str, Any]]:
        """One row per API client (`programs`)."""
        return self.dispatcher.programs(self.clients)

    def status(self) -> dict[str, Any]:
        """Its keys in `status`."""
        return {
            "clients": len(self.clients),
            "lease": self.core.lease_status(),
            "events_dropped": self.stats.events_dropped,
            "limits_hit": dict(self.stats.limits_hit),
            "api_errors": dict(self.dispatcher.api_errors),
            "inhibit": self.core.holder,
            "inhibits": self.core.inhibits,
        }


async def _unix_server(
    loop: asyncio.AbstractEventLoop, factory: Callable[[], asyncio.Protocol], sock: socket.socket
) -> asyncio.Server:
    """A server on the listening Unix socket `sock` that leaves its file alone when it
    closes. Python 3.13's loops (and uvloop's since 0.21) unlink it by default: that
    would remove systemd's socket under activation, and verld removes its own itself,
    only while it is still the file it bound."""
    if sys.version_info >= (3, 13):
        try:
            return await loop.create_unix_server(factory, sock=sock, cleanup_socket=False)
        except TypeError:  # (a loop without the keyword: one that does not unlink)
            pass
    return await loop.create_unix_server(factory, sock=sock)
