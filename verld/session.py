"""The device session: one link, one queue, every client's calls.

Strategy: clients `submit` calls; each call ends in exactly one `CallResult`
handed to its `done` callback. Calls wait in per-client queues served
round-robin; up to `window` of them are on the link at once (verl; 1 for the
codecs without seqs), each keyed by a seq that is never reused while outstanding.
Replies are matched by seq (or, for length/line, to the one call outstanding);
a reply that matches nothing is stale and dropped. Each try has a deadline; one
timer, armed for the earliest, sweeps out the tries that ran out (no timer per
call to create and cancel on the hot path). Timeouts drive retries and feed the
link state machine (`link.Link`), which decides when the link is
dead. Losing the link — for any reason — goes through `_lose`, which fails
what is outstanding and wakes the connect loop in `run`.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Hashable
from typing import Any

import structlog

from verld.calls import Call, CallResult, FairQueue
from verld.codec.base import Inbound, Kind, LinkCodec
from verld.config import Config, tcp_target
from verld.link import Link, LinkState, Transition
from verld.metrics import Histogram
from verld.transport import FdTransport, OpenError, open_link

log = structlog.get_logger("verld.session")

_SEQ_MOD = 65536
#: a deadline within this of the clock has passed (float rounding of virtual clocks)
_EPSILON = 1e-6
_new_tuple = tuple.__new__


class Counters:
    """The `status` counters; plain attributes keep increments cheap."""

    __slots__ = (
        "calls",
        "calls_failed",
        "calls_ok",
        "events",
        "frames_rx",
        "frames_tx",
        "pings",
        "retries",
        "stale",
        "timeouts",
    )

    def __init__(self) -> None:
        self.calls = self.calls_ok = self.calls_failed = 0
        self.timeouts = self.retries = self.stale = self.pings = 0
        self.frames_tx = self.frames_rx = self.events = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


EventSink = Callable[[bytes, str | None, int], None]
LinkSink = Callable[[Transition], None]
#: (dir "tx"/"rx", kind, seq, status, payload) for every frame: the `traffic` topic
TrafficTap = Callable[[str, str, int | None, int | None, bytes], None]
#: (dir, raw bytes) as read and written, garbage included: the `wire` topic
WireTap = Callable[[str, bytes], None]


class Session:
    """Owns the link to the device and everything on it."""

    def __init__(
        self,
        cfg: Config,
        codec: LinkCodec,
        port: str,
        *,
        on_event: EventSink,
        on_link: LinkSink,
        rng: random.Random | None = None,
    ) -> None:
        self.cfg = cfg
        self.codec = codec
        self.port = port
        #: where device events go (the server's fan-out); replaceable after construction
        self.on_event = on_event
        self._on_link = on_link
        self._loop = asyncio.get_running_loop()
        rc, hb = cfg.reconnect, cfg.heartbeat
        self.link = Link(
            initial=rc.initial,
            maximum=rc.max,
            misses=hb.misses,
            interval=hb.interval,
            rng=rng,
        )
        self.window = cfg.device.window if codec.pipelined else 1
        self.ping_payload = ping_payload(cfg)
        self._tcp = tcp_target(port) is not None
        self.counters = Counters()
        #: failed calls by error code
        self.errors: dict[str, int] = {}
        #: link sessions ended because the stream was out of step (length codec)
        self.desyncs = 0
        #: device events dropped because they came before the handshake reply
        self.early_events = 0
        self.latency = Histogram()
        self._transport: FdTransport | None = None
        self._inflight: dict[int, Call] = {}
        self.queue = FairQueue(cfg.api.queue_limit, cfg.api.client_queue)
        self._next_seq = 0
        self._guard_until: float | None = None
        self._guard_timer: asyncio.TimerHandle | None = None
        self._held: Call | None = None  # a retry waiting for the guard to end
        self._hb_timer: asyncio.TimerHandle | None = None
        #: the one timeout timer, armed for the earliest deadline on the link
        self._sweep_timer: asyncio.TimerHandle | None = None
        self._sweep_at = math.inf
        self._wake: asyncio.Future[None] | None = None
        self._closing = False
        self._holds = 0
        self._pump_wanted = False
        self._polled = False  #: the device was polled in this loop turn
        self._bytes_prev = (0, 0)
        self._debug = False
        self.started = time.time()
        self.traffic: TrafficTap | None = None
        self._wire: WireTap | None = None

    # --- public -----------------------------------------------------------------
    @property
    def state(self) -> LinkState:
        return self.link.state

    @property
    def exclusive(self) -> Hashable | None:
        """The lease holder: while set, only its calls reach the device."""
        return self.queue.exclusive

    def reconfigure(self, cfg: Config) -> None:
        """Apply a reloaded config's live settings (timeouts, heartbeat, limits)."""
        self.cfg = cfg
        self.queue.limit, self.queue.share = cfg.api.queue_limit, cfg.api.client_queue
        link, hb, rc = self.link, cfg.heartbeat, cfg.reconnect
        link.interval, link.misses = hb.interval, hb.misses
        link.initial, link.maximum = rc.initial, rc.max
        self.ping_payload = ping_payload(cfg)
        self._arm_heartbeat()

    def set_debug(self, enabled: bool) -> None:
        """Per-call DEBUG lines cost even when filtered: build them only when wanted."""
        self._debug = enabled

    def replace_device(self, codec: LinkCodec, port: str | None = None) -> None:
        """New device settings (a reload): new codec (and port), then reconnect."""
        self.codec = codec
        self.window = self.cfg.device.window if codec.pipelined else 1
        if port is not None:
            self.set_port(port)
        self.request_reconnect("device settings changed by reload")

    def set_port(self, port: str) -> None:
        """Use another device (a reload changed device.port); takes effect on reconnect."""
        self.port = port
        self._tcp = tcp_target(port) is not None

    def set_wire_tap(self, tap: WireTap | None) -> None:
        """Raw bytes each way to `tap` (None: off; costs nothing then)."""
        self._wire = tap
        if self._transport is not None:
            self._transport.tap = tap

    def set_exclusive(self, owner: Hashable | None) -> None:
        """Give the device to one owner (a lease), or back to everyone (None)."""
        self.queue.exclusive = owner
        self._pump()

    def submit(self, call: Call) -> None:
        """Accept a call; its `done` runs exactly once, maybe before this returns."""
        call.t_submit = time.perf_counter()
        if self._debug:
            log.debug("call_received", client=call.owner, request_id=call.req_id,
                      bytes=len(call.payload))  # fmt: skip
        if self._closing:
            self._finish(call, "shutting_down", "verld is shutting down")
            return
        if self.link.state is not LinkState.UP and not call.wait:
            self._finish(call, "link_down", f"link is {self.link.state.value}: {self.link.reason}")
            return
        excl = self.queue.exclusive
        if excl is not None and call.owner is not excl and not call.wait:
            self._finish(call, "busy", "the device is leased to another client")
            return
        queue = self.queue
        refused = queue.admit(call)
        if refused is not None:
            self._finish(call, "busy", refused)
            return
        if (
            not queue.waiting
            and excl is None
            and not self._holds
            and len(self._inflight) < self.window
            and self._writable()
        ):
            self._send([call])  # what _pump would do, without the trip through the queue
            return
        queue.push(call)
        if self._debug:
            log.debug("call_queued", client=call.owner, request_id=call.req_id,
                      queue=len(self.queue))  # fmt: skip
        if self.link.state is LinkState.UP and (excl is None or call.owner is excl):
            if len(self._inflight) < self.window:  # full: the next reply pumps
                self._pump()
            elif not self._polled and self._transport is not None:
                # Full window, calls waiting: replies the device already sent free
                # slots, so read them before more client requests (once per loop turn:
                # the loop may have queued many clients ahead of the device's fd).
                self._polled = True
                self._loop.call_soon(self._unpoll)
                self._transport.poll()
        else:
            when = self._loop.time() + call.timeout
            call.timer = self._loop.call_at(when, self._wait_expired, call)

    def _unpoll(self) -> None:
        self._polled = False

    def forget_owner(self, owner: Hashable) -> None:
        """A client went away: its queued calls are dropped unsent.

        With seqs (verl) its calls on the link are abandoned too, freeing their window
        slots at once: a reply that still comes is then stale, like any late reply.
        Without seqs the one call on the link runs out, so its reply cannot be taken
        for the next call's.
        """
        for call in self.queue.drop_owner(owner):
            if call.timer is not None:
                call.timer.cancel()
        if not self.codec.pipelined:
            self._shorten_abandoned(owner)
            return
        abandoned = [c for c in self._inflight.values() if c.owner is owner and not c.is_ping]
        for call in abandoned:
            del self._inflight[call.seq]
            self.queue.release(call)
        if abandoned:
            self._pump()

    def _shorten_abandoned(self, owner: Hashable) -> None:
        """Without seqs the departed client's call must run out, but no longer than
        device.timeout: a long per-call timeout cannot hold the device for nobody."""
        limit = self.cfg.device.timeout
        latest = self._loop.time() + limit
        for call in self._inflight.values():
            if call.owner is owner and call.timeout > limit:
                call.retry = 0
                if call.deadline > latest:
                    call.deadline = latest
                    self._arm_sweep(latest)

    def request_reconnect(self, reason: str = "reconnect requested") -> None:
        """Drop the link now and reopen it (the admin `reconnect` op)."""
        if self.link.state in (LinkState.UP, LinkState.CONNECTING) and self._transport:
            self._lose(reason)
        elif self.link.state is LinkState.DOWN:
            self.link.next_attempt = 0.0
            self._wakeup()

    async def run(self) -> None:
        """The connect loop: open, handshake, serve until lost, back off, repeat."""
        while not self._closing:
            delay = self.link.retry_in(self._loop.time())
            if delay > 0:
                await self._sleep(delay)
                continue  # re-check: closing or a reconnect request may have come meanwhile
            self._announce(self.link.attempt(self._loop.time()))
            if not await self._connect():
                continue
            self._wake = self._loop.create_future()
            await self._wake

    async def close(self, drain: float) -> None:
        """Stop: fail queued calls, let in-flight ones finish for up to `drain` s."""
        self._closing = True
        self._fail_queued("shutting_down", "verld is shutting down", everyone=True)
        deadline = self._loop.time() + drain
        while self._inflight_calls() and self._loop.time() < deadline:
            await asyncio.sleep(0.01)
        for call in self._take_inflight():
            self._finish(call, "shutting_down", "verld is shutting down")
        self._drop_transport()
        if self.link.state is not LinkState.CLOSED:
            self._announce(self.link.close(self._loop.time()))
        self._wakeup()

    def status(self) -> dict[str, Any]:
        """The `status` reply's session part."""
        c = self.counters.as_dict()
        c["bad_frames"] = self.codec.bad_frames
        c["reconnects"] = self.link.reconnects
        tx, rx = self._bytes_prev
        if self._transport is not None:
            tx, rx = tx + self._transport.bytes_tx, rx + self._transport.bytes_rx
        c["bytes_tx"], c["bytes_rx"] = tx, rx
        link = self.link
        wall = time.time() - (self._loop.time() - link.since) if link.since else self.started
        return {
            "link": {
                "state": link.state.value,
                "reason": link.reason,
                "generation": link.generation,
                "port": self.port,
                "codec": self.cfg.device.codec,
                "since": round(wall, 3),
            },
            "counters": c,
            "latency_ms": self.latency.summary_ms(),
            "queue": len(self.queue),
            "inflight": len(self._inflight),
            "errors": dict(self.errors),
            "desyncs": self.desyncs,
            "early_events": self.early_events,
            "link_up_seconds": round(self._loop.time() - link.since, 3)
            if link.state is LinkState.UP
            else 0.0,
        }

    # --- connecting ---------------------------------------------------------------
    async def _connect(self) -> bool:
        try:
            transport = await open_link(self.cfg.device, self.port, self, self.cfg.device.timeout)
        except OpenError as exc:
            self._announce(self.link.lost(self._loop.time(), f"open failed: {exc}"))
            return False
        if self._closing:
            transport.close()
            return False
        self._transport = transport
        transport.tap = self._wire
        self.codec.reset()
        if self.ping_payload is None:
            self._came_up()
            return True
        result = await self._handshake()
        if self._transport is not transport:
            return False  # lost during the handshake; _lose announced it
        if result.error is not None:
            self._lose(f"handshake failed: {result.message}")
            return False
        return True

    def _came_up(self) -> None:
        self._announce(self.link.opened(self._loop.time()))
        self._arm_heartbeat()
        self._pump()

    async def _handshake(self) -> CallResult:
        fut: asyncio.Future[CallResult] = self._loop.create_future()

        def done(result: CallResult) -> None:
            # Up at once, inside the reply's handling: an event right behind the reply
            # (same read) then already belongs to the new generation.
            if result.error is None and self.link.state is LinkState.CONNECTING:
                self._came_up()
            if not fut.done():
                fut.set_result(result)

        assert self.ping_payload is not None
        ping = Call(
            None, self.ping_payload, done, timeout=self.cfg.heartbeat.timeout, retry=0, is_ping=True
        )
        ping.t_submit = time.perf_counter()
        self._send([ping])
        return await fut

    # --- the queue ----------------------------------------------------------------
    def hold(self) -> None:
        """Collect calls without writing until `flush`: one write for a burst of calls."""
        self._holds += 1

    def flush(self) -> None:
        """End a `hold`; what was collected goes out in one write."""
        self._holds -= 1
        if not self._holds and self._pump_wanted:
            self._pump()

    def _pump(self) -> None:
        """Move calls from the queue onto the link while the window has room."""
        if self._holds:
            self._pump_wanted = True
            return
        self._pump_wanted = False
        if not self._writable():
            return
        room = self.window - len(self._inflight)
        if room <= 0 or not self.queue.ready():
            return
        batch = self.queue.take(room)
        for call in batch:
            if call.timer is not None:  # a waiting call's wait timer
                call.timer.cancel()
                call.timer = None
        if batch:
            self._send(batch)

    def _writable(self) -> bool:
        """Calls may go out now: the link is up, no guard period, a transport."""
        return (
            self.link.state is LinkState.UP
            and self._guard_until is None
            and self._transport is not None
        )

    def _alloc_seq(self) -> int:
        seq = self._next_seq
        inflight = self._inflight
        while seq in inflight:
            seq = (seq + 1) % _SEQ_MOD
        self._next_seq = (seq + 1) % _SEQ_MOD
        return seq

    def _send(self, calls: list[Call]) -> None:
        """Write calls (first tries) in one write; set their deadlines."""
        transport = self._transport
        assert transport is not None
        now = self._loop.time()
        frames = []
        inflight, encode = self._inflight, self.codec.encode_request
        earliest = self._sweep_at
        for call in calls:
            seq = self._next_seq
            if seq in inflight:
                seq = self._alloc_seq()
            else:
                self._next_seq = (seq + 1) % _SEQ_MOD
            call.seq = seq
            call.frame = frame = encode(seq, call.payload)
            call.tries += 1
            inflight[seq] = call
            call.deadline = deadline = now + call.timeout
            earliest = min(earliest, deadline)
            frames.append(frame)
            if call.is_ping:
                self.counters.pings += 1
            if self._debug:
                log.debug("call_sent", client=call.owner, request_id=call.req_id, seq=seq)
        if self.traffic is not None:
            for call in calls:
                kind = "ping" if call.is_ping else "request"
                self.traffic("tx", kind, call.seq, None, call.payload)
        self.counters.frames_tx += len(frames)
        self.link.last_activity = now
        if earliest < self._sweep_at:
            self._arm_sweep(earliest)
        transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    # --- deadlines ---------------------------------------------------------------
    def _arm_sweep(self, when: float) -> None:
        """Have the sweep run at `when` if that is earlier than it runs now."""
        if when >= self._sweep_at:
            return
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        self._sweep_at = when
        self._sweep_timer = self._loop.call_at(when, self._sweep)

    def _cancel_sweep(self) -> None:
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        self._sweep_timer, self._sweep_at = None, math.inf

    def _sweep(self) -> None:
        """The earliest deadline came: time out every try whose deadline passed."""
        self._sweep_timer, self._sweep_at = None, math.inf
        now = self._loop.time()
        due = now + _EPSILON
        expired = [c for c in self._inflight.values() if c.deadline <= due]
        for call in expired:
            # an earlier timeout may have resent it (new deadline) or dropped the link
            if self._inflight.get(call.seq) is call and call.deadline <= due:
                self._on_timeout(call)
        if self._inflight:  # a retry above may have armed for a later deadline than these
            earliest = min(c.deadline for c in self._inflight.values())
            # not before 1 ms from now: a clock that fired early cannot make a busy loop
            self._arm_sweep(max(earliest, now + 0.001))

    def _wait_expired(self, call: Call) -> None:
        """A call that asked to wait for the link waited its whole timeout."""
        if not call.queued:
            return
        self.queue.remove(call)
        if self.link.state is LinkState.UP and self.queue.exclusive is not None:
            self._finish(call, "busy", f"the device stayed leased for {call.timeout:g} s")
            return
        self._finish(
            call, "link_down", f"link still {self.link.state.value} after {call.timeout:g} s"
        )

    def _fail_queued(self, code: str, message: str, *, everyone: bool) -> None:
        """Fail queued calls (all of them, or those that did not ask to wait)."""
        now = self._loop.time()
        for call in self.queue:
            if everyone or not call.wait:
                self.queue.remove(call)
                if call.timer is not None:
                    call.timer.cancel()
                self._finish(call, code, message)
            elif call.timer is None or call.timer.cancelled():
                call.timer = self._loop.call_at(now + call.timeout, self._wait_expired, call)

    # --- replies, timeouts, retries --------------------------------------------------
    def link_data(self, data: bytes) -> None:
        """Transport callback: bytes from the device."""
        now = self._loop.time()
        if self._guard_until is not None:
            # After a timeout (length/line): discard until the line has been quiet.
            self._guard_until = now + self.cfg.device.guard
            return
        frames = self.codec.feed(data, bool(self._inflight))
        if frames:
            if self.traffic is not None:
                for f in frames:
                    kind = "reply" if f.kind is Kind.REPLY else "event"
                    self.traffic("rx", kind, f.seq, f.status, f.data)
            self.counters.frames_rx += len(frames)
            self.link.last_activity = now
            if len(frames) == 1 and frames[0].kind is Kind.REPLY:  # the common case
                frame = frames[0]
                call = self._match(frame)
                if call is not None:
                    if self.queue.waiting:
                        self._pump()  # refill the slot before answering, as below
                    self._complete(call, frame, now)
                return
            # Free the window slots first and refill them in one write, so the device
            # works on the next calls while the replies go out to their clients.
            matched = [self._match(f) if f.kind is Kind.REPLY else None for f in frames]
            self._pump()
            self.hold()  # replies to pings may pump again: still one write
            try:
                for frame, call in zip(frames, matched, strict=True):
                    if call is not None:
                        self._complete(call, frame, now)
                    elif frame.kind is Kind.REPLY:
                        continue  # stale, counted by _match
                    elif self.link.state is LinkState.UP:
                        self.counters.events += 1
                        self.on_event(frame.data, frame.text, self.link.generation)
                    else:  # before the handshake reply: left over from an earlier session
                        self.early_events += 1
            finally:
                self.flush()
        if self.codec.desync is not None:
            self.desyncs += 1
            self._lose(f"stream out of step: {self.codec.desync}")

    def _match(self, frame: Inbound) -> Call | None:
        """The outstanding call a reply answers (taken off the link), or None: stale."""
        seq = frame.seq
        if seq is None:
            call = next(iter(self._inflight.values()), None)
            if call is not None:
                del self._inflight[call.seq]
        else:
            call = self._inflight.pop(seq, None)
        if call is None:
            self.counters.stale += 1
            if self._debug:
                log.debug("stale_reply", seq=seq)
        return call

    def _complete(self, call: Call, frame: Inbound, now: float) -> None:
        """A matched reply: the call ends with the device's status and data."""
        self.link.reply(now)
        status = frame.status
        if status == 0:
            error, message = None, "ok"
        elif status == 0xFF:
            error, message = "remote_failure", "the device reported failure (status 0xff)"
        else:
            error, message = "device_error", f"device status 0x{status:02x}"
        self._finish(call, error, message, status, frame.data, frame.text)
        if call.is_ping:
            if not self._inflight:
                self._cancel_sweep()  # an idle link: no wake-up for a deadline long met
            self._arm_heartbeat()
        if self.queue.waiting and self.queue.ready():
            self._pump()

    def _on_timeout(self, call: Call) -> None:
        """A try's deadline passed (the sweep checked that it is still on the link)."""
        del self._inflight[call.seq]
        self.counters.timeouts += 1
        dead = self.link.timeout()
        if self.link.state is LinkState.CONNECTING:
            self._finish(call, "timeout", f"no answer within {call.timeout:g} s")
            return
        if dead:
            self._finish(call, "timeout", f"no answer within {call.timeout:g} s")
            self._lose(f"device not answering ({self.link.consecutive_timeouts} timeouts in a row)")
            return
        retry = call.tries <= call.retry and not call.is_ping
        if not retry:
            self._finish(call, "timeout", f"no answer within {call.timeout:g} s")
        if self.codec.pipelined:
            if retry:
                self._resend(call)
        elif self._tcp:
            # Without seqs a late reply would pass for the next call's: on TCP, drop the
            # connection so it goes nowhere, and send the retry on the new one.
            if retry:
                self._requeue_first(call)
            self._lose("no answer on a tcp link without seqs: reconnecting")
            return
        else:
            self._start_guard(call if retry else None)
        if call.is_ping:
            self._arm_heartbeat()
        if not retry:
            self._pump()

    def _requeue_first(self, call: Call) -> None:
        """Put a call to be retried at the head of the queue; it waits for the link."""
        self.counters.retries += 1
        call.wait = True
        self.queue.push(call, front=True)

    def _resend(self, call: Call) -> None:
        """A retry: the same bytes with the same seq, so a device may answer from a cache."""
        transport = self._transport
        assert transport is not None
        now = self._loop.time()
        call.tries += 1
        self.counters.retries += 1
        self._inflight[call.seq] = call
        call.deadline = now + call.timeout
        self._arm_sweep(call.deadline)
        self.counters.frames_tx += 1
        self.link.activity(now)
        if self.traffic is not None:
            self.traffic("tx", "retry", call.seq, None, call.payload)
        if self._debug:
            log.debug("call_retry", client=call.owner, request_id=call.req_id, try_=call.tries)
        transport.write(call.frame)

    def _start_guard(self, held: Call | None) -> None:
        self._held = held
        self._guard_until = self._loop.time() + self.cfg.device.guard
        self._guard_timer = self._loop.call_at(self._guard_until, self._guard_check)

    def _guard_check(self) -> None:
        if self._guard_until is None:
            return
        now = self._loop.time()
        if now < self._guard_until:
            self._guard_timer = self._loop.call_at(self._guard_until, self._guard_check)
            return
        self._guard_until = self._guard_timer = None
        self.codec.reset()
        held, self._held = self._held, None
        if held is not None and self._transport is not None:
            self._resend(held)
        else:
            self._pump()
        self._arm_heartbeat()

    def _finish(
        self,
        call: Call,
        error: str | None,
        message: str,
        status: int | None = None,
        data: bytes = b"",
        text: str | None = None,
    ) -> None:
        # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds.
        elapsed = time.perf_counter() - call.t_submit if call.t_submit else 0.0
        if not call.is_ping:
            c = self.counters
            c.calls += 1
            if error is None:
                c.calls_ok += 1
                self.latency.observe(elapsed)
            else:
                c.calls_failed += 1
                self.errors[error] = self.errors.get(error, 0) + 1
            self.queue.release(call)
            if self._debug:
                log.debug(
                    "call_done",
                    client=call.owner,
                    request_id=call.req_id,
                    error=error,
                    status=status,
                    ms=round(elapsed * 1000, 3),
                )
        # tuple.__new__: CallResult's own __new__ is a Python function, once per call
        result = _new_tuple(
            CallResult, (error, message, status, data, text, elapsed * 1000, self.link.generation)
        )
        call.done(result)

    # --- heartbeat -------------------------------------------------------------------
    def _arm_heartbeat(self) -> None:
        due = self.link.ping_due_at()
        if due is None:
            return
        if self._hb_timer is not None:
            self._hb_timer.cancel()
        self._hb_timer = self._loop.call_at(due, self._heartbeat)

    def _heartbeat(self) -> None:
        self._hb_timer = None
        due = self.link.ping_due_at()
        if due is None or self._transport is None or self.ping_payload is None:
            return
        now = self._loop.time()
        if now < due - 0.001:
            self._hb_timer = self._loop.call_at(due, self._heartbeat)
            return
        if self._inflight or self.queue.ready() or self._guard_until is not None:
            # Not idle: the calls on the link prove (or disprove) liveness themselves.
            self._hb_timer = self._loop.call_at(now + self.link.interval, self._heartbeat)
            return
        ping = Call(
            None,
            self.ping_payload,
            _ignore,
            timeout=self.cfg.heartbeat.timeout,
            retry=0,
            is_ping=True,
        )
        ping.t_submit = time.perf_counter()
        self._send([ping])

    # --- losing the link ---------------------------------------------------------------
    def link_lost(self, reason: str) -> None:
        """Transport callback: hang-up, EIO, write error."""
        self._lose(reason)

    def _lose(self, reason: str) -> None:
        if self.link.state not in (LinkState.UP, LinkState.CONNECTING):
            return
        self._drop_transport()
        transition = self.link.lost(self._loop.time(), reason)
        for call in self._take_inflight():
            self._finish(call, "link_down", f"link lost: {reason}")
        self._fail_queued("link_down", f"link lost: {reason}", everyone=False)
        self._announce(transition)
        self._wakeup()

    def _take_inflight(self) -> list[Call]:
        calls = list(self._inflight.values())
        if self._held is not None:
            calls.append(self._held)
            self._held = None
        self._inflight.clear()
        self._cancel_sweep()
        for call in calls:
            if call.timer is not None:
                call.timer.cancel()
                call.timer = None
        return calls

    def _inflight_calls(self) -> int:
        return sum(1 for c in self._inflight.values() if not c.is_ping) + (self._held is not None)

    def _drop_transport(self) -> None:
        for timer in (self._hb_timer, self._guard_timer):
            if timer is not None:
                timer.cancel()
        self._hb_timer = self._guard_timer = None
        self._guard_until = None
        transport, self._transport = self._transport, None
        if transport is not None:
            tx, rx = self._bytes_prev
            self._bytes_prev = (tx + transport.bytes_tx, rx + transport.bytes_rx)
            transport.close()

    def _announce(self, transition: Transition) -> None:
        state = transition.state
        if state is LinkState.UP:
            log.info("link_up", link_state="up", port=self.port, generation=transition.generation)
        elif state is LinkState.DOWN:
            log.warning(
                "link_down",
                link_state="down",
                port=self.port,
                reason=transition.reason,
                generation=transition.generation,
                retry_in=round(self.link.retry_in(self._loop.time()), 3),
            )
        else:
            log.debug("link_" + state.value, link_state=state.value, port=self.port,
                      generation=transition.generation)  # fmt: skip
        self._on_link(transition)

    # --- waiting ----------------------------------------------------------------------
    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _sleep(self, delay: float) -> None:
        self._wake = self._loop.create_future()
        handle = self._loop.call_later(delay, self._wakeup)
        try:
            await self._wake
        finally:
            handle.cancel()


def _ignore(_: CallResult) -> None:
    return None


def ping_payload(cfg: Config) -> bytes | None:
    """What the handshake and heartbeat send (None: no handshake, heartbeat off)."""
    codec, hb = cfg.device.codec, cfg.heartbeat
    if codec == "verl":
        return b""
    if codec == "length":
        return bytes.fromhex(hb.payload) if hb.interval > 0 else None
    if hb.payload and hb.interval > 0:
        return hb.payload.encode(cfg.device.line.encoding)
    return None


def make_codec(cfg: Config) -> LinkCodec:
    """The daemon-side codec the config asks for."""
    from verld.codec.length import LengthCodec
    from verld.codec.line import LineCodec
    from verld.codec.verl import VerlCodec

    dev = cfg.device
    if dev.codec == "verl":
        return VerlCodec(dev.max_payload)
    if dev.codec == "length":
        return LengthCodec(dev.max_payload)
    line = dev.line
    return LineCodec(
        dev.max_payload,
        terminator=line.terminator,
        encoding=line.encoding,
        end=line.end,
        error=line.error,
        event=line.event,
    )
