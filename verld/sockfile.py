"""The API socket file: own it by its lock, refuse to steal a live one, replace a
stale one; its directory safe (created 0755, refused when others may write it), its
mode and group given without following a path (docs/security.md, "The socket file")."""

from __future__ import annotations

import errno
import os
import socket
import stat

import structlog

from verld.errors import SocketInUse
from verld.ownership import Lock, LockHeld, acquire, lock_path

log = structlog.get_logger("verld.server")


def bind_socket(
    path: str, mode: int, group: str | int | None = None
) -> tuple[socket.socket, tuple[int, int]]:
    """A new AF_UNIX stream socket bound at `path`, not listening yet, whose file has
    `mode` and `group`; with the file's (device, inode).

    Nothing here follows a path. Linux creates the bound file with the socket's own
    inode mode minus the umask, and `fchmod` on a socket fd sets that inode (after
    bind it no longer reaches the file): so `fchmod(fd, mode)` comes before bind, and
    bind runs under a umask that keeps those bits. The file is born with `mode`, never
    wider. The group is then set on the file bind made, pinned by an O_PATH|O_NOFOLLOW
    fd (checked to be a socket of ours), before `listen`: no client can connect in
    between. A group that cannot be set is logged, not fatal.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.fchmod(sock.fileno(), mode)
        umask = os.umask(0o777 & ~mode)  # (process-wide, for this one call; verld's
        # other threads, if any, create no files)
        try:
            sock.bind(path)
        finally:
            os.umask(umask)
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
                raise SocketInUse(f"{path} was replaced right after bind; not touching it")
            if group is not None:
                _set_group(fd, path, group)
        finally:
            os.close(fd)
    except BaseException:
        sock.close()
        raise
    return sock, (st.st_dev, st.st_ino)


def _set_group(fd: int, path: str, group: str | int) -> None:
    """Give the socket file pinned by `fd` (O_PATH) its group; a failure (no CAP_CHOWN,
    seccomp) is logged, not fatal."""
    try:
        gid = _gid(group)
        if os.fstat(fd).st_gid != gid:
            os.chown(f"/proc/self/fd/{fd}", -1, gid)  # (fchown refuses O_PATH fds)
    except KeyError:
        log.error("socket_group_failed", path=path, group=group, error="no such group")
    except OSError as exc:
        hint = "run verld with that group, or use SocketGroup= on verld.socket"
        log.error("socket_group_failed", path=path, group=group, error=exc.strerror, hint=hint)


def _gid(group: str | int) -> int:
    if isinstance(group, int):
        return group
    import grp

    return grp.getgrnam(group).gr_gid


def socket_directory(path: str) -> None:
    """Make the directory of socket `path` safe to serve from, or `SocketInUse` naming why.

    Every existing directory on the way (and on the way its symlinks resolve to) must
    belong to root or to verld's user and, unless sticky (like /tmp), be writable by
    nobody else: whoever may write the socket's directory can replace the socket and
    read every client's requests. Missing levels are created 0755 whatever the umask,
    owned by verld's user.
    """
    parent = os.path.dirname(os.path.abspath(path))
    missing: list[str] = []
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    _check_tree(parent)
    for level in reversed(missing):
        try:
            os.mkdir(level, 0o755)  # never wider than 0755, whatever the umask
        except FileExistsError:  # made by someone else meanwhile: judged as any other
            _check_tree(level)
            continue
        except OSError as exc:
            raise SocketInUse(f"cannot create {level}: {exc.strerror or exc}") from None
        fd = os.open(level, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, 0o755)  # and not narrower either: clients must traverse it
        finally:
            os.close(fd)


def _check_tree(directory: str) -> None:
    """`SocketInUse` naming the first directory from `directory` up to / (also along
    its resolved path) that another user may write."""
    seen: set[str] = set()
    for start in (os.path.abspath(directory), os.path.realpath(directory)):
        d = start
        while d not in seen:
            seen.add(d)
            _check_dir(d)
            d = os.path.dirname(d)


def _check_dir(d: str) -> None:
    try:
        st = os.stat(d)
    except OSError as exc:
        raise SocketInUse(f"cannot look at {d}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise SocketInUse(f"{d} is not a directory; the socket cannot go under it")
    why = None
    if st.st_uid not in (0, os.geteuid()):
        why = f"belongs to uid {st.st_uid}"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(st.st_mode)
        why = f"is writable by other users without the sticky bit (mode {mode:04o})"
    if why is not None:
        raise SocketInUse(
            f"{d} {why}: another user could replace the API socket there and read every "
            "client's requests; make it 0755 and root's or verld's, or put the socket elsewhere"
        )


def claim_socket(path: str) -> Lock:
    """Own the API socket path before anything is created: its lock, then its file.

    `SocketInUse` (nothing touched) when another process holds `PATH.lock` (named),
    or the file there is not a socket, or something still answers on it (a verld
    from before the lock, another program). A socket file nobody answers on, with
    the lock free, is a leftover: `clear_stale_socket` replaces it at bind. The
    socket's directory is checked, and created if missing (`socket_directory`; the
    lock file lives in it).
    """
    socket_directory(path)
    try:
        lock = acquire(path)
    except LockHeld as exc:
        raise SocketInUse(
            f"{exc.holder} is already serving {path} (it holds {exc.path}); not touching it"
        ) from None
    except OSError as exc:
        raise SocketInUse(f"cannot lock {lock_path(path)}: {exc.strerror or exc}") from None
    try:
        _stale(path)
    except BaseException:
        lock.release()
        raise
    return lock


def clear_stale_socket(path: str) -> None:
    """Remove a socket file left by a crashed run; refuse to steal a live one."""
    if _stale(path):
        os.unlink(path)  # nobody listens: a stale file from a crashed run
        log.info("stale_socket_removed", path=path)


def _stale(path: str) -> bool:
    """Whether a leftover socket file is at `path`: False when there is none;
    `SocketInUse` when the file is no socket or a process answers on it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise SocketInUse(f"cannot look at {path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUse(f"{path} exists and is not a socket; not touching it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise SocketInUse(f"cannot probe {path}: {exc.strerror}") from None
        return True
    finally:
        probe.close()
    raise SocketInUse(f"another process is already serving {path} (is verld running?)")
