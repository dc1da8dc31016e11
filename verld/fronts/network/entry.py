"""One `network:` entry: its listening sockets, who gets in, its connections, its figures.

Strategy: each listening socket has an accept task (`loop.sock_accept`), so a
connection is judged before anything is spent on it: an address outside `allow`,
a shared entry at `max_connections`, a TLS entry with 4 handshakes in progress from
that address, a passthrough entry while the port is held (by a connection or an
`inhibit`) — each is closed at once, counted in `refused` by why and logged with the
address (`refusals.Refusals`: at most a line a second per why). An accepted socket
gets keepalive, then becomes a connection — a `SharedConn` or, on a passthrough
entry, a `PassthroughConn` — through `loop.connect_accepted_socket`
(with the TLS handshake, given 10 s, when the entry has `tls`; a failed or late
handshake is refused, why `tls`). Until it is made (`admit`) it is `_pending`, and
pending ones count toward `max_connections` like connections: a handshake in
progress holds an fd and the TLS layer's buffers (uvloop: 256 KiB each), so
connects that never send a ClientHello can take no more than the entry's slots. A
closed connection's figures are folded into the entry's totals, so `status` counts
every connection the entry ever had.

The entry owns its accept and handshake tasks: `close` cancels them and `wait_closed`
awaits them. Nothing but cancelling ends an accept loop: an exception it does not
expect (a bug met by one connection, say) is logged at ERROR
(`network_accept_crashed`), the connection it met is closed and accepting goes on,
as asyncio's own listeners (the API and Modbus fronts') keep listening after an error.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import TYPE_CHECKING, Any, Literal

import structlog

from verld.config import Config, NetworkConfig
from verld.fronts.network.access import allowed, host_of, keepalive, tls_context
from verld.fronts.network.conn import SharedConn
from verld.fronts.network.figures import EntryStatus
from verld.fronts.network.passthrough import PassthroughConn
from verld.fronts.network.refusals import Refusals
from verld.fronts.network.relay import MODEM_POLL
from verld.fronts.network.state import EntryState
from verld.tlserrors import handshake_error

if TYPE_CHECKING:
    from verld.fronts.base import Core

log = structlog.get_logger("verld.network")

#: one connection of an entry, by its mode
Conn = SharedConn | PassthroughConn
#: a connection's counts summed into the entry's (`failed`, a map, apart)
_COUNTS: tuple[Literal["calls", "ok", "dropped", "ignored", "bad_frames"], ...] = (
    "calls",
    "ok",
    "dropped",
    "ignored",
    "bad_frames",
)
#: seconds a TLS handshake may take before the connection is closed (why `tls`)
HANDSHAKE_TIMEOUT = 10.0
#: TLS handshakes one source address may have in progress (more: refused, why `limit`)
SOURCE_HANDSHAKES = 4
#: seconds an accept loop waits after an accept that failed (so it does not spin)
ACCEPT_PAUSE = 0.5


class Entry:
    """One network port (see the module docstring)."""

    def __init__(self, core: Core, cfg: Config, conf: NetworkConfig) -> None:
        self.core = core
        self.loop = asyncio.get_running_loop()
        #: what its connections share of it (settings, counts)
        self.state = EntryState(core, self.loop, cfg, conf)
        self.ssl: ssl.SSLContext | None = tls_context(conf)
        self.conns: set[Conn] = set()
        self.socks: list[socket.socket] = []
        self.passed = False  #: its socket came from systemd (not bound here, not closed here)
        self.address = conf.listen  #: where it listens, as bound
        self._accepting: set[asyncio.Task[None]] = set()  #: (kept until `wait_closed`)
        self._handshakes: set[asyncio.Task[None]] = set()  #: (each leaves the set as it ends)
        self._pending: dict[Conn, str | None] = {}  #: not yet made → host if in _sources
        self._sources: dict[str, int] = {}  #: handshakes in progress by host (TLS)
        self._refusals = Refusals(log, "network_refused")
        self.refused = self._refusals.counts
        self._totals: dict[str, Any] = {
            "calls": 0,
            "ok": 0,
            "failed": {},
            "dropped": 0,
            "ignored": 0,
            "bad_frames": 0,
        }
        self._modem: asyncio.TimerHandle | None = None

    @property
    def cfg(self) -> Config:
        return self.state.cfg

    @property
    def conf(self) -> NetworkConfig:
        return self.state.conf

    @property
    def label(self) -> str:
        return self.state.label

    # --- listening ----------------------------------------------------------------------------
    def serve(self, socks: list[socket.socket], *, passed: bool) -> None:
        """Accept on `socks` (bound and listening)."""
        self.socks, self.passed = socks, passed
        name = socks[0].getsockname()
        self.address = host_of(name)[1]
        for sock in socks:
            sock.setblocking(False)
            task = self.loop.create_task(self._accept(sock), name=f"network {self.label} accept")
            self._accepting.add(task)
        log.info(
            "network_listening",
            name=self.label,
            listen=self.address,
            protocol=self.conf.protocol,
            mode=self.conf.mode,
            tls=self.ssl is not None,
            socket_activation=passed,
        )

    async def _accept(self, sock: socket.socket) -> None:
        """Accept on `sock` until cancelled (see the module docstring)."""
        while True:
            try:
                conn, address = await self.loop.sock_accept(sock)
            except OSError as exc:  # (EMFILE and the like: wait, do not spin)
                log.warning("network_accept_failed", name=self.label, error=str(exc))
                await asyncio.sleep(ACCEPT_PAUSE)
                continue
            except Exception as exc:
                self._crashed(exc, f"accepting again in {ACCEPT_PAUSE} s")
                await asyncio.sleep(ACCEPT_PAUSE)
                continue
            try:
                self._accepted(conn, address)
            except Exception as exc:
                conn.close()
                self._crashed(exc, "that connection closed, accepting goes on", peer=str(address))

    def _crashed(self, exc: Exception, then: str, **where: str) -> None:
        """What accepting did not expect (a bug): logged, without a traceback; `then`
        says what happens next."""
        log.error("network_accept_crashed", name=self.label, error=repr(exc), then=then, **where)

    def _accepted(self, sock: socket.socket, address: Any) -> None:
        host, peer = host_of(address)
        if not allowed(self.conf, host):
            self._refuse(sock, peer, "allow")
            return
        why = self._full(host)
        if why is not None:
            self._refuse(sock, peer, why)
            return
        keepalive(sock)
        conn: Conn = (
            PassthroughConn(self.state, peer, self.admit, self.detach)
            if self.conf.mode == "passthrough"
            else SharedConn(self.state, peer, self.admit, self.detach)
        )
        self._pending[conn] = host if self.ssl is not None else None
        if self.ssl is not None:
            self._sources[host] = self._sources.get(host, 0) + 1
        task = self.loop.create_task(self._connect(sock, conn))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    def _full(self, host: str | None = None) -> str | None:
        """Why a new connection (from `host`: its handshakes in progress count too)
        cannot be served now (None: it can)."""
        if self.conf.mode == "passthrough" and (self.conns or self.core.holder is not None):
            return "busy"
        taken = len(self._pending) + (0 if self.conf.mode == "passthrough" else len(self.conns))
        if taken >= self.conf.max_connections:
            return "limit"
        if host is not None and self._sources.get(host, 0) >= SOURCE_HANDSHAKES:
            return "limit"
        return None

    def _made(self, conn: Conn) -> None:
        """`conn` is no longer pending (made, or its handshake failed)."""
        host = self._pending.pop(conn, None)
        if host is not None:
            left = self._sources.pop(host) - 1
            if left > 0:
                self._sources[host] = left

    def _refuse(self, sock: socket.socket | None, peer: str, why: str, error: str = "") -> None:
        self._refusals.refuse(
            why, name=self.label, peer=peer, **({"error": error} if error else {})
        )
        if sock is not None:
            sock.close()

    async def _connect(self, sock: socket.socket, conn: Conn) -> None:
        try:
            if self.ssl is None:
                await self.loop.connect_accepted_socket(lambda: conn, sock)
            else:
                await self.loop.connect_accepted_socket(
                    lambda: conn, sock, ssl=self.ssl, ssl_handshake_timeout=HANDSHAKE_TIMEOUT
                )
        except (OSError, ssl.SSLError, TimeoutError, EOFError) as exc:
            self._refuse(
                sock, conn.peer, "tls" if self.ssl is not None else "error", handshake_error(exc)
            )
        except Exception as exc:
            sock.close()
            self._crashed(exc, "that connection closed, accepting goes on", peer=conn.peer)
        finally:
            self._made(conn)

    # --- connections ----------------------------------------------------------------------------
    def admit(self, conn: Conn) -> bool:
        """A connection is made (after its TLS handshake): take it, or close it when
        the entry filled up meanwhile (a reload lowered `max_connections`, the port
        was taken)."""
        self._made(conn)
        why = self._full()
        if why is not None:
            self._refuse(None, conn.peer, why)
            conn.close(f"refused: {why}")
            return False
        self.conns.add(conn)
        if self.conf.protocol == "rfc2217" and self._modem is None:
            self._modem = self.loop.call_later(MODEM_POLL, self._look)
        log.info(
            "network_connected",
            name=self.label,
            peer=conn.peer,
            **({"subject": conn.io.subject} if conn.io.subject else {}),
        )
        self.core.clients_changed()
        return True

    def _look(self) -> None:
        """Shared RFC 2217 connections: the link's modem lines, while any is open."""
        self._modem = None
        if not self.conns or self.conf.protocol != "rfc2217":
            return
        for conn in self.conns:
            if isinstance(conn, SharedConn):
                conn.io.modem_lines()
        self._modem = self.loop.call_later(MODEM_POLL, self._look)

    def detach(self, conn: Conn, reason: str) -> None:
        if conn not in self.conns:
            return
        self.conns.discard(conn)
        fig = conn.figures()
        totals = self._totals
        for key in _COUNTS:
            totals[key] += fig[key]
        for code, n in fig["failed"].items():
            totals["failed"][code] = totals["failed"].get(code, 0) + n
        log.info(
            "network_closed",
            name=self.label,
            peer=conn.peer,
            reason=reason,
            calls=fig["calls"],
            ok=fig["ok"],
            failed=sum(fig["failed"].values()),
        )
        self.core.clients_changed()

    def reconfigure(self, cfg: Config, conf: NetworkConfig) -> None:
        """Take reloaded settings (the caller closes connections when `protocol`,
        `mode` or `tls` changed); `allow` applies to open connections too; the TLS files
        are read again (`ServeError` when they cannot be: the old ones stay in use)."""
        old = self.conf
        self.state.cfg, self.state.conf = cfg, conf
        self.state.share.limit = cfg.api.client_queue
        for conn in list(self.conns):
            if not allowed(conf, conn.peer.rpartition(":")[0].strip("[]")):
                conn.close("no longer in allow (reload)")
            elif isinstance(conn, SharedConn) and conn.stream is not None:
                conn.stream.configure(cfg, write=conf.write, events=conf.events)
            conn.io.comport.device = cfg.device
            if conf.idle != old.idle:
                conn.io.rearm_idle()
        self.ssl = tls_context(conf)  # (re-read: new files apply to new handshakes; unreadable:
        # ServeError, the old context stays)

    def stop_accepting(self) -> None:
        """Cancel the accept loops (`wait_closed` awaits them)."""
        for task in self._accepting:
            task.cancel()

    def close_conns(self, reason: str) -> None:
        for conn in list(self.conns):
            conn.close(reason)

    def close(self, reason: str) -> None:
        """Stop listening, close every connection (a passed socket stays systemd's);
        the tasks cancelled here are awaited by `wait_closed`."""
        self.stop_accepting()
        if self._modem is not None:
            self._modem.cancel()
            self._modem = None
        for task in self._handshakes:
            task.cancel()
        self.close_conns(reason)
        self._refusals.flush()
        for sock in self.socks:
            if self.passed:
                sock.detach()
            else:
                sock.close()
        self.socks = []

    async def wait_closed(self) -> None:
        """After `close`: its accept loops and handshakes have ended."""
        tasks = [*self._accepting, *self._handshakes]
        self._accepting.clear()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- figures ----------------------------------------------------------------------------
    def status(self) -> EntryStatus:
        """Its `status.network` entry."""
        counts = {key: self._totals[key] for key in _COUNTS}
        failed = dict(self._totals["failed"])
        holder = None
        for conn in self.conns:
            fig = conn.figures()
            for key in _COUNTS:
                counts[key] += fig[key]
            for code, n in fig["failed"].items():
                failed[code] = failed.get(code, 0) + n
            if isinstance(conn, PassthroughConn):
                holder = conn.peer
        conf = self.conf
        return {
            "name": self.label,
            "listen": self.address,
            "protocol": conf.protocol,
            "mode": conf.mode,
            "connections": len(self.conns),
            "calls": counts["calls"],
            "ok": counts["ok"],
            "failed": dict(sorted(failed.items())),
            "dropped": counts["dropped"],
            "ignored": counts["ignored"],
            "bad_frames": counts["bad_frames"],
            "refused": dict(sorted(self.refused.items())),
            "holder": holder,
            "bytes_in": self.state.bytes_in,
            "bytes_out": self.state.bytes_out,
        }
