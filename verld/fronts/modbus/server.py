"""The Modbus TCP server front: Modbus masters reach the device through verld.

Strategy: the front owns the listening sockets and the set of connections
(`conn.ModbusConn`, one owner in the core's fair queue each). A malformed MBAP
header closes that connection only; connections beyond `max_connections` are
closed at once. It is a `Front`: `claim` binds `modbus.listen` (or takes the socket
systemd passed) before anything else of verld is created; with neither it serves
nothing and `status.modbus` is null. A reload that changes `listen` rebinds it
(its connections closed) in a task of the front's own, which `close` awaits.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import structlog

from verld.codec.registry import spec_of
from verld.config import Config
from verld.fronts.base import CannotServe, Core
from verld.fronts.listening import bind_listen
from verld.fronts.modbus.conn import ModbusConn, ModbusStats
from verld.fronts.modbus.figures import FIGURES, ModbusStatus
from verld.fronts.network.refusals import Refusals
from verld.reloads import Serialised

log = structlog.get_logger("verld.modbus")


class ModbusServer:
    """The Modbus TCP front over one core."""

    name = FIGURES.name

    def __init__(self, cfg: Config, core: Core) -> None:
        self.core = core
        self.counts = core.front(self.name)
        self.stats = ModbusStats()
        self._refusals = Refusals(log, "modbus_refused", key="reason")  #: a line a second
        self.conns: set[ModbusConn] = set()
        self.idle_timeout = 0.0  #: (set by `_configure`)
        self._servers: list[asyncio.AbstractServer] = []
        self._serial = 0
        self.address = ""  #: where it listens, "HOST:PORT"
        self._passed: socket.socket | None = None  #: the socket systemd passed, if any
        self._bound: list[socket.socket] = []  #: claimed (`bind_listen`), not yet served
        self._rebinds = Serialised("modbus")  #: a reload's rebinds, one after the other
        self._configure(cfg)

    def _configure(self, cfg: Config) -> None:
        """Take the `modbus` settings (at start and on reload; `listen` by `_rebind`)."""
        self.cfg = cfg
        mb = cfg.modbus
        self.read_only = mb.read_only
        was, self.idle_timeout = self.idle_timeout, mb.idle_timeout
        if was <= 0 < self.idle_timeout:  # turned on by a reload: the clock starts now
            for conn in self.conns:
                conn.touch()
        self.max_connections = mb.max_connections
        self.rtu = spec_of(cfg).rtu

    # --- the Front protocol -----------------------------------------------------------------
    async def claim(self) -> None:
        """The socket systemd passed for it (named `modbus`), else `modbus.listen`
        bound and listening (`bind_listen`), so that a taken address stops verld's
        start before anything is created. `CannotServe` when it is taken, or when a
        socket was passed to a verld whose codec is not a Modbus one (exit 2)."""
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
        elif listen and not self._bound:
            try:
                self._bound = await bind_listen(listen)
            except OSError as exc:
                why = exc.strerror or str(exc)  # ("cannot listen on HOST:PORT: ...")
                raise CannotServe(why, listen=listen) from None

    async def start(self) -> None:
        """Serve what `claim` took (or bind `modbus.listen` now); nothing to serve:
        nothing to do. OSError when it cannot; the sockets are closed then."""
        if self._passed is not None:
            socks = [self._passed]
        elif self._bound:
            socks, self._bound = self._bound, []
        elif self.cfg.modbus.listen:
            socks = await bind_listen(self.cfg.modbus.listen)
        else:
            return
        try:
            await self._serve(socks)
        except OSError as exc:
            raise CannotServe(str(exc), listen=self.cfg.modbus.listen or "") from None

    async def _serve(self, socks: list[socket.socket]) -> None:
        loop = asyncio.get_running_loop()
        try:
            for sock in socks:
                self._servers.append(await loop.create_server(self._new_conn, sock=sock))
        except BaseException:
            await self._stop()
            for sock in socks if self._passed is None else ():
                sock.close()
            raise
        name = socks[0].getsockname()
        self.address = f"[{name[0]}]:{name[1]}" if ":" in name[0] else f"{name[0]}:{name[1]}"
        log.info("modbus_listening", listen=self.address, read_only=self.read_only)

    def reload(self, cfg: Config, changed: list[str]) -> None:
        """The new settings; a changed `listen` rebinds it (its connections closed),
        or starts or stops it, in the front's own task (one after the other)."""
        self._configure(cfg)
        if "modbus.listen" not in changed:
            return
        if self._passed is not None:
            log.warning("reload_modbus_unchanged", reason="the Modbus socket is systemd's")
            return
        self._rebinds.run(self._rebind(cfg))

    async def _rebind(self, new: Config) -> None:
        await self._stop()
        self.stats = ModbusStats()  # (a new listener's figures start at zero)
        if new.modbus.listen is None:
            log.info("modbus_stopped", reason="modbus.listen is null after reload")
            return
        try:
            await self._serve(await bind_listen(new.modbus.listen))
        except OSError as exc:
            log.error("modbus_rebind_failed", listen=new.modbus.listen, error=str(exc))

    def stop_accepting(self) -> None:
        for server in self._servers:
            server.close()

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
        if not self._servers:
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
            }
        }

    async def close(self) -> None:
        """Stop listening and close every connection; a rebind under way ends first."""
        await self._rebinds.close()
        await self._stop()
        self._refusals.flush()
        bound, self._bound = self._bound, []
        for sock in bound:
            sock.close()

    async def _stop(self) -> None:
        """Stop listening and close every connection."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for conn in list(self.conns):
            conn.close()

    def _new_conn(self) -> ModbusConn:
        self._serial += 1
        return ModbusConn(self, self._serial)

    # --- connections -------------------------------------------------------------------------
    def attach(self, conn: ModbusConn) -> None:
        if len(self.conns) >= self.max_connections:
            self._refusals.refuse(
                "max_connections", client=repr(conn), max_connections=self.max_connections
            )
            conn.close()
            return
        self.conns.add(conn)
        log.info("modbus_connected", client=repr(conn))

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
