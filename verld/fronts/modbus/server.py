"""The Modbus TCP server front: Modbus masters reach the device through verld.

Strategy: every TCP connection is one owner in the core's fair queue, like an API
client. Its bytes are cut into MBAP requests (`mbap.RequestDecoder`); each request's
unit + PDU becomes a call, and each call's end becomes the response frame
(`mbap.answer`, the gateway exception mapping). A connection may pipeline: its
responses go back in request order, each held in a slot until those before it are
written. `read_only` (the default) answers every function code but 1-4 with
exception 01 without touching the device; on `modbus-rtu` a unit-0 request is a
broadcast and gets no response at all. A malformed MBAP header closes that
connection only; one silent for `idle_timeout` is closed; connections beyond
`max_connections` are closed at once. What a connection may hold is bounded: past
`api.client_queue` unanswered requests it is not read until it catches up.

One turn of the event loop serves at most `TURN` requests of one connection. A master
may pipeline thousands of requests in one write, and requests that end at once (an
offline unit, `read_only`, beyond its share: `busy`) never count toward its share, so
without the bound one read could keep verld from everything else for a long while:
from reading the device's replies in time (another master's call would time out with
its answer already waiting) and from serving the other connections. The rest wait in
the connection's backlog, which is served a turn at a time, and the connection is not
read until it is empty. The answers of one turn go out in one write.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import Any, cast

import structlog

from verld.calls import CallResult
from verld.config import Config
from verld.config.model import host_port
from verld.fronts.base import Core
from verld.fronts.modbus.mbap import (
    ILLEGAL_FUNCTION,
    READS,
    Malformed,
    RequestDecoder,
    answer,
    exception_frame,
)
from verld.link import LinkState

log = structlog.get_logger("verld.modbus")

#: a slot whose call needs no response (a broadcast)
_NOTHING = b""
#: requests of one connection served per turn of the event loop (see the module docstring)
TURN = 64


class ModbusStats:
    """The front's figures: `status.modbus`."""

    __slots__ = ("calls", "closed_malformed", "exceptions")

    def __init__(self) -> None:
        self.calls = 0
        self.exceptions: dict[int, int] = {}
        self.closed_malformed = 0


class _Slot:
    __slots__ = ("frame",)

    def __init__(self) -> None:
        self.frame: bytes | None = None  #: the response, once the call ended


class ModbusConn(asyncio.Protocol):
    """One Modbus TCP master."""

    def __init__(self, front: ModbusServer, serial: int) -> None:
        self.front = front
        self.serial = serial
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self.decoder = RequestDecoder()
        self.slots: deque[_Slot] = deque()
        #: requests read and not yet served: more than one turn's worth came at once
        self.backlog: deque[tuple[int, bytes]] = deque()
        self._turn: asyncio.Handle | None = None
        #: while serving a turn: the answers it completes, written together at its end
        self._out: list[bytes] | None = None
        self.closed = False
        self._paused_reading = False
        self._paused_writing = False
        self._quiet_since = 0.0
        self._idle: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"modbus#{self.serial}({self.peer})"

    # --- asyncio callbacks ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        peer = self.transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
        self.front.attach(self)
        if not self.closed:
            self.touch()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.touch()
        try:
            requests = self.decoder.feed(data)
        except Malformed as exc:
            self.front.malformed(self, str(exc))
            return
        if not requests:
            return
        if len(requests) <= TURN and not self.backlog:
            self._serve(requests)
            return
        self.backlog.extend(requests)
        self._next_turn()

    def _next_turn(self) -> None:
        """Serve one turn's worth of the backlog; the rest in a later turn of the loop."""
        self._turn = None
        if self.closed:
            return
        backlog = self.backlog
        self._serve([backlog.popleft() for _ in range(min(TURN, len(backlog)))])
        if backlog and not self.closed:
            self._turn = asyncio.get_running_loop().call_soon(self._next_turn)

    def _serve(self, requests: list[tuple[int, bytes]]) -> None:
        core = self.front.core
        self._out = []
        core.hold()  # a pipelined burst goes to the device in one write
        try:
            for tid, request in requests:
                self._request(tid, request)
        finally:
            core.flush()
            out, self._out = self._out, None
            if out and not self.closed and self.transport is not None:
                self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            self._read_or_not()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._idle is not None:
            self._idle.cancel()
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        self.backlog.clear()
        self.front.detach(self)

    def pause_writing(self) -> None:
        self._paused_writing = True
        self._read_or_not()

    def resume_writing(self) -> None:
        self._paused_writing = False
        self._read_or_not()

    # --- requests and responses ---------------------------------------------------------
    def _request(self, tid: int, request: bytes) -> None:
        front = self.front
        slot = _Slot()
        self.slots.append(slot)
        front.stats.calls += 1
        broadcast = front.rtu and request[0] == 0
        if front.read_only and request[1] not in READS:
            front.counts_outcome("forbidden")
            # (a broadcast is never answered, not even to say no)
            self._fill(
                slot, _NOTHING if broadcast else exception_frame(tid, request, ILLEGAL_FUNCTION)
            )
            return

        def done(result: CallResult) -> None:
            front.counts_outcome(result.error or "ok")
            if broadcast and result.error is None:
                self._fill(slot, _NOTHING)  # nobody answers a broadcast: nor do we
            else:
                self._fill(slot, answer(tid, request, result, inhibited=front.core.inhibited))

        # While an open attempt is under way (at start, say, when this connection is
        # what socket activation started verld for), the call waits for it.
        wait = front.core.session.link.state is LinkState.CONNECTING
        front.core.submit(front.core.make_call(None, self, request, done, req_id=tid, wait=wait))

    def _fill(self, slot: _Slot, frame: bytes) -> None:
        slot.frame = frame
        if len(frame) >= 9 and frame[7] & 0x80:  # an exception response
            self.front.count_exception(frame[8])
        slots = self.slots
        if slots[0] is not slot:
            return  # an earlier request's answer is still to come
        out = self._out
        corked = out is not None  # (within a turn: written at its end)
        if out is None:
            out = []
        while slots and slots[0].frame is not None:
            done = slots.popleft().frame
            if done:
                out.append(done)
        if corked:
            return
        if out and not self.closed and self.transport is not None:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        self._read_or_not()

    def _read_or_not(self) -> None:
        """Stop reading while the peer does not read, or holds too many requests."""
        if self.closed or self.transport is None:
            return
        hold = (
            self._paused_writing
            or bool(self.backlog)
            or len(self.slots) >= self.front.cfg.api.client_queue
        )
        if hold and not self._paused_reading:
            self._paused_reading = True
            self.transport.pause_reading()
        elif not hold and self._paused_reading:
            self._paused_reading = False
            self.transport.resume_reading()

    # --- idleness -----------------------------------------------------------------------
    def touch(self) -> None:
        loop = asyncio.get_running_loop()
        self._quiet_since = loop.time()
        if self._idle is None and self.front.idle_timeout > 0:  # (0: never closed)
            self._idle = loop.call_at(self._quiet_since + self.front.idle_timeout, self._check_idle)

    def _check_idle(self) -> None:
        self._idle = None
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        if self.front.idle_timeout <= 0:
            return  # (turned off by a reload)
        due = self._quiet_since + self.front.idle_timeout
        if loop.time() < due or self.slots or self.backlog:  # spoke since, or still busy
            self._idle = loop.call_at(max(due, loop.time() + 0.05), self._check_idle)
            return
        log.info("modbus_idle_closed", client=repr(self), idle_timeout=self.front.idle_timeout)
        self.close()

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()


async def bind_listen(listen: str) -> list[socket.socket]:
    """`modbus.listen` ("HOST:PORT") bound and listening, one socket per address the
    host resolves to, as `loop.create_server` binds them (SO_REUSEADDR, IPV6_V6ONLY).

    Listening at once, not only bound: on Linux two sockets with SO_REUSEADDR may
    bind the same address while neither listens, so a bind alone would let two
    starting verlds both think they have it. OSError ("cannot listen on
    HOST:PORT: ...") when any address cannot be had; nothing stays open then.
    """
    host, port = host_port(listen)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {listen}: {exc.strerror or exc}") from None
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(100)
            sock.setblocking(False)
    except OSError as exc:
        for sock in socks:
            sock.close()
        raise OSError(exc.errno, f"cannot listen on {listen}: {exc.strerror or exc}") from None
    if not socks:
        raise OSError(f"cannot listen on {listen}: no address for {host}")
    return socks


class ModbusServer:
    """The Modbus TCP front over one core."""

    def __init__(self, cfg: Config, core: Core) -> None:
        self.core = core
        self.counts = core.front("modbus")
        self.stats = ModbusStats()
        self.conns: set[ModbusConn] = set()
        self.idle_timeout = 0.0  #: (set by `configure`)
        self._servers: list[asyncio.AbstractServer] = []
        self._serial = 0
        self.address = ""  #: where it listens, "HOST:PORT"
        self.configure(cfg)

    def configure(self, cfg: Config) -> None:
        """Take the `modbus` settings (at start and on reload; `listen` by `rebind`)."""
        self.cfg = cfg
        mb = cfg.modbus
        self.read_only = mb.read_only
        was, self.idle_timeout = self.idle_timeout, mb.idle_timeout
        if was <= 0 < self.idle_timeout:  # turned on by a reload: the clock starts now
            for conn in self.conns:
                conn.touch()
        self.max_connections = mb.max_connections
        self.rtu = cfg.device.codec == "modbus-rtu"

    # --- listening ------------------------------------------------------------------------
    async def start(
        self,
        listen_sock: socket.socket | None = None,
        *,
        bound: list[socket.socket] | None = None,
    ) -> None:
        """Serve the given (socket-activated) socket, or `modbus.listen`: the sockets
        `bind_listen` made for it earlier (`bound`, the daemon's, so that a taken
        address stops the start before anything is created), else bound here.
        OSError when it cannot; the sockets are closed then."""
        loop = asyncio.get_running_loop()
        if listen_sock is not None:
            socks = [listen_sock]
        elif bound is not None:
            socks = bound
        else:
            assert self.cfg.modbus.listen is not None
            socks = await bind_listen(self.cfg.modbus.listen)
        try:
            for sock in socks:
                self._servers.append(await loop.create_server(self._new_conn, sock=sock))
        except BaseException:
            await self.close()
            for sock in socks if listen_sock is None else ():
                sock.close()
            raise
        name = socks[0].getsockname()
        self.address = f"[{name[0]}]:{name[1]}" if ":" in name[0] else f"{name[0]}:{name[1]}"
        log.info("modbus_listening", listen=self.address, read_only=self.read_only)

    def _new_conn(self) -> ModbusConn:
        self._serial += 1
        return ModbusConn(self, self._serial)

    async def close(self) -> None:
        """Stop listening and close every connection."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for conn in list(self.conns):
            conn.close()

    # --- connections -------------------------------------------------------------------------
    def attach(self, conn: ModbusConn) -> None:
        if len(self.conns) >= self.max_connections:
            log.warning("modbus_refused", client=repr(conn), reason="max_connections",
                        max_connections=self.max_connections)  # fmt: skip
            conn.close()
            return
        self.conns.add(conn)
        log.info("modbus_connected", client=repr(conn))

    def detach(self, conn: ModbusConn) -> None:
        if conn in self.conns:
            self.conns.discard(conn)
            self.core.forget(conn)
            log.info("modbus_disconnected", client=repr(conn))

    def malformed(self, conn: ModbusConn, reason: str) -> None:
        """A header that is not Modbus TCP: that connection goes; the others stay."""
        self.stats.closed_malformed += 1
        log.warning("modbus_malformed", client=repr(conn), reason=reason)
        conn.close()

    # --- figures -------------------------------------------------------------------------------
    def counts_outcome(self, outcome: str) -> None:
        outcomes = self.counts.outcomes
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    def count_exception(self, code: int) -> None:
        self.stats.exceptions[code] = self.stats.exceptions.get(code, 0) + 1

    def status(self) -> dict[str, Any]:
        """`status.modbus`."""
        return {
            "listen": self.address,
            "connections": len(self.conns),
            "calls": self.stats.calls,
            # JSON keys are strings: the code in decimal, as any JSON encoder writes an
            # integer key ("11" for 0x0B)
            "exceptions": {str(c): n for c, n in sorted(self.stats.exceptions.items())},
            "closed_malformed": self.stats.closed_malformed,
        }
