"""Passthrough: one network connection holds the real port, bytes relayed both ways.

Strategy: the relay asks the core to hold the port (`Core.hold`, the `inhibit`
machinery: in-flight calls finish, queued ones fail `busy`, the port closes, the
link is `inhibited`), then opens the port itself — the serial path with the
configured settings (pyserial, exclusively), or the `tcp://` endpoint — and only
then lets the connection's bytes in. Port → connection and connection → port are
plain non-blocking fd I/O on the loop, each side's flow control holding the other
(a connection that reads slowly stops reads from the port; a port that drains
slowly stops reads from the connection). COM-PORT commands reach the port through
the connection's `ComPortServer` (`port` set here). The end, whatever its cause
(the peer closed, idle, `uninhibit`, a reload): BREAK off, the configured line
settings and modem lines back, buffers flushed, the tty's exclusive flag cleared
(TIOCNXCL), port closed, and the core reopens it with a new generation
(`Core.unhold`). A port that fails during the relay (an unplug) closes the
connection and is not touched again: the link reconnects.
"""

from __future__ import annotations

import asyncio
import os
import socket
import termios
import time
from typing import TYPE_CHECKING, Any

import serial
import structlog

from verld.codec.rfc2217 import SERVER, Cmd
from verld.config import tcp_target
from verld.errors import OpenError
from verld.links.rfc2217 import Rfc2217Link, open_rfc2217
from verld.links.transport import close_serial, modem_bits, open_serial, open_tcp

if TYPE_CHECKING:
    from verld.fronts.network.conn import NetConn

log = structlog.get_logger("verld.network")

_READ = 65536
#: bytes from the connection waiting for the port beyond which its reads stop
_PORT_BACKLOG = 65536
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
    """The passthrough of one connection (see the module docstring)."""

    def __init__(self, conn: NetConn) -> None:
        self.conn = conn
        self.entry = conn.entry
        self.core = conn.entry.core
        self.loop = conn.loop
        label = self.entry.label
        self.who = f"network {label} {conn.peer}"
        self.shown: dict[str, Any] = {
            "pid": None,
            "uid": None,
            "client": self.who,
            "since": round(time.time(), 3),
            "front": "network",
        }
        self.ser: serial.Serial | None = None
        self.sock: socket.socket | None = None
        self.remote: Rfc2217Link | None = None  #: on an rfc2217:// link: the server, negotiated
        self._asked: dict[int, int] = {}  #: the client's commands forwarded, not yet answered
        self.fd = -1
        self._pending = bytearray()
        self._reading = False
        self._writing = False
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
        log.info("network_passthrough_asked", name=self.entry.label, peer=self.conn.peer)
        self._task = self.loop.create_task(self._take(held), name=f"passthrough {self.who}")

    async def _take(self, held: Any) -> None:
        path = await held
        if self._ended:
            return
        try:
            await self._open(path)
        except OpenError as exc:
            log.warning(
                "network_passthrough_failed",
                name=self.entry.label,
                peer=self.conn.peer,
                port=path,
                error=str(exc),
            )
            self.conn.close(f"the port cannot be opened: {exc}")
            return
        if self.fd >= 0:
            os.set_blocking(self.fd, False)
            self.resume_port()
        if self.conn.comport is not None:
            self.conn.comport.port = self.ser
            self.conn.comport.log = log.bind(name=self.entry.label, peer=self.conn.peer)
        self.ready = True
        self.conn.held()
        log.info("network_passthrough", name=self.entry.label, peer=self.conn.peer, port=path)
        self._poll = self.loop.call_later(0, self._look)

    async def _open(self, path: str) -> None:
        dev = self.entry.cfg.device
        if path.startswith("rfc2217://"):  # the client's commands go on to the server
            self.remote = await open_rfc2217(dev, path, self, dev.timeout)
            self.remote.client.on_command = self._server_said
            return
        target = tcp_target(path)
        if target is None:
            self.ser = open_serial(self.entry.cfg.device, path)
            self.fd = self.ser.fileno()
            return
        host, port = target
        self.sock = await open_tcp(host, port, self.entry.cfg.device.timeout)
        self.fd = self.sock.fileno()

    def _uninhibit(self, why: str) -> None:
        self.conn.close(why)

    def _look(self) -> None:
        self.conn.modem_lines()
        self._poll = self.loop.call_later(MODEM_POLL, self._look)

    def modem_bits(self) -> int | None:
        return modem_bits(self.fd) if self.ser is not None else None

    # --- an rfc2217:// link: the server is the port ----------------------------------------
    def forward(self, code: int, value: bytes) -> bool:
        """A client's COM-PORT command: on an rfc2217:// link it goes on to the server
        (whose answer comes back through `_server_said`); False: handle it here."""
        if self.remote is None:
            return False
        self._asked[code] = self._asked.get(code, 0) + 1
        self.remote.command(code, value)
        return True

    @property
    def forwards(self) -> bool:
        """The server's own COM-PORT answers and modem state reach the client."""
        return self.remote is not None

    def _server_said(self, code: int, value: bytes) -> None:
        """The server's answers go to the client only for commands it sent (a late answer
        to verld's own open, or to its DTR/RTS, is not the client's); notifications all."""
        asked = code - SERVER
        if code in _NOTIFICATIONS:
            self.conn.forward_command(code, value)
        elif self._asked.get(asked, 0) > 0:
            self._asked[asked] -= 1
            self.conn.forward_command(code, value)

    def link_data(self, data: bytes) -> None:
        """(The rfc2217:// link's handler) the server's port sent `data`."""
        self.core.relayed("rx", data)
        self.conn.send_data(data)

    def link_lost(self, reason: str) -> None:
        self._fail(OSError(reason))

    # --- bytes --------------------------------------------------------------------------------
    def to_port(self, data: bytes) -> None:
        """What the connection sent, for the port."""
        if self.remote is not None and not self._failed:
            self.core.relayed("tx", data)
            self.remote.write(data)
            return
        if self.fd < 0 or self._failed:
            return
        self.core.relayed("tx", data)
        if self._pending:
            self._pending += data
        else:
            try:
                n = os.write(self.fd, data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as exc:
                self._fail(exc)
                return
            if n < len(data):
                self._pending += data[n:]
                self._start_writing()
        if len(self._pending) > _PORT_BACKLOG and self.conn.transport is not None:
            self.conn.transport.pause_reading()

    def _start_writing(self) -> None:
        if not self._writing:
            self._writing = True
            self.loop.add_writer(self.fd, self._port_writable)

    def _port_writable(self) -> None:
        try:
            n = os.write(self.fd, self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fail(exc)
            return
        del self._pending[:n]
        if len(self._pending) <= _PORT_BACKLOG and self.conn.transport is not None:
            self.conn.transport.resume_reading()
        if not self._pending:
            self._writing = False
            self.loop.remove_writer(self.fd)

    def _port_readable(self) -> None:
        try:
            data = os.read(self.fd, _READ)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fail(exc)
            return
        if not data:
            self._fail(OSError("hangup"))
            return
        self.core.relayed("rx", data)
        self.conn.send_data(data)

    def pause_port(self) -> None:
        """The connection reads slowly: stop reading the port."""
        if self._reading:
            self._reading = False
            self.loop.remove_reader(self.fd)

    def resume_port(self) -> None:
        if not self._reading and self.fd >= 0 and not self._failed:
            self._reading = True
            self.loop.add_reader(self.fd, self._port_readable)

    def purge(self, received: bool, sent: bool) -> None:
        """PURGE-DATA: the real port's buffers flushed as asked."""
        if self.ser is None:
            return
        try:
            if received:
                self.ser.reset_input_buffer()
            if sent:
                self.ser.reset_output_buffer()
        except (serial.SerialException, OSError):
            pass

    def _fail(self, exc: OSError) -> None:
        """The port failed (an unplug): the connection goes, the link reconnects."""
        self._failed = True
        self._stop_io()
        log.warning(
            "network_passthrough_port_failed",
            name=self.entry.label,
            peer=self.conn.peer,
            error=str(exc),
        )
        self.conn.close(f"the port failed: {exc}")

    # --- giving it back -----------------------------------------------------------------------
    def _stop_io(self) -> None:
        if self.fd >= 0:
            if self._reading:
                self.loop.remove_reader(self.fd)
            if self._writing:
                self.loop.remove_writer(self.fd)
        self._reading = self._writing = False
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
        self._stop_io()
        self._pending.clear()
        if self.ser is not None:
            if not self._failed:
                self._restore(self.ser)
            close_serial(self.ser)  # (its TIOCEXCL cleared: the link reopens it next)
        if self.sock is not None:
            self.sock.close()
        if self.remote is not None:
            self.remote.handler = None
            self.remote.close()
        self.fd = -1
        if self.core.holder is self.shown:
            self.core.unhold()
            log.info(
                "network_passthrough_ended",
                name=self.entry.label,
                peer=self.conn.peer,
                reason=reason,
            )

    def _restore(self, ser: serial.Serial) -> None:
        dev = self.entry.cfg.device
        settings = {
            "baudrate": dev.baudrate,
            "bytesize": dev.bytesize,
            "parity": dev.parity[0].upper(),
            "stopbits": dev.stopbits,
            "rtscts": dev.rtscts,
            "xonxoff": False,
        }
        for attr, value in (("break_condition", False), ("dtr", True), ("rts", True)):
            try:
                setattr(ser, attr, value)
            except (serial.SerialException, OSError, ValueError, termios.error):
                pass  # (a pty has no modem lines; the link reopens the port anyway)
        try:
            ser.apply_settings(settings)
            ser.reset_input_buffer()
            ser.reset_output_buffer()
        except (serial.SerialException, OSError, ValueError, termios.error):
            pass
