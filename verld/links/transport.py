"""The asyncio edge of the link: a file descriptor that moves bytes.

The transport knows bytes, not frames. A serial port is opened and configured by
pyserial (`verld.links.serialport`), a TCP endpoint by the socket module (`open_tcp`);
then both are just a non-blocking fd driven by `loop.add_reader`/`add_writer` with our
own EAGAIN and partial-write handling. Not pyserial-asyncio: it blocks in close()
(tcdrain) and calls connection_lost() while the port is still open;
pyserial-asyncio-fast 0.16 leaves its writer callback installed after a partial write
and spins on EAGAIN. A read of b'', EIO, ENXIO, EBADF or a write error all mean "the
device went away": the transport removes its callbacks at once (no busy loop on a
hung-up fd) and reports `on_lost(reason)` exactly once. Flow control, for a writer
that can wait (a passthrough's connection): reading can be paused and resumed, and
`flow` is told when the bytes waiting for the fd pass `BACKLOG` and when they are back
under it; a full write, the session's usual case, costs nothing more.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import Callable
from typing import Protocol

import serial

from verld.config import DeviceConfig
from verld.errors import OpenError

_READ_SIZE = 65536
#: bytes waiting for the fd beyond which `flow(True)` asks the writer to stop
BACKLOG = 65536


class LinkHandler(Protocol):
    """What the transport calls back into (the session)."""

    def link_data(self, data: bytes) -> None: ...

    def link_lost(self, reason: str) -> None: ...


class LinkTransport(Protocol):
    """What the session drives (an FdTransport, or a test's stand-in)."""

    tap: Callable[[str, bytes], None] | None

    @property
    def bytes_tx(self) -> int: ...

    @property
    def bytes_rx(self) -> int: ...

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class FdTransport:
    """A connected, non-blocking fd; closes via the `closer` it was given. As a
    `RawPort` (a tcp:// port) it has no modem lines, buffers or settings of its own."""

    comport_server = False

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        closer: Callable[[], None],
        handler: LinkHandler,
    ) -> None:
        self._loop = loop
        self._fd = fd
        self._closer = closer
        self._handler = handler
        self._pending = bytearray()
        self._writing = False
        self.closed = False
        self.bytes_tx = 0
        self.bytes_rx = 0
        #: optional tap: called with ("tx"|"rx", bytes) for the raw wire view
        self.tap: Callable[[str, bytes], None] | None = None
        #: told True when more than BACKLOG bytes wait for the fd, False once back under it
        self.flow: Callable[[bool], None] | None = None
        self._full = False  #: `flow(True)` was told last
        #: (a `RawPort`'s: a plain fd has no line settings, nor a server to tell it things)
        self.serial: serial.Serial | None = None
        self.on_command: Callable[[int, bytes], None] | None = None
        self._reading = True
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, _READ_SIZE)  # read(2) serves ttys and sockets alike
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(os_reason(exc))
            return
        if not data:
            self._lose("hangup")
            return
        self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        self.bytes_rx += len(data)
        if self.tap is not None:
            self.tap("rx", data)
        self._handler.link_data(data)

    def write(self, data: bytes) -> None:
        """Queue bytes; written at once when the fd can take them."""
        if self.closed:
            return
        self.bytes_tx += len(data)
        if self.tap is not None:
            self.tap("tx", data)
        if self._pending:
            self._pending += data
        else:
            try:
                n = os.write(self._fd, data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as exc:
                self._lose(os_reason(exc))
                return
            if n == len(data):
                return
            self._pending += memoryview(data)[n:]
            self._start_writing()
        if len(self._pending) > BACKLOG and not self._full and self.flow is not None:
            self._full = True
            self.flow(True)

    def _start_writing(self) -> None:
        if not self._writing:
            self._writing = True
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            n = os.write(self._fd, self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(os_reason(exc))
            return
        del self._pending[:n]
        if self._full and len(self._pending) <= BACKLOG and self.flow is not None:
            self._full = False
            self.flow(False)
        if not self._pending:
            self._writing = False
            self._loop.remove_writer(self._fd)

    def pause_reading(self) -> None:
        """Stop reading the fd (the bytes wait in the kernel) until `resume_reading`."""
        if self._reading and not self.closed:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self.closed:
            self._reading = True
            self._loop.add_reader(self._fd, self._on_readable)

    # --- what a plain fd (tcp://) lacks of a `RawPort`: `SerialPort` has it ----------------
    def purge(self, received: bool, sent: bool) -> None:
        return None

    def modem_bits(self) -> int | None:
        return None

    def command(self, code: int, value: bytes) -> None:
        return None

    def restore(self, cfg: DeviceConfig) -> None:
        return None

    @property
    def fd(self) -> int:
        """Its file descriptor (-1 once closed)."""
        return -1 if self.closed else self._fd

    @property
    def write_backlog(self) -> int:
        """Bytes accepted but not yet written to the fd."""
        return len(self._pending)

    def _lose(self, reason: str) -> None:
        if self.closed:
            return
        self.close()
        self._handler.link_lost(reason)

    def close(self) -> None:
        """Stop watching the fd and close it; never blocks (no drain)."""
        if self.closed:
            return
        self.closed = True
        if self._reading:
            self._loop.remove_reader(self._fd)
        if self._writing:
            self._loop.remove_writer(self._fd)
        self._pending.clear()
        try:
            self._closer()
        except OSError:
            pass


def os_reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{name}: {exc.strerror}" if name else str(exc)


async def open_tcp(host: str, port: int, wait: float) -> socket.socket:
    """A TCP connection to HOST:PORT within `wait` seconds, Nagle off; `OpenError` says
    why not."""
    try:
        sock = await asyncio.wait_for(_connect_tcp(host, port), wait)
    except TimeoutError:
        raise OpenError(f"connect to {host}:{port} timed out") from None
    except OSError as exc:
        raise OpenError(f"connect to {host}:{port}: {exc.strerror or exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


async def _connect_tcp(host: str, port: int) -> socket.socket:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:  # (cancelled: a passthrough's connection went meanwhile)
            sock.close()
            raise
        return sock
    raise last
