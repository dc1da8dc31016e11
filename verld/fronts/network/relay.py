"""Passthrough: one network connection holds the real port, bytes relayed both ways.

Strategy: the relay asks the core to hold the port (`Core.hold`, the `inhibit`
machinery: in-flight calls finish, queued ones fail `busy`, the port closes, the
link is `inhibited`), then opens the port itself as the link does (`open_port`: the
serial path with the configured settings, exclusively; the `tcp://` endpoint; the
`rfc2217://` server, negotiated) and only then lets the connection's bytes in. Each
side's flow control holds the other: a connection that reads slowly pauses reading
the port, a port that drains slowly (`RawPort.flow`) pauses reading the connection.
COM-PORT commands reach the port through the connection's `ComPortServer` (given the
port's line settings, `RawPort.serial`), or, on an `rfc2217://` port, go on to its
server (`RawPort.command`), whose answers to them and notifications come back. The
end, whatever its cause (the peer closed, idle, `uninhibit`, a reload): the line put
back as configured (`RawPort.restore`: BREAK off, settings and modem lines, buffers
flushed), the port closed (a tty's exclusive flag cleared), and the core reopens it
with a new generation (`Core.unhold`). A port that fails during the relay (an unplug)
closes the connection and is not touched again: the link reconnects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from verld.codec.rfc2217 import SERVER, Cmd
from verld.errors import OpenError
from verld.fronts.network.figures import FIGURES
from verld.fronts.network.peer import PeerIO
from verld.links.port import RawPort, open_port

log = structlog.get_logger("verld.network")

#: what an RFC 2217 server sends unasked, passed on to a passthrough client as it comes
_NOTIFICATIONS = (
    SERVER + Cmd.NOTIFY_LINESTATE,
    SERVER + Cmd.NOTIFY_MODEMSTATE,
    Cmd.FLOWCONTROL_SUSPEND,
    Cmd.FLOWCONTROL_RESUME,
)
#: seconds between looks at the modem lines while the port is held
MODEM_POLL = 0.5


class Relay:
    """The passthrough of one connection, over its wire `io`; `held` is told once the
    port is open (see the module docstring)."""

    def __init__(self, io: PeerIO, held: Callable[[], None]) -> None:
        self.io = io
        self.entry = io.entry
        self.core = io.entry.core
        self.loop = io.loop
        self.peer = io.peer
        self._held = held
        self.who = f"network {self.entry.label} {io.peer}"
        self.shown: dict[str, Any] = {
            "pid": None,
            "uid": None,
            "client": self.who,
            "since": round(time.time(), 3),
            "front": FIGURES.name,
        }
        self.port: RawPort | None = None  #: the port, once held and open
        self._asked: dict[int, int] = {}  #: the client's commands forwarded, not yet answered
        self._failed = False
        self._ended = False
        self.ready = False  #: the port is held and open: the connection's bytes go to it
        self._task: asyncio.Task[None] | None = None
        self._poll: asyncio.TimerHandle | None = None

    # --- taking the port ----------------------------------------------------------------------
    def start(self) -> None:
        """Ask for the port (the answer comes in the relay's own task)."""
        reason = f"inhibited by {self.who}"
        held = self.core.hold(self.shown, reason, self._uninhibit)
        log.info("network_passthrough_asked", name=self.entry.label, peer=self.peer)
        self._task = self.loop.create_task(self._take(held), name=f"passthrough {self.who}")

    async def _take(self, held: Any) -> None:
        path = await held
        if self._ended:
            return
        dev = self.entry.cfg.device
        try:
            port = await open_port(dev, path, self, dev.timeout)
        except OpenError as exc:
            log.warning(
                "network_passthrough_failed",
                name=self.entry.label,
                peer=self.peer,
                port=path,
                error=str(exc),
            )
            self.io.close(f"the port cannot be opened: {exc}")
            return
        self.port = port
        port.flow = self._port_full
        if port.comport_server:  # the client's commands go on to the port's server
            port.on_command = self._server_said
            self.io.forward = self._forward
            self.io.modem = None  # (the server's own NOTIFY-MODEMSTATE is forwarded)
        self.io.comport.port = port.serial
        self.io.comport.log = log.bind(name=self.entry.label, peer=self.peer)
        self.ready = True
        self._held()
        log.info("network_passthrough", name=self.entry.label, peer=self.peer, port=path)
        self._poll = self.loop.call_later(0, self._look)

    def _uninhibit(self, why: str) -> None:
        self.io.close(why)

    def _look(self) -> None:
        self.io.modem_lines()
        self._poll = self.loop.call_later(MODEM_POLL, self._look)

    def modem_bits(self) -> int | None:
        return self.port.modem_bits() if self.port is not None else None

    # --- an rfc2217:// link: the server is the port ----------------------------------------
    def _forward(self, code: int, value: bytes) -> bool:
        """A client's COM-PORT command goes on to the server (whose answer comes back
        through `_server_said`)."""
        if self.port is None or self._failed:
            return True  # (the connection is closing: nobody answers)
        self._asked[code] = self._asked.get(code, 0) + 1
        self.port.command(code, value)
        return True

    def _server_said(self, code: int, value: bytes) -> None:
        """The server's answers go to the client only for commands it sent (a late answer
        to verld's own open, or to its DTR/RTS, is not the client's); notifications all."""
        asked = code - SERVER
        if code in _NOTIFICATIONS:
            self.io.forward_command(code, value)
        elif self._asked.get(asked, 0) > 0:
            self._asked[asked] -= 1
            self.io.forward_command(code, value)

    # --- bytes: the port's handler, and the connection's --------------------------------------
    def link_data(self, data: bytes) -> None:
        """The port sent `data`."""
        self.core.relayed("rx", data)
        self.io.send(data)

    def link_lost(self, reason: str) -> None:
        """The port failed (an unplug): the connection goes, the link reconnects."""
        self._failed = True
        self._stop_looking()
        log.warning(
            "network_passthrough_port_failed",
            name=self.entry.label,
            peer=self.peer,
            error=reason,
        )
        self.io.close(f"the port failed: {reason}")

    def to_port(self, data: bytes) -> None:
        """What the connection sent, for the port."""
        port = self.port
        if port is None or self._failed:
            return
        self.core.relayed("tx", data)
        port.write(data)

    def _port_full(self, full: bool) -> None:
        """The port drains slowly (`full`), or caught up: the connection waits, or reads."""
        transport = self.io.transport
        if transport is None:
            return
        if full:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def pause_port(self) -> None:
        """The connection reads slowly: stop reading the port."""
        if self.port is not None:
            self.port.pause_reading()

    def resume_port(self) -> None:
        if self.port is not None:
            self.port.resume_reading()

    def purge(self, received: bool, sent: bool) -> None:
        """PURGE-DATA: the real port's buffers flushed as asked."""
        if self.port is not None:
            self.port.purge(received, sent)

    # --- giving it back -----------------------------------------------------------------------
    def _stop_looking(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None

    def end(self, reason: str) -> None:
        """The connection ended: the port back as configured, then to the link."""
        if self._ended:
            return
        self._ended = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._stop_looking()
        port, self.port = self.port, None
        if port is not None:
            port.flow = port.on_command = None
            if not self._failed:
                port.restore(self.entry.cfg.device)
            port.close()  # (a tty's TIOCEXCL cleared: the link reopens it next)
        if self.core.holder is self.shown:
            self.core.unhold()
            log.info(
                "network_passthrough_ended",
                name=self.entry.label,
                peer=self.peer,
                reason=reason,
            )
