"""One Modbus TCP master's connection: MBAP requests in, responses out, in order.

Strategy: the connection is one owner in the core's fair queue, like an API
client. Its bytes are cut into MBAP requests (`mbap.RequestDecoder`); each request's
unit + PDU becomes a call, and each call's end becomes the response frame
(`mbap.answer`, the gateway exception mapping). A connection may pipeline: its
responses go back in request order, each held in a slot until those before it are
written. `read_only` answers every function code but 1-4 with exception 01 without
touching the device; on `modbus-rtu` a unit-0 request is a broadcast and gets no
response at all. A connection silent for `idle_timeout` is closed. What a
connection may hold is bounded: past `api.client_queue` unanswered requests it is
not read until it catches up.

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
from collections import deque
from typing import Protocol, cast

import structlog

from verld.config import Config
from verld.fronts.base import Core, FrontCounts
from verld.fronts.modbus.mbap import (
    ILLEGAL_FUNCTION,
    READS,
    Malformed,
    RequestDecoder,
    answer,
    exception_frame,
)
from verld.session.calls import CallResult

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


class ConnHost(Protocol):
    """What a connection needs from the front it belongs to."""

    cfg: Config
    core: Core
    counts: FrontCounts
    stats: ModbusStats
    read_only: bool
    rtu: bool  #: modbus-rtu: unit 0 is a broadcast
    idle_timeout: float

    def attach(self, conn: ModbusConn) -> None: ...

    def detach(self, conn: ModbusConn) -> None: ...

    def malformed(self, conn: ModbusConn, reason: str) -> None: ...


class _Slot:
    __slots__ = ("frame",)

    def __init__(self) -> None:
        self.frame: bytes | None = None  #: the response, once the call ended


class ModbusConn(asyncio.Protocol):
    """One Modbus TCP master."""

    def __init__(self, front: ConnHost, serial: int, peer: str = "?") -> None:
        self.front = front
        self.serial = serial
        self.peer = peer  #: "HOST:PORT"
        self.transport: asyncio.Transport | None = None
        self.decoder = RequestDecoder()
        self.slots: deque[_Slot] = deque()
        #: requests read and not yet served: more than one turn's worth came at once
        self.backlog: deque[tuple[int, bytes]] = deque()
        self._turn: asyncio.Handle | None = None
        #: while serving a turn: the answers it completes, written together at its end
        self._out: list[bytes] | None = None
        self.closed = False
        self.calls = self.ok = self.failed = 0  #: its requests, and how they ended (`programs`)
        self._paused_reading = False
        self._paused_writing = False
        self._quiet_since = 0.0
        self._idle: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"modbus#{self.serial}({self.peer})"

    # --- asyncio callbacks ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
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
        self._out = []
        try:
            with self.front.core.burst():  # a pipelined burst goes to the device in one write
                for tid, request in requests:
                    self._request(tid, request)
        finally:
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
        self.calls += 1
        broadcast = front.rtu and request[0] == 0
        if front.read_only and request[1] not in READS:
            front.counts.add("forbidden")
            self.failed += 1
            # (a broadcast is never answered, not even to say no)
            self._fill(
                slot, _NOTHING if broadcast else exception_frame(tid, request, ILLEGAL_FUNCTION)
            )
            return

        def done(result: CallResult) -> None:
            if result.error is None:
                self.ok += 1
            else:
                self.failed += 1
            if broadcast and result.error is None:
                self._fill(slot, _NOTHING)  # nobody answers a broadcast: nor do we
            else:
                self._fill(slot, answer(tid, request, result, inhibited=front.core.inhibited))

        # While an open attempt is under way (at start, say, when this connection is
        # what socket activation started verld for), the call waits for it (wait None).
        core = front.core
        core.submit(core.make_call(front.counts, self, request, done, req_id=tid))

    def _fill(self, slot: _Slot, frame: bytes) -> None:
        slot.frame = frame
        if len(frame) >= 9 and frame[7] & 0x80:  # an exception response
            exceptions = self.front.stats.exceptions
            exceptions[frame[8]] = exceptions.get(frame[8], 0) + 1
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
