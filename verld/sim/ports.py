"""Where the simulated device's bytes go: a pty behind a symlink, or TCP.

A port owns file descriptors only; the loop reads and writes `port.fd`. The
loop must stop watching `fd` before calling `unplug`, `accept` or `hang_up`,
which close it.

pty: the sim keeps its own slave fd open, so the master never sees a hang-up
(EIO) while no daemon has the device open. Unplug closes the master *and* that
slave fd and removes the symlink: the daemon's fd then reads b''/EIO like an
unplugged USB-serial adapter. Replug makes a new pty behind the same link path.

tcp: one connection at a time, on 127.0.0.1 only; a new one replaces the old.
While unplugged, connections are accepted and closed at once.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tty
from typing import Protocol


class Port(Protocol):
    """The device end of the link."""

    @property
    def fd(self) -> int | None:
        """The data fd; None while unplugged or (tcp) with nobody connected."""
        ...

    @property
    def listener(self) -> int | None:
        """The fd to watch for new connections (tcp), else None."""
        ...

    @property
    def address(self) -> str:
        """The pty link path, or tcp://127.0.0.1:PORT."""
        ...

    @property
    def peer_closes(self) -> bool:
        """A hang-up on fd is the peer leaving (tcp), not an error to wait out (pty)."""
        ...

    def plug(self) -> None: ...
    def unplug(self) -> None: ...
    def accept(self) -> bool: ...
    def hang_up(self) -> None: ...
    def close(self) -> None: ...


class PtyPort:
    """A pty pair whose slave is reachable through a stable symlink."""

    listener: int | None = None
    peer_closes = False

    def __init__(self, link: str) -> None:
        self.address = self.link = link
        self.fd: int | None = None
        self._slave: int | None = None

    def plug(self) -> None:
        """Create the pty and point the link at its slave."""
        if self.fd is not None:
            return
        master, slave = os.openpty()
        try:
            tty.setraw(slave)
            os.set_blocking(master, False)
            _replace_symlink(os.ttyname(slave), self.link)
        except OSError:
            os.close(master)
            os.close(slave)
            raise
        self.fd, self._slave = master, slave

    def unplug(self) -> None:
        """Close both ends and remove the link."""
        for fd in (self.fd, self._slave):
            if fd is not None:
                os.close(fd)
        self.fd = self._slave = None
        if os.path.islink(self.link):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.link)

    def accept(self) -> bool:
        return False

    def hang_up(self) -> None:
        """Nothing to do: the pty stays; reading it again is paced by the loop."""

    def close(self) -> None:
        self.unplug()


class TcpPort:
    """A TCP listener on 127.0.0.1 serving one connection at a time."""

    peer_closes = True

    def __init__(self, port: int) -> None:
        self._server = socket.create_server(("127.0.0.1", port), backlog=4)
        self._server.setblocking(False)
        self.listener: int | None = self._server.fileno()
        self.address = f"tcp://127.0.0.1:{self._server.getsockname()[1]}"
        self.fd: int | None = None
        self._conn: socket.socket | None = None
        self._plugged = True

    def plug(self) -> None:
        self._plugged = True

    def unplug(self) -> None:
        self._plugged = False
        self.hang_up()

    def accept(self) -> bool:
        """Take a pending connection; True when it replaced the data fd."""
        try:
            conn, _ = self._server.accept()
        except (BlockingIOError, ConnectionError):
            return False
        if not self._plugged:
            conn.close()
            return False
        self.hang_up()
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn, self.fd = conn, conn.fileno()
        return True

    def hang_up(self) -> None:
        """Close the current connection, if any."""
        if self._conn is not None:
            self._conn.close()
        self._conn = self.fd = None

    def close(self) -> None:
        self.hang_up()
        self._server.close()
        self.listener = None


def _replace_symlink(target: str, link: str) -> None:
    """Point `link` at `target` atomically (symlink to a temp name, then rename)."""
    if os.path.lexists(link) and not os.path.islink(link):
        raise FileExistsError(f"{link} exists and is not a symlink: not replacing it")
    tmp = f"{link}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
