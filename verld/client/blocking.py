"""The blocking `Client`: one Unix-socket connection, replies matched by id.

Requests are framed and replies split by `verld.wire` (via `messages`). Replies
that arrive for another id are kept until asked for; events are buffered for
`events()`.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from verld.client.engine import Engine
from verld.client.messages import (
    ClientError,
    Reply,
    Unreachable,
    call_request,
    check,
    connect_failed,
    encode_message,
    is_connection_error,
    is_event,
    new_decoder,
    parse_message,
    reply_from,
)
from verld.errors import ErrorCode

_RECV_SIZE = 65536


def _connect_unix(path: str, timeout: float | None) -> socket.socket:
    """Connect, riding out a full listen backlog (EAGAIN on AF_UNIX) for up to `timeout`."""
    deadline = time.monotonic() + (timeout if timeout is not None else 30.0)
    delay = 0.005
    while (sock := _try_connect(path)) is None:
        if time.monotonic() >= deadline:
            raise Unreachable(f"cannot connect to {path}: verld is not accepting")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    return sock


def _try_connect(path: str) -> socket.socket | None:
    """A connected socket, or None while verld's listen backlog is full."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except BlockingIOError:
        sock.close()
        return None
    except OSError as exc:
        sock.close()
        raise connect_failed(path, exc) from None
    return sock


def _lost(exc: OSError) -> Unreachable:
    return Unreachable(f"connection to verld lost: {exc.strerror or exc}")


class Client(Engine):
    """Blocking client. Replies are matched by id; events are buffered for `events()`."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        timeout: float | None = 30.0,
        actions: Mapping[str, int] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(socket_path, actions=actions, name=name)
        self._sock: socket.socket | None = None
        self.timeout = timeout
        self._decoder = new_decoder()
        self._bodies: deque[bytes] = deque()  #: received, not yet handed out
        self._ids = itertools.count(1)
        self._events: deque[dict[str, Any]] = deque()
        self._replies: dict[int | str, dict[str, Any]] = {}

    @property
    def timeout(self) -> float | None:
        """Seconds to wait for verld (None: for ever); applies to an open connection too."""
        return self._timeout

    @timeout.setter
    def timeout(self, seconds: float | None) -> None:
        self._timeout = seconds
        if self._sock is not None:
            self._sock.settimeout(seconds)

    # --- connection -------------------------------------------------------------
    def connect(self) -> Client:
        if self._sock is not None:
            return self
        sock = _connect_unix(self.socket_path, self.timeout)
        sock.settimeout(self.timeout)
        self._sock = sock
        self._decoder = new_decoder()  # a new stream: no partial message carries over
        self._bodies.clear()
        if self.name is not None:
            self.request("hello", client=self.name)
        return self

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Client:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- messages -----------------------------------------------------------------
    def send(self, obj: Mapping[str, Any]) -> None:
        """Send one raw message (the caller picks the id)."""
        sock = self.connect()._sock
        assert sock is not None
        try:
            sock.sendall(encode_message(obj))
        except OSError as exc:
            self.close()
            raise _lost(exc) from None

    def receive(self) -> dict[str, Any]:
        """The next message (reply or event), blocking up to the client timeout."""
        sock = self._sock
        if sock is None:
            raise Unreachable("not connected")
        while not self._bodies:
            self._bodies.extend(self._decoder.feed(self._recv(sock)))
        return parse_message(self._bodies.popleft())

    def _recv(self, sock: socket.socket) -> bytes:
        """One read from verld; ClientError on timeout, Unreachable when the link is gone."""
        try:
            chunk = sock.recv(_RECV_SIZE)
        except TimeoutError:
            raise ClientError(ErrorCode.TIMEOUT, "no answer from verld in time") from None
        except OSError as exc:
            self.close()
            raise _lost(exc) from None
        if not chunk:
            self.close()
            raise Unreachable("verld closed the connection")
        return chunk

    def _wait_reply(self, req_id: int | str) -> dict[str, Any]:
        if req_id in self._replies:
            return self._replies.pop(req_id)
        while True:
            msg = self.receive()
            if is_event(msg):
                self._events.append(msg)
                continue
            if msg.get("id") == req_id:
                return msg
            if is_connection_error(msg):
                check(msg)  # busy, forbidden, too_large, shutting_down: raises
            self._replies[msg["id"]] = msg

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request, wait for its reply; ClientError on an error reply."""
        req_id = next(self._ids)
        self.send({"op": op, "id": req_id, **fields})
        return check(self._wait_reply(req_id))

    # --- verbs -----------------------------------------------------------------------
    def hello(self, name: str | None = None) -> dict[str, Any]:
        return self.request("hello", **({"client": name} if name else {}))

    def status(self) -> dict[str, Any]:
        return self.request("status")

    def inhibit(self) -> str:
        """Have verld let go of the device port (admin); its path, once closed. It stays
        closed while this connection is open, until `uninhibit`."""
        return str(self.request("inhibit")["port"])

    def uninhibit(self) -> None:
        """End an inhibition (any admin's; a no-op when there is none)."""
        self.request("uninhibit")

    def call(
        self,
        data: bytes | str,
        *,
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool = False,
        reply: bool | None = None,
    ) -> Reply:
        """One call; a device status is in the Reply, API errors raise ClientError.

        `reply=False`: a command the device does not answer (written once, never
        retried; the Reply has `reply` False); `True`: await an answer even where
        `device.line.no_reply` matches; None: the daemon decides.
        """
        req_id = next(self._ids)
        self.send({**call_request(data, timeout, retry, wait, reply), "id": req_id})
        return reply_from(self._wait_reply(req_id))

    def ping(self, timeout: float | None = None) -> Reply:
        return self.call(b"", timeout=timeout)

    def execute(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The reference engine: normalize, to_packet, send, interpret."""
        return self.interpret(self.call(self.to_packet(payload)))

    def subscribe(self, topics: Iterable[str] = ("events",)) -> dict[str, Any]:
        return self.request("subscribe", topics=list(topics))

    def events(self) -> Iterator[dict[str, Any]]:
        """Events as they arrive (subscribe first); blocks between them."""
        while True:
            while self._events:
                yield self._events.popleft()
            msg = self.receive()
            if is_event(msg):
                yield msg
            elif "id" in msg:
                self._replies[msg["id"]] = msg
