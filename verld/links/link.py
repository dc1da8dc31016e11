"""The link state machine: everything that decides the link's state lives here.

Strategy: the machine does no I/O and reads no clock. The session and the
supervisor tell it what happened (`attempt`, `opened`, `lost`, `reply`,
`timed_out`, `activity`, `noise`, `begin_inhibit`/`inhibit`/`end_inhibit`,
`begin_close`/`close`) together with the time `now`, and read back what to do: the
state, whether calls are refused (inhibited, closing), when to try opening again,
whether a heartbeat ping is due, what a timed-out try calls for (`AfterTimeout`),
whether the quiet guard after a timeout still runs. It is the only writer of these
fields; everyone else only reads them. Every cause of loss (open failure, hang-up,
EIO, write error, dead heartbeat, codec desync) goes through `lost` (from
`Supervisor.lose`), so they all take the same path: outstanding calls fail, the
new state is announced, and the next attempt waits `retry_in`. The delay doubles
up to a cap, with jitter, and resets once a link session comes up.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Any

from verld.config import Config
from verld.errors import LocalProtocolError


class LinkState(enum.Enum):
    """Where the link is."""

    DOWN = "down"  #: not open; waiting for the next attempt
    CONNECTING = "connecting"  #: opening the port and doing the handshake ping
    UP = "up"  #: open and answered the handshake: calls flow
    INHIBITED = "inhibited"  #: let go of for another program: closed, no reconnect
    CLOSED = "closed"  #: shut down for good (daemon stopping)


@dataclass(frozen=True, slots=True)
class Transition:
    """What changed: the supervisor announces it to `link` subscribers."""

    state: LinkState
    reason: str
    generation: int


class AfterTimeout(enum.Enum):
    """What a try that ran out calls for (besides failing or retrying the call)."""

    FAIL = "fail"  #: the handshake ping: the connect attempt fails, nothing more
    DEAD = "dead"  #: the device is not answering: the link is dead, reopen it
    RESEND = "resend"  #: with seqs: a retry goes out at once with the same seq
    GUARD = "guard"  #: without seqs (serial or tcp): discard input until quiet for `guard` s


# Which events each state accepts; anything else is a programming error.
_ALLOWED: dict[str, frozenset[LinkState]] = {
    # (connecting: an attempt abandoned for an inhibit that ended before it took hold)
    "attempt": frozenset({LinkState.DOWN, LinkState.CONNECTING, LinkState.INHIBITED}),
    "inhibit": frozenset({LinkState.DOWN, LinkState.CONNECTING, LinkState.UP}),
    "opened": frozenset({LinkState.CONNECTING}),
    "lost": frozenset({LinkState.CONNECTING, LinkState.UP}),
    "close": frozenset({LinkState.DOWN, LinkState.CONNECTING, LinkState.UP, LinkState.INHIBITED}),
    "release": frozenset({LinkState.INHIBITED}),
}


class Link:
    """State, generation, backoff and heartbeat bookkeeping for one link."""

    def __init__(
        self,
        *,
        initial: float,
        maximum: float,
        misses: int,
        interval: float,
        guard: float = 0.1,
        rng: random.Random | None = None,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.misses = misses
        self.interval = interval
        self.guard = guard
        self._rng = rng or random.Random()
        self.state = LinkState.DOWN
        self.reason = "starting"
        self.generation = 0
        self.since = 0.0
        self._delay = initial
        self.next_attempt = 0.0
        #: heartbeat pings unanswered in a row (`misses` of them: dead)
        self.consecutive_timeouts = 0
        #: calls in a row whose every try timed out while no ping could tell (no ping)
        self.silent_calls = 0
        self._heard = False  #: bytes came from the device since the first silent call
        self.last_activity = 0.0
        self.reconnects = 0
        #: opens tried since the link was last up (0 while up): `status.link.attempts`
        self.attempts = 0
        #: while not None: input is discarded until the line is quiet up to this time
        self.guard_until: float | None = None
        #: while set (an inhibit asked for): why calls are refused busy; nothing goes out
        self.inhibited_by: str | None = None
        #: verld is stopping: calls are refused, the link is not reopened
        self.closing = False
        #: out of step (a try ran out on a line without request ids): nothing but pings
        #: goes out until as many lines have answered them as pings were sent
        self.resyncing = False
        self.resync_pings = 0  #: pings sent in this resync
        self.resync_answers = 0  #: lines that answered them so far
        self._stalls = 0  #: times in this resync no answer owed came within a ping's timeout
        #: lines dropped as late answers (after a timeout, in a resync): `status.link.late`
        self.late = 0
        #: lines dropped in a no-reply call's quiet time: `status.link.unexpected`
        self.unexpected = 0
        self._late_now = 0  #: late lines not yet logged

    @classmethod
    def from_config(cls, cfg: Config, rng: random.Random | None = None) -> Link:
        rc, hb = cfg.reconnect, cfg.heartbeat
        return cls(
            initial=rc.initial,
            maximum=rc.max,
            misses=hb.misses,
            interval=hb.interval,
            guard=cfg.device.guard,
            rng=rng,
        )

    def configure(self, cfg: Config) -> None:
        """Take `reconnect`, `heartbeat` and `device.guard` (at start and on reload)."""
        rc, hb = cfg.reconnect, cfg.heartbeat
        self.initial, self.maximum = rc.initial, rc.max
        self.misses, self.interval, self.guard = hb.misses, hb.interval, cfg.device.guard

    def _check(self, event: str) -> None:
        if self.state not in _ALLOWED[event]:
            raise LocalProtocolError(f"link: {event!r} is not valid in state {self.state.value}")

    def _enter(self, state: LinkState, reason: str, now: float) -> Transition:
        self.guard_until = None
        self.resyncing = False
        self.resync_pings = self.resync_answers = 0
        self.state = state
        self.reason = reason
        self.since = now
        return Transition(state, reason, self.generation)

    def attempt(self, now: float) -> Transition:
        """An open attempt starts (its reason says why the link is not up: what came
        before, not a failure of this attempt)."""
        self._check("attempt")
        self.attempts += 1
        before = self.reason.removeprefix("reopening after: ")
        reason = "opening" if before == "starting" else f"reopening after: {before}"
        return self._enter(LinkState.CONNECTING, reason, now)

    def opened(self, now: float) -> Transition:
        """The port opened and the handshake succeeded: a new link session."""
        self._check("opened")
        self.generation += 1
        self._delay = self.initial
        self.consecutive_timeouts = self.silent_calls = self.attempts = 0
        self.last_activity = now
        if self.generation > 1:
            self.reconnects += 1
        return self._enter(LinkState.UP, "connected", now)

    def lost(self, now: float, reason: str) -> Transition:
        """Open failed, hang-up, I/O error, dead heartbeat or desync: one path for all."""
        self._check("lost")
        delay = min(self._delay, self.maximum)
        # Jitter spreads reconnects of many daemons after a shared outage.
        delay *= self._rng.uniform(0.75, 1.0)
        self.next_attempt = now + max(delay, min(self.initial, self.maximum) * 0.5)
        self._delay = min(self._delay * 2, self.maximum)
        return self._enter(LinkState.DOWN, reason, now)

    def begin_inhibit(self, reason: str) -> None:
        """Another program asked for the port: from now on calls are refused `busy`
        with `reason` (or wait) and nothing more goes out; `inhibit` follows once the
        port is let go of."""
        self.inhibited_by = reason

    def inhibit(self, now: float, reason: str) -> Transition:
        """The port was let go of for another program (closed); no attempts until
        `release`. The next `attempt` (at once) opens a new link session."""
        self._check("inhibit")
        return self._enter(LinkState.INHIBITED, reason, now)

    def end_inhibit(self) -> bool:
        """The inhibition ends; True when the port had been let go of (it reopens at
        once, with a fresh backoff), False when it was still held (nothing changed)."""
        self.inhibited_by = None
        if self.state is not LinkState.INHIBITED:
            return False
        self._check("release")
        self.next_attempt = 0.0
        self._delay = self.initial
        self.reason = "inhibit ended"
        return True

    def begin_close(self) -> None:
        """verld is stopping: calls are refused from now on; `close` follows."""
        self.closing = True

    def close(self, now: float) -> Transition:
        """Shut down for good."""
        self._check("close")
        self.closing = True
        return self._enter(LinkState.CLOSED, "shutting down", now)

    def retry_now(self) -> None:
        """A reconnect was asked for while down: the next attempt is due at once."""
        self.next_attempt = 0.0

    def retry_in(self, now: float) -> float:
        """Seconds until the next open attempt (0 when due)."""
        return max(0.0, self.next_attempt - now)

    # --- liveness -------------------------------------------------------------
    def activity(self, now: float) -> None:
        """Bytes went out or a frame came in: the heartbeat clock restarts."""
        self.last_activity = now

    def reply(self, now: float) -> None:
        """The device answered something: the miss counts reset."""
        self.consecutive_timeouts = self.silent_calls = 0
        self.last_activity = now

    def timed_out(
        self,
        now: float,
        *,
        seqs: bool,
        ping: bool,
        spent: bool,
        probes: bool,
        hold_until: float = 0.0,
    ) -> tuple[AfterTimeout, bool]:
        """A try ran out: the policy for what follows (the caller fails or retries it),
        and whether a probe ping should go next, ahead of queued calls.

        One client's unanswered request must not drop the link for everyone: only
        unanswered pings count toward `misses`. A call whose tries are all `spent`
        asks for a probe ping instead; where there is none (`probes` false: no ping on
        this codec, or the heartbeat off) such calls count, but only while not a byte
        comes from the device. Calls that must never count (a Modbus call: its unit is
        silent, not the port) are neither `ping` nor `spent`. Without seqs a late reply
        would pass for the next call's, so the line must be quiet first (the guard),
        on tcp too: reopening it would fail every other client's calls. The guard
        lasts at least until `hold_until`: a client's own short timeout must not let
        its late reply, due within `device.timeout`, pass for another client's.
        """
        if self.state is LinkState.CONNECTING:
            return AfterTimeout.FAIL, False
        dead = probe = False
        if ping:
            self.consecutive_timeouts += 1
            dead = self.consecutive_timeouts >= self.misses
            probe = probes and not dead  # after a failed ping the next follows at once
        elif spent:
            if probes:
                probe = True
            else:
                dead = self._silent_call()
        if dead:
            return AfterTimeout.DEAD, False
        if seqs:
            return AfterTimeout.RESEND, probe
        self.guard_until = max(now + self.guard, hold_until)
        return AfterTimeout.GUARD, probe

    def _silent_call(self) -> bool:
        """One more call without an answer and no ping to ask; True: the link is dead."""
        if self._heard or not self.silent_calls:  # a new run starts with this call
            self.silent_calls, self._heard = 0, False
        self.silent_calls += 1
        return self.silent_calls >= self.misses

    def dead_reason(self) -> str:
        """Why the last `timed_out` (or `resync_stalled`) declared the link dead."""
        if self.resyncing and self._stalls >= self.misses:
            owed = self.resync_pings - self.resync_answers
            pings = self.resync_pings
            return f"device out of step ({owed} of {pings} pings never answered in a resync)"
        if self.consecutive_timeouts >= self.misses:
            return f"device not answering ({self.consecutive_timeouts} pings in a row)"
        return (
            f"device not answering ({self.silent_calls} calls in a row timed out "
            "with no byte from the device)"
        )

    # --- out of step: late answers (codecs without seqs) ----------------------------
    def begin_resync(self) -> None:
        """A try ran out on a line without request ids: its answer may still come, and
        would pass for the next call's. Until the pings say which line answers what,
        only pings go out."""
        if not self.resyncing:
            self.resyncing = True
            self.resync_pings = self.resync_answers = self._stalls = 0

    def resync_ping(self) -> None:
        """A ping of the resync went out."""
        self.resync_pings += 1

    def resync_answer(self) -> bool:
        """A line answered a ping of the resync; True when every ping has its answer
        (the resync is over: calls may go out again)."""
        self.resync_answers += 1
        if self.resync_answers < self.resync_pings:
            return False
        self.resyncing = False
        return True

    def resync_stalled(self) -> bool:
        """No answer came for the pings still owed within a ping's timeout: a miss,
        whatever the other pings' answers said (they are what is out of step); True
        when `misses` of them make the link dead (a reopen puts it in step)."""
        self._stalls += 1
        return self._stalls >= self.misses

    def late_lines(self, count: int) -> None:
        """Lines dropped as late answers (counted; logged once per resync)."""
        self.late += count
        self._late_now += count

    def take_late(self) -> int:
        """Late lines since the last time they were told (to log them once)."""
        count, self._late_now = self._late_now, 0
        return count

    def quiet(self, now: float) -> None:
        """A command that gets no answer went out: the line is kept quiet for `guard`."""
        self.guard_until = now + self.guard

    def quiet_stands(self, until: float) -> None:
        """What came in the quiet time were events only: it ends when it would have
        (`noise` made it longer)."""
        if self.guard_until is not None:
            self.guard_until = until

    # --- the quiet guard after a timeout (codecs without seqs) ---------------------
    def noise(self, now: float) -> bool:
        """Bytes came in; True when they are to be discarded (the guard runs, and restarts)."""
        self._heard = True
        if self.guard_until is None:
            return False
        self.guard_until = max(self.guard_until, now + self.guard)
        return True

    def guard_over(self, now: float) -> bool:
        """Whether the guard has run its quiet time (it ends then); False if still running."""
        if self.guard_until is not None and now < self.guard_until:
            return False
        self.guard_until = None
        return True

    def status(self, port: str, codec: str, since_wall: float) -> dict[str, Any]:
        """The `status.link` object (`since_wall`: when it entered this state, in
        wall-clock time)."""
        return {
            "state": self.state.value,
            "reason": self.reason,
            "generation": self.generation,
            "port": port,
            "codec": codec,
            "since": round(since_wall, 3),
            "attempts": self.attempts,
            "modem": None,  # (rfc2217:// links only)
            "late": self.late,
            "unexpected": self.unexpected,
        }

    def ping_due_at(self) -> float | None:
        """When an idle link should be pinged next (None: heartbeat off or not up).

        After a failed ping the next follows at once (the miss count is non-zero).
        """
        if self.interval <= 0 or self.state is not LinkState.UP:
            return None
        if self.consecutive_timeouts:
            return self.last_activity
        return self.last_activity + self.interval
