"""The receiving half of the session: bytes from the device become replies and events.

Strategy: the transport's bytes come to `Receiver.link_data` (the session's own
`link_data` is this bound method: no hop per read); the codec decodes them into
`Inbound` frames; a reply takes its call off the window (`Window.match`: no call,
a stale reply, counted) and ends it, with the window refilled first so the device
works on the next calls while the replies go out; an event goes to the event sink
once the link is up. A stream out of step (`codec.desync`) loses the link.

The receiver owns the decoding side: which feed reads the bytes (the codec's
`feed`, its `quiet_feed` in a quiet time, its `feed_replies` while the link is out
of step), the `heartbeat.expect` pattern, the event sink and the counting of what
came (frames, stale replies, events, desyncs). The session makes it with the parts
both halves share (link, window, stats, timekeeper) and what it does to the calls
as callbacks (`finish`, `pump`, `hold`/`flush`, `lose`), and tells it the codec,
line and queue in use (`use`). The usual reply (status 0 to a client call,
no unit, no DEBUG) ends its call right here: what the session's `finish` does,
without the trip through it (the per-call hot path).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import structlog

from verld.alarm import Clock
from verld.codec.base import Inbound, Kind, LinkCodec
from verld.links.link import Link, LinkState
from verld.session.calls import Call, CallResult, FairQueue, Finish
from verld.session.discipline import Plain
from verld.session.stats import Stats
from verld.session.timekeeper import Timekeeper
from verld.session.window import Window

log = structlog.get_logger("verld.session.session")

_UP = LinkState.UP
_REPLY = Kind.REPLY
_new_tuple = tuple.__new__  #: CallResult's own __new__ is a Python function: once per call
EventSink = Callable[[bytes, str | None, int], None]
#: (dir "tx"/"rx", kind, seq, status, payload) for every frame: the `traffic` topic
TrafficTap = Callable[[str, str, int | None, int | None, bytes], None]


class Receiver:
    """Replies and events in, for one session."""

    def __init__(
        self,
        codec: LinkCodec,
        line: Plain,
        queue: FairQueue,
        *,
        clock: Clock,
        precise: Callable[[], float],
        link: Link,
        window: Window,
        stats: Stats,
        timers: Timekeeper,
        on_event: EventSink,
        finish: Finish,
        pump: Callable[[], None],
        hold: Callable[[], None],
        flush: Callable[[], None],
        lose: Callable[[str], None],
    ) -> None:
        self.clock, self.precise, self.link, self.window = clock, precise, link, window
        self.stats, self.counters, self.timers = stats, stats.counters, timers
        self._on_event = on_event
        self._finish, self._pump, self._hold, self._flush = finish, pump, hold, flush
        self._lose = lose
        # the codec, line and queue in use (`use` sets them anew)
        self.codec, self.line, self.queue, self._heard = codec, line, queue, line.heard
        #: the codec sorts lines in a quiet time (events kept, the rest dropped)
        self._quiet_feed: Callable[[bytes], tuple[list[Inbound], int]] | None = None
        #: every reply in a read, none taken for an event (a link out of step: `line`)
        self._feed_replies: Callable[[bytes], list[Inbound]] | None = None
        #: a try that ran out puts the line out of step: its lines are sorted (`line`)
        self.resyncs = False
        #: what a line must match to answer the ping (`heartbeat.expect`), or None
        self.expect: re.Pattern[str] | None = None
        self.traffic: TrafficTap | None = None
        self.debug = False

    def use(
        self,
        codec: LinkCodec,
        line: Plain,
        queue: FairQueue,
        *,
        quiet: bool,
        resyncs: bool,
        expect: re.Pattern[str] | None,
    ) -> None:
        """The codec, line and queue in use; `quiet`: the codec sorts lines in a quiet
        time (`CodecSpec.quiet`); `resyncs`, `expect`: how a link out of step is read."""
        self.codec, self.line, self.queue, self._heard = codec, line, queue, line.heard
        self._quiet_feed = getattr(codec, "quiet_feed", None) if quiet else None
        self._feed_replies = getattr(codec, "feed_replies", None)
        self.resyncs, self.expect = resyncs, expect

    @property
    def quiet_sorts(self) -> bool:
        """Whether lines in a quiet time are sorted (a call with `reply: false` may go)."""
        return self._quiet_feed is not None

    def link_data(self, data: bytes) -> None:
        """Transport callback: bytes from the device."""
        now = self.clock.time()
        heard = self._heard
        if heard is not None:
            heard()  # (the RTU gap restarts)
        link = self.link
        quiet_until = link.guard_until
        if link.noise(now):  # after a timeout or a no-reply call (no seqs): a quiet time
            if self._quiet_feed is not None:
                self._quiet_lines(data, now, quiet_until)
            return  # (other codecs: discarded until the line has been quiet)
        if self.resyncs and (link.resyncing or self._ping_awaits_expect()):
            self._out_of_step(data, now)
            return
        frames = self.codec.feed(data, bool(self.window))
        if not frames and heard is not None:
            self.line.unfinished()  # (a reply whose end only silence tells)
        self.frames_in(frames, now)

    def _quiet_lines(self, data: bytes, now: float, quiet_until: float | None) -> None:
        """Input in a quiet time: events go out; the rest is dropped and counted, as
        late answers (after a timeout) or unexpected (after a no-reply call). Events
        alone do not make a no-reply call's quiet time longer: a device that streams
        them (a GPS) would otherwise hold the call forever."""
        assert self._quiet_feed is not None
        events, dropped = self._quiet_feed(data)
        if dropped:
            if self.timers.quiet_call is not None:
                self.link.unexpected += dropped
            else:
                self.link.late_lines(dropped)
        elif events and self.timers.quiet_call is not None and quiet_until is not None:
            self.link.quiet_stands(quiet_until)
        if events:
            self.frames_in(events, now)

    def _ping_awaits_expect(self) -> bool:
        """A ping is on the link and only a line matching `heartbeat.expect` answers it."""
        if self.expect is None:
            return False
        call = self.window.first()
        return call is not None and call.is_ping

    def _out_of_step(self, data: bytes, now: float) -> None:
        """Lines while the link is out of step (a resync) or a ping awaits `expect`:
        a line that answers the ping (matches `expect`; without it, is no error) ends
        it; every other line that is not an event is a late answer, dropped."""
        assert self._feed_replies is not None  # (`resyncs` only where the codec has it)
        frames = self._feed_replies(data)  # (every line not an event is a "reply")
        kept: list[Inbound] = []
        link, expect = self.link, self.expect
        ping = self.window.first()
        over = False
        for frame in frames:
            if frame.kind is not _REPLY:
                kept.append(frame)
                continue
            if expect is not None:
                answers = expect.search(frame.text or "") is not None
            else:
                answers = frame.status == 0
            if not answers:
                link.late_lines(1 + (frame.text or "").count("\n"))
                continue
            if ping is not None and ping.is_ping:
                kept.append(frame)  # the ping on the link ends with it
                ping = None
            if link.resyncing and link.resync_answer():
                over = True
        if over and expect is None:  # the quiet time first: nothing goes out meanwhile
            self.timers.resync_over(wait_quiet=True)
        if kept:
            self.frames_in(kept, now)
        if over and expect is not None:
            self.timers.resync_over(wait_quiet=False)

    def line_quiet(self, frames: list[Inbound]) -> None:
        """The line fell silent (the line discipline's `quiet`): the frames that
        ended, then the next calls."""
        if frames:
            self.frames_in(frames, self.clock.time())
        self._pump()

    def frames_in(self, frames: list[Inbound], now: float) -> None:
        """Decoded frames: replies to their calls, events to the listeners.

        The window slots are freed first and refilled in one write, so the device works
        on the next calls while the replies go out to their clients.
        """
        if frames:
            if self.traffic is not None:
                for f in frames:
                    kind = "reply" if f.kind is Kind.REPLY else "event"
                    self.traffic("rx", kind, f.seq, f.status, f.data)
            self.counters.frames_rx += len(frames)
            self.link.activity(now)
            match = self.window.match
            matched = [match(f.seq) if f.kind is _REPLY else None for f in frames]
            if self.queue.waiting:
                self._pump()
            self._hold()  # replies to pings may pump again: still one write
            try:
                self._complete_all(frames, matched, now)
            finally:
                self._flush()
        if self.codec.desync is not None:
            self.stats.desyncs += 1
            self._lose(f"stream out of step: {self.codec.desync}")

    def _complete_all(self, frames: list[Inbound], matched: list[Call | None], now: float) -> None:
        """Each frame in order: its call ends (a reply), or it goes to the listeners."""
        replied = False
        precise, generation = self.precise, self.link.generation
        release, fast = self.queue.release, not self.debug
        took: list[float] = []  #: the elapsed times of the calls that succeeded
        try:
            for frame, call in zip(frames, matched, strict=True):
                if call is None:
                    if frame.kind is not _REPLY:
                        self._device_event(frame)
                    else:  # a reply without a call is stale
                        self.counters.stale += 1
                        if self.debug:
                            log.debug("stale_reply", seq=frame.seq)
                    continue
                if not replied:
                    replied = True
                    self.link.reply(now)
                if frame.status != 0 or call.unit >= 0 or call.is_ping or not fast:
                    self._complete(call, frame)
                    continue
                # A client call answered with status 0: `finish`, inlined (the hot path)
                elapsed = precise() - call.t_submit
                outcomes = call.outcomes
                if outcomes is not None:
                    outcomes["ok"] = outcomes.get("ok", 0) + 1
                took.append(elapsed)
                if call.counted:
                    release(call)
                result = (None, "ok", 0, frame.data, frame.text, elapsed * 1000, generation)
                call.done(_new_tuple(CallResult, result))
        finally:
            if took:  # (what Stats.finished does for each, for all at once)
                self.stats.succeeded(took)

    def _device_event(self, frame: Inbound) -> None:
        if self.link.state is _UP:
            self.counters.events += 1
            self._on_event(frame.data, frame.text, self.link.generation)
        else:  # before the handshake reply: left over from an earlier session
            self.stats.early_events += 1

    def _complete(self, call: Call, frame: Inbound) -> None:
        """A matched reply (the link's `reply` already told): the call ends with the
        device's status and data."""
        status = frame.status
        error: str | None
        if status == 0:
            error, message = None, "ok"
        else:
            error, message = self.line.reply_error(status or 0)
        self._finish(call, error, message, status, frame.data, frame.text)
        if call.is_ping:
            self.line.ping_answered(call)
            self.timers.ping_answered()
        if self.queue.waiting:
            self._pump()
