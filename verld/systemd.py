"""systemd integration: readiness/status/watchdog notifications and socket activation.

Uses systemd-python's `daemon.notify` when installed, else sends the datagram
itself (`$NOTIFY_SOCKET`, a leading `@` means the abstract namespace). Without
systemd every function here is a harmless no-op.
"""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Callable

_SD_LISTEN_FDS_START = 3


def _pure_notify(message: str) -> bool:
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message.encode(), address)
    except OSError:
        return False
    return True


def _pick_notifier() -> Callable[[str], bool]:
    try:
        daemon = importlib.import_module("systemd.daemon")
    except ImportError:
        return _pure_notify

    def notify(message: str) -> bool:
        return bool(daemon.notify(message))

    return notify


notify: Callable[[str], bool] = _pick_notifier()


def watchdog_interval() -> float | None:
    """Half of WATCHDOG_USEC in seconds, when the watchdog is meant for this process."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None


def listen_socket() -> socket.socket | None:
    """The first socket passed by socket activation (LISTEN_FDS/LISTEN_PID), if any."""
    pid = os.environ.get("LISTEN_PID")
    fds = os.environ.get("LISTEN_FDS")
    if not fds or (pid and pid != str(os.getpid())):
        return None
    try:
        count = int(fds)
    except ValueError:
        return None
    if count < 1:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    fd = _SD_LISTEN_FDS_START
    os.set_inheritable(fd, False)
    sock = socket.socket(fileno=fd)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        sock.detach()
        raise OSError("socket activation passed an fd that is not a Unix stream socket")
    sock.setblocking(False)
    return sock
