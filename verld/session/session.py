"""The device session: one link, one queue, every front's calls.

Strategy: fronts `submit` calls; each ends in exactly one `CallResult` handed to its
`done`. Calls wait in per-owner queues served round-robin (`calls.FairQueue`); up
to `window` of them are on the link at once (`window.Window`). Every timer is the
`timekeeper.Timekeeper`'s, and what a timeout calls for is the link state machine's
policy (`link.Link.timed_out`); the link's own state (up, inhibited, closing) is
the `Link`'s; the link's life (open, handshake, loss, announcing) is the
`supervisor.Supervisor`'s, which calls `attach`, `send_ping`, `resume`,
`fail_queued` and `detach`. What differs between codecs beyond framing (Modbus
units and turns, the RTU gap, line's screen) is the line's `discipline.Plain`,
chosen once from the codec's traits. Replies and events come in through its
receiving half, the `receiving.Receiver` (the transport's `link_data` is the
receiver's); the timers are the timekeeper's. The session makes both with the
parts they share and hands each the few of its methods they call, and tells them
the settings, codec, line, queue and ping in use whenever those change
(`_use_line`).

No I/O here; time only from `clock` (the loop, or a test's manual clock: timers)
and `precise` (the monotonic clock the loop is built on: elapsed times and the
RTU gap, as uvloop's loop time ticks in whole milliseconds).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Hashable
from typing import Any

import structlog

from verld.alarm import Clock
from verld.codec.base import LinkCodec
from verld.codec.registry import spec_of
from verld.config import Config
from verld.errors import ErrorCode
from verld.links.link import Link, LinkState
from verld.links.transport import LinkTransport
from verld.session.calls import Call, CallResult, FairQueue
from verld.session.discipline import Plain, discipline_for
from verld.session.receiving import EventSink, Receiver, TrafficTap
from verld.session.stats import Stats
from verld.session.timekeeper import Timekeeper
from verld.session.window import SEQ_MOD, Window

log = structlog.get_logger("verld.session.session")

_new_tuple = tuple.__new__
_UP = LinkState.UP

#: (dir, raw bytes) as read and written, garbage included: the `wire` topic
WireTap = Callable[[str, bytes], None]


class Session:
    """Owns the calls on the link to the device."""

    #: the transport's callback, bytes from the device: the receiver's own method
    link_data: Callable[[bytes], None]

    def __init__(
        self,
        cfg: Config,
        codec: LinkCodec,
        port: str,
        *,
        clock: Clock,
        on_event: EventSink,
        precise: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.cfg, self.codec, self.port, self.clock = cfg, codec, port, clock
        #: the link is lost (the reason): the supervisor's `lose`
        self.on_lost: Callable[[str], None] = _nothing
        #: fine-grained time (elapsed ms, the RTU gap): the loop's monotonic clock
        self.precise = clock.time if precise is None else precise
        self.link = Link.from_config(cfg, rng)
        self.window = Window(1)
        #: the device's ping (the handshake, the heartbeat, probes), or None: none
        self.ping_payload: bytes | None = None
        self.stats = Stats()
        self.counters = self.stats.counters
        self.queue = FairQueue(cfg.api.queue_limit, cfg.api.client_queue)
        self.line: Plain = Plain(cfg, codec, self.link)
        self._transport: LinkTransport | None = None
        self._holds = 0
        self._pump_wanted = False
        self._debug = False
        self._traffic: TrafficTap | None = None
        self._wire: WireTap | None = None
        self.timers = Timekeeper(
            cfg,
            codec,
            self.line,
            self.queue,
            clock=clock,
            precise=self.precise,
            link=self.link,
            window=self.window,
            counters=self.counters,
            finish=self.finish,
            pump=self.pump,
            send=self.send,
            resend=self.resend,
            lose=self.lose,
            attached=lambda: self._transport is not None,
        )
        self._sweep = self.timers.sweep
        self.receiver = Receiver(
            codec,
            self.line,
            self.queue,
            clock=clock,
            precise=self.precise,
            link=self.link,
            window=self.window,
            stats=self.stats,
            timers=self.timers,
            on_event=on_event,
            finish=self.finish,
            pump=self.pump,
            hold=self.hold,
            flush=self.flush,
            lose=self.lose,
        )
        self.link_data = self.receiver.link_data
        self._set_line()
        self.started = 0.0  #: when verld started, in wall-clock time (`status`)

    # --- settings -----------------------------------------------------------------
    def reconfigure(self, cfg: Config) -> None:
        """Apply a reloaded config's live settings (timeouts, heartbeat, limits)."""
        self.cfg = cfg
        self.queue.limit, self.queue.share = cfg.api.queue_limit, cfg.api.client_queue
        self.link.configure(cfg)
        self.line.configure(cfg)
        self._use_line()
        self.timers.arm_heartbeat()

    def set_debug(self, enabled: bool) -> None:
        """Per-call DEBUG lines cost even when filtered: build them only when wanted."""
        self._debug = self.receiver.debug = enabled

    def replace_device(self, codec: LinkCodec, port: str | None = None) -> None:
        """New device settings (a reload): new codec (and port); the caller reconnects."""
        self.codec = codec
        if port is not None:
            self.port = port
        self._set_line()

    def _set_line(self) -> None:
        """The codec's window, ping and line discipline, and the queue that suits it:
        calls queued for the other kind of line fail."""
        cfg, spec = self.cfg, spec_of(self.cfg)
        self.window.size = cfg.device.window if self.codec.pipelined else 1
        # (a codec whose seq field is narrower than 16 bits says how many numbers it holds)
        self.window.modulus = getattr(self.codec, "seq_space", 0) or SEQ_MOD
        self.line.stop()
        line = self.line = discipline_for(
            spec,
            cfg,
            self.codec,
            self.link,
            clock=self.clock,
            precise=self.precise,
            quiet=self.receiver.line_quiet,
        )
        queue = line.queue(self.queue)
        if queue is not self.queue:
            if len(self.queue):
                why = "the device codec changed"
                self.timers.fail_queued(ErrorCode.LINK_DOWN, why, everyone=True)
            self.queue = queue
        self._use_line()

    def _use_line(self) -> None:
        """The line's hooks, the device's ping (also with the idle heartbeat off: the
        handshake and the probe after a timeout send it) and whether a timeout calls
        for a resync; the timekeeper and the receiver told what is in use now."""
        cfg, spec, codec, line = self.cfg, spec_of(self.cfg), self.codec, self.line
        self._screen, self._clear = line.screen, line.clear
        # a bus's units may be offline (`_refusal` asks): its calls take the slow path
        self._turns = line.turns
        self._quick_screen = None if line.turns else line.screen
        ping = self.ping_payload = spec.device_ping(cfg)
        expect = cfg.heartbeat.expect
        # a try that ran out puts the line out of step: pings resync it (`line`)
        resyncs = (
            spec.text
            and not codec.pipelined
            and not line.turns
            and ping is not None
            and getattr(codec, "feed_replies", None) is not None
        )
        self.timers.use(cfg, codec, line, self.queue, ping=ping, resyncs=resyncs)
        self.receiver.use(
            codec,
            line,
            self.queue,
            quiet=spec.quiet,
            resyncs=resyncs,
            expect=re.compile(expect) if expect is not None and spec.text else None,
        )

    def set_taps(self, traffic: TrafficTap | None, wire: WireTap | None) -> None:
        """Decoded frames and raw bytes each way to the taps (None: off, costs nothing)."""
        self._traffic = self.receiver.traffic = traffic
        self._wire = wire
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
        call.t_submit = self.precise()
        queue, link = self.queue, self.link
        if (
            self._debug
            or link.closing
            or link.inhibited_by is not None
            or link.state is not _UP
            or queue.exclusive is not None
            or self._turns
            or not call.reply
        ):
            self._submit(call)  # the rarer cases, one by one
            return
        # The usual call (the per-call hot path): the link is up and open to everyone.
        screen = self._quick_screen
        if screen is not None:  # (line, frame: one request per call)
            reason = screen(call)
            if reason is not None:
                self.finish(call, ErrorCode.BAD_REQUEST, reason)
                return
        full = queue.admit(call)
        if full is not None:
            self.finish(call, ErrorCode.BUSY, full)
        elif queue.waiting or not self._sendable():
            queue.push(call)
            if self.window.room() > 0:  # (full: the next reply pumps)
                self.pump()
        else:
            queue.sent_directly(call.unit)  # (that was its unit's turn, with units)
            self.send([call])  # what pump would do, without the trip through the queue

    def _submit(self, call: Call) -> None:
        """`submit` with every case checked: DEBUG lines, closing, inhibited, down, a
        lease, a line's screen."""
        if self._debug:
            log.debug(
                "call_received", client=call.owner, request_id=call.req_id, bytes=len(call.payload)
            )
        refused = self._refusal(call)
        if refused is not None:
            self.finish(call, *refused)
            return
        queue, link = self.queue, self.link
        if not queue.waiting and queue.exclusive is None and self._sendable():
            queue.sent_directly(call.unit)  # (that was its unit's turn, with units)
            self.send([call])  # what _pump would do, without the trip through the queue
            return
        queue.push(call)
        if self._debug:
            log.debug("call_queued", client=call.owner, request_id=call.req_id, queue=len(queue))
        excl = queue.exclusive
        held = excl is not None and call.owner is not excl
        if link.state is not _UP or link.inhibited_by is not None or held:
            self.timers.wait(call)
        elif self.window.room() > 0:  # full: the next reply pumps
            self.pump()

    def _refusal(self, call: Call) -> tuple[ErrorCode, str] | None:
        """Why a call ends at once (error code, message), or None: it is admitted."""
        link = self.link
        if link.closing:
            return ErrorCode.SHUTTING_DOWN, "verld is shutting down"
        if self._screen is not None:
            reason = self._screen(call)
            if reason is not None:
                return ErrorCode.BAD_REQUEST, reason
        if not call.reply and not self.receiver.quiet_sorts:
            codec = self.cfg.device.codec
            why = f"'reply': false is not for codec {codec}: its device answers every request"
            return ErrorCode.BAD_REQUEST, why
        if link.inhibited_by is not None and not call.wait:
            return ErrorCode.BUSY, link.inhibited_by
        if link.state is not _UP and not call.wait:
            return ErrorCode.LINK_DOWN, f"link is {link.state.value}: {link.reason}"
        excl = self.queue.exclusive
        if excl is not None and call.owner is not excl and not call.wait:
            return ErrorCode.BUSY, "the device is leased to another client"
        if link.state is _UP:  # (a unit offline: a reopen may bring it back)
            offline = self.line.offline(call, self.clock.time())
            if offline is not None:
                return ErrorCode.TIMEOUT, offline
        refused = self.queue.admit(call)
        return None if refused is None else (ErrorCode.BUSY, refused)

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
        return (
            link.state is _UP
            and link.guard_until is None
            and not self._holds
            and self._transport is not None
            and self.window.room() > 0
            and link.inhibited_by is None
            and not link.resyncing
            and (self._clear is None or self._clear())
        )

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
        if not calls[0].reply:  # (only without seqs: the window holds one call)
            self._send_unanswered(calls[0], transport)
            return
        now = self.clock.time()
        earliest = self.window.add_all(calls, now)
        encode = self.codec.encode_request
        for call in calls:
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
        self.line.sent(calls, now)
        if earliest < self._sweep.at:
            self._sweep.set(earliest)
        transport.write(calls[0].frame if len(calls) == 1 else b"".join([c.frame for c in calls]))

    def _send_unanswered(self, call: Call, transport: LinkTransport) -> None:
        """A call the device does not answer: written once, off the window (no reply
        can match it); it ends when the line has been quiet for `device.guard`."""
        call.tries += 1
        call.frame = self.codec.encode_request(call.seq, call.payload)
        self.counters.frames_tx += 1
        if self._traffic is not None:
            self._traffic("tx", "request", None, None, call.payload)
        if self._debug:
            log.debug("call_sent", client=call.owner, request_id=call.req_id, reply=False)
        self.line.sent([call], self.clock.time())
        self.timers.quiet(call)
        transport.write(call.frame)

    def resend(self, call: Call) -> None:
        """A retry: the same bytes with the same seq, so a device may answer from a cache."""
        transport = self._transport
        assert transport is not None
        now = self.clock.time()
        self.counters.retries += 1
        self.counters.frames_tx += 1
        self._sweep.set_earlier(self.window.readd(call, now))
        self.line.sent([call], now)
        if self._traffic is not None:
            self._traffic("tx", "retry", call.seq, None, call.payload)
        if self._debug:
            log.debug("call_retry", client=call.owner, request_id=call.req_id, try_=call.tries)
        transport.write(call.frame)

    def finish(
        self,
        call: Call,
        error: str | None,
        message: str,
        status: int | None = None,
        data: bytes = b"",
        text: str | None = None,
    ) -> None:
        """End a call: its outcome counted, its share of the queue released, its
        result to its `done` (exactly once per call)."""
        # `precise`, not loop.time(): uvloop's clock ticks in whole milliseconds.
        elapsed = self.precise() - call.t_submit if call.t_submit else 0.0
        if not call.is_ping:
            outcomes = call.outcomes
            if outcomes is not None:
                outcome = error or "ok"
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            self.stats.finished(error, elapsed)
            self.queue.release(call)
            if call.unit >= 0:
                gone = self.line.finished(call, error, self.clock.time())
                if gone is not None:
                    self.line.unit_offline(gone, self.queue, self.finish)
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
        result = (error, message, status, data, text, elapsed * 1000, self.link.generation)
        call.done(_new_tuple(CallResult, result))

    # --- the link's life: the supervisor's; the session only attaches and detaches ----
    @property
    def attached(self) -> LinkTransport | None:
        return self._transport

    def attach(self, transport: LinkTransport) -> None:
        """A newly opened transport (link connecting): the handshake comes next."""
        self._transport = transport
        transport.tap = self._wire
        self.codec.reset()

    def resume(self) -> None:
        """The link came up: the heartbeat runs, queued calls go out."""
        self.timers.arm_heartbeat()
        self.pump()

    def proves_alive(self, result: CallResult) -> bool:
        """Whether a ping's result shows the device is there (the line's say: on a
        Modbus bus an exception reply does)."""
        return self.line.proves_alive(result)

    @property
    def bad_frames(self) -> int:
        """Frames the codec could not read (noise, another codec, a wrong baud rate)."""
        return self.codec.bad_frames

    def send_ping(self, done: Callable[[CallResult], None]) -> None:
        """Ping the device now, ahead of the queue (the handshake's ping), ending in
        `done`; only when the codec has a ping (`ping_payload`)."""
        self.send([self.timers.ping(done)])

    def fail_queued(self, code: ErrorCode, message: str, *, everyone: bool) -> None:
        """Fail the queued calls (all of them, or those that did not ask to wait: those
        wait on, each for its timeout): a loss, an inhibit, the shutdown."""
        self.timers.fail_queued(code, message, everyone=everyone)

    def lose(self, reason: str) -> None:
        """The link is gone (hang-up, EIO, dead heartbeat, desync...): the supervisor's
        `lose`, one path for every cause."""
        self.on_lost(reason)

    def link_lost(self, reason: str) -> None:
        """The transport's callback (hang-up, EIO, write error): `lose`."""
        self.lose(reason)

    def take_inflight(self) -> list[Call]:
        """Every call on the link or held for the guard, off it (their timers off)."""
        calls = self.window.drain()
        calls += self.timers.take_held()
        self._sweep.cancel()
        for call in calls:
            if call.timer is not None:
                call.timer.cancel()
                call.timer = None
        return calls

    def inflight_calls(self) -> int:
        """Client calls still to be answered (on the link or held for the guard)."""
        return self.window.calls() + self.timers.holding

    def detach(self) -> None:
        """The transport goes (closed); the link's timers stop."""
        self.timers.stop()
        self.line.stop()
        transport, self._transport = self._transport, None
        if transport is not None:
            self.stats.closed_transport(transport.bytes_tx, transport.bytes_rx)
            transport.close()

    # --- figures -------------------------------------------------------------------------
    def status(self, wall: float) -> dict[str, Any]:
        """The `status` reply's session part (`wall`: wall-clock time now)."""
        t, link = self._transport, self.link
        since = wall - (self.clock.time() - link.since) if link.since else self.started
        return self.stats.status(
            link.status(self.port, self.cfg.device.codec, since),
            link,
            now=self.clock.time(),
            live=(0, 0) if t is None else (t.bytes_tx, t.bytes_rx),
            bad_frames=self.bad_frames,
            queue=len(self.queue),
            inflight=len(self.window),
            extra=self.line.status(),
        )


def _nothing(_: str) -> None:
    return None
