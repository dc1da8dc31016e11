"""What happens because time passed: deadlines, retries, the quiet guard, waits, pings.

Strategy: the session's per-call path never looks at a clock beyond stamping
deadlines; this module owns every timer of the session (three `Alarm`s and the
wait timers of calls that asked to wait) and acts when one rings:
- the **sweep** rings at the earliest deadline on the link and times out every try
  that ran out; what each timeout calls for (fail, resend, quiet guard, reconnect,
  dead link) is the link state machine's policy (`Link.timed_out`);
- the **guard** (codecs without seqs, serial) rings once the line has been quiet
  for `device.guard`, then sends the held retry or the next calls;
- the **heartbeat** pings an idle link `heartbeat.interval` after its last traffic,
  and a **probe** ping goes ahead of the queue after a call whose tries all ran out
  or a ping that did: only unanswered pings count toward `heartbeat.misses`;
- a **waiting call** (`wait: true`) fails after its timeout if it is still queued;
- a **no-reply call** (`reply: false`) ends once the line after it has been quiet for
  `device.guard` (the guard's alarm);
- a **resync** (a try ran out on a line without request ids, with a ping): after the
  guard only pings go out, each when the last ended, until every ping has its answer
  (`Link.begin_resync`); the **stall** alarm counts a miss when the answers still owed
  do not come within a ping's timeout.
What a timeout calls for is decided by the link state machine (`Link.timed_out`
returns an `AfterTimeout` and whether a probe ping follows); what differs on a
line whose units take turns (Modbus: a retry queues again, a call's silence is
its unit's and proves nothing about the line, a heartbeat ping takes a turn) is
the session's line discipline's (`discipline.Plain.turns` and its hooks), never
a codec's name. The session makes it with the parts they share (link, window,
counters) and the only things it does to the calls as callbacks (`finish`,
`send`, `resend`, `pump`, `lose`, and whether a transport is `attached`), and
tells it the settings, codec, line, queue and ping in use (`use`); the calls it
takes off the window or the queue are its own timers' calls.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from verld.alarm import Alarm, Clock
from verld.codec.base import LinkCodec
from verld.config import Config
from verld.errors import ErrorCode
from verld.links.link import AfterTimeout, Link, LinkState
from verld.session.calls import Call, CallResult, FairQueue, Finish
from verld.session.discipline import Plain
from verld.session.stats import Counters
from verld.session.window import EPSILON, Window

log = structlog.get_logger("verld.session.session")


class Timekeeper:
    """The timers of one session."""

    def __init__(
        self,
        cfg: Config,
        codec: LinkCodec,
        line: Plain,
        queue: FairQueue,
        *,
        clock: Clock,
        precise: Callable[[], float],
        link: Link,
        window: Window,
        counters: Counters,
        finish: Finish,
        pump: Callable[[], None],
        send: Callable[[list[Call]], None],
        resend: Callable[[Call], None],
        lose: Callable[[str], None],
        attached: Callable[[], bool],
    ) -> None:
        self.clock, self.precise, self.link, self.window = clock, precise, link, window
        self.counters = counters
        self._finish, self._pump, self._send, self._resend = finish, pump, send, resend
        self._lose, self._attached = lose, attached
        # what `use` sets anew: the settings, codec, line, queue and ping in use
        self.cfg, self.codec, self.line, self.queue = cfg, codec, line, queue
        self.ping_payload: bytes | None = None
        #: a try that ran out puts the line out of step (no seqs, a ping, no units): resync
        self.resyncs = False
        #: the one timeout timer, set for the earliest deadline on the link
        self.sweep = Alarm(clock, self._swept)
        self._beat = Alarm(clock, self._heartbeat)
        self._guard = Alarm(clock, self._guard_over)
        self._stall = Alarm(clock, self._resync_stalled)
        self._held: Call | None = None  #: a retry waiting for the guard to end
        #: a call the device does not answer, written: it ends when the guard does
        self.quiet_call: Call | None = None
        self._pinging = False  #: a heartbeat ping is queued or on the link

    def use(
        self,
        cfg: Config,
        codec: LinkCodec,
        line: Plain,
        queue: FairQueue,
        *,
        ping: bytes | None,
        resyncs: bool,
    ) -> None:
        """The settings, codec, line and queue in use; the device's `ping` (None: the
        codec has none) and whether a try that ran out calls for a resync."""
        self.cfg, self.codec, self.line, self.queue = cfg, codec, line, queue
        self.ping_payload, self.resyncs = ping, resyncs

    def stop(self) -> None:
        """The link went away: no heartbeat, no guard (deadlines end with their calls)."""
        self._beat.cancel()
        self._guard.cancel()
        self._stall.cancel()

    @property
    def holding(self) -> int:
        """Client calls held off the window: a retry waiting for the guard, a no-reply
        call waiting for its quiet time to end."""
        return (self._held is not None) + (self.quiet_call is not None)

    def take_held(self) -> list[Call]:
        """The calls held off the window (taken: the link is being emptied)."""
        held = [c for c in (self._held, self.quiet_call) if c is not None]
        self._held = self.quiet_call = None
        return held

    # --- deadlines ---------------------------------------------------------------------
    def _swept(self) -> None:
        """The earliest deadline came: time out every try whose deadline passed."""
        now, window = self.clock.time(), self.window
        for call in window.expired(now):
            # an earlier timeout may have resent it (new deadline) or dropped the link
            if window.holds(call) and call.deadline <= now + EPSILON:
                self._timed_out(call)
        if window:  # a retry above may have set it for a later deadline than these
            # not before 1 ms from now: a clock that rang early cannot make a busy loop
            self.sweep.set_earlier(max(window.earliest(), now + 0.001))

    def _timed_out(self, call: Call) -> None:
        """A try's deadline passed: fail or retry it as the link's policy says."""
        line = self.line
        self.window.remove(call)
        if line.unanswerable(call):  # (a Modbus broadcast)
            self._finish(call, None, "broadcast sent (no answer expected)", 0)
            self._pump()
            return
        self.counters.timeouts += 1
        if not call.is_ping:
            line.try_timed_out(call, self.queue)
        retry = call.tries <= call.retry and not call.is_ping
        # Units taking turns: a call's timeout is its unit's silence, not the line's:
        # it never counts, and no probe follows it (the heartbeat pings take turns).
        turns = line.turns
        # Without seqs a client's call, done, keeps the line quiet until the device's own
        # time to answer (device.timeout) has passed, however short the call's timeout:
        # the next call may be another client's. (Its own retry is the same request, so
        # a late answer to the try before would be the right one.)
        sent = call.deadline - call.timeout
        hold = 0.0 if call.is_ping or retry else sent + self.cfg.device.timeout
        after, probe = self.link.timed_out(
            self.clock.time(),
            seqs=self.codec.pipelined,
            ping=call.is_ping,
            spent=not retry and not call.is_ping and not turns,
            probes=not turns and self.probes(),
            hold_until=hold,
        )
        if not retry or after is AfterTimeout.FAIL or after is AfterTimeout.DEAD:
            tries = f" ({call.tries} tries)" if call.tries > 1 else ""
            self._finish(call, ErrorCode.TIMEOUT, f"no answer within {call.timeout:g} s{tries}")
        if after is AfterTimeout.DEAD:
            self._lose(self.link.dead_reason())
            return
        if after is AfterTimeout.FAIL:
            return
        if probe and after is AfterTimeout.GUARD and self.resyncs:
            # Without request ids its answer may still come and pass for the next
            # call's: out of step until the pings after the guard are all answered.
            self.link.begin_resync()
        elif probe:
            self.probe()
        if retry and turns:
            # to the back of its unit's turn: other units' calls go first
            self.counters.retries += 1
            self.queue.push(call, front=True)
        elif after is AfterTimeout.RESEND and retry:
            self._resend(call)
        if after is AfterTimeout.GUARD:
            self._held = call if retry and not turns else None
            self._guard.set(self.link.guard_until or 0.0)
        if call.is_ping and not probe:
            self.arm_heartbeat()
        if not retry or turns:
            self._pump()

    def probes(self) -> bool:
        """Whether a ping can tell a live device from a dead one (there is one; also
        with the idle heartbeat off)."""
        return self.ping_payload is not None

    def probe(self) -> None:
        """A ping next, ahead of the queued calls (a call or a ping went unanswered):
        it tells a device that ignores one request from one that hangs."""
        if self._pinging:
            return  # one on its way already says it
        self._pinging = True
        self.queue.push(self.ping(self._pinged), front=True)

    def shorten(self, calls: list[Call], limit: float) -> None:
        """Calls nobody waits for any more (their client left) run out within `limit`
        and are not retried: without seqs they must run out, not hold the device."""
        latest = self.clock.time() + limit
        for call in calls:
            if call.timeout > limit:
                call.retry = 0
                if call.deadline > latest:
                    call.deadline = latest
                    self.sweep.set_earlier(latest)

    def _guard_over(self) -> None:
        link = self.link
        if link.guard_until is None:
            return
        if not link.guard_over(self.clock.time()):
            self._guard.set(link.guard_until)  # bytes came meanwhile: quiet from then on
            return
        self.codec.reset()
        quiet, self.quiet_call = self.quiet_call, None
        if quiet is not None:  # its quiet time is over: nothing answered it, as foreseen
            self._finish(quiet, None, "sent (no reply expected)", 0, b"", "")
        held, self._held = self._held, None
        if link.resyncing:
            if self._attached() and not self.window:
                self.resync_ping()
            return
        late = link.take_late()
        if late:
            log.info("late_lines_dropped", count=late, resync=False)
        if held is not None and self._attached():
            self._resend(held)
        else:
            self._pump()
        self.arm_heartbeat()

    # --- a call the device does not answer ------------------------------------------------
    def quiet(self, call: Call) -> None:
        """`call` (no reply awaited) was written: it ends once the line has been quiet
        for `device.guard`; meanwhile nothing else goes out."""
        link = self.link
        link.quiet(self.clock.time())
        self.quiet_call = call
        self._guard.set(link.guard_until or 0.0)

    # --- out of step: pings until every one is answered ------------------------------------
    def resync_ping(self) -> None:
        """The next ping of a resync, straight onto the link."""
        self._stall.cancel()
        self.link.resync_ping()
        self._pinging = True
        self._send([self.ping(self._resync_pinged)])

    def _resync_pinged(self, result: CallResult) -> None:
        self._pinging = False
        if result.error is None and self.link.resyncing:
            # answered, but earlier pings' answers are still owed: they come, or a miss
            self._stall.set(self.clock.time() + self.cfg.heartbeat.timeout)

    def resync_over(self, wait_quiet: bool) -> None:
        """Every ping of the resync has its answer: calls go out again (after a quiet
        `device.guard` when `wait_quiet`: no `expect` said which line was the ping's)."""
        self._stall.cancel()
        late = self.link.take_late()
        if late:
            log.info("late_lines_dropped", count=late, resync=True)
        if wait_quiet:
            self.link.quiet(self.clock.time())
            self._guard.set(self.link.guard_until or 0.0)
        else:
            self._pump()
            self.arm_heartbeat()

    def _resync_stalled(self) -> None:
        if not self.link.resyncing or self.window or not self._attached():
            return
        if self.link.resync_stalled():
            self._lose(self.link.dead_reason())
        else:
            self.resync_ping()

    # --- calls waiting for the link or a lease ---------------------------------------------
    def wait(self, call: Call) -> None:
        """A queued call that asked to wait: it fails after its timeout if still queued."""
        call.timer = self.clock.call_at(self.clock.time() + call.timeout, self._waited, call)

    def _waited(self, call: Call) -> None:
        if not call.queued:
            return
        self.queue.remove(call)
        if self.link.inhibited_by is not None:
            self._finish(call, ErrorCode.BUSY, f"{self.link.inhibited_by} for {call.timeout:g} s")
        elif self.link.state is LinkState.UP and self.queue.exclusive is not None:
            self._finish(call, ErrorCode.BUSY, f"the device stayed leased for {call.timeout:g} s")
        else:
            state = self.link.state.value
            self._finish(call, ErrorCode.LINK_DOWN, f"link still {state} after {call.timeout:g} s")

    def fail_queued(self, code: ErrorCode, message: str, *, everyone: bool) -> None:
        """Fail queued calls (all of them, or those that did not ask to wait)."""
        queue = self.queue
        for call in queue:
            if everyone or not call.wait:
                queue.remove(call)
                if call.timer is not None:
                    call.timer.cancel()
                self._finish(call, code, message)
            elif call.timer is None:
                self.wait(call)

    # --- the heartbeat ---------------------------------------------------------------------
    def arm_heartbeat(self) -> None:
        due = self.link.ping_due_at()
        if due is not None:
            self._beat.set(due)

    def _heartbeat(self) -> None:
        due = self.link.ping_due_at()
        if (
            due is None
            or not self._attached()
            or self.ping_payload is None
            or self.link.inhibited_by
            or self._pinging
            or self.link.resyncing
        ):
            return  # (a ping on its way re-arms the heartbeat when it ends)
        now = self.clock.time()
        if now < due - 0.001:
            self._beat.set(due)
        elif self.line.turns and (self.window or self.queue.ready() or self.link.guard_until):
            # Units taking turns: no reply for a heartbeat interval, yet calls go out
            # (to silent units?): only a ping can tell a dead port. It takes its unit's
            # turn like a call (so a silent heartbeat unit cannot hold the others'
            # calls back: their replies prove the port, and reset the misses); its end
            # re-arms the heartbeat.
            ping = self.ping(self._pinged)
            self.line.ping_turn(ping)
            self._pinging = True
            self.queue.push(ping)
            self._pump()
        elif self.window or self.queue.ready() or self.link.guard_until is not None:
            # Not idle: the calls on the link prove (or disprove) liveness themselves.
            self._beat.set(now + self.link.interval)
        else:
            self._pinging = True
            self._send([self.ping(self._pinged)])

    def ping_answered(self) -> None:
        """A ping got its answer: an idle link needs no wake-up for a deadline long
        met, and the heartbeat counts from now."""
        if not self.window:
            self.sweep.cancel()
        self.arm_heartbeat()

    def _pinged(self, _: CallResult) -> None:
        self._pinging = False

    def ping(self, done: Callable[[CallResult], None]) -> Call:
        """A heartbeat (or handshake) ping ending in `done`."""
        timeout = self.cfg.heartbeat.timeout
        ping = Call(None, self.ping_payload or b"", done, timeout=timeout, retry=0, is_ping=True)
        ping.t_submit = self.precise()
        return ping
