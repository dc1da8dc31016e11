"""The device session: one link, one queue, every front's calls.

Strategy: fronts `submit` calls; each call ends in exactly one `CallResult` handed
to its `done` callback. Calls wait in per-owner queues served round-robin
(`calls.FairQueue`); up to `window` of them are on the link at once
(`window.Window`: seqs, matching, deadlines). One timer, armed for the earliest
deadline, sweeps out the tries that ran out (no timer per call on the hot path).
Every timer — that sweep, retries, the quiet guard, waits, the heartbeat — is the
`timekeeper.Timekeeper`'s; what a timeout calls for is the link state machine's
policy (`link.Link.timed_out`). Losing the link for any reason goes through `lose`,
which fails what is outstanding and tells the supervisor (`supervisor.Supervisor`,
the connect loop) to reopen it.

This module does no I/O of its own and reads time only from its `clock` (the
event loop, or a test's manual clock; on a real loop the Modbus RTU gap is also kept
on the monotonic clock the loop is built on): the transport calls `link_data` and
`link_lost`; the supervisor calls `attach`, `came_up` and `drop_transport`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Hashable

import structlog

from verld.alarm import Clock
from verld.bus import Bus, exception_message
from verld.calls import Call, CallResult, FairQueue, LaneQueue
from verld.codec.base import Inbound, Kind, LinkCodec
from verld.codec.line import LineCodec
from verld.codec.modbus import ModbusRtuCodec
from verld.codec.select import ping_payload
from verld.config import MODBUS_CODECS, Config, tcp_target
from verld.errors import ErrorCode
from verld.link import Link, LinkState, Transition
from verld.outage import Outage
from verld.stats import Stats, log_transition
from verld.timekeeper import Timekeeper
from verld.transport import LinkTransport
from verld.window import EPSILON, Window

log = structlog.get_logger("verld.session")

_new_tuple = tuple.__new__
_UP = LinkState.UP

EventSink = Callable[[bytes, str | None, int], None]
LinkSink = Callable[[Transition], None]
#: (dir "tx"/"rx", kind, seq, status, payload) for every frame: the `traffic` topic
TrafficTap = Callable[[str, str, int | None, int | None, bytes], None]
#: (dir, raw bytes) as read and written, garbage included: the `wire` topic
WireTap = Callable[[str, bytes], None]


class Session:
    """Owns the calls on the link to the device."""

    def __init__(
        self,
        cfg: Config,
        codec: LinkCodec,
        port: str,
        *,
        clock: Clock,
        on_event: EventSink,
        on_link: LinkSink,
        rng: random.Random | None = None,
    ) -> None:
        self.cfg, self.codec, self.port, self.clock = cfg, codec, port, clock
        self._on_event, self._on_link = on_event, on_link
        #: called when the link is lost or a reconnect is wanted: the supervisor's wake-up
        self.on_lost: Callable[[], None] = _nothing
        self.link = Link.from_config(cfg, rng)
        self._outage = Outage()
        self.window = Window(cfg.device.window if codec.pipelined else 1)
        self.ping_payload = ping_payload(cfg)
        self.tcp = tcp_target(port) is not None
        self.stats = Stats()
        self.counters = self.stats.counters
        #: Modbus codecs: the units, offline units, broadcast, the silent gap (else None)
        self.bus: Bus | None = None
        self._gap = 0.0  #: modbus-rtu: silence the line needs before a request (s)
        #: modbus-rtu: when the line has been silent long enough, on `precise` time
        self.quiet_until = 0.0
        # uvloop's loop.time() ticks in whole milliseconds (and is read once per loop
        # turn): a 1.75 ms gap measured on it can come out 1 ms short. The gap is kept
        # on the monotonic clock both loops' time is (asyncio's exactly, uvloop's to the
        # millisecond), so its alarm is set for that very time; one that rings early
        # (uvloop, by up to about 0.4 ms) is set again. A test's manual clock is exact.
        loop = isinstance(clock, asyncio.AbstractEventLoop)
        self.precise: Callable[[], float] = time.monotonic if loop else clock.time
        self.rtu_codec: ModbusRtuCodec | None = None  #: the codec, when it is modbus-rtu
        #: line: why a request cannot be one call (one line per call), else None
        self._screen: Callable[[bytes], str | None] | None = None
        self.queue: FairQueue = FairQueue(cfg.api.queue_limit, cfg.api.client_queue)
        self._set_bus()
        self._transport: LinkTransport | None = None
        self.timers = Timekeeper(self)
        self._sweep = self.timers.sweep
        self.closing = False
        #: while set (an `inhibit`): why calls are refused busy; nothing more goes out
        self.inhibited_by: str | None = None
        self._holds = 0
        self._pump_wanted = False
        self._polled = False  #: the device was polled in this loop turn
        self._debug = False
        self.started = time.time()
        self._traffic: TrafficTap | None = None
        self._wire: WireTap | None = None

    # --- settings -----------------------------------------------------------------
    def reconfigure(self, cfg: Config) -> None:
        """Apply a reloaded config's live settings (timeouts, heartbeat, limits)."""
        self.cfg = cfg
        self.queue.limit, self.queue.share = cfg.api.queue_limit, cfg.api.client_queue
        self.link.configure(cfg)
        self.ping_payload = ping_payload(cfg)
        if self.bus is not None:
            self.bus.configure(cfg)
            self._gap = self.bus.gap
        self.timers.arm_heartbeat()

    def set_debug(self, enabled: bool) -> None:
        """Per-call DEBUG lines cost even when filtered: build them only when wanted."""
        self._debug = enabled

    def replace_device(self, codec: LinkCodec, port: str | None = None) -> None:
        """New device settings (a reload): new codec (and port); the caller reconnects."""
        self.codec = codec
        self.window.size = self.cfg.device.window if codec.pipelined else 1
        if port is not None:
            self.port = port
            self.tcp = tcp_target(port) is not None
        self._set_bus()

    def _set_bus(self) -> None:
        """A bus (and a queue served by unit) on the Modbus codecs; none on the others.

        Calls queued for a codec of the other kind cannot go out on this one: they fail.
        """
        modbus = self.cfg.device.codec in MODBUS_CODECS
        self.bus = Bus(self.cfg) if modbus else None
        self._gap = self.bus.gap if self.bus is not None else 0.0
        codec = self.codec
        self.rtu_codec = codec if isinstance(codec, ModbusRtuCodec) else None
        self._screen = codec.refuse if isinstance(codec, LineCodec) else None
        old = self.queue
        if isinstance(old, LaneQueue) is modbus:
            if isinstance(old, LaneQueue) and self.bus is not None:
                old.heavy = self.bus.heavy
            return
        if len(old):
            self.timers.fail_queued(ErrorCode.LINK_DOWN, "the device codec changed", everyone=True)
        new = LaneQueue(old.limit, old.share) if modbus else FairQueue(old.limit, old.share)
        new.exclusive, new._load = old.exclusive, old._load
        self.queue = new
        if isinstance(new, LaneQueue) and self.bus is not None:
            new.heavy = self.bus.heavy

    def set_taps(self, traffic: TrafficTap | None, wire: WireTap | None) -> None:
        """Decoded frames and raw bytes each way to the taps (None: off, costs nothing)."""
        self._traffic, self._wire = traffic, wire
        if self._transport is not None:
            self._transport.tap = wire

    def set_exclusive(self, owner: Hashable | None) -> None:
        """Give the device to one owner (a lease), or back to everyone (None).

        Others' calls already queued are treated as if they came now: `busy` at once,
        or, if they asked to wait, a wait of their timeout (not the lease's length).
        """
        self.queue.exclusive = owner
        if owner is not None:
            for call in self.queue:
                if call.owner is owner or call.is_ping:
                    continue
                if call.wait:
                    if call.timer is None:
                        self.timers.wait(call)
                    continue
                self.queue.remove(call)
                self.finish(call, ErrorCode.BUSY, "the device is leased to another client")
        self.pump()

    # --- calls in ---------------------------------------------------------------------
    def submit(self, call: Call) -> None:
        """Accept a call; its `done` runs exactly once, maybe before this returns."""
        call.t_submit = time.perf_counter()
        if self._debug:
            log.debug("call_received", client=call.owner, request_id=call.req_id,
                      bytes=len(call.payload))  # fmt: skip
        queue, link = self.queue, self.link
        if (self.closing or self.inhibited_by is not None or link.state is not _UP
                or queue.exclusive is not None or self.bus is not None
                or self._screen is not None):  # fmt: skip
            refused = self._refusal(call)  # the rarer cases, one by one
        else:
            full = queue.admit(call)
            refused = None if full is None else (ErrorCode.BUSY, full)
        if refused is not None:
            self.finish(call, *refused)
            return
        if not queue.waiting and queue.exclusive is None and self._sendable():
            if self.bus is not None:  # (that was its unit's turn on the bus)
                queue.sent_directly(call.unit)
            self.send([call])  # what _pump would do, without the trip through the queue
            return
        queue.push(call)
        if self._debug:
            log.debug("call_queued", client=call.owner, request_id=call.req_id, queue=len(queue))
        excl = queue.exclusive
        held = excl is not None and call.owner is not excl
        if self.link.state is not _UP or self.inhibited_by is not None or held:
            self.timers.wait(call)
        elif self.window.room() > 0:  # full: the next reply pumps
            self.pump()
        elif not self._polled and self._transport is not None:
            # Full window, calls waiting: replies the device already sent free slots,
            # so read them before more client requests (once per loop turn: the loop
            # may have queued many clients ahead of the device's fd).
            self._polled = True
            self.clock.call_soon(self._unpoll)
            self._transport.poll()

    def _refusal(self, call: Call) -> tuple[ErrorCode, str] | None:
        """Why a call ends at once (error code, message), or None: it is admitted."""
        if self.closing:
            return ErrorCode.SHUTTING_DOWN, "verld is shutting down"
        bus = self.bus
        if bus is not None:
            reason = bus.check(call)
            if reason is not None:
                return ErrorCode.BAD_REQUEST, reason
        elif self._screen is not None:
            reason = self._screen(call.payload)
            if reason is not None:
                return ErrorCode.BAD_REQUEST, reason
        if self.inhibited_by is not None and not call.wait:
            return ErrorCode.BUSY, self.inhibited_by
        link = self.link
        if link.state is not _UP and not call.wait:
            return ErrorCode.LINK_DOWN, f"link is {link.state.value}: {link.reason}"
        excl = self.queue.exclusive
        if excl is not None and call.owner is not excl and not call.wait:
            return ErrorCode.BUSY, "the device is leased to another client"
        if bus is not None and link.state is _UP:  # (a reopen may bring the unit back)
            offline = bus.offline(call, self.clock.time())
            if offline is not None:
                return ErrorCode.TIMEOUT, offline
        refused = self.queue.admit(call)
        return None if refused is None else (ErrorCode.BUSY, refused)

    def _unpoll(self) -> None:
        self._polled = False

    def forget_owner(self, owner: Hashable) -> None:
        """An owner went away: its queued calls are dropped unsent.

        With seqs (verl) its calls on the link are abandoned too, freeing their window
        slots at once: a reply that still comes is then stale, like any late reply.
        Without seqs the one call on the link runs out, so its reply cannot be taken
        for the next call's, but within device.timeout: a long per-call timeout cannot
        hold the device for nobody.
        """
        for call in self.queue.drop_owner(owner):
            if call.timer is not None:
                call.timer.cancel()
        if self.codec.pipelined:
            abandoned = self.window.drop_owner(owner)
            for call in abandoned:
                self.queue.release(call)
            if abandoned:
                self.pump()
            return
        self.timers.shorten(self.window.owned_by(owner), self.cfg.device.timeout)

    # --- the queue onto the link ----------------------------------------------------------
    def hold(self) -> None:
        """Collect calls without writing until `flush`: one write for a burst of calls."""
        self._holds += 1

    def flush(self) -> None:
        """End a `hold`; what was collected goes out in one write."""
        self._holds -= 1
        if not self._holds and self._pump_wanted:
            self.pump()

    def _sendable(self) -> bool:
        """Calls may go out now: up, no guard, a transport, room, not held."""
        link = self.link
        return (link.state is _UP and link.guard_until is None and not self._holds
                and self._transport is not None and self.window.room() > 0
                and self.inhibited_by is None
                and (not self._gap or self._quiet_enough()))  # fmt: skip

    def _quiet_enough(self) -> bool:
        """modbus-rtu: the line has been silent for 3.5 characters (else the quiet
        alarm pumps once it has)."""
        left = self.quiet_until - self.precise()
        if left <= EPSILON:
            return True
        self.timers.quiet.set_earlier(self.quiet_until)
        return False

    def pump(self) -> None:
        """Move calls from the queue onto the link while the window has room."""
        if self._holds:
            self._pump_wanted = True
            return
        self._pump_wanted = False
        if not self._sendable() or not self.queue.ready():
            return
        batch = self.queue.take(self.window.room())
        for call in batch:
            if call.timer is not None:  # a waiting call's wait timer
                call.timer.cancel()
                call.timer = None
        if batch:
            self.send(batch)

    def send(self, calls: list[Call]) -> None:
        """Write calls (first tries) in one write; set their deadlines."""
        transport = self._transport
        assert transport is not None
        now = self.clock.time()
        add, encode, earliest = self.window.add, self.codec.encode_request, self._sweep.at
        for call in calls:
            earliest = min(earliest, add(call, now))
            call.frame = encode(call.seq, call.payload)
            if call.is_ping:
                self.counters.pings += 1
            if self._debug:
                log.debug("call_sent", client=call.owner, request_id=call.req_id, seq=call.seq)
        if self._traffic is not None:
            for call in calls:
                kind = "ping" if call.is_ping else "request" if call.tries == 1 else "retry"
                self._traffic("tx", kind, call.seq, None, call.payload)
        self.counters.frames_tx += len(calls)
        bus = self.bus
        if bus is None:
            self.link.activity(now)
        elif self.rtu_codec is not None and calls[0].unit == 0 and not calls[0].is_ping:
            self.rtu_codec.expect_nothing()
        # (Modbus: a request to a silent unit proves nothing: only replies restart the
        # heartbeat's clock, so a dead adapter is found under load too)
        self._sweep.set_earlier(earliest)
        transport.write(calls[0].frame if len(calls) == 1 else b"".join(c.frame for c in calls))

    def resend(self, call: Call) -> None:
        """A retry: the same bytes with the same seq, so a device may answer from a cache."""
        transport = self._transport
        assert transport is not None
        now = self.clock.time()
        self.counters.retries += 1
        self.counters.frames_tx += 1
        self._sweep.set_earlier(self.window.readd(call, now))
        if self.bus is None:
            self.link.activity(now)
        if self._traffic is not None:
            self._traffic("tx", "retry", call.seq, None, call.payload)
        if self._debug:
            log.debug("call_retry", client=call.owner, request_id=call.req_id, try_=call.tries)
        transport.write(call.frame)

    # --- bytes in: replies and events -------------------------------------------------------
    def link_data(self, data: bytes) -> None:
        """Transport callback: bytes from the device."""
        now = self.clock.time()
        if self._gap:
            self.quiet_until = self.precise() + self._gap
        if self.link.noise(now):
            return  # after a timeout (no seqs): discarded until the line has been quiet
        frames = self.codec.feed(data, bool(self.window))
        if not frames and self.rtu_codec is not None and self.rtu_codec.partial:
            # a reply whose end only silence tells
            self.timers.quiet.set(self.quiet_until)
        self.frames_in(frames, now)

    def line_quiet(self) -> None:
        """modbus-rtu: the line has been silent for 3.5 characters: a reply whose length
        its bytes do not tell ends here."""
        assert self.rtu_codec is not None
        self.frames_in(self.rtu_codec.flush(), self.clock.time())

    def frames_in(self, frames: list[Inbound], now: float) -> None:
        """Decoded frames: replies to their calls, events to the listeners."""
        if frames:
            if self._traffic is not None:
                for f in frames:
                    kind = "reply" if f.kind is Kind.REPLY else "event"
                    self._traffic("rx", kind, f.seq, f.status, f.data)
            self.counters.frames_rx += len(frames)
            self.link.activity(now)
            self._received(frames, now)
        if self.codec.desync is not None:
            self.stats.desyncs += 1
            self.lose(f"stream out of step: {self.codec.desync}")

    def _received(self, frames: list[Inbound], now: float) -> None:
        """Free the window slots first and refill them in one write, so the device works
        on the next calls while the replies go out to their clients."""
        if len(frames) == 1 and frames[0].kind is Kind.REPLY:  # the common case
            call = self._match(frames[0])
            if call is not None:
                if self.queue.waiting:
                    self.pump()
                self._complete(call, frames[0], now)
            return
        matched = [self._match(f) if f.kind is Kind.REPLY else None for f in frames]
        self.pump()
        self.hold()  # replies to pings may pump again: still one write
        try:
            for frame, call in zip(frames, matched, strict=True):
                if call is not None:
                    self._complete(call, frame, now)
                elif frame.kind is not Kind.REPLY:  # (a reply without a call is stale)
                    self._device_event(frame)
        finally:
            self.flush()

    def _device_event(self, frame: Inbound) -> None:
        if self.link.state is _UP:
            self.counters.events += 1
            self._on_event(frame.data, frame.text, self.link.generation)
        else:  # before the handshake reply: left over from an earlier session
            self.stats.early_events += 1

    def _match(self, frame: Inbound) -> Call | None:
        """The outstanding call a reply answers (taken off the link), or None: stale."""
        call = self.window.match(frame.seq)
        if call is None:
            self.counters.stale += 1
            if self._debug:
                log.debug("stale_reply", seq=frame.seq)
        return call

    def _complete(self, call: Call, frame: Inbound, now: float) -> None:
        """A matched reply: the call ends with the device's status and data."""
        self.link.reply(now)
        status = frame.status
        if status == 0:
            error, message = None, "ok"
        elif self.bus is not None:
            error, message = ErrorCode.DEVICE_ERROR, exception_message(status or 0)
        elif status == 0xFF:
            error, message = ErrorCode.REMOTE_FAILURE, "the device reported failure (status 0xff)"
        else:
            error, message = ErrorCode.DEVICE_ERROR, f"device status 0x{status:02x}"
        self.finish(call, error, message, status, frame.data, frame.text)
        if call.is_ping:
            if self.bus is not None:
                self.bus.replied(call.payload[0])  # (the heartbeat's unit is there)
            if not self.window:
                self._sweep.cancel()  # an idle link: no wake-up for a deadline long met
            self.timers.arm_heartbeat()
        if self.queue.waiting and self.queue.ready():
            self.pump()

    def finish(self, call: Call, error: str | None, message: str, status: int | None = None,
                data: bytes = b"", text: str | None = None) -> None:  # fmt: skip
        # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds.
        elapsed = time.perf_counter() - call.t_submit if call.t_submit else 0.0
        if not call.is_ping:
            outcomes = call.outcomes
            if outcomes is not None:
                outcome = error or "ok"
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            self.stats.finished(error, elapsed)
            self.queue.release(call)
            if call.unit >= 0 and self.bus is not None:
                gone = self.bus.finished(call, error, self.clock.time())
                if gone is not None:
                    self._unit_offline(gone)
            if self._debug:
                log.debug("call_done", client=call.owner, request_id=call.req_id, error=error,
                          status=status, ms=round(elapsed * 1000, 3))  # fmt: skip
        # tuple.__new__: CallResult's own __new__ is a Python function, once per call
        result = (error, message, status, data, text, elapsed * 1000, self.link.generation)
        call.done(_new_tuple(CallResult, result))

    def proves_alive(self, result: CallResult) -> bool:
        """Whether a ping's result shows the device is there (Modbus: an exception
        reply does too)."""
        if result.error is None:
            return True
        return self.bus is not None and result.error == ErrorCode.DEVICE_ERROR

    def _unit_offline(self, unit: int) -> None:
        """A unit went offline: its waiting calls fail at once, as later ones will."""
        assert self.bus is not None and isinstance(self.queue, LaneQueue)
        log.warning("modbus_unit_offline", unit=unit, backoff=self.bus.backoff)
        for call in self.queue.lane(unit):
            if call.is_ping:
                continue  # (the heartbeat is the port's: it times out on its own)
            self.queue.remove(call)
            if call.timer is not None:
                call.timer.cancel()
                call.timer = None
            self.bus.count_offline(call)
            self.finish(call, ErrorCode.TIMEOUT, f"unit {unit} offline")

    # --- the link's life: attached by the supervisor, lost here -------------------------------
    @property
    def attached(self) -> LinkTransport | None:
        return self._transport

    def attach(self, transport: LinkTransport) -> None:
        """A newly opened transport (link connecting): the handshake comes next."""
        self._transport = transport
        transport.tap = self._wire
        self.codec.reset()

    def came_up(self) -> None:
        """The handshake was answered (or there is none): a new link session."""
        self.announce(self.link.opened(self.clock.time()))
        self.timers.arm_heartbeat()
        self.pump()

    def lose(self, reason: str) -> None:
        """The link is gone (hang-up, EIO, dead heartbeat, desync...) or to be dropped
        (a reconnect, a failed handshake): one path for every cause."""
        if self.link.state not in (_UP, LinkState.CONNECTING):
            return
        self.drop_transport()
        transition = self.link.lost(self.clock.time(), reason)
        for call in self.take_inflight():
            self.finish(call, ErrorCode.LINK_DOWN, f"link lost: {reason}")
        self.timers.fail_queued(ErrorCode.LINK_DOWN, f"link lost: {reason}", everyone=False)
        self.announce(transition)
        self.on_lost()

    link_lost = lose  #: the transport's callback (hang-up, EIO, write error)

    def take_inflight(self) -> list[Call]:
        """Every call on the link or held for the guard, off it (their timers off)."""
        calls = self.window.drain()
        held = self.timers.take_held()
        if held is not None:
            calls.append(held)
        self._sweep.cancel()
        for call in calls:
            if call.timer is not None:
                call.timer.cancel()
                call.timer = None
        return calls

    def inflight_calls(self) -> int:
        """Client calls still to be answered (on the link or held for the guard)."""
        return self.window.calls() + self.timers.holding

    def drop_transport(self) -> None:
        self.timers.stop()
        transport, self._transport = self._transport, None
        if transport is not None:
            self.stats.closed_transport(transport.bytes_tx, transport.bytes_rx)
            transport.close()

    def announce(self, transition: Transition) -> None:
        """Log a transition and tell the link listener (an outage once: `outage.Outage`)."""
        now = self.clock.time()
        told = self._outage.tell(transition, now)
        log_transition(transition, port=self.port, retry_in=self.link.retry_in(now),
                       level=told.level, attempts=self.link.attempts,
                       remind=told.remind)  # fmt: skip
        if told.event:
            self._on_link(transition)


def _nothing() -> None:
    return None
