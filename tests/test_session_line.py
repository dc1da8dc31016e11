"""Text instruments on the session, with no event loop: commands that get no answer,
quiet times, and the resync after a timeout (late answers never reach another call).

The shipped rig (`verld.testing.session`) runs the real session on a `line` codec
and a manual clock; the device's lines go in through the wire as the pty would hand
them over.
"""

from __future__ import annotations

from verld.codec.base import PortRequest
from verld.links.link import LinkState
from verld.testing.session import SessionRig

CONFIG = """
device: {port: /dev/fake, codec: line, timeout: 1.0, guard: 0.1,
         line: {event: "^ALARM", no_reply: "^[^?]*$"}}
heartbeat: {interval: 0, misses: 3, timeout: 0.5, payload: "*IDN?", expect: "^ACME,"}
"""
IDN = b"ACME,PSU-1,0,1.0"


def idn(request: PortRequest) -> tuple[int, bytes] | None:
    """The supply answers `*IDN?` only."""
    return (0, IDN) if request.payload == b"*IDN?" else None


def up(config: str = CONFIG) -> SessionRig:
    """A rig whose handshake (`*IDN?`) was answered: the link is up."""
    rig = SessionRig(config)
    assert rig.connect(idn)[0].error is None
    assert rig.session.link.state is LinkState.UP
    return rig


def written(rig: SessionRig) -> list[bytes]:
    """What the session wrote since the last look (the device's requests)."""
    payloads = [r.payload for r in rig.wire.requests]
    rig.wire.requests = []
    return payloads


def timed_out(rig: SessionRig, payload: bytes = b"MEAS:VOLT?") -> None:
    """A query whose only try runs out (the device is slow): the link is out of step."""
    result = rig.call(payload)
    assert written(rig) == [payload]
    rig.clock.advance(1.0)
    assert result[0].error == "timeout"


class TestNoReply:
    def test_a_call_without_reply_ends_ok_after_the_quiet_guard(self) -> None:
        """`reply: false` is written once and ends ok, empty, once `guard` has passed."""
        rig = up()
        result = rig.call(b"VOLT 5.0", reply=False)
        assert written(rig) == [b"VOLT 5.0"] and result == []
        rig.clock.advance(0.099)
        assert result == []
        rig.clock.advance(0.002)
        assert [(r.error, r.status, r.data) for r in result] == [(None, 0, b"")]
        assert rig.session.counters.retries == 0

    def test_the_next_call_waits_for_the_quiet_time(self) -> None:
        """A call queued behind a no-reply command goes out only after the guard."""
        rig = up()
        rig.call(b"VOLT 5.0", reply=False)
        rig.call(b"VOLT?")
        assert written(rig) == [b"VOLT 5.0"]
        rig.clock.advance(0.11)
        assert written(rig) == [b"VOLT?"]

    def test_a_line_in_the_quiet_time_is_dropped_and_counted_unexpected(self) -> None:
        """A stray line after a no-reply command is nobody's reply: counted, dropped."""
        rig = up()
        result = rig.call(b"VOLT 5.0", reply=False)
        rig.wire.deliver(b"-113,Undefined\n")
        rig.clock.advance(0.2)
        assert result[0].data == b"" and rig.session.link.unexpected == 1
        assert rig.session.link.status("p", "line", 0)["unexpected"] == 1

    def test_an_event_in_the_quiet_time_goes_out_as_an_event(self) -> None:
        """A line matching `event` in the quiet time is an event, not counted."""
        rig = up()
        rig.call(b"VOLT 5.0", reply=False)
        rig.wire.deliver(b"ALARM OVP\n")
        rig.clock.advance(0.2)
        assert [e[1] for e in rig.events] == ["ALARM OVP"]
        assert rig.session.link.unexpected == 0

    def test_streaming_events_do_not_hold_a_no_reply_call(self) -> None:
        """Events arriving all through the quiet time do not make it longer."""
        rig = up()
        result = rig.call(b"VOLT 5.0", reply=False)
        for _ in range(3):
            rig.clock.advance(0.04)
            rig.wire.deliver(b"ALARM tick\n")
        assert result[0].error is None and len(rig.events) == 3

    def test_on_length_a_frame_in_the_quiet_time_is_dropped_and_counted(self) -> None:
        """`reply: false` on length: written once, a frame in its quiet time counted."""
        rig = SessionRig("device: {port: /dev/fake, codec: length, guard: 0.1}\n")
        rig.connect()
        result = rig.call(b"\x07set", reply=False)
        assert written(rig) == [b"\x07set"]
        rig.wire.deliver(rig.wire.event(b"stray"))
        rig.clock.advance(0.2)
        assert [(r.error, r.data) for r in result] == [(None, b"")]
        assert rig.session.link.unexpected == 1 and rig.events == []

    def test_reply_false_on_verl_is_a_bad_request(self) -> None:
        """On verl every request is answered: `reply: false` is refused, unsent."""
        rig = SessionRig("device: {port: /dev/fake}\n")
        rig.connect()
        result = rig.call(b"\x01x", reply=False)
        assert result[0].error == "bad_request" and "verl" in result[0].message
        assert written(rig) == []


class TestResync:
    def test_the_ping_goes_out_after_the_guard_and_calls_wait(self) -> None:
        """After a timeout only the ping goes out; a queued call waits, unwritten."""
        rig = up()
        timed_out(rig)
        waiting = rig.call(b"VOLT?")
        assert written(rig) == []
        rig.clock.advance(0.11)  # the guard after the timeout
        assert written(rig) == [b"*IDN?"] and waiting == []
        rig.wire.deliver(IDN + b"\n")
        assert written(rig) == [b"VOLT?"]

    def test_late_lines_before_the_expected_answer_are_dropped_and_counted(self) -> None:
        """Lines before the `expect` line are late: dropped, counted, never a reply."""
        rig = up()
        timed_out(rig)
        rig.clock.advance(0.11)
        written(rig)
        mine = rig.call(b"VOLT?")
        rig.wire.deliver(b"12.345\n")  # the timed-out query's answer, late
        assert mine == [] and rig.session.link.late == 1
        rig.wire.deliver(IDN + b"\n")
        assert written(rig) == [b"VOLT?"]
        rig.wire.deliver(b"5.000\n")
        assert mine[0].text == "5.000"

    def test_a_late_line_in_the_guard_counts_as_late(self) -> None:
        """A late answer arriving in the guard after the timeout is counted late."""
        rig = up()
        timed_out(rig)
        rig.wire.deliver(b"12.345\n")
        assert rig.session.link.late == 1

    def test_a_late_line_and_the_pings_answer_in_one_read(self) -> None:
        """The late line and the ping's answer read together: one late, the ping answered."""
        rig = up()
        timed_out(rig)
        rig.clock.advance(0.11)
        written(rig)
        waiting = rig.call(b"VOLT?")
        rig.wire.deliver(b"SECRET\n" + IDN + b"\n")
        assert rig.session.link.late == 1 and rig.events == []
        assert written(rig) == [b"VOLT?"] and waiting == []

    def test_an_event_during_a_resync_is_an_event(self) -> None:
        """A line matching `event` during a resync goes out as an event, not late."""
        rig = up()
        timed_out(rig)
        rig.clock.advance(0.11)
        rig.wire.deliver(b"ALARM OVP\n")
        assert [e[1] for e in rig.events] == ["ALARM OVP"]
        assert rig.session.link.late == 0

    def test_every_ping_of_a_resync_must_be_answered(self) -> None:
        """Two pings sent (one timed out): the resync ends at the second `expect` line."""
        rig = up()
        timed_out(rig)
        rig.clock.advance(0.11)
        assert written(rig) == [b"*IDN?"]
        rig.clock.advance(0.5)  # the ping's timeout: a miss
        rig.clock.advance(0.11)  # its guard: the next ping
        assert written(rig) == [b"*IDN?"]
        waiting = rig.call(b"VOLT?")
        rig.wire.deliver(IDN + b"\n")  # the first ping's answer, late
        assert written(rig) == [] and waiting == []
        rig.wire.deliver(IDN + b"\n")
        assert written(rig) == [b"VOLT?"]
        assert rig.session.link.state is LinkState.UP

    def test_answers_still_owed_that_never_come_count_as_a_miss(self) -> None:
        """With answers owed and none coming within a ping's timeout, another ping goes."""
        rig = up()
        timed_out(rig)
        rig.clock.advance(0.11)
        rig.clock.advance(0.5)
        rig.clock.advance(0.11)
        written(rig)
        rig.wire.deliver(IDN + b"\n")  # one answer of two
        rig.clock.advance(0.5)
        assert written(rig) == [b"*IDN?"]

    def test_a_device_that_lost_a_pings_answer_is_reopened(self) -> None:
        """Answers owed that never come, `misses` times, drop the link (a reopen resyncs)."""
        rig = up()
        timed_out(rig)
        rig.clock.advance(0.11)
        rig.clock.advance(0.5)  # the first ping's answer is lost
        rig.clock.advance(0.11)
        assert written(rig) == [b"*IDN?", b"*IDN?"]
        for n in range(3):  # every later ping answered, one answer always owed
            rig.wire.deliver(IDN + b"\n")
            rig.clock.advance(0.5)
            assert written(rig) == ([b"*IDN?"] if n < 2 else [])
        assert rig.lost == 1 and "out of step" in rig.session.link.reason

    def test_pings_unanswered_misses_times_declare_the_link_dead(self) -> None:
        """A device that stopped answering: `misses` pings of the resync drop the link."""
        rig = up()
        timed_out(rig)
        for _ in range(3):
            rig.clock.advance(0.11)
            rig.clock.advance(0.5)
        assert rig.lost == 1 and "3 pings in a row" in rig.session.link.reason

    def test_without_expect_the_answer_is_followed_by_a_quiet_guard(self) -> None:
        """Without `expect` any line answers the ping; the next call waits `guard` after."""
        rig = up(CONFIG.replace(', expect: "^ACME,"', ""))
        timed_out(rig)
        rig.clock.advance(0.11)
        assert written(rig) == [b"*IDN?"]
        waiting = rig.call(b"VOLT?")
        rig.wire.deliver(IDN + b"\n")
        assert written(rig) == []
        rig.clock.advance(0.11)
        assert written(rig) == [b"VOLT?"] and waiting == []

    def test_the_handshake_ping_takes_only_an_expect_line(self) -> None:
        """At connect, a leftover line is late; the `expect` line brings the link up."""
        rig = SessionRig(CONFIG)
        handshake = rig.connect(None)
        rig.wire.deliver(b"5.000\n")
        assert handshake == [] and rig.session.link.late == 1
        rig.wire.deliver(IDN + b"\n")
        assert handshake[0].error is None
