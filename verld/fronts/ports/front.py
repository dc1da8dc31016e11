"""The virtual serial ports front: every `ports:` entry, claimed, created, reloaded, closed.

Strategy: the front is a `Front` the daemon drives (`claim`, `start`, `reload`,
`stop_accepting`, `status`, `close`) and, once started, a `Listener` of the core that hands each
device event to the ports (each writes it when its entry has `events: true`); all
the per-program work is `port.VirtualPort`'s. Ports are keyed by their link: a
reload keeps the pty of every link still in the config (with the entry's new
settings), closes the ptys of links that went (their programs see a hang-up) and
creates the new ones; a change of the codec or of its framing settings gives every
port a new decoder and forgets their calls. Each port owns its link by a lock
(`LINK.lock`, `pty.claim_link`): taken before anything is created, at start by
`claim` for every link at once, on reload by the port itself, and let go when the
port closes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from verld.config import Config, PortConfig
from verld.fronts.ports.figures import FIGURES, PortStatus
from verld.fronts.ports.port import VirtualPort
from verld.fronts.ports.pty import PortSetupError, claim_link
from verld.links.link import Transition

if TYPE_CHECKING:
    from verld.fronts.base import Core
    from verld.ownership import Lock

log = structlog.get_logger("verld.ports")

#: settings the port decoders are built from: a change resets every decoder
_FRAMING_KEYS = ("device.codec", "device.max_payload", "device.line")


class PortsFront:
    """All virtual serial ports over one core."""

    name = FIGURES.name

    def __init__(self, cfg: Config, core: Core) -> None:
        self.cfg = cfg
        self.core = core
        self.ports: dict[str, VirtualPort] = {}
        self._claims: dict[str, Lock] = {}  #: links claimed, not yet handed to a port
        core.front(self.name)  # (its calls show as 0 before the first)

    async def claim(self) -> None:
        """Own every configured link (its lock) before anything is created;
        `PortSetupError` (with the `link`) for the first one that cannot be owned,
        and the links claimed so far are let go."""
        for entry in self.cfg.ports:
            if entry.link in self._claims:
                continue
            try:
                self._claims[entry.link] = claim_link(entry.link)
            except PortSetupError:
                self._let_go()
                raise

    async def start(self) -> None:
        """Create every configured port (on its claimed link; one not claimed is
        claimed here); `PortSetupError` for the first that cannot be created (those
        made before it are closed by `close`)."""
        if self not in self.core.listeners:
            self.core.listeners.append(self)
        for entry in self.cfg.ports:
            port = VirtualPort(self.core, self.cfg, entry)
            lock = self._claims.pop(entry.link, None)
            if lock is not None:
                port.pty.adopt(lock)  # (released by the port's close, or by a failed open)
            port.open()
            self.ports[entry.link] = port

    async def close(self) -> None:
        """Close every port, remove its link (if it still points at the port's pty)
        and let the links' locks go; safe before `start`, and twice."""
        if self in self.core.listeners:
            self.core.listeners.remove(self)
        for port in list(self.ports.values()):
            port.close()
        self.ports.clear()
        self._let_go()

    def _let_go(self) -> None:
        for lock in self._claims.values():
            lock.release()
        self._claims.clear()

    def reload(self, cfg: Config, changed: list[str]) -> None:
        """Apply a reloaded config (see the module docstring); a port that cannot be
        created or changed is logged and left out (or as it was)."""
        self.cfg = cfg
        reframe = any(k.startswith(_FRAMING_KEYS) for k in changed)
        wanted = {entry.link: entry for entry in cfg.ports}
        for link in [link for link in self.ports if link not in wanted]:
            self.ports.pop(link).close()  # (its lock too: another verld may take it now)
            log.info("port_removed", link=link)
        for link, entry in wanted.items():
            port = self.ports.get(link)
            if port is None:
                self._create(cfg, link, entry)
                continue
            try:
                port.configure(cfg, entry)
            except PortSetupError as exc:
                log.error("port_reconfigure_failed", link=link, error=str(exc))
            if reframe:
                port.stream.reset_framing(cfg)

    def _create(self, cfg: Config, link: str, entry: PortConfig) -> None:
        """A port added by a reload: its link claimed like at start; one another
        process owns (or that cannot be made) is logged and left out, the daemon
        goes on."""
        port = VirtualPort(self.core, cfg, entry)
        try:
            port.open()
        except PortSetupError as exc:
            log.error("port_create_failed", link=link, error=str(exc))
            return
        self.ports[link] = port

    # --- a Listener of the core ---------------------------------------------------------
    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        for port in self.ports.values():
            port.event(data, text)

    def link_event(self, transition: Transition) -> None:
        return None

    def stop_accepting(self) -> None:
        """Nothing to stop: a pty cannot refuse an open, and the programs with a port
        open are answered while the calls on the link finish, until `close`."""

    # --- figures ------------------------------------------------------------------------
    def programs(self) -> list[dict[str, Any]]:
        """One row per port (`programs`)."""
        return [port.row() for port in self.ports.values()]

    def status(self) -> dict[str, list[PortStatus]]:
        """`status.ports`: one entry per port, in config order."""
        return {"ports": [port.status() for port in self.ports.values()]}
