"""A serial port: opened exclusively with the device's line settings, and given back so.

`open_serial` opens the tty with pyserial, exclusively twice over: pyserial's flock
(another verld) and the tty's TIOCEXCL (anyone else without CAP_SYS_ADMIN); a refusal
names the holder as far as /proc tells (`lock_holder`, `tty_holder`). The exclusive
flag outlives the fd while anything else holds the tty, so `close_serial` clears it
first. `SerialPort` is that port as a `RawPort` (`verld.links.port`): the fd moved by
`FdTransport`, plus what only a tty has: modem lines, purging its buffers, line
settings a passthrough client changes (`serial`) and puts back (`restore`).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import stat
import struct
import termios
from collections.abc import Callable

import serial
import structlog
from serial.rs485 import RS485Settings

from verld.config import DeviceConfig
from verld.errors import OpenError
from verld.links.transport import FdTransport, LinkHandler, os_reason

log = structlog.get_logger("verld.links.link")

_PARITY = {
    "none": serial.PARITY_NONE,
    "even": serial.PARITY_EVEN,
    "odd": serial.PARITY_ODD,
    "mark": serial.PARITY_MARK,
    "space": serial.PARITY_SPACE,
}
#: what a tty refusing a setting or a line raises (termios.error: tcsetattr said EINVAL)
_REFUSALS = (serial.SerialException, OSError, ValueError, termios.error)


class SerialPort(FdTransport):
    """A serial port opened by `open_serial`, as a `RawPort`; closes with `close_serial`."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, ser: serial.Serial, handler: LinkHandler
    ) -> None:
        super().__init__(loop, ser.fileno(), lambda: close_serial(ser), handler)
        #: the pyserial port whose settings a passthrough client changes (`ComPortServer`)
        self.serial: serial.Serial | None = ser

    def modem_bits(self) -> int | None:
        return modem_bits(self.fd)

    def purge(self, received: bool, sent: bool) -> None:
        """Flush the tty's input (`received`) and output (`sent`) buffers."""
        ser = self.serial
        if ser is None or self.closed:
            return
        try:
            if received:
                ser.reset_input_buffer()
            if sent:
                ser.reset_output_buffer()
        except (serial.SerialException, OSError):
            pass

    def restore(self, cfg: DeviceConfig) -> None:
        """The line as `cfg` says again: BREAK off, DTR and RTS on, the line settings,
        buffers flushed (what the port refuses is left: the link reopens it anyway)."""
        ser = self.serial
        if ser is None or self.closed:
            return
        for attr, value in (("break_condition", False), ("dtr", True), ("rts", True)):
            try:
                setattr(ser, attr, value)
            except _REFUSALS:
                pass  # (a pty has no modem lines)
        try:
            ser.apply_settings(
                {
                    "baudrate": cfg.baudrate,
                    "bytesize": cfg.bytesize,
                    "parity": _PARITY[cfg.parity],
                    "stopbits": cfg.stopbits,
                    "rtscts": cfg.rtscts,
                    "xonxoff": False,
                }
            )
            ser.reset_input_buffer()
            ser.reset_output_buffer()
        except _REFUSALS:
            pass


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
        log.debug("tty_exclusive_failed", on=on, error=os_reason(exc))


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
