"""Ownership of a path another verld could also want: an exclusive flock on `PATH.lock`.

A second start of the same config must never harm the running one (docs/deploy.md,
section 5), so ownership is a lock, not a guess: before verld
binds its API socket or places a port's link it takes an exclusive, non-blocking
`flock` on `SOCKET.lock` / `LINK.lock` beside it and keeps the fd open for as long
as it owns the path. A lock another process holds means "not yours: touch
nothing" (`LockHeld`, naming the holder); a lock nobody holds means whatever is at
the path is a leftover of a run that ended, and may be replaced. The kernel drops
a flock when its holder dies, even by SIGKILL, so a crash never leaves a path owned.

- **Who holds it.** The holder writes its pid into the file once it has the lock
  (`os.getpid()` and a newline); a refused starter reads it and names the program
  from `/proc/PID/comm` where it can see it ("pid 812 (verld)"; "pid 812" where
  /proc hides other processes, as under the hardened unit; "another process" when
  the file holds no pid yet).
- **The fd.** O_CLOEXEC, so the simulator and other children never inherit the
  lock (a child holding it would outlive verld and keep the path owned);
  O_NOFOLLOW, so a symlink planted at `PATH.lock` is refused rather than followed.
  Created with mode 0644 under the process's umask: 0600 under the unit's
  UMask=0077, so another user can neither read it nor hold it (a local user
  holding a crashed verld's lock file would keep it from restarting).
- **The file is removed at release, while still held.** Leaving lock files behind
  is harmless but litters `/run/verld/ports`; removing one after letting go races
  with a starter that opened the old file. So `release` unlinks the file first and
  closes the fd (letting go) after, and `acquire` checks, once it has the lock,
  that the file it locked is still the one at the path (same device and inode);
  when not (its holder removed it in between), it tries again on the new file.
  Two starters then always meet on the same inode: exactly one wins.
- **A leftover lock file of another user** (readable, not writable: a crashed
  verld run as root) is locked read-only, then, since nobody held it, removed and
  replaced by one of our own, so the pid in it is ours. Where it cannot be removed
  (a sticky directory such as /tmp) the read-only lock is kept and the old pid
  stays in the file: a refused starter's "held by" is then wrong, but the lock
  still holds (and such a start fails anyway at that user's leftover link or socket).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat

#: the lock file of `path`
SUFFIX = ".lock"
_TRIES = 8  #: fresh files to try when holders keep removing theirs under us


class LockHeld(Exception):
    """Another process holds the lock: `path` (the lock file) and `holder` (who)."""

    def __init__(self, path: str, holder: str) -> None:
        super().__init__(f"{path} is held by {holder}")
        self.path = path
        self.holder = holder


class Lock:
    """An exclusive flock on `path` (a `.lock` file), held until `release`."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    def __repr__(self) -> str:
        return f"Lock({self.path!r}, {'held' if self.held else 'released'})"

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        """Remove the lock file (while still holding it), then let go; idempotent."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            mine = os.fstat(fd)
            there = os.stat(self.path, follow_symlinks=False)
            if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
                os.unlink(self.path)
        except OSError:
            pass  # gone already, or the directory is read-only now: the lock still goes
        finally:
            os.close(fd)

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_path(path: str) -> str:
    """The lock file that says who owns `path`."""
    return path + SUFFIX


def acquire(path: str) -> Lock:
    """Take the exclusive lock on `lock_path(path)`, without waiting.

    `LockHeld` when another process (or another fd of this one) holds it; OSError
    when the lock file cannot be opened or locked (its directory missing or not
    writable, a symlink or a directory at its name).
    """
    lock = lock_path(path)
    for _ in range(_TRIES):
        fd, writable = _open(lock)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise LockHeld(lock, holder) from None
        except OSError:
            os.close(fd)
            raise
        if not _still_there(fd, lock):
            os.close(fd)  # its holder removed it before letting go: try the new one
            continue
        if not writable and _remove(lock):
            os.close(fd)  # a leftover of another user's run, nobody's now: make our own
            continue
        if writable:
            _write_pid(fd)
        return Lock(lock, fd)
    raise OSError(errno.EAGAIN, f"{lock} was replaced {_TRIES} times while locking it")


def _open(lock: str) -> tuple[int, bool]:
    """The lock file's fd (created if missing) and whether it is writable."""
    flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY
    try:
        fd, writable = os.open(lock, flags | os.O_RDWR | os.O_CREAT, 0o644), True
    except PermissionError:  # another user's file: read-only is enough to lock it
        fd, writable = os.open(lock, flags | os.O_RDONLY), False
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(exc.errno, "is a symlink, not a lock file", lock) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "is not a regular file", lock)
    return fd, writable


def _still_there(fd: int, lock: str) -> bool:
    """Whether the file `fd` locked is still the one at `lock`."""
    mine = os.fstat(fd)
    try:
        there = os.stat(lock, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)


def _remove(lock: str) -> bool:
    try:
        os.unlink(lock)
    except OSError:
        return False  # (a directory we cannot write: keep the read-only lock)
    return True


def _write_pid(fd: int) -> None:
    """Our pid into the lock file (for a refused starter's message); best effort."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _holder(fd: int) -> str:
    """Who holds the lock on `fd`'s file, as well as can be told."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return describe_pid(int(text)) if text.isdigit() else "another process"


def describe_pid(pid: int) -> str:
    """The process as a user can find it: `pid 812 (verld)`, or `pid 812` where
    /proc does not show it (another user's, under ProtectProc=invisible)."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            name = f.read().strip()
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} ({name})" if name else f"pid {pid}"
