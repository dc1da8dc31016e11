"""systemd integration: readiness/status/watchdog notifications and socket activation.

Uses systemd-python's `daemon.notify` when installed, else sends the datagram
itself (`$NOTIFY_SOCKET`, a leading `@` means the abstract namespace). Without
systemd every function here is a harmless no-op.

The watchdog is fed from the event loop itself (a timer at half WATCHDOG_USEC),
not from a thread: a wedged loop stops the pings and systemd restarts verld.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import time
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
        value = int(usec)
    except ValueError:
        return None
    return value / 2_000_000 if value > 0 else None


def reloading() -> None:
    """Tell systemd a reload started; READY=1 ends it (sd_notify(3))."""
    notify(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}")


def start_watchdog(loop: asyncio.AbstractEventLoop) -> Callable[[], None] | None:
    """Send WATCHDOG=1 from `loop` every half interval; returns the function that stops it."""
    interval = watchdog_interval()
    if interval is None:
        return None
    handle: asyncio.TimerHandle | None = None

    def ping() -> None:
        nonlocal handle
        notify("WATCHDOG=1")
        handle = loop.call_later(interval, ping)

    def stop() -> None:
        if handle is not None:
            handle.cancel()

    ping()
    return stop


def listen_sockets() -> dict[str, socket.socket]:
    """The sockets passed by socket activation (LISTEN_FDS/LISTEN_PID), by name:
    "api" (the API's Unix stream socket), "modbus" (the Modbus TCP front's) and
    "net-NAME" (network port NAME's); empty when none were passed.

    The one named `modbus` in $LISTEN_FDNAMES (`FileDescriptorName=modbus`) and those
    named `net-NAME` must be TCP listening sockets; the first other one is the API's
    and must be a Unix stream socket.
    """
    pid = os.environ.get("LISTEN_PID")
    fds = os.environ.get("LISTEN_FDS")
    if not fds or (pid and pid != str(os.getpid())):
        return {}
    try:
        count = int(fds)
    except ValueError:
        return {}
    names = os.environ.get("LISTEN_FDNAMES", "").split(":")
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    found: dict[str, socket.socket] = {}
    for i in range(max(count, 0)):
        fd = _SD_LISTEN_FDS_START + i
        os.set_inheritable(fd, False)
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        named = names[i] if i < len(names) else ""
        tcp = named == "modbus" or (named.startswith("net-") and len(named) > 4)
        key = named if tcp else "api"
        if key in found:
            sock.detach()  # (left open: systemd owns it)
        elif tcp and sock.family not in (socket.AF_INET, socket.AF_INET6):
            sock.detach()
            raise OSError(f"socket activation passed a '{named}' fd that is not a TCP socket")
        elif not tcp and (sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM):
            sock.detach()
            raise OSError("socket activation passed an fd that is not a Unix stream socket")
        else:
            found[key] = sock
    return found
