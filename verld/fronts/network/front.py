"""The network ports front: every `network:` entry, claimed, served, reloaded, closed.

Strategy: the front is a `Front` the daemon drives and a `Listener` of the core (a
device event goes to every shared connection of an entry with `events: true`);
the per-connection work is `conn.SharedConn`'s and `passthrough.PassthroughConn`'s,
the per-entry work `entry.Entry`'s.
At `claim` each entry gets its socket: the one systemd passed named `net-NAME`
(a passed `net-X` with no entry X, or one bound beyond loopback for an entry
without `allow` or `tls.ca`, stops verld with exit 2), else its `listen` bound
here (taken: exit 1 naming the address and the OS error); its TLS files are read
then too (unreadable: exit 1 naming the file). Entries are keyed by `listen`: a
reload keeps an entry whose `listen` is unchanged with its listener and
connections (a change of `protocol`, `mode` or `tls` closes the connections),
closes removed ones and binds new ones, in the front's own task (`Serialised`: one
reload's after the other's, awaited by `close`); a bind that fails at reload is
logged and the entry left out.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

import structlog

from verld.config import Config, NetworkConfig
from verld.config.network import exposed
from verld.errors import ServeError
from verld.fronts.listening import bind_listen
from verld.fronts.network.access import host_of, private_network
from verld.fronts.network.conn import SharedConn
from verld.fronts.network.entry import Entry
from verld.fronts.network.figures import FIGURES, EntryStatus
from verld.fronts.protocol import CannotServe
from verld.links.link import Transition
from verld.reloads import Serialised

if TYPE_CHECKING:
    from verld.fronts.base import Core

log = structlog.get_logger("verld.network")

#: the name of a socket systemd passes for an entry: `net-` and the entry's name
_PASSED = "net-"
#: settings that make an entry's connections start afresh (closed) on reload
_RESTART = ("protocol", "mode", "tls")
#: settings the stream decoders are built from: a change resets every decoder
_FRAMING_KEYS = ("device.codec", "device.max_payload", "device.line")


class NetworkFront:
    """All network ports over one core."""

    name = FIGURES.name

    def __init__(self, cfg: Config, core: Core) -> None:
        self.cfg = cfg
        self.core = core
        self.entries: dict[str, Entry] = {}  #: by `listen`
        self._socks: dict[str, tuple[list[socket.socket], bool]] = {}  #: claimed, by `listen`
        self._reloads = Serialised("network")  #: a reload's entries ended and bound, in turn
        core.front(self.name)  # (its calls show as 0 before the first)

    # --- the Front protocol -------------------------------------------------------------------
    async def claim(self) -> None:
        """Each entry's socket (passed or bound here); see the module docstring."""
        by_name = {conf.label: conf for conf in self.cfg.network}
        for passed in self.core.passed_sockets():
            sock = self.core.take_socket(passed) if passed.startswith(_PASSED) else None
            if sock is None:  # (another front's)
                continue
            name = passed.removeprefix(_PASSED)
            conf = by_name.get(name)
            if conf is None:
                sock.detach()
                raise CannotServe(
                    f"systemd passed a socket named 'net-{name}', but no network "
                    f"entry is named {name!r}",
                    exit_code=2,
                )
            host, address = host_of(sock.getsockname())
            why = exposed(conf, host)
            if why is not None:
                raise CannotServe(
                    f"network {name}: the socket systemd passed is bound to {address}: {why}",
                    exit_code=2,
                )
            self._socks[conf.listen] = ([sock], True)
        for conf in self.cfg.network:
            if conf.listen in self._socks:
                continue
            try:
                self._socks[conf.listen] = (await _bind(conf), False)
            except OSError as exc:
                raise CannotServe(exc.strerror or str(exc), listen=conf.listen) from None

    async def start(self) -> None:
        """Serve every entry on its claimed socket (bound now if it was not claimed)."""
        if self not in self.core.listeners:
            self.core.listeners.append(self)
        for conf in self.cfg.network:
            self._serve(conf, *(self._socks.pop(conf.listen, None) or (await _bind(conf), False)))

    def _serve(self, conf: NetworkConfig, socks: list[socket.socket], passed: bool) -> None:
        try:
            entry = Entry(self.core, self.cfg, conf)
        except ServeError as exc:
            _close(socks, passed)
            raise CannotServe(str(exc), listen=conf.listen) from None
        entry.serve(socks, passed=passed)
        self.entries[conf.listen] = entry
        if not passed and private_network():
            log.warning(
                "network_unreachable",
                name=entry.label,
                listen=entry.address,
                reason="verld runs in a private network namespace (only lo): nobody "
                "can reach this listener; use socket activation or the network drop-in",
            )

    def reload(self, cfg: Config, changed: list[str]) -> None:
        """Apply a reloaded config (see the module docstring)."""
        self.cfg = cfg
        reframe = any(k.startswith(_FRAMING_KEYS) for k in changed)
        wanted = {conf.listen: conf for conf in cfg.network}
        removed = [self.entries.pop(k) for k in list(self.entries) if k not in wanted]
        for gone in removed:
            gone.close("network entry removed (reload)")
            log.info("network_removed", listen=gone.conf.listen)
        new: list[NetworkConfig] = []
        for listen, conf in wanted.items():
            entry = self.entries.get(listen)
            if entry is None:
                new.append(conf)
                continue
            restart = any(getattr(conf, k) != getattr(entry.conf, k) for k in _RESTART)
            try:
                entry.reconfigure(cfg, conf)
            except ServeError as exc:
                log.error("network_reconfigure_failed", name=conf.label, error=str(exc))
            if restart:
                entry.close_conns("protocol, mode or tls changed (reload)")
            elif reframe:
                for conn in entry.conns:
                    if isinstance(conn, SharedConn) and conn.stream is not None:
                        conn.stream.reset_framing(cfg)
        if removed or new:
            self._reloads.run(self._apply(removed, new))

    async def _apply(self, removed: list[Entry], confs: list[NetworkConfig]) -> None:
        """The removed entries' tasks awaited, then the new entries bound and served."""
        for entry in removed:
            await entry.wait_closed()
        for conf in confs:
            if conf.listen in self.entries:
                continue
            try:
                self._serve(conf, await _bind(conf), False)
            except (OSError, CannotServe) as exc:
                log.error("network_bind_failed", listen=conf.listen, error=str(exc))

    def stop_accepting(self) -> None:
        for entry in self.entries.values():
            entry.stop_accepting()

    def programs(self) -> list[dict[str, Any]]:
        """One row per network connection (`programs`)."""
        return [conn.row() for entry in self.entries.values() for conn in entry.conns]

    def status(self) -> dict[str, list[EntryStatus]]:
        """`status.network`: one entry per network port, in config order."""
        return {"network": [entry.status() for entry in self.entries.values()]}

    async def close(self) -> None:
        """Close every entry (listeners, connections); safe before `start`, and twice."""
        if self in self.core.listeners:
            self.core.listeners.remove(self)
        await self._reloads.close()  # (a reload's binds end first: their entries close below)
        entries = list(self.entries.values())
        self.entries.clear()
        for entry in entries:
            entry.close("verld is stopping")
        for entry in entries:
            await entry.wait_closed()
        for socks, passed in self._socks.values():
            _close(socks, passed)
        self._socks.clear()

    # --- a Listener of the core -------------------------------------------------------------
    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        for entry in self.entries.values():
            for conn in entry.conns:
                if isinstance(conn, SharedConn):
                    conn.event(data, text)

    def link_event(self, transition: Transition) -> None:
        return None


async def _bind(conf: NetworkConfig) -> list[socket.socket]:
    """`listen` bound and listening (a `[::]` listener takes IPv4 clients too)."""
    return await bind_listen(conf.listen, dual_stack=conf.listen.startswith("[::]:"))


def _close(socks: list[socket.socket], passed: bool) -> None:
    for sock in socks:
        if passed:
            sock.detach()
        else:
            sock.close()
