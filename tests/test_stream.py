"""`verld.fronts.stream.ProgramStream` on its own: bytes in, calls out, answers back.

No pty, no loop, no device: a `FakeCore` records the calls the stream submits (a
test ends them by hand, as the session would), a `FakeEdge` stands for the pty or
socket (its room to write is set by the test), and time is a `ManualClock`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import pytest
from structlog.testing import capture_logs

from verld.calls import Call, CallResult
from verld.codec.base import Kind
from verld.codec.modbus import rtu_frame
from verld.codec.verl import FrameDecoder, encode_frame
from verld.config import Config, parse_config
from verld.fronts.protocol import FrontCounts
from verld.fronts.stream import GONE, ProgramStream
from verld.testing import ManualClock

if TYPE_CHECKING:
    from verld.fronts.base import Core

LINK = "/tmp/ttyV0"


class FakeCore:
    """The part of `Core` a stream uses: calls are recorded, ended by `answer`/`fail`."""

    def __init__(self) -> None:
        self.counts: dict[str, FrontCounts] = {}
        self.calls: list[Call] = []
        self.in_burst: list[bool] = []  #: per submitted call: inside `burst`
        self.forgotten: list[Hashable] = []
        self._bursts = 0

    def front(self, name: str) -> FrontCounts:
        return self.counts.setdefault(name, FrontCounts(name))

    def make_call(
        self,
        counts: FrontCounts | None,
        owner: Hashable,
        payload: bytes,
        done: Callable[[CallResult], None],
        *,
        req_id: object = None,
    ) -> Call:
        call = Call(owner, payload, done, timeout=1.0, retry=0, req_id=req_id)
        call.outcomes = None if counts is None else counts.outcomes
        return call

    def submit(self, call: Call) -> None:
        self.calls.append(call)
        self.in_burst.append(self._bursts > 0)

    def forget(self, owner: Hashable) -> None:
        self.forgotten.append(owner)

    @contextmanager
    def burst(self) -> Iterator[None]:
        self._bursts += 1
        try:
            yield
        finally:
            self._bursts -= 1

    def answer(self, call: Call, data: bytes, status: int = 0, text: str | None = None) -> None:
        error = None if status == 0 else "device_error"
        call.done(CallResult(error, "ok", status, data, text, 1.0, 1))

    def fail(self, call: Call, error: str = "timeout") -> None:
        call.done(CallResult(error, "no answer within 1 s", None, b"", None, 1.0, 1))


class FakeEdge:
    """A pty or socket: takes at most `room` bytes a write (None: all), or is `gone`."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.room: int | None = None
        self.gone = False
        self.wants: list[bool] = []  #: the stream's `want_writable` calls, in order

    def write(self, data: bytes | bytearray) -> int:
        if self.gone:
            return GONE
        taken = len(data) if self.room is None else min(self.room, len(data))
        self.out += data[:taken]
        if self.room is not None:
            self.room -= taken
        return taken

    def want_writable(self, want: bool) -> None:
        self.wants.append(want)

    def waiting(self) -> bool:
        """The stream waits for `writable`."""
        return bool(self.wants) and self.wants[-1]


def _config(codec: str = "line", **api: int) -> Config:
    extra = "".join(f", {key}: {value}" for key, value in api.items())
    return parse_config(
        f"device: {{port: /dev/fake, codec: {codec}, guard: 0.5, max_payload: 64}}\n"
        f"api: {{socket: /tmp/verld.sock{extra}}}\n"
    )


class Rig:
    """One stream over a fake core and edge, with a program attached."""

    def __init__(self, codec: str = "line", *, write: bool = True, events: bool = True,
                 **api: int) -> None:  # fmt: skip
        self.core = FakeCore()
        self.edge = FakeEdge()
        self.clock = ManualClock(100.0)
        self.stream = ProgramStream(cast("Core", self.core), _config(codec, **api), self.edge,
                                    self.clock, kind="port", where={"link": LINK}, write=write,
                                    events=events)  # fmt: skip
        self.stream.attach()

    @property
    def calls(self) -> list[Call]:
        return self.core.calls

    def figures(self) -> dict[str, Any]:
        return self.stream.figures()


def _verl_request(seq: int, payload: bytes) -> bytes:
    return encode_frame(Kind.REQUEST, seq, payload)


def _verl_reply(seq: int, data: bytes, status: int = 0) -> bytes:
    return encode_frame(Kind.REPLY, seq, bytes((status,)) + data)


# --- input ----------------------------------------------------------------------------


class TestInput:
    def test_a_line_fed_one_byte_at_a_time_becomes_one_call_for_the_stream(self) -> None:
        """Bytes split anywhere make one call whose owner is the stream itself."""
        rig = Rig()
        for byte in b"PING\n":
            rig.stream.feed(bytes((byte,)))
        assert [c.payload for c in rig.calls] == [b"PING"]
        assert rig.calls[0].owner is rig.stream
        assert repr(rig.stream) == f"port:{LINK}"
        assert rig.figures()["calls"] == 1

    def test_verl_requests_read_together_go_to_the_core_in_one_burst(self) -> None:
        """Several verl requests in one chunk are all submitted inside `core.burst()`."""
        rig = Rig("verl")
        rig.stream.feed(b"".join(_verl_request(seq, b"\x01x") for seq in (5, 6, 7)))
        assert [c.req_id for c in rig.calls] == [5, 6, 7]
        assert rig.core.in_burst == [True, True, True]

    def test_a_lone_verl_request_goes_straight_out(self) -> None:
        """One request in a read is submitted without a burst around it."""
        rig = Rig("verl")
        rig.stream.feed(_verl_request(9, b"\x01x"))
        assert rig.core.in_burst == [False]

    def test_garbage_between_verl_frames_is_counted_and_harms_no_request(self) -> None:
        """A bad frame is counted in bad_frames; the good ones around it still call."""
        rig = Rig("verl")
        good = _verl_request(1, b"\x01a")
        rig.stream.feed(good + b"\x00\x05junk\x00" + _verl_request(2, b"\x01b"))
        assert [c.req_id for c in rig.calls] == [1, 2]
        assert rig.figures()["bad_frames"] == 1

    def test_a_read_only_stream_ignores_and_counts_everything(self) -> None:
        """`write: false`: no call, every byte counted as ignored."""
        rig = Rig(write=False)
        rig.stream.feed(b"PING\n")
        assert rig.calls == []
        assert rig.figures()["ignored"] == 5

    def test_an_overlong_line_is_ignored_until_quiet_for_the_guard(self) -> None:
        """Input past max_payload is ignored until `device.guard` s of quiet, then heard."""
        rig = Rig()
        rig.stream.feed(b"x" * 100)
        rig.clock.advance(0.3)
        rig.stream.feed(b"more\nPING\n")  # (within the guard: still out of step)
        rig.clock.advance(0.3)  # 0.6 s after the first, 0.3 s after the last input
        assert rig.calls == []
        with capture_logs() as logs:
            rig.clock.advance(0.3)
        assert [r["event"] for r in logs] == ["port_input_resumed"]
        assert logs[0]["link"] == LINK
        rig.stream.feed(b"PING\n")
        assert [c.payload for c in rig.calls] == [b"PING"]
        assert rig.figures()["ignored"] == 110

    def test_an_rtu_request_of_unknown_length_ends_at_silence(self) -> None:
        """modbus-rtu: a function code whose length its bytes do not tell ends at the gap."""
        rig = Rig("modbus-rtu")
        request = b"\x01\x41\x01\x02"  # (unit 1, a user function code)
        rig.stream.feed(rtu_frame(request))
        assert rig.calls == []
        rig.clock.advance(0.01)
        assert [c.payload for c in rig.calls] == [request]


# --- calls and answers ------------------------------------------------------------------


class TestAnswers:
    def test_verl_replies_carry_the_programs_seqs_in_the_order_they_complete(self) -> None:
        """Pipelined: all requests out at once; each reply written as its call ends."""
        rig = Rig("verl")
        rig.stream.feed(_verl_request(7, b"\x01a") + _verl_request(9, b"\x01b"))
        first, second = rig.calls
        rig.core.answer(second, b"B")
        rig.core.answer(first, b"A")
        assert bytes(rig.edge.out) == _verl_reply(9, b"B") + _verl_reply(7, b"A")
        assert rig.figures()["ok"] == 2

    def test_one_at_a_time_codecs_send_the_next_request_when_the_last_ended(self) -> None:
        """line: requests wait in the stream; the next goes out as the last ends."""
        rig = Rig()
        rig.stream.feed(b"ONE\nTWO\n")
        assert [c.payload for c in rig.calls] == [b"ONE"]
        rig.core.answer(rig.calls[0], b"1\n", text="1")
        assert [c.payload for c in rig.calls] == [b"ONE", b"TWO"]
        rig.core.answer(rig.calls[1], b"2\n", text="2")
        assert bytes(rig.edge.out) == b"1\n2\n"

    def test_requests_past_client_queue_fail_busy_counted_by_the_front_only(self) -> None:
        """Past api.client_queue waiting, requests fail busy, counted by the stream (only those)."""
        rig = Rig(client_queue=2)
        rig.stream.feed(b"A\nB\nC\nD\n")
        rig.core.answer(rig.calls[0], b"a\n", text="a")
        assert [c.payload for c in rig.calls] == [b"A", b"B"]
        assert rig.figures()["failed"] == {"busy": 2}
        assert rig.core.counts["port"].outcomes == {"busy": 2}

    def test_a_call_that_fails_gets_no_answer_and_is_counted_by_error(self) -> None:
        """A timeout writes nothing, counts `failed`, and logs port_call_failed at DEBUG."""
        rig = Rig()
        rig.stream.feed(b"DELAY\nPING\n")
        with capture_logs() as logs:
            rig.core.fail(rig.calls[0])
        assert rig.edge.out == b""
        assert rig.figures()["failed"] == {"timeout": 1}
        assert logs == [{"event": "port_call_failed", "log_level": "debug", "link": LINK,
                         "error": "timeout", "message": "no answer within 1 s"}]  # fmt: skip
        assert [c.payload for c in rig.calls] == [b"DELAY", b"PING"]  # (the next went out)

    def test_a_device_error_reply_is_still_written_back(self) -> None:
        """An answer with an error status is the device's: written, counted ok."""
        rig = Rig("verl")
        rig.stream.feed(_verl_request(3, b"\x09"))
        rig.core.answer(rig.calls[0], b"no", status=0x02)
        assert bytes(rig.edge.out) == _verl_reply(3, b"no", status=0x02)
        assert rig.figures()["ok"] == 1


# --- epochs ----------------------------------------------------------------------------------


class TestEpochs:
    def test_an_answer_after_the_program_left_is_never_written(self) -> None:
        """A program's leaving forgets its calls: a late answer reaches no later program."""
        rig = Rig("verl")
        rig.stream.feed(_verl_request(1, b"\x01a"))
        assert rig.stream.detach()
        rig.stream.attach()
        rig.core.answer(rig.calls[0], b"A")
        assert rig.edge.out == b""
        assert rig.core.forgotten == [rig.stream]
        assert rig.figures()["dropped"] == 1

    def test_detach_without_a_program_does_nothing(self) -> None:
        """`detach` says False, and forgets nothing, when no program was there."""
        rig = Rig()
        rig.stream.detach()
        assert rig.stream.detach() is False
        assert rig.core.forgotten == [rig.stream]

    def test_a_program_that_came_and_went_unseen_has_its_calls_dropped(self) -> None:
        """Calls from input read while nobody is there are forgotten by `absent`."""
        rig = Rig()
        rig.stream.detach()
        rig.stream.feed(b"ONE\nTWO\n")
        rig.stream.absent()
        rig.core.answer(rig.calls[0], b"1\n", text="1")
        assert rig.figures()["dropped"] == 2  # (one out, one waiting)
        assert len(rig.calls) == 1

    def test_a_new_decoder_starts_a_new_epoch_and_keeps_the_old_counts(self) -> None:
        """`reset_framing` forgets the calls; bad frames of the old decoder still count."""
        rig = Rig("verl")
        rig.stream.feed(b"\x00\x05junk\x00" + _verl_request(1, b"\x01a"))
        rig.stream.reset_framing(_config("verl"))
        rig.core.answer(rig.calls[0], b"A")
        assert rig.edge.out == b""
        assert rig.figures()["bad_frames"] == 1
        assert rig.figures()["dropped"] == 1


# --- output ----------------------------------------------------------------------------------


class TestOutput:
    def test_nothing_is_written_while_nobody_is_there(self) -> None:
        """An event with no program attached is dropped and counted."""
        rig = Rig()
        rig.stream.detach()
        rig.stream.event(b"tick\n", "tick")
        assert rig.edge.out == b""
        assert rig.figures()["dropped"] == 1

    def test_events_are_written_only_where_events_are_wanted(self) -> None:
        """`events: false`: device events are not written (and not counted dropped)."""
        rig, quiet = Rig(), Rig(events=False)
        for r in (rig, quiet):
            r.stream.event(b"tick\n", "tick")
        assert (bytes(rig.edge.out), bytes(quiet.edge.out)) == (b"tick\n", b"")
        assert quiet.figures()["dropped"] == 0

    def test_a_short_write_waits_for_writable_and_keeps_the_order(self) -> None:
        """The rest of a partial write and what follows go out in order on `writable`."""
        rig = Rig()
        rig.edge.room = 3
        rig.stream.event(b"first\n", "first")
        rig.stream.event(b"second\n", "second")
        assert rig.edge.waiting()
        rig.edge.room = 4
        rig.stream.writable()
        assert rig.edge.waiting()
        rig.edge.room = None
        rig.stream.writable()
        assert rig.edge.wants == [True, False]  # (asked once, let go once)
        assert bytes(rig.edge.out) == b"first\nsecond\n"
        assert rig.figures()["dropped"] == 0

    def test_output_beyond_max_backlog_is_dropped_whole(self) -> None:
        """With `api.max_backlog` bytes waiting, a further message is dropped entire."""
        rig = Rig(max_backlog=10)
        rig.edge.room = 0
        for text in ("aaaa", "bbbb", "cccc"):
            rig.stream.event(f"{text}\n".encode(), text)
        rig.edge.room = None
        rig.stream.writable()
        assert bytes(rig.edge.out) == b"aaaa\nbbbb\n"
        assert rig.figures()["dropped"] == 1

    def test_a_program_leaving_drops_what_waits_for_it(self) -> None:
        """Bytes waiting when the program leaves are dropped, counted per message."""
        rig = Rig()
        rig.edge.room = 2
        rig.stream.event(b"one\n", "one")
        rig.stream.event(b"two\n", "two")
        rig.stream.detach()
        assert not rig.edge.waiting()
        assert rig.figures()["dropped"] == 2

    def test_an_edge_gone_at_write_time_drops_the_answer(self) -> None:
        """`GONE` from the edge: the answer is dropped, nothing waits."""
        rig = Rig()
        rig.edge.gone = True
        rig.stream.feed(b"PING\n")
        rig.core.answer(rig.calls[0], b"PONG\n", text="PONG")
        assert not rig.edge.waiting()
        assert rig.figures()["dropped"] == 1

    @pytest.mark.parametrize("chunk", [1, 3, 7])
    def test_verl_replies_split_by_the_edge_arrive_whole(self, chunk: int) -> None:
        """However small the edge's writes, the program reads whole, valid frames."""
        rig = Rig("verl")
        rig.stream.feed(b"".join(_verl_request(seq, b"\x01x") for seq in range(5)))
        rig.edge.room = chunk
        for call in rig.calls:
            rig.core.answer(call, b"y" * 3)
        while rig.edge.waiting():
            rig.edge.room = chunk
            rig.stream.writable()
        frames = FrameDecoder(4096, frozenset({Kind.REPLY})).feed(bytes(rig.edge.out))
        assert [(f.seq, f.payload) for f in frames] == [(seq, b"\x00yyy") for seq in range(5)]
