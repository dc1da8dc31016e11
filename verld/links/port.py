"""The device's port, whatever its kind: decided once, opened as one `RawPort`.

Strategy: `port_kind` reads the port's kind from its name, the one place that does:
a serial path, `tcp://HOST:PORT` or `rfc2217://HOST:PORT`. `open_port` opens it as
that kind (`SerialPort`, a plain `FdTransport` on the socket, `Rfc2217Link`) and
hands back a `RawPort`: bytes both ways with flow control, and what a port may or may
not have — modem lines, buffers to purge, line settings to change and give back, a
COM-PORT server to pass commands to. The supervisor opens the device's link with it
and a passthrough relay the port it holds, so both see the same port and neither
asks what kind it is: where a kind has nothing to do (no modem lines on a socket,
no settings on `tcp://`), its method does nothing.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import serial

from verld.config import DeviceConfig, tcp_target
from verld.links.rfc2217 import open_rfc2217
from verld.links.serialport import SerialPort, open_serial
from verld.links.transport import FdTransport, LinkHandler, LinkTransport, open_tcp


class PortKind(enum.Enum):
    """What a device's port is, by its name."""

    SERIAL = "serial"  #: a tty path (or anything that is not a URL below)
    TCP = "tcp"  #: tcp://HOST:PORT: raw bytes over TCP
    RFC2217 = "rfc2217"  #: rfc2217://HOST:PORT: a serial port served over telnet


def port_kind(port: str) -> PortKind:
    """The kind of the port named `port`."""
    if port.startswith("rfc2217://"):
        return PortKind.RFC2217
    if port.startswith("tcp://"):
        return PortKind.TCP
    return PortKind.SERIAL


@runtime_checkable
class RawPort(LinkTransport, Protocol):
    """An open port: what the session drives (`LinkTransport`) and what a passthrough
    needs besides (`SerialPort`, `FdTransport` for tcp://, `Rfc2217Link`)."""

    #: told True when the bytes waiting for the port pass `transport.BACKLOG`, False
    #: once back under it (a passthrough stops and resumes reading its connection)
    flow: Callable[[bool], None] | None
    #: told each COM-PORT command the port's RFC 2217 server sends (`comport_server`)
    on_command: Callable[[int, bytes], None] | None

    @property
    def comport_server(self) -> bool:
        """The port is an RFC 2217 server's (rfc2217://): a client's COM-PORT commands go
        on to it (`command`), and its answers and notifications come back (`on_command`)."""
        ...

    @property
    def serial(self) -> serial.Serial | None:
        """The pyserial port whose line settings a passthrough client sets; None: the
        port has none here (tcp://, or rfc2217:// where the server takes them)."""
        ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def purge(self, received: bool, sent: bool) -> None:
        """Flush the port's buffers (PURGE-DATA) where it has any."""
        ...

    def modem_bits(self) -> int | None:
        """The modem input lines as RFC 2217 MODEMSTATE bits; None: it has none."""
        ...

    def command(self, code: int, value: bytes) -> None:
        """A client's COM-PORT command for the port's RFC 2217 server (`comport_server`
        only: another port has none to send it to)."""
        ...

    def restore(self, cfg: DeviceConfig) -> None:
        """The line as `cfg` says again, after a passthrough changed it."""
        ...


async def open_port(
    cfg: DeviceConfig, port: str, handler: LinkHandler, connect_timeout: float
) -> RawPort:
    """Open `port` by its kind, `handler` told its bytes and its loss; `OpenError` says
    why not, and nothing stays open then."""
    kind = port_kind(port)
    if kind is PortKind.RFC2217:
        return await open_rfc2217(cfg, port, handler, connect_timeout)
    loop = asyncio.get_running_loop()
    if kind is PortKind.SERIAL:
        return SerialPort(loop, open_serial(cfg, port), handler)
    target = tcp_target(port)
    assert target is not None
    sock = await open_tcp(*target, connect_timeout)
    return FdTransport(loop, sock.fileno(), sock.close, handler)
