"""The API socket file: own it by its lock, refuse to steal a live one, replace a
stale one, set its group."""

from __future__ import annotations

import errno
import os
import socket
import stat

import structlog

from verld.errors import SocketInUse
from verld.ownership import Lock, LockHeld, acquire, lock_path

log = structlog.get_logger("verld.server")


def set_group(path: str, group: str | int) -> None:
    """Give the socket its group; a failure (no CAP_CHOWN, seccomp) is logged, not fatal."""
    try:
        gid = _gid(group)
        if os.stat(path).st_gid != gid:
            os.chown(path, -1, gid)
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


def claim_socket(path: str) -> Lock:
    """Own the API socket path before anything is created: its lock, then its file.

    `SocketInUse` (nothing touched) when another process holds `PATH.lock` (named),
    or the file there is not a socket, or something still answers on it (a verld
    from before the lock, another program). A socket file nobody answers on, with
    the lock free, is a leftover: `clear_stale_socket` replaces it at bind. The
    socket's directory is created if missing (the lock file lives in it).
    """
    parent = os.path.dirname(path)
    if parent:
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise SocketInUse(f"cannot create {parent}: {exc.strerror or exc}") from None
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
