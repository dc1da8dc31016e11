"""The virtual serial ports front: every `ports:` entry, created, reloaded, closed.

Strategy: the front is a `Listener` of the core that hands each device event to
the ports with `events: true`; all the per-program work is `port.VirtualPort`'s.
Ports are keyed by their link: a reload keeps the pty of every link still in the
config (with the entry's new settings), closes the ptys of links that went (their
programs see a hang-up) and creates the new ones; a change of the codec or of its
framing settings gives every port a new decoder and forgets their calls. Each
port owns its link by a lock (`LINK.lock`, `pty.claim_link`): taken before its
pty is made, at start by the daemon for every link at once, on reload by the port
itself, and let go when the port closes.
"""

from __future__ import annotations

from typing import Any

import structlog

from verld.config import Config, PortConfig, changed_keys
from verld.fronts.base import Core
from verld.fronts.ports.port import VirtualPort
from verld.fronts.ports.pty import PortSetupError
from verld.link import Transition
from verld.ownership import Lock

log = structlog.get_logger("verld.ports")

#: settings the port decoders are built from: a change resets every decoder
_FRAMING_KEYS = ("device.codec", "device.max_payload", "device.line")


class PortsFront:
    """All virtual serial ports over one core."""

    def __init__(self, cfg: Config, core: Core) -> None:
        self.cfg = cfg
        self.core = core
        self.ports: dict[str, VirtualPort] = {}
        core.front("port")  # (its calls show as 0 before the first)

    def start(self, claims: dict[str, Lock] | None = None) -> None:
        """Create every configured port; `PortSetupError` for the first that cannot
        be (those made before it are closed by the caller's `close`). `claims` are
        the links' locks the daemon took before creating anything (`claim_link`),
        each handed to its port, which releases it at `close`; a link not in
        `claims` is claimed here."""
        for entry in self.cfg.ports:
            port = VirtualPort(self.core, self.cfg, entry)
            lock = None if claims is None else claims.pop(entry.link, None)
            if lock is not None:
                port.pty.adopt(lock)
            port.open()
            self.ports[entry.link] = port

    def close(self) -> None:
        """Close every port, remove its link (if it still points at the port's pty)
        and let the link's lock go."""
        for port in list(self.ports.values()):
            port.close()
        self.ports.clear()

    def configure(self, new: Config) -> None:
        """Apply a reloaded config (see the module docstring); a port that cannot be
        created or changed is logged and left out (or as it was)."""
        old, self.cfg = self.cfg, new
        reframe = any(k.startswith(_FRAMING_KEYS) for k in changed_keys(old, new))
        wanted = {entry.link: entry for entry in new.ports}
        for link in [link for link in self.ports if link not in wanted]:
            self.ports.pop(link).close()  # (its lock too: another verld may take it now)
            log.info("port_removed", link=link)
        for link, entry in wanted.items():
            port = self.ports.get(link)
            if port is None:
                self._create(new, link, entry)
                continue
            try:
                port.configure(new, entry)
            except PortSetupError as exc:
                log.error("port_reconfigure_failed", link=link, error=str(exc))
            if reframe:
                port.reset_framing(new)

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

    # --- figures ------------------------------------------------------------------------
    def status(self) -> list[dict[str, Any]]:
        """`status.ports`: one entry per port, in config order."""
        return [port.status() for port in self.ports.values()]
