"""The Modbus TCP server front: Modbus masters reach the device through verld.

Strategy: the front owns the listening sockets and the set of connections
(`conn.ModbusConn`, one owner in the core's fair queue each). Who gets in is a
`gate.Gate`, the network ports' own: an address outside `modbus.allow`, a front at
`max_connections`, too many TLS handshakes in progress from one address — each is
closed at accept, counted in `refused` by why and logged with the address; with
`modbus.tls` every connection is TLS (Modbus/TCP Security), its handshake bounded
as on network ports. A malformed MBAP header closes that connection only. It is a
`Front`: `claim` binds `modbus.listen` (or takes the socket systemd passed: a
writable gateway's passed socket bound beyond loopback without `allow` or `tls.ca`
stops verld, exit 2) and reads the TLS files before anything else of verld is
created; with neither socket it serves nothing and `status.modbus` is null. A
reload applies `allow` to open connections (those no longer allowed are closed),
reads the TLS files again (a changed `tls` closes the connections) and, when
`listen` changed, rebinds it (its connections closed) in a task of the front's own,
which `close` awaits.
"""

from __future__ import annotations

import socket
from typing import Any

import structlog

from verld.codec.registry import spec_of
from verld.config import Config
from verld.config.network import modbus_exposed
from verld.errors import ServeError
from verld.fronts.base import CannotServe, Core
from verld.fronts.gate import Gate
from verld.fronts.listening import bind_listen
from verld.fronts.modbus.conn import ModbusConn, ModbusStats
from verld.fronts.modbus.figures import FIGURES, ModbusStatus
from verld.fronts.network.access import (
    allowed,
    host_of,
    peer_host,
    private_network,
    tls_context,
    tls_subject,
)
from verld.reloads import Serialised

log = structlog.get_logger("verld.modbus")

#: the name of the listener in TLS errors ("modbus: tls cert ...") and task names
_LABEL = "modbus"


class ModbusServer:
    """The Modbus TCP front over one core."""

    name = FIGURES.name

    def __init__(self, cfg: Config, core: Core) -> None:
        self.core = core
        self.counts = core.front(self.name)
        self.stats = ModbusStats()
        self.conns: set[ModbusConn] = set()
        self.gate = self._new_gate()
        self.idle_timeout = 0.0  #: (set by `_configure`)
        self._serial = 0
        self.address = ""  #: where it listens, "HOST:PORT"
        self.socks: list[socket.socket] = []  #: served now
        self._passed: socket.socket | None = None  #: the socket systemd passed, if any
        self._bound: list[socket.socket] = []  #: claimed (`bind_listen`), not yet served
        self._rebinds = Serialised("modbus")  #: a reload's rebinds, one after the other
        self._configure(cfg)

    def _new_gate(self) -> Gate[ModbusConn]:
        gate: Gate[ModbusConn] = Gate(log, "modbus", self._new_conn, lambda: len(self.conns))
        old = getattr(self, "gate", None)
        if old is not None:  # (a rebind: the settings stay)
            gate.allow, gate.ssl, gate.max_connections = old.allow, old.ssl, old.max_connections
        return gate

    def _configure(self, cfg: Config) -> None:
        """Take the `modbus` settings (at start and on reload; `listen` by `_rebind`,
        `tls` by `claim` and `reload`)."""
        self.cfg = cfg
        mb = cfg.modbus
        self.read_only = mb.read_only
        was, self.idle_timeout = self.idle_timeout, mb.idle_timeout
        if was <= 0 < self.idle_timeout:  # turned on by a reload: the clock starts now
            for conn in self.conns:
                conn.touch()
        self.max_connections = mb.max_connections
        self.gate.allow, self.gate.max_connections = mb.allow, mb.max_connections
        self.rtu = spec_of(cfg).rtu

    # --- the Front protocol -----------------------------------------------------------------
    async def claim(self) -> None:
        """The socket systemd passed for it (named `modbus`), else `modbus.listen`
        bound and listening (`bind_listen`), so that a taken address stops verld's
        start before anything is created; the TLS files read. `CannotServe` when the
        address is taken or a TLS file cannot be used (exit 1), when a socket was passed
        to a verld whose codec is not a Modbus one, or a writable gateway's passed
        socket is bound beyond loopback without `allow` or `tls.ca` (exit 2)."""
        self._passed = self.core.take_socket("modbus")
        listen = self.cfg.modbus.listen
        if self._passed is not None:
            if not spec_of(self.cfg).bus:
                raise CannotServe(
                    "a socket named 'modbus' was passed, but the Modbus TCP "
                    "server needs codec modbus-rtu or modbus-tcp, not "
                    f"{self.cfg.device.codec}",
                    exit_code=2,
                )
            host, address = host_of(self._passed.getsockname())
            why = modbus_exposed(self.cfg.modbus, host)
            if why is not None:
                raise CannotServe(
                    f"modbus: the socket systemd passed is bound to {address}: {why}",
                    exit_code=2,
                )
        elif not listen:
            return
        self._read_tls()
        if self._passed is None and not self._bound:
            assert listen is not None
            try:
                self._bound = await bind_listen(listen)
            except OSError as exc:
                why = exc.strerror or str(exc)  # ("cannot listen on HOST:PORT: ...")
                raise CannotServe(why, listen=listen) from None

    def _read_tls(self) -> None:
        """The TLS context from `modbus.tls` (`CannotServe` naming the file)."""
        try:
            self.gate.ssl = tls_context(self.cfg.modbus.tls, _LABEL)
        except ServeError as exc:
            raise CannotServe(str(exc), listen=self.cfg.modbus.listen or "modbus") from None

    async def start(self) -> None:
        """Serve what `claim` took (or bind `modbus.listen` now); nothing to serve:
        nothing to do. OSError when it cannot; the sockets are closed then."""
        if self._passed is not None:
            socks = [self._passed]
        elif self._bound:
            socks, self._bound = self._bound, []
        elif self.cfg.modbus.listen:
            self._read_tls()
            socks = await bind_listen(self.cfg.modbus.listen)
        else:
            return
        self._serve(socks)

    def _serve(self, socks: list[socket.socket]) -> None:
        self.socks = socks
        self.address = host_of(socks[0].getsockname())[1]
        self.gate.serve(socks, _LABEL)
        log.info(
            "modbus_listening",
            listen=self.address,
            read_only=self.read_only,
            tls=self.gate.ssl is not None,
            socket_activation=self._passed is not None,
        )
        if self._passed is None and private_network():
            log.warning(
                "modbus_unreachable",
                listen=self.address,
                reason="verld runs in a private network namespace (only lo): nobody "
                "can reach this listener; use socket activation (a socket named modbus)",
            )

    def reload(self, cfg: Config, changed: list[str]) -> None:
        """The new settings: `allow` applies to open connections; the TLS files are
        read again (unreadable: logged, the old ones stay; a changed `tls` closes the
        connections); a changed `listen` rebinds it (its connections closed), or
        starts or stops it, in the front's own task (one after the other)."""
        old = self.cfg.modbus
        self._configure(cfg)
        for conn in list(self.conns):
            if not allowed(cfg.modbus.allow, peer_host(conn.peer)):
                log.info("modbus_disconnected", client=repr(conn), reason="no longer in allow")
                conn.close()
        if cfg.modbus.listen is not None or self._passed is not None:
            try:
                self.gate.ssl = tls_context(cfg.modbus.tls, _LABEL)
            except ServeError as exc:
                log.error("modbus_reconfigure_failed", error=str(exc))
            if cfg.modbus.tls != old.tls:
                for conn in list(self.conns):
                    conn.close()
        if "modbus.listen" not in changed:
            return
        if self._passed is not None:
            log.warning("reload_modbus_unchanged", reason="the Modbus socket is systemd's")
            return
        self._rebinds.run(self._rebind(cfg))

    async def _rebind(self, new: Config) -> None:
        await self._stop()
        self.stats = ModbusStats()  # (a new listener's figures start at zero)
        self.gate = self._new_gate()
        if new.modbus.listen is None:
            log.info("modbus_stopped", reason="modbus.listen is null after reload")
            return
        try:
            self._serve(await bind_listen(new.modbus.listen))
        except OSError as exc:
            log.error("modbus_rebind_failed", listen=new.modbus.listen, error=str(exc))

    def stop_accepting(self) -> None:
        self.gate.stop_accepting()

    def programs(self) -> list[dict[str, Any]]:
        """One row per Modbus TCP connection (`programs`)."""
        return [
            {
                "front": self.name,
                "who": conn.peer,
                "calls": conn.calls,
                "ok": conn.ok,
                "failed": conn.failed,
                "waiting": self.core.waiting(conn),
            }
            for conn in self.conns
        ]

    def status(self) -> dict[str, ModbusStatus | None]:
        """`status.modbus` (null while it does not listen)."""
        if not self.socks:
            return {"modbus": None}
        return {
            "modbus": {
                "listen": self.address,
                "connections": len(self.conns),
                "calls": self.stats.calls,
                # JSON keys are strings: the code in decimal, as any JSON encoder writes an
                # integer key ("11" for 0x0B)
                "exceptions": {str(c): n for c, n in sorted(self.stats.exceptions.items())},
                "closed_malformed": self.stats.closed_malformed,
                "refused": dict(sorted(self.gate.refused.items())),
            }
        }

    async def close(self) -> None:
        """Stop listening and close every connection; a rebind under way ends first."""
        await self._rebinds.close()
        await self._stop()
        bound, self._bound = self._bound, []
        for sock in bound:
            sock.close()

    async def _stop(self) -> None:
        """Stop listening (a passed socket stays systemd's), close every connection."""
        self.gate.close()
        socks, self.socks = self.socks, []
        for sock in socks:
            if sock is self._passed:
                sock.detach()
            else:
                sock.close()
        for conn in list(self.conns):
            conn.close()
        await self.gate.wait_closed()

    def _new_conn(self, peer: str) -> ModbusConn:
        self._serial += 1
        return ModbusConn(self, self._serial, peer)

    # --- connections -------------------------------------------------------------------------
    def attach(self, conn: ModbusConn) -> None:
        """`conn` is made (after its TLS handshake): take it, or close it when the
        front filled up meanwhile (a reload lowered `max_connections`)."""
        self.gate.made(conn)
        why = self.gate.full()
        if why is not None:
            self.gate.refuse(None, conn.peer, why)
            conn.close()
            return
        self.conns.add(conn)
        subject = tls_subject(conn.transport) if conn.transport is not None else None
        log.info("modbus_connected", client=repr(conn), **({"subject": subject} if subject else {}))

    def detach(self, conn: ModbusConn) -> None:
        if conn in self.conns:
            self.conns.discard(conn)
            self.core.forget(conn)
            log.info("modbus_disconnected", client=repr(conn))

    def malformed(self, conn: ModbusConn, reason: str) -> None:
        """A header that is not Modbus TCP: that connection goes; the others stay."""
        self.stats.closed_malformed += 1
        log.warning("modbus_malformed", client=repr(conn), reason=reason)
        conn.close()
