"""The API socket file: refuse to steal a live one, replace a stale one, set its group."""

from __future__ import annotations

import errno
import os
import socket
import stat

import structlog

from verld.errors import SocketInUse

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


def clear_stale_socket(path: str) -> None:
    """Remove a socket file left by a crashed run; refuse to steal a live one."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUse(f"{path} exists and is not a socket; not touching it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise SocketInUse(f"cannot probe {path}: {exc.strerror}") from None
        os.unlink(path)  # nobody listens: a stale file from a crashed run
        log.info("stale_socket_removed", path=path)
        return
    finally:
        probe.close()
    raise SocketInUse(f"another process is already serving {path} (is verld running?)")
