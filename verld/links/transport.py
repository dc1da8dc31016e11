"""The asyncio edge of the link: a file descriptor that moves bytes.

The transport knows bytes, not frames. Serial ports are opened and configured by
pyserial (exclusively: its flock and the tty's TIOCEXCL, cleared again before every
close), TCP endpoints by the socket module; then both are just a
non-blocking fd driven by `loop.add_reader`/`add_writer` with our own EAGAIN and
partial-write handling. Not pyserial-asyncio: it blocks in close() (tcdrain) and
calls connection_lost() while the port is still open; pyserial-asyncio-fast 0.16
leaves its writer callback installed after a partial write and spins on EAGAIN.
A read of b'', EIO, ENXIO, EBADF or a write error all mean "the device went
away": the transport removes its callbacks at once (no busy loop on a hung-up fd)
and reports `on_lost(reason)` exactly once.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import socket
import stat
import struct
import termios
from collections.abc import Callable
from typing import Protocol

import serial
import structlog
from serial.rs485 import RS485Settings

from verld.config import DeviceConfig, tcp_target
from verld.errors import OpenError

log = structlog.get_logger("verld.links.link")

_READ_SIZE = 65536
_PARITY = {
    "none": serial.PARITY_NONE,
    "even": serial.PARITY_EVEN,
    "odd": serial.PARITY_ODD,
    "mark": serial.PARITY_MARK,
    "space": serial.PARITY_SPACE,
}


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
    """A connected, non-blocking fd; closes via the `closer` it was given."""

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
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, _READ_SIZE)  # read(2) serves ttys and sockets alike
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(_os_reason(exc))
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
            return
        try:
            n = os.write(self._fd, data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            self._lose(_os_reason(exc))
            return
        if n < len(data):
            self._pending += memoryview(data)[n:]
            self._start_writing()

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
            self._lose(_os_reason(exc))
            return
        del self._pending[:n]
        if not self._pending:
            self._writing = False
            self._loop.remove_writer(self._fd)

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
        self._loop.remove_reader(self._fd)
        if self._writing:
            self._loop.remove_writer(self._fd)
        self._pending.clear()
        try:
            self._closer()
        except OSError:
            pass


def _os_reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{name}: {exc.strerror}" if name else str(exc)


#: TIOCMGET bits → RFC 2217 MODEMSTATE bits (CD, RI, DSR, CTS)
_MODEM = (
    (termios.TIOCM_CD, 0x80),
    (termios.TIOCM_RI, 0x40),
    (termios.TIOCM_DSR, 0x20),
    (termios.TIOCM_CTS, 0x10),
)


def modem_bits(fd: int) -> int | None:
    """The modem input lines of tty `fd` as RFC 2217 MODEMSTATE bits; None where
    there are none (a pty, a socket, a closed fd)."""
    if fd < 0:
        return None
    try:
        raw = fcntl.ioctl(fd, termios.TIOCMGET, struct.pack("I", 0))
    except OSError:
        return None
    lines = struct.unpack("I", raw)[0]
    return sum(bit for tiocm, bit in _MODEM if lines & tiocm)


def lock_holder(path: str) -> str:
    """Who holds the flock on `path`, as far as /proc tells: "pid 812 (verld)", else
    "another process" (under ProtectProc=invisible other processes are hidden)."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return "another process"
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()  # "1: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode:
            try:
                with open(f"/proc/{int(fields[4])}/comm", encoding="utf-8") as f:
                    return f"pid {int(fields[4])} ({f.read().strip()})"
            except (OSError, ValueError):
                break
    return "another process"


def tty_holder(path: str) -> str:
    """Who has the tty `path` open, as far as /proc tells: "pid 812 (socat)" (several:
    "pid 812 (socat), pid 90 (verld-sim)"), else "another process" (another user's
    processes are hidden from a non-root one)."""
    try:
        rdev = os.stat(path).st_rdev
    except OSError:
        return "another process"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev:
                try:
                    with open(f"/proc/{entry}/comm", encoding="utf-8") as f:
                        found.append((int(entry), f.read().strip()))
                except OSError:
                    pass
                break
    return ", ".join(f"pid {pid} ({comm})" for pid, comm in sorted(found)) or "another process"


def _set_exclusive(fd: int, on: bool) -> None:
    """Set (TIOCEXCL) or clear (TIOCNXCL) the tty's exclusive flag: while set, any other
    open(2) of the tty by a process without CAP_SYS_ADMIN fails with EBUSY. A tty that
    refuses it (hung up, unplugged, not a tty) is left as it is."""
    try:
        fcntl.ioctl(fd, termios.TIOCEXCL if on else termios.TIOCNXCL)
    except OSError as exc:
        log.debug("tty_exclusive_failed", on=on, error=_os_reason(exc))


def close_serial(ser: serial.Serial) -> None:
    """Close a port `open_serial` opened, its exclusive flag cleared first (TIOCNXCL): the
    flag outlives this fd while anything else holds the tty (a pty's master, a simulator),
    and would refuse the next non-root open (verld's own reconnect, inhibit's program)."""
    if ser.is_open:
        _set_exclusive(ser.fileno(), False)
    ser.close()


def open_serial(
    cfg: DeviceConfig, port: str, make: Callable[..., serial.Serial] = serial.Serial
) -> serial.Serial:
    """The serial port `port` opened exclusively (pyserial's flock and the tty's TIOCEXCL)
    with `cfg`'s line settings (and the kernel's RS-485 mode with `cfg.rs485`), input
    flushed; `OpenError` says why not. Close it with `close_serial`. `make` builds the
    pyserial object (a test's recorder)."""
    try:
        ser = make(
            port=port,
            baudrate=cfg.baudrate,
            bytesize=cfg.bytesize,
            parity=_PARITY[cfg.parity],
            stopbits=cfg.stopbits,
            rtscts=cfg.rtscts,
            timeout=0,
            write_timeout=0,
            exclusive=True,
        )
    except (serial.SerialException, OSError, ValueError, termios.error) as exc:
        # (termios.error: the tty refused the line settings, e.g. a parity it lacks)
        text = str(exc)
        code = getattr(exc, "errno", None)
        if (
            code == errno.EAGAIN
            or "Resource temporarily unavailable" in text
            or "[Errno 11]" in text
        ):
            text = f"{port} is locked by {lock_holder(port)} (opened exclusively)"
        elif code == errno.EBUSY or "Device or resource busy" in text:
            # TIOCEXCL: the flock's holder if there is one (another verld), else who has it open
            holder = lock_holder(port)
            if holder == "another process":
                holder = tty_holder(port)
            text = f"{port} is locked by {holder} (opened exclusively)"
        raise OpenError(text) from None
    _set_exclusive(ser.fileno(), True)
    if cfg.rs485 is not None:
        _rs485(ser, cfg, port)
    # pyserial's open() already flushed input; flush again in case it raced.
    try:
        ser.reset_input_buffer()
    except (serial.SerialException, OSError, termios.error) as exc:
        close_serial(ser)
        raise OpenError(f"{port}: {exc}") from None
    return ser


def _rs485(ser: serial.Serial, cfg: DeviceConfig, port: str) -> None:
    """The kernel's RS-485 mode on `ser` (TIOCSRS485); `OpenError` when the driver
    refuses it (a pty, an adapter without kernel RS-485 support), the port closed."""
    rs = cfg.rs485
    assert rs is not None
    try:
        ser.rs485_mode = RS485Settings(
            rts_level_for_tx=rs.rts_level_for_tx,
            rts_level_for_rx=rs.rts_level_for_rx,
            delay_before_tx=rs.delay_before_tx,
            delay_before_rx=rs.delay_before_rx,
        )
    except (serial.SerialException, OSError, ValueError) as exc:
        close_serial(ser)
        raise OpenError(f"RS-485 mode not supported by {port}: {exc}") from None


async def open_link(
    cfg: DeviceConfig, port: str, handler: LinkHandler, connect_timeout: float
) -> FdTransport:
    """Open the device (serial path or tcp://HOST:PORT) as an FdTransport."""
    loop = asyncio.get_running_loop()
    target = tcp_target(port)
    if target is None:
        ser = open_serial(cfg, port)
        return FdTransport(loop, ser.fileno(), lambda: close_serial(ser), handler)
    sock = await open_tcp(*target, connect_timeout)
    return FdTransport(loop, sock.fileno(), sock.close, handler)


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
        return sock
    raise last
