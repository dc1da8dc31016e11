"""`verld.fronts.stream.ProgramStream` over the real core: bytes in, calls out, answers back.

No pty, no loop, no device process: the stream runs over a real `Core` built by the
session rig (`SessionRig(..., core=True)`: the real session, supervisor and codec,
the link up), whose wire's far end is the codec's own device side. The program's
bytes go in through the stream; what the session wrote to the device is read off
the wire, and the device's answers, events and silences come from the rig; time is
the rig's `ManualClock`. A `FakeEdge` stands for the pty or socket (its room to
write is set by the test).
"""

from __future__ import annotations

import gc

import pytest
from structlog.testing import capture_logs

from verld.codec.base import Kind, PortRequest
from verld.codec.frame.frames import FrameFormat
from verld.codec.modbus import rtu_frame
from verld.codec.verl import FrameDecoder, encode_frame
from verld.config import Config, parse_config
from verld.fronts.protocol import StreamFigures
from verld.fronts.stream import GONE, ProgramStream, Share
from verld.links.link import Transition
from verld.session.calls import Call
from verld.testing.session import Respond, SessionRig, echo

LINK = "/tmp/ttyV0"


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


#: `configs/frame.yaml`'s declaration: "STX len seq cmd data CRC-16/MODBUS ETX"
STX_FRAME = (
    '{start: "02", header: 3, length: {offset: 0, size: 1},'
    " check: {kind: CRC-16/MODBUS, order: little},"
    ' end: "03", seq: {offset: 1, size: 1}, event: {offset: 2, values: ["80"]}}'
)


def _config(codec: str = "line", frame: str | None = None, **api: int) -> Config:
    extra = "".join(f", {key}: {value}" for key, value in api.items())
    declared = "" if frame is None else f", frame: {frame}"
    return parse_config(
        f"device: {{port: /dev/fake, codec: {codec}, guard: 0.5, max_payload: 64,"
        f" timeout: 1.0, retry: 0{declared}}}\n"
        "heartbeat: {interval: 0}\n"  # (no pings on the wire but the handshake's)
        f"api: {{socket: /tmp/verld.sock{extra}}}\n"
    )


class Rig:
    """A stream with a program attached, over a real core whose link is up; device
    events go to every stream of the rig, as the ports front sends them."""

    def __init__(
        self,
        codec: str = "line",
        *,
        frame: str | None = None,
        write: bool = True,
        events: bool = True,
        **api: int,
    ) -> None:
        self.cfg = _config(codec, frame, **api)
        self.dev = SessionRig(self.cfg, core=True)
        self.dev.connect()
        self.core, self.clock, self.wire = self.dev.core, self.dev.clock, self.dev.wire
        self.requests: list[PortRequest] = []  #: every request the device got since
        self.wire.on_request = self.requests.append
        self._writes = self.wire.writes
        self.streams: list[ProgramStream] = []
        self.core.listeners.append(self)
        self.stream, self.edge = self.add(write=write, events=events)

    def add(
        self, *, write: bool = True, events: bool = True, share: Share | None = None
    ) -> tuple[ProgramStream, FakeEdge]:
        """Another stream over the same core, with a program attached."""
        edge = FakeEdge()
        stream = ProgramStream(
            self.core,
            self.cfg,
            edge,
            self.clock,
            kind="port",
            where={"link": LINK},
            write=write,
            events=events,
            share=share,
        )
        stream.attach()
        self.streams.append(stream)
        return stream, edge

    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        for stream in self.streams:
            stream.event(data, text)

    def link_event(self, transition: Transition) -> None:
        return None

    @property
    def payloads(self) -> list[bytes]:
        """What the device was asked, in order."""
        return [r.payload for r in self.requests]

    @property
    def writes(self) -> int:
        """The session's writes to the device since the link came up."""
        return self.wire.writes - self._writes

    def answer(self, respond: Respond = echo) -> int:
        """The device answers every request not answered yet."""
        return self.dev.answer(respond)

    def device_says(self, data: bytes) -> None:
        """An event from the device."""
        self.wire.deliver(self.wire.event(data))

    def figures(self) -> StreamFigures:
        return self.stream.figures()


def _lower(request: PortRequest) -> tuple[int, bytes]:
    """A line device's answer: the request in lower case."""
    return 0, request.payload.lower()


def _says(data: bytes, status: int = 0) -> Respond:
    """A device answering every request with `status` and `data`."""
    return lambda _request: (status, data)


def _verl_request(seq: int, payload: bytes) -> bytes:
    return encode_frame(Kind.REQUEST, seq, payload)


def _verl_reply(seq: int, data: bytes, status: int = 0) -> bytes:
    return encode_frame(Kind.REPLY, seq, bytes((status,)) + data)


# --- input ----------------------------------------------------------------------------


class TestInput:
    def test_an_answered_request_is_freed_without_the_garbage_collector(self) -> None:
        """A program's call and its answer hold no reference cycle: freed as they end."""
        rig = Rig()
        gc.collect()
        gc.disable()
        try:
            for _ in range(20):
                rig.stream.feed(b"PING\n")
                rig.answer()
            left = sum(isinstance(o, Call) and o.owner is rig.stream for o in gc.get_objects())
        finally:
            gc.enable()
        assert (rig.figures()["ok"], left) == (20, 0)

    def test_a_line_fed_one_byte_at_a_time_becomes_one_call_for_the_stream(self) -> None:
        """Bytes split anywhere make one call whose owner is the stream itself."""
        rig = Rig()
        rig.core.take_lease(rig.stream, 60, dict)  # (only the stream's own calls go out)
        for byte in b"PING\n":
            rig.stream.feed(bytes((byte,)))
        assert rig.payloads == [b"PING"]
        assert repr(rig.stream) == f"port:{LINK}"
        assert rig.figures()["calls"] == 1

    def test_verl_requests_read_together_go_to_the_device_in_one_write(self) -> None:
        """Several verl requests in one chunk go out in one write; replies keep their seqs."""
        rig = Rig("verl")
        rig.stream.feed(
            b"".join(
                _verl_request(seq, b"\x01" + p) for seq, p in ((5, b"a"), (6, b"b"), (7, b"c"))
            )
        )
        assert (rig.payloads, rig.writes) == ([b"\x01a", b"\x01b", b"\x01c"], 1)
        rig.answer()
        assert bytes(rig.edge.out) == b"".join(
            _verl_reply(seq, p) for seq, p in ((5, b"a"), (6, b"b"), (7, b"c"))
        )

    def test_a_lone_verl_request_goes_straight_out(self) -> None:
        """One request in a read goes to the device at once, in a write of its own."""
        rig = Rig("verl")
        rig.stream.feed(_verl_request(9, b"\x01x"))
        assert (rig.payloads, rig.writes) == ([b"\x01x"], 1)
        rig.stream.feed(_verl_request(10, b"\x01y"))
        assert (rig.payloads, rig.writes) == ([b"\x01x", b"\x01y"], 2)

    def test_garbage_between_verl_frames_is_counted_and_harms_no_request(self) -> None:
        """A bad frame is counted in bad_frames; the good ones around it still call."""
        rig = Rig("verl")
        good = _verl_request(1, b"\x01a")
        rig.stream.feed(good + b"\x00\x05junk\x00" + _verl_request(2, b"\x01b"))
        assert rig.payloads == [b"\x01a", b"\x01b"]
        assert rig.figures()["bad_frames"] == 1

    def test_a_read_only_stream_ignores_and_counts_everything(self) -> None:
        """`write: false`: nothing reaches the device, every byte counted as ignored."""
        rig = Rig(write=False)
        rig.stream.feed(b"PING\n")
        assert (rig.payloads, rig.writes) == ([], 0)
        assert rig.figures()["ignored"] == 5

    def test_an_overlong_line_is_ignored_until_quiet_for_the_guard(self) -> None:
        """Input past max_payload is ignored until `device.guard` s of quiet, then heard."""
        rig = Rig()
        rig.stream.feed(b"x" * 100)
        rig.clock.advance(0.3)
        rig.stream.feed(b"more\nPING\n")  # (within the guard: still out of step)
        rig.clock.advance(0.3)  # 0.6 s after the first, 0.3 s after the last input
        assert rig.payloads == []
        with capture_logs() as logs:
            rig.clock.advance(0.3)
        assert [r["event"] for r in logs] == ["port_input_resumed"]
        assert logs[0]["link"] == LINK
        rig.stream.feed(b"PING\n")
        assert rig.payloads == [b"PING"]
        assert rig.figures()["ignored"] == 110

    def test_an_rtu_request_of_unknown_length_ends_at_silence(self) -> None:
        """modbus-rtu: a function code whose length its bytes do not tell ends at the gap."""
        rig = Rig("modbus-rtu")
        request = b"\x01\x41\x01\x02"  # (unit 1, a user function code)
        rig.stream.feed(rtu_frame(request))
        assert rig.payloads == []
        rig.clock.advance(0.01)
        assert rig.payloads == [request]


class TestFalseStart:
    """`frame` (`guard_flush`): a frame a program leaves incomplete, after `device.guard`."""

    @staticmethod
    def _frame(rig: Rig, data: bytes) -> bytes:
        assert rig.cfg.device.frame is not None
        return FrameFormat(rig.cfg.device.frame, 64).encode(data)

    def test_a_false_start_is_dropped_once_the_program_is_quiet_for_the_guard(self) -> None:
        """A start marker with nothing behind it is dropped after the guard; the next is heard."""
        rig = Rig("frame", frame=STX_FRAME)
        rig.stream.feed(b"\x02\x20")  # (a 32-byte payload announced, never sent)
        rig.clock.advance(0.6)
        assert rig.figures()["bad_frames"] == 1
        rig.stream.feed(self._frame(rig, b"\x00\x07\x01\x01hi"))
        assert [p[2:] for p in rig.payloads] == [b"\x01\x01hi"]  # (verld's own seq at 1)

    def test_a_request_inside_a_false_starts_extent_is_heard_after_the_guard(self) -> None:
        """The search resumes behind the false start: a whole request it swallowed is called."""
        rig = Rig("frame", frame=STX_FRAME)
        rig.stream.feed(b"\x02\x20" + self._frame(rig, b"\x00\x07\x01\x01hi"))
        assert rig.payloads == []
        rig.clock.advance(0.6)
        assert [p[2:] for p in rig.payloads] == [b"\x01\x01hi"]
        rig.answer(lambda request: (0, request.payload))  # (the request's data, echoed)
        assert bytes(rig.edge.out) == self._frame(rig, b"\x00\x07\x01\x01hi")

    def test_a_program_still_writing_keeps_its_frame(self) -> None:
        """The guard counts from the program's last byte: a slow writer's frame is not cut."""
        rig = Rig("frame", frame=STX_FRAME)
        frame = self._frame(rig, b"\x00\x07\x01\x01hi")
        for byte in frame:
            rig.stream.feed(bytes((byte,)))
            rig.clock.advance(0.3)
        assert [p[2:] for p in rig.payloads] == [b"\x01\x01hi"]
        assert rig.figures()["bad_frames"] == 0


# --- calls and answers ------------------------------------------------------------------


class TestAnswers:
    def test_verl_replies_carry_the_programs_seqs_in_the_order_they_complete(self) -> None:
        """Pipelined: all requests out at once; each reply written as its call ends."""
        rig = Rig("verl")
        rig.stream.feed(_verl_request(7, b"\x01a") + _verl_request(9, b"\x01b"))
        first, second = rig.wire.requests
        rig.wire.deliver(rig.wire.reply(second, 0, b"B"))
        rig.wire.deliver(rig.wire.reply(first, 0, b"A"))
        assert bytes(rig.edge.out) == _verl_reply(9, b"B") + _verl_reply(7, b"A")
        assert rig.figures()["ok"] == 2

    def test_one_at_a_time_codecs_send_the_next_request_when_the_last_ended(self) -> None:
        """line: requests wait in the stream; the next goes out as the last ends."""
        rig = Rig()
        rig.stream.feed(b"ONE\nTWO\n")
        assert rig.payloads == [b"ONE"]
        rig.answer(_lower)
        assert rig.payloads == [b"ONE", b"TWO"]
        rig.answer(_lower)
        assert bytes(rig.edge.out) == b"one\ntwo\n"

    def test_requests_past_client_queue_fail_busy_counted_by_the_front_once(self) -> None:
        """Past api.client_queue waiting, requests fail busy, counted once in the front's counts."""
        rig = Rig(client_queue=2)
        rig.stream.feed(b"A\nB\nC\nD\n")
        rig.answer(_lower)
        assert rig.payloads == [b"A", b"B"]
        assert rig.figures()["failed"] == {"busy": 2}
        # (the stream counts the refusals it made; the session counts A's answer)
        assert rig.core.front("port").outcomes == {"busy": 2, "ok": 1}

    def test_streams_sharing_a_share_hold_at_most_its_limit_together(self) -> None:
        """Two streams with one share of 3: the fourth request between them fails busy."""
        rig = Rig()
        share = Share(3)
        a, _ = rig.add(share=share)
        b, b_edge = rig.add(share=share)
        a.feed(b"A1\nA2\n")
        b.feed(b"B1\nB2\n")
        assert b.figures()["failed"] == {"busy": 1}
        while rig.answer(_lower):
            pass
        assert share.used == 0
        assert bytes(b_edge.out) == b"b1\n"

    def test_a_share_never_drifts_over_many_single_requests(self) -> None:
        """One request at a time, many times: the share is back to 0 after each."""
        rig = Rig()
        share = Share(8)
        stream, edge = rig.add(share=share)
        for i in range(20):
            stream.feed(b"X%d\n" % i)
            rig.answer(_lower)
            assert share.used == 0
        assert edge.out.count(b"\n") == 20

    def test_a_leaving_stream_gives_its_share_back(self) -> None:
        """A stream whose program leaves returns what it held of the share."""
        rig = Rig()
        share = Share(2)
        stream, _ = rig.add(share=share)
        stream.feed(b"ONE\nTWO\n")
        assert share.used == 2
        stream.detach()
        assert share.used == 0

    def test_a_call_that_fails_gets_no_answer_and_is_counted_by_error(self) -> None:
        """A timeout writes nothing, counts `failed`, and logs port_call_failed at DEBUG."""
        rig = Rig()
        rig.stream.feed(b"DELAY\nPING\n")
        with capture_logs() as logs:
            rig.clock.advance(1.0)  # (device.timeout: the device stays silent)
        assert rig.edge.out == b""
        assert rig.figures()["failed"] == {"timeout": 1}
        failed = [r for r in logs if r["event"] == "port_call_failed"]
        assert failed == [
            {
                "event": "port_call_failed",
                "log_level": "debug",
                "link": LINK,
                "error": "timeout",
                "message": "no answer within 1 s",
            }
        ]
        rig.clock.advance(0.5)  # (device.guard: the line is quiet again)
        assert rig.payloads == [b"DELAY", b"PING"]  # (the next went out)

    def test_a_device_error_reply_is_still_written_back(self) -> None:
        """An answer with an error status is the device's: written, counted ok."""
        rig = Rig("verl")
        rig.stream.feed(_verl_request(3, b"\x09"))
        rig.answer(_says(b"no", status=0x02))
        assert bytes(rig.edge.out) == _verl_reply(3, b"no", status=0x02)
        assert rig.figures()["ok"] == 1


# --- epochs ----------------------------------------------------------------------------------


class TestEpochs:
    def test_an_answer_after_the_program_left_is_never_written(self) -> None:
        """A program's leaving forgets its calls: a late answer is stale, never written."""
        rig = Rig("verl")
        rig.stream.feed(_verl_request(1, b"\x01a"))
        assert rig.stream.detach()
        rig.stream.attach()
        rig.answer()
        assert rig.edge.out == b""
        assert rig.dev.session.counters.stale == 1
        assert rig.figures()["dropped"] == 1

    def test_detach_without_a_program_does_nothing(self) -> None:
        """`detach` says False, and forgets nothing, when no program was there."""
        rig = Rig("verl")
        rig.stream.detach()
        rig.stream.feed(_verl_request(1, b"\x01a"))  # (read while nobody is there)
        assert rig.stream.detach() is False
        rig.answer()
        assert rig.dev.session.counters.stale == 0  # (its call was not forgotten)
        assert (rig.figures()["ok"], rig.figures()["dropped"]) == (1, 1)

    def test_a_program_that_came_and_went_unseen_has_its_calls_dropped(self) -> None:
        """Calls from input read while nobody is there are forgotten by `absent`."""
        rig = Rig()
        rig.stream.detach()
        rig.stream.feed(b"ONE\nTWO\n")
        rig.stream.absent()
        rig.answer(_lower)
        assert rig.figures()["dropped"] == 2  # (one out, one waiting)
        assert rig.payloads == [b"ONE"]

    def test_a_new_decoder_starts_a_new_epoch_and_keeps_the_old_counts(self) -> None:
        """`reset_framing` forgets the calls; bad frames of the old decoder still count."""
        rig = Rig("verl")
        rig.stream.feed(b"\x00\x05junk\x00" + _verl_request(1, b"\x01a"))
        rig.stream.reset_framing(_config("verl"))
        rig.answer()
        assert rig.edge.out == b""
        assert rig.dev.session.counters.stale == 1
        assert rig.figures()["bad_frames"] == 1
        assert rig.figures()["dropped"] == 1


# --- output ----------------------------------------------------------------------------------


class TestOutput:
    def test_nothing_is_written_while_nobody_is_there(self) -> None:
        """A device event with no program attached is dropped and counted."""
        rig = Rig()
        rig.stream.detach()
        rig.device_says(b"tick")
        assert rig.edge.out == b""
        assert rig.figures()["dropped"] == 1

    def test_events_are_written_only_where_events_are_wanted(self) -> None:
        """`events: false`: device events are not written (and not counted dropped)."""
        rig = Rig()
        quiet, quiet_edge = rig.add(events=False)
        rig.device_says(b"tick")
        assert (bytes(rig.edge.out), bytes(quiet_edge.out)) == (b"tick\n", b"")
        assert quiet.figures()["dropped"] == 0

    def test_a_short_write_waits_for_writable_and_keeps_the_order(self) -> None:
        """The rest of a partial write and what follows go out in order on `writable`."""
        rig = Rig()
        rig.edge.room = 3
        rig.device_says(b"first")
        rig.device_says(b"second")
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
        for text in (b"aaaa", b"bbbb", b"cccc"):
            rig.device_says(text)
        rig.edge.room = None
        rig.stream.writable()
        assert bytes(rig.edge.out) == b"aaaa\nbbbb\n"
        assert rig.figures()["dropped"] == 1

    def test_a_program_leaving_drops_what_waits_for_it(self) -> None:
        """Bytes waiting when the program leaves are dropped, counted per message."""
        rig = Rig()
        rig.edge.room = 2
        rig.device_says(b"one")
        rig.device_says(b"two")
        rig.stream.detach()
        assert not rig.edge.waiting()
        assert rig.figures()["dropped"] == 2

    def test_an_edge_gone_at_write_time_drops_the_answer(self) -> None:
        """`GONE` from the edge: the device's answer is dropped, nothing waits."""
        rig = Rig()
        rig.edge.gone = True
        rig.stream.feed(b"PING\n")
        rig.answer(_says(b"PONG"))
        assert not rig.edge.waiting()
        assert rig.figures()["dropped"] == 1

    @pytest.mark.parametrize("chunk", [1, 3, 7])
    def test_verl_replies_split_by_the_edge_arrive_whole(self, chunk: int) -> None:
        """However small the edge's writes, the program reads whole, valid frames."""
        rig = Rig("verl")
        rig.stream.feed(b"".join(_verl_request(seq, b"\x01x") for seq in range(5)))
        rig.edge.room = chunk
        assert rig.answer(_says(b"yyy")) == 5
        while rig.edge.waiting():
            rig.edge.room = chunk
            rig.stream.writable()
        frames = FrameDecoder(4096, frozenset({Kind.REPLY})).feed(bytes(rig.edge.out))
        assert [(f.seq, f.payload) for f in frames] == [(seq, b"\x00yyy") for seq in range(5)]
