"""The runtime control socket: one text command per line, one JSON line back.

`run_command` parses and dispatches a command to a `Target` (the running sim)
and is free of I/O; `ControlServer` is the Unix-socket edge, driven by the
sim's selector (every registration's data is a callback taking the event mask).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import stat
from collections.abc import Callable
from typing import Any, Protocol

from verld.sim.faults import Faults, parse_seconds

MAX_LINE = 4096  #: a longer command line closes the control connection
HELP = (
    "status | set NAME VALUE | hang | unhang | unplug [SECONDS] | replug | "
    "garbage N | event HEX | reset | help"
)


class Target(Protocol):
    """What the control commands act on."""

    faults: Faults

    def status(self) -> dict[str, Any]: ...
    def unplug(self, seconds: float) -> None: ...
    def replug(self) -> None: ...
    def inject_garbage(self, size: int) -> None: ...
    def inject_event(self, payload: bytes) -> None: ...
    def reset_faults(self) -> None: ...


#: command → (fewest, most) arguments
_ARITY = {
    "status": (0, 0),
    "set": (2, 2),
    "hang": (0, 0),
    "unhang": (0, 0),
    "unplug": (0, 1),
    "replug": (0, 0),
    "garbage": (1, 1),
    "event": (1, 1),
    "reset": (0, 0),
    "help": (0, 0),
}


def run_command(target: Target, line: str) -> dict[str, Any]:
    """Run one control command; the JSON-able answer has `ok` and more."""
    words = line.split()
    if not words:
        return {"ok": False, "error": "empty command", "help": HELP}
    name, args = words[0].lower(), words[1:]
    try:
        return _dispatch(target, name, args)
    except ValueError as exc:
        return {"ok": False, "error": str(exc)}


def _dispatch(target: Target, name: str, args: list[str]) -> dict[str, Any]:
    if name not in _ARITY:
        raise ValueError(f"unknown command {name!r}; commands: {HELP}")
    low, high = _ARITY[name]
    if not low <= len(args) <= high:
        raise ValueError(f"{name}: wrong number of arguments; usage: {HELP}")
    if name == "set":
        target.faults.set(args[0].lower(), args[1])
    elif name in ("hang", "unhang"):
        target.faults.hang = name == "hang"
    elif name == "unplug":
        target.unplug(parse_seconds(args[0]) if args else 1.0)
    elif name == "replug":
        target.replug()
    elif name == "garbage":
        size = int(args[0])
        if not 1 <= size <= 1 << 20:
            raise ValueError("garbage: N must be 1..1048576")
        target.inject_garbage(size)
    elif name == "event":
        target.inject_event(bytes.fromhex(args[0]))
    elif name == "reset":
        target.reset_faults()
    elif name == "help":
        return {"ok": True, "help": HELP}
    return {"ok": True} | target.status()


class ControlServer:
    """A Unix stream socket serving any number of control connections."""

    def __init__(
        self,
        path: str,
        selector: selectors.BaseSelector,
        handle: Callable[[str], dict[str, Any]],
    ) -> None:
        self.path = path
        self._selector = selector
        self._handle = handle
        _remove_stale_socket(path)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(path)
        self._server.listen(8)
        self._server.setblocking(False)
        self._conns: dict[int, _Conn] = {}
        selector.register(self._server, selectors.EVENT_READ, self._on_accept)

    def _on_accept(self, _mask: int) -> None:
        try:
            sock, _ = self._server.accept()
        except (BlockingIOError, ConnectionError):
            return
        sock.setblocking(False)
        conn = _Conn(sock)
        self._conns[sock.fileno()] = conn
        self._selector.register(sock, selectors.EVENT_READ, lambda mask: self._on_io(conn, mask))

    def _on_io(self, conn: _Conn, mask: int) -> None:
        if mask & selectors.EVENT_READ and not self._read(conn):
            self._drop(conn)
            return
        if conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._drop(conn)
                return
            del conn.out[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        self._selector.modify(conn.sock, events, self._selector.get_key(conn.sock).data)

    def _read(self, conn: _Conn) -> bool:
        """Read and answer whole lines; False when the connection is to be closed."""
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        conn.buf += data
        while b"\n" in conn.buf:
            line, _, rest = bytes(conn.buf).partition(b"\n")
            conn.buf = bytearray(rest)
            answer = self._handle(line.decode("utf-8", errors="replace"))
            conn.out += json.dumps(answer).encode() + b"\n"
        return len(conn.buf) <= MAX_LINE

    def _drop(self, conn: _Conn) -> None:
        self._selector.unregister(conn.sock)
        self._conns.pop(conn.sock.fileno(), None)
        conn.sock.close()

    def close(self) -> None:
        """Close every connection and the listener; remove the socket file."""
        for conn in list(self._conns.values()):
            self._drop(conn)
        self._selector.unregister(self._server)
        self._server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.out = bytearray()


def _remove_stale_socket(path: str) -> None:
    """Remove a socket file left by an earlier run; refuse to remove anything else."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"control path {path} exists and is not a socket")
    os.unlink(path)
