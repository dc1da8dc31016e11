"""The session's logic with no event loop: the shipped rig (`verld.testing.session`).

The session reads time only from its clocks and does no I/O of its own, so these
tests drive it by hand: what it writes is split as a verl device would (the
codec's own device side), the device's answers go in through the session's
`link_data`, and time moves only by `clock.advance`. The supervisor's steps of an
attempt are its own methods, run by `SessionRig.connect`.
"""

from __future__ import annotations

from verld.links.link import LinkState
from verld.testing.session import SessionRig

CONFIG = """
device: {port: /dev/fake, timeout: 1.0, retry: 0, window: 8}
heartbeat: {interval: 2.0, misses: 3, timeout: 0.5}
reconnect: {initial: 0.1, max: 2.0}
"""


def Rig(config: str = CONFIG) -> SessionRig:
    """The shipped rig on this file's config."""
    return SessionRig(config)


class TestWithoutAnEventLoop:
    def test_handshake_brings_the_link_up_in_generation_one(self) -> None:
        """An answered handshake ping is `up`, generation 1, with no loop running."""
        rig = Rig()
        rig.connect()
        assert [t.state for t in rig.transitions] == [LinkState.CONNECTING, LinkState.UP]
        assert rig.session.link.generation == 1

    def test_a_call_is_written_and_answered(self) -> None:
        """A call goes out as one request and ends with the device's data."""
        rig = Rig()
        rig.connect()
        results = rig.call(b"\x01abc")
        assert [f.payload for f in rig.wire.requests] == [b"\x01abc"]
        rig.answer()
        assert [(r.error, r.data, r.generation) for r in results] == [(None, b"abc", 1)]

    def test_a_retry_goes_out_at_the_deadline_with_the_same_seq(self) -> None:
        """No answer within `timeout`: the same frame again, at exactly that time."""
        rig = Rig()
        rig.connect()
        results = rig.call(b"\x01x", retry=1)
        first = rig.wire.requests[0]
        rig.clock.advance(0.999)
        assert len(rig.wire.requests) == 1
        rig.clock.advance(0.002)
        assert [f.tag for f in rig.wire.requests] == [first.tag, first.tag]
        rig.answer(skip=1)
        assert results[0].error is None and rig.session.counters.retries == 1

    def test_a_late_reply_after_the_timeout_is_stale(self) -> None:
        """A reply to a call that already timed out is counted stale, delivered to nobody."""
        rig = Rig()
        rig.connect()
        results = rig.call(b"\x01x")
        rig.clock.advance(1.0)
        assert [r.error for r in results] == ["timeout"]
        rig.answer()
        assert len(results) == 1 and rig.session.counters.stale == 1

    def test_an_idle_link_is_pinged_and_declared_dead_after_misses(self) -> None:
        """Idle for `interval`, then `misses` unanswered pings: down, and the supervisor told."""
        rig = Rig()
        rig.connect()
        rig.wire.requests.clear()
        rig.clock.advance(2.0)
        assert [f.payload for f in rig.wire.requests] == [b""]  # the heartbeat ping
        rig.clock.advance(3 * 0.5)
        assert rig.session.link.state is LinkState.DOWN
        assert rig.lost == 1 and rig.wire.closed
        assert rig.transitions[-1].reason == "device not answering (3 pings in a row)"

    def test_losing_the_link_leaves_no_timer_behind(self) -> None:
        """After a hang-up with calls on the link, no timer of the session is still set."""
        rig = Rig()
        rig.connect()
        results = rig.call(b"\x01x", timeout=5.0)
        rig.session.link_lost("hangup")
        assert [r.error for r in results] == ["link_down"]
        assert rig.clock.pending() == 0
