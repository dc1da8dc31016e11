"""The link state machine, driven with explicit times: no sleeps, no I/O."""

from __future__ import annotations

import random

import pytest

from verld.errors import LocalProtocolError
from verld.links.link import AfterTimeout, Link, LinkState


def make(**kw: float) -> Link:
    args = {"initial": 0.1, "maximum": 5.0, "misses": 3, "interval": 2.0}
    args.update(kw)
    return Link(
        initial=args["initial"],
        maximum=args["maximum"],
        misses=int(args["misses"]),
        interval=args["interval"],
        rng=random.Random(1),
    )


class TestTransitions:
    def test_starts_down_with_generation_zero(self) -> None:
        """A new link is down, generation 0, due for an attempt at once."""
        link = make()
        assert link.state is LinkState.DOWN
        assert link.generation == 0
        assert link.retry_in(0.0) == 0.0

    def test_open_brings_it_up_with_the_next_generation(self) -> None:
        """attempt → opened is connecting → up, and each session adds one generation."""
        link = make()
        assert link.attempt(1.0).state is LinkState.CONNECTING
        t = link.opened(1.1)
        assert (t.state, t.generation) == (LinkState.UP, 1)
        link.lost(2.0, "hangup")
        link.attempt(3.0)
        assert link.opened(3.1).generation == 2

    def test_down_event_carries_the_generation_that_went_down(self) -> None:
        """The `down` transition reports the generation that was lost, with its reason."""
        link = make()
        link.attempt(0.0)
        link.opened(0.0)
        t = link.lost(1.0, "EIO")
        assert (t.state, t.reason, t.generation) == (LinkState.DOWN, "EIO", 1)

    def test_invalid_event_raises(self) -> None:
        """Opening a link that is not connecting is a programming error."""
        with pytest.raises(LocalProtocolError):
            make().opened(0.0)

    def test_reconnects_counted_after_the_first_session(self) -> None:
        """The first `up` is not a reconnect; every later one is."""
        link = make()
        for i in range(3):
            link.attempt(float(i))
            link.opened(float(i))
            link.lost(float(i) + 0.5, "x")
        assert link.reconnects == 2


class TestBackoff:
    def test_delay_doubles_to_the_cap_with_jitter(self) -> None:
        """Consecutive failures wait about initial, 2x, 4x ... never above max."""
        link = make(initial=0.1, maximum=1.0)
        delays = []
        now = 0.0
        for _ in range(8):
            link.attempt(now)
            link.lost(now, "open failed")
            delays.append(link.retry_in(now))
            now += 10
        assert 0.075 <= delays[0] <= 0.1
        assert 0.15 <= delays[1] <= 0.2
        assert all(d <= 1.0 for d in delays)
        assert delays[-1] >= 0.75

    def test_success_resets_the_delay(self) -> None:
        """After a link session came up, the next loss waits the initial delay again."""
        link = make(initial=0.1, maximum=5.0)
        for i in range(5):
            link.attempt(float(i))
            link.lost(float(i), "x")
        link.attempt(10.0)
        link.opened(10.0)
        link.lost(11.0, "hangup")
        assert link.retry_in(11.0) <= 0.1


class TestHeartbeat:
    def test_ping_due_after_interval_of_silence(self) -> None:
        """An idle up link is due for a ping `interval` after the last activity."""
        link = make(interval=2.0)
        link.attempt(0.0)
        link.opened(0.0)
        link.activity(5.0)
        assert link.ping_due_at() == 7.0

    def test_no_ping_when_interval_is_zero_or_down(self) -> None:
        """interval 0 turns the ping off; a down link is never pinged."""
        assert make(interval=0).ping_due_at() is None
        link = make()
        assert link.ping_due_at() is None

    def test_failed_ping_makes_the_next_due_at_once(self) -> None:
        """After a ping times out the next ping follows immediately."""
        link = make(interval=2.0)
        link.attempt(0.0)
        link.opened(0.0)
        link.activity(3.0)
        link.timed_out(3.5, seqs=True, ping=True, spent=False, probes=True)
        due = link.ping_due_at()
        assert due is not None and due <= 3.0

    def test_misses_pings_in_a_row_declare_the_link_dead(self) -> None:
        """`misses` unanswered pings in a row mean dead; a reply resets the count."""
        link = make(misses=3)
        link.attempt(0.0)
        link.opened(0.0)
        ping = {"seqs": True, "ping": True, "spent": False, "probes": True}
        assert link.timed_out(1.0, **ping)[0] is AfterTimeout.RESEND
        assert link.timed_out(2.0, **ping)[0] is AfterTimeout.RESEND
        link.reply(2.5)
        assert link.timed_out(3.0, **ping)[0] is AfterTimeout.RESEND
        assert link.timed_out(4.0, **ping)[0] is AfterTimeout.RESEND
        assert link.timed_out(5.0, **ping)[0] is AfterTimeout.DEAD
        assert link.dead_reason() == "device not answering (3 pings in a row)"


class TestTimeoutPolicy:
    def up(self, **kw: float) -> Link:
        link = make(**kw)
        link.attempt(0.0)
        link.opened(0.0)
        return link

    def test_with_seqs_a_timeout_is_resent(self) -> None:
        """With seqs a timed-out try is resent at once: no guard, no probe."""
        link = self.up()
        after = link.timed_out(1.0, seqs=True, ping=False, spent=False, probes=True)
        assert after == (AfterTimeout.RESEND, False)
        assert link.guard_until is None

    def test_serial_without_seqs_starts_the_quiet_guard(self) -> None:
        """Without seqs the guard runs for `guard` s from the timeout."""
        link = self.up()
        after = link.timed_out(1.0, seqs=False, ping=False, spent=False, probes=True)
        assert after == (AfterTimeout.GUARD, False)
        assert link.guard_until == 1.1

    def test_call_timeouts_never_make_the_link_dead_where_a_ping_can_tell(self) -> None:
        """Calls whose every try timed out ask for a probe ping and never make the link dead."""
        link = self.up(misses=2)
        for n in range(10):
            after = link.timed_out(float(n), seqs=False, ping=False, spent=True, probes=True)
            assert after == (AfterTimeout.GUARD, True)

    def test_a_failed_ping_asks_for_the_next_at_once(self) -> None:
        """An unanswered ping short of `misses` asks for another probe."""
        link = self.up(misses=2)
        assert link.timed_out(1.0, seqs=True, ping=True, spent=False, probes=True) == (
            AfterTimeout.RESEND,
            True,
        )
        assert link.timed_out(2.0, seqs=True, ping=True, spent=False, probes=True) == (
            AfterTimeout.DEAD,
            False,
        )

    def test_without_a_ping_silent_calls_make_the_link_dead(self) -> None:
        """No ping: `misses` spent calls in a row with no byte from the device are dead."""
        link = self.up(misses=3)
        spent = {"seqs": False, "ping": False, "spent": True, "probes": False}
        assert link.timed_out(1.0, **spent)[0] is AfterTimeout.GUARD
        assert link.timed_out(2.0, **spent)[0] is AfterTimeout.GUARD
        assert link.timed_out(3.0, **spent)[0] is AfterTimeout.DEAD
        assert "3 calls in a row" in link.dead_reason()

    def test_without_a_ping_a_byte_from_the_device_keeps_the_link(self) -> None:
        """No ping: bytes from the device between silent calls start the count over."""
        link = self.up(misses=2)
        spent = {"seqs": False, "ping": False, "spent": True, "probes": False}
        for n in range(6):
            assert link.timed_out(float(n), **spent)[0] is AfterTimeout.GUARD
            link.noise(n + 0.5)  # the device talks (an event, garbage)
            link.guard_over(n + 0.9)

    def test_the_guard_holds_until_the_device_had_its_time(self) -> None:
        """The guard lasts at least until `hold_until`, noise or not."""
        link = self.up()
        link.timed_out(1.0, seqs=False, ping=False, spent=True, probes=True, hold_until=5.0)
        assert link.guard_until == 5.0
        assert link.noise(1.5) and link.guard_until == 5.0
        assert not link.guard_over(4.9)
        assert link.noise(4.95) and not link.guard_over(5.0)
        assert link.guard_over(5.05)

    def test_tries_with_retries_left_never_count(self) -> None:
        """A try that will be retried is neither a miss nor a silent call."""
        link = self.up(misses=1)
        for n in range(5):
            after = link.timed_out(float(n), seqs=False, ping=False, spent=False, probes=False)
            assert after == (AfterTimeout.GUARD, False)

    def test_a_handshake_timeout_only_fails(self) -> None:
        """While connecting, a timed-out (handshake) ping just fails the attempt."""
        link = make()
        link.attempt(0.0)
        after = link.timed_out(1.0, seqs=False, ping=True, spent=False, probes=True)
        assert after == (AfterTimeout.FAIL, False)
        assert link.guard_until is None

    def test_noise_during_the_guard_restarts_it(self) -> None:
        """Bytes during the guard are discarded and push its end `guard` s out."""
        link = self.up()
        link.timed_out(1.0, seqs=False, ping=False, spent=False, probes=True)
        assert link.noise(1.5) and link.guard_until == 1.6
        assert not link.guard_over(1.55)
        assert link.guard_over(1.6)
        assert not link.noise(1.7)
        assert link.guard_until is None

    def test_losing_the_link_ends_the_guard(self) -> None:
        """A lost link has no guard left running."""
        link = self.up()
        link.timed_out(1.0, seqs=False, ping=False, spent=False, probes=True)
        link.lost(1.01, "EIO")
        assert link.guard_until is None
