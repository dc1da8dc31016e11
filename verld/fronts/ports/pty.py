"""The I/O edge of one virtual serial port: a pty, a symlink to its device end.

`PtyPort` creates a pty pair, sets it raw, gives the device (slave) node its mode
and group, and keeps a symlink `link` to that node; verld talks to the program
through the master end, non-blocking. No codec logic here: the port feeds what
`read` returns to its stream (`verld.fronts.stream`) and writes what that encodes.

The link is owned by a lock (`claim_link`: an flock on `LINK.lock`, see
`verld.ownership`), taken before the pty is made and let go after the link is
removed: a link another running verld holds is never re-pointed or removed, and
`close` removes the link only while it still points at this pty.

Facts measured on Linux (6.x, devpts), which the code relies on:

- **No slave fd open → POLLHUP.** With no process holding the slave open,
  `poll()` on the master reports POLLOUT|POLLHUP at once (measured ~2 µs after the
  last close) and for ever; with one open, POLLOUT only. Two programs: POLLHUP
  comes back only when both have closed. So `program_attached()` is one
  zero-timeout poll of the master.
- **EIO on read, not on write.** While detached, `read()` on the master gives EIO,
  after first returning whatever the program wrote before it closed (that data is
  not lost). `write()` to the master still *succeeds* and is buffered (about 20 KiB
  before EAGAIN): the next program to open the slave reads those stale bytes.
  Hence `write` refuses (returns `DETACHED`) while no program is attached, and
  when a program is first seen attached after a detach, bytes that slipped into
  the buffer in between (a write racing the program's close) are discarded with
  `tcflush(TCIFLUSH)` on a momentary slave fd (TIOCGPTPEER). Not with
  `tcflush(master, TCOFLUSH)`: measured, 247 of 300 such writes survived it.
- **verld keeps no slave fd.** A slave fd held by verld would hide every close
  (no POLLHUP) and let bytes pile up for the next program (gpsd's FakePTY). The
  slave fd from `openpty` is closed as soon as the pty is set up; the pty lives
  on while the master is open: reopening `/dev/pts/N` after the last slave fd
  closed works, and the node disappears only when the master is closed.
- **termios belongs to the pty, not to an open.** The raw settings made at
  `open()` are still there when a program opens the slave later, and whatever a
  program sets (ECHO, ICANON, its baud rate) stays after it closes, for the next
  program. `tcgetattr(master)` shows the slave's termios and `tcsetattr(master)`
  changes it, so `fix_termios` works from the master alone.
- **No modem lines.** `TIOCMGET` on a pty gives ENOTTY (pyserial ignores it when it
  sets DTR/RTS on open).

Driving it from asyncio (what the front does):

- While `program_attached()`: `loop.add_reader(port.fd, cb)`; in `cb`, `read()`
  returns bytes, or b"" (spurious wake-up), or None (the program left).
- On None: `loop.remove_reader(port.fd)` at once, since a detached master is
  readable (POLLHUP) for ever and a reader would busy-loop; then poll
  `program_attached()` (`port.ATTACH_POLL`) and add the reader back.
- Before each write: `fix_termios()` (log once when it returns True), then
  `write(data)`: `DETACHED` means drop the bytes (count them `dropped`); a short
  count means the rest waits for `loop.add_writer(port.fd, ...)`, as in
  `verld.links.transport`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import stat
import termios
import tty

from verld.fronts.protocol import CannotServe
from verld.ownership import Lock, LockHeld, acquire, lock_path

#: `write`'s answer when no program has the port open (nothing was written)
DETACHED = -1

_READ_SIZE = 65536
_TIOCGPTPEER = getattr(termios, "TIOCGPTPEER", 0x5441)  # Linux ≥ 4.13: open our pty's slave
_PTS = re.compile(r"/dev/pts/\d+")
_HUP = select.POLLHUP | select.POLLERR | select.POLLNVAL
#: local modes that turn verld's writes back into the program's requests (ECHO*)
#: or hold them from the program until a newline (ICANON)
_BAD_LFLAGS = termios.ECHO | termios.ECHONL | termios.ICANON


class PortSetupError(CannotServe):
    """A virtual port cannot be created (bad link path, node permissions); `fields`
    name its `link`."""

    def __init__(self, message: str, link: str) -> None:
        super().__init__(message, link=link)
        self.link = link


class PtyPort:
    """One pty whose device end is reachable at `link`; verld holds the master."""

    def __init__(self, link: str, mode: int = 0o660, group: str | int | None = None) -> None:
        self.link = link
        self.mode = mode
        self.group = group
        self._master = -1
        self._slave_path = ""
        self._attached = False  # as last seen by program_attached()
        self._poller = select.poll()
        self._termios_reported = False  # fix_termios said True since the last attach
        self._lock: Lock | None = None  #: LINK.lock while we own the link

    # -- lifecycle -------------------------------------------------------------

    def claim(self) -> None:
        """Own the link (`claim_link`) unless already owned; `PortSetupError` if not."""
        if self._lock is None or not self._lock.held:
            self._lock = claim_link(self.link)

    def adopt(self, lock: Lock) -> None:
        """Own the link by a lock `claim_link` took earlier (the daemon claims every
        link before it creates anything); `close` releases it."""
        if self._lock is not None and self._lock is not lock:
            self._lock.release()
        self._lock = lock

    def open(self) -> None:
        """Own the link, create the pty and place the link; `PortSetupError` says why
        it cannot (and the link's lock is let go)."""
        if self._master >= 0:
            return
        self.claim()
        try:
            self._master, self._slave_path = self._create_pty()
        except BaseException:
            self._release()
            raise
        self._attached = False
        self._termios_reported = False
        self._poller = select.poll()  # one for the pty's life: a poll per write is hot
        self._poller.register(self._master, select.POLLOUT)

    def _create_pty(self) -> tuple[int, str]:
        gid = _resolve_gid(self.group, self.link)
        try:
            master, slave = os.openpty()  # non-inheritable; glibc opens the slave O_NOCTTY
        except OSError as exc:
            raise PortSetupError(
                f"port {self.link}: cannot create a pty: {_why(exc)}", self.link
            ) from None
        try:
            path = os.ttyname(slave)
            tty.setraw(slave)
            os.set_blocking(master, False)
            _set_node(path, self.mode, gid)
            self._place_link(path)
        except (OSError, termios.error) as exc:
            os.close(master)
            why = _why(exc) if isinstance(exc, OSError) else str(exc)
            raise PortSetupError(f"port {self.link}: {why}", self.link) from None
        finally:
            os.close(slave)  # keep none: an open slave fd hides the program's closes
        return master, path

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def set_access(self, mode: int, group: str | int | None) -> None:
        """New `mode` and `group` for the node (at once when open); `PortSetupError`
        (the old ones stay) when they cannot be set."""
        if self._master >= 0:
            try:
                _set_node(self._slave_path, mode, _resolve_gid(group, self.link))
            except OSError as exc:
                raise PortSetupError(f"port {self.link}: {_why(exc)}", self.link) from None
        self.mode, self.group = mode, group

    def close(self) -> None:
        """Remove the link (if it still points at our pty), close the pty, then let
        the link's lock go; idempotent."""
        if self._master >= 0:
            try:
                if os.readlink(self.link) == self._slave_path:
                    os.unlink(self.link)
            except OSError:
                pass  # gone, or replaced by someone else: not ours to remove
            os.close(self._master)  # the program sees a hang-up; /dev/pts/N disappears
            self._master = -1
            self._slave_path = ""
            self._attached = False
        self._release()  # (last: the next verld finds the link free)

    def __enter__(self) -> PtyPort:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _place_link(self, target: str) -> None:
        tmp = f"{self.link}.{os.getpid()}.tmp"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.symlink(target, tmp)
        try:
            os.replace(tmp, self.link)  # atomic over an old link
        except OSError:
            os.unlink(tmp)
            raise

    # -- state -----------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._master >= 0

    @property
    def fd(self) -> int:
        """The master fd, for `loop.add_reader`/`add_writer` (only while attached)."""
        if self._master < 0:
            raise ValueError(f"port {self.link} is not open")
        return self._master

    @property
    def slave_path(self) -> str:
        """The device node the link points at (`/dev/pts/N`); "" when closed."""
        return self._slave_path

    def program_attached(self) -> bool:
        """Whether a program has the device end open (the master shows no POLLHUP).

        When a program is first seen after a detach, bytes still buffered towards
        it (written before its open) are discarded, and `fix_termios` may report
        again.
        """
        if self._master < 0:
            return False
        events = self._poller.poll(0)
        now = not (events and events[0][1] & _HUP)
        if now and not self._attached:
            self._discard_stale()
            self._termios_reported = False
        self._attached = now
        return now

    def _discard_stale(self) -> None:
        """Empty the slave's input queue: bytes verld wrote before this program came.

        `tcflush(master, TCOFLUSH)` is not enough (measured: 247 of 300 stale writes
        survived it); `TCIFLUSH` on a slave fd drops them all (300 of 300). The fd
        comes from TIOCGPTPEER (no path lookup), else from the node; it is closed
        at once.
        """
        flags = os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK
        try:
            peer = fcntl.ioctl(self._master, _TIOCGPTPEER, flags)
        except OSError:
            try:
                peer = os.open(self._slave_path, flags)
            except OSError:
                return
        try:
            termios.tcflush(peer, termios.TCIFLUSH)
        except termios.error:
            pass
        finally:
            os.close(peer)

    def fix_termios(self) -> bool:
        """Clear ECHO, ECHONL and ICANON if the program set them on the shared termios.

        True only the first time per program open that something was cleared (so
        the front logs once); False when nothing needed clearing or it was reported.
        """
        if self._master < 0:
            return False
        try:
            attrs = termios.tcgetattr(self._master)
            bad = attrs[3] & _BAD_LFLAGS
            if not bad:
                return False
            attrs[3] &= ~bad
            termios.tcsetattr(self._master, termios.TCSANOW, attrs)
        except termios.error:
            return False
        first = not self._termios_reported
        self._termios_reported = True
        return first

    # -- bytes -----------------------------------------------------------------

    def read(self) -> bytes | None:
        """What the program wrote: bytes, b"" for nothing yet, None for no program.

        None (EIO: no slave fd open) comes only after what a departed program wrote
        has been read; the front then removes its reader.
        """
        if self._master < 0:
            return None
        try:
            data = os.read(self._master, _READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return b""
        except OSError as exc:
            if exc.errno in (errno.EIO, errno.ENXIO):
                return None
            raise
        return data or None

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Write without blocking: bytes written (0 when full), or `DETACHED`.

        `DETACHED` (-1) means no program has the port open: nothing was written,
        so no program opening later reads these bytes; the front drops them.
        """
        if not self.program_attached():
            return DETACHED
        try:
            return os.write(self._master, data)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:
            if exc.errno in (errno.EIO, errno.ENXIO):
                return DETACHED
            raise


def claim_link(link: str) -> Lock:
    """Own a port's link before anything is created: its lock, then what is there.

    `PortSetupError` (nothing touched) when the link's directory does not exist,
    another process holds `LINK.lock` (named: "pid 812 (verld)"), or the path is
    something other than a symlink to a pty. With the lock ours, a symlink to a pty
    there is a leftover of an earlier run: `open` re-points it.
    """
    directory = os.path.dirname(os.path.abspath(link))
    if not os.path.isdir(directory):
        raise PortSetupError(f"port {link}: directory {directory} does not exist", link)
    try:
        lock = acquire(link)
    except LockHeld as exc:
        raise PortSetupError(
            f"port {link} belongs to {exc.holder}, which holds {exc.path}; not touching it", link
        ) from None
    except OSError as exc:
        raise PortSetupError(
            f"port {link}: cannot lock {lock_path(link)}: {exc.strerror or exc}", link
        ) from None
    try:
        _check_link(link)
    except BaseException:
        lock.release()
        raise
    return lock


def _check_link(link: str) -> None:
    try:
        st = os.lstat(link)
        if stat.S_ISLNK(st.st_mode) and _PTS.fullmatch(os.readlink(link)):
            return  # a link an earlier verld left: replaced in _place_link
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PortSetupError(f"port {link}: {_why(exc)}", link) from None
    raise PortSetupError(f"port {link}: exists and is not a link to a pty; not touching it", link)


def _set_node(path: str, mode: int, gid: int) -> None:
    """The pty node's group, then its mode (in that order: devpts' own group, often
    `tty`, never gets `mode`); no chown when the group is already right."""
    if os.stat(path).st_gid != gid:
        os.chown(path, -1, gid)
    os.chmod(path, mode)


def _why(exc: OSError) -> str:
    """An OSError as the user can act on it: EPERM from chown is the hardened unit."""
    text = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    if exc.errno == errno.EPERM:
        text += (
            " (under systemd, ports need the verld.service.d/ports.conf drop-in, "
            "which allows chown: docs/deploy.md)"
        )
    return text


def _resolve_gid(group: str | int | None, link: str) -> int:
    """The node's group: `group` (name or id), or the process's when None.

    Not `sockfile.set_group`: that logs a socket hint and carries on, but a pty
    left with devpts' group (often `tty`) and `mode` would open it to that group.
    """
    if group is None:
        return os.getegid()
    if isinstance(group, int):
        return group
    import grp

    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise PortSetupError(f"group {group!r} does not exist", link) from None
