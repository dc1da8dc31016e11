"""One `network:` entry: its listening sockets, who gets in, its connections, its figures.

Strategy: who gets in is the entry's `gate.Gate` (shared with the Modbus TCP
gateway): each connection is judged at accept, before anything is spent on it — an
address outside `allow`, a shared entry at `max_connections`, a TLS entry with 4
handshakes in progress from that address, a passthrough entry while the port is held
(by a connection or an `inhibit`: the gate's `busy`) — and closed at once, counted in
`refused` by why and logged with the address. An accepted socket becomes a connection —
a `SharedConn` or, on a passthrough entry, a `PassthroughConn` — with the TLS
handshake, given 10 s, when the entry has `tls` (a failed or late handshake is refused,
why `tls`); handshakes in progress count toward `max_connections` like connections. A
closed connection's figures are folded into the entry's totals, so `status` counts
every connection the entry ever had.

The entry's gate owns the accept and handshake tasks: `close` cancels them and
`wait_closed` awaits them; an accept loop that meets what it does not expect logs it
(`network_accept_crashed`) and goes on accepting.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Any, Literal

import structlog

from verld.config import Config, NetworkConfig
from verld.fronts.gate import Gate
from verld.fronts.network.access import allowed, host_of, peer_host, tls_context
from verld.fronts.network.conn import SharedConn
from verld.fronts.network.figures import EntryStatus
from verld.fronts.network.passthrough import PassthroughConn
from verld.fronts.network.relay import MODEM_POLL
from verld.fronts.network.state import EntryState

if TYPE_CHECKING:
    import ssl

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


class Entry:
    """One network port (see the module docstring)."""

    def __init__(self, core: Core, cfg: Config, conf: NetworkConfig) -> None:
        self.core = core
        self.loop = asyncio.get_running_loop()
        #: what its connections share of it (settings, counts)
        self.state = EntryState(core, self.loop, cfg, conf)
        self.conns: set[Conn] = set()
        self.gate: Gate[Conn] = Gate(log, "network", self._conn, self._taken, self._busy)
        self._settle(conf)
        self.gate.ssl = tls_context(conf.tls, f"network {self.label}")
        self.socks: list[socket.socket] = []
        self.passed = False  #: its socket came from systemd (not bound here, not closed here)
        self.address = conf.listen  #: where it listens, as bound
        self.refused = self.gate.refused
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

    @property
    def ssl(self) -> ssl.SSLContext | None:
        return self.gate.ssl

    def _settle(self, conf: NetworkConfig) -> None:
        """The gate's settings from `conf` (its TLS context apart)."""
        gate = self.gate
        gate.allow, gate.max_connections = conf.allow, conf.max_connections
        gate.where = {"name": self.label}

    # --- listening ----------------------------------------------------------------------------
    def serve(self, socks: list[socket.socket], *, passed: bool) -> None:
        """Accept on `socks` (bound and listening)."""
        self.socks, self.passed = socks, passed
        name = socks[0].getsockname()
        self.address = host_of(name)[1]
        self.gate.serve(socks, f"network {self.label}")
        log.info(
            "network_listening",
            name=self.label,
            listen=self.address,
            protocol=self.conf.protocol,
            mode=self.conf.mode,
            tls=self.ssl is not None,
            socket_activation=passed,
        )

    def _conn(self, peer: str) -> Conn:
        """A new connection of the entry's mode (its gate's `make`)."""
        if self.conf.mode == "passthrough":
            return PassthroughConn(self.state, peer, self.admit, self.detach)
        return SharedConn(self.state, peer, self.admit, self.detach)

    def _taken(self) -> int:
        """Its connections counted toward `max_connections` (passthrough: `_busy`'s)."""
        return 0 if self.conf.mode == "passthrough" else len(self.conns)

    def _busy(self) -> str | None:
        """A passthrough entry while the port is held: "busy"."""
        if self.conf.mode == "passthrough" and (self.conns or self.core.holder is not None):
            return "busy"
        return None

    # --- connections ----------------------------------------------------------------------------
    def admit(self, conn: Conn) -> bool:
        """A connection is made (after its TLS handshake): take it, or close it when
        the entry filled up meanwhile (a reload lowered `max_connections`, the port
        was taken)."""
        self.gate.made(conn)
        why = self.gate.full()
        if why is not None:
            self.gate.refuse(None, conn.peer, why)
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
        self._settle(conf)
        for conn in list(self.conns):
            if not allowed(conf.allow, peer_host(conn.peer)):
                conn.close("no longer in allow (reload)")
            elif isinstance(conn, SharedConn) and conn.stream is not None:
                conn.stream.configure(cfg, write=conf.write, events=conf.events)
            conn.io.comport.device = cfg.device
            if conf.idle != old.idle:
                conn.io.rearm_idle()
        # (re-read: new files apply to new handshakes; unreadable: ServeError, the old
        # context stays)
        self.gate.ssl = tls_context(conf.tls, f"network {self.label}")

    def stop_accepting(self) -> None:
        """Cancel the accept loops (`wait_closed` awaits them)."""
        self.gate.stop_accepting()

    def close_conns(self, reason: str) -> None:
        for conn in list(self.conns):
            conn.close(reason)

    def close(self, reason: str) -> None:
        """Stop listening, close every connection (a passed socket stays systemd's);
        the tasks cancelled here are awaited by `wait_closed`."""
        self.gate.close()
        if self._modem is not None:
            self._modem.cancel()
            self._modem = None
        self.close_conns(reason)
        for sock in self.socks:
            if self.passed:
                sock.detach()
            else:
                sock.close()
        self.socks = []

    async def wait_closed(self) -> None:
        """After `close`: its accept loops and handshakes have ended."""
        await self.gate.wait_closed()

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
