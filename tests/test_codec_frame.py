"""The frame codec: declared framings, checks, stuffing, resync, and which frame answers."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from verld.codec.base import Inbound, Kind, PortRequest
from verld.codec.frame.catalogue import ALIASES, MODELS
from verld.codec.frame.check import SUMS, canonical, crc_function, make_check
from verld.codec.frame.declaration import (
    Check,
    Event,
    Field,
    FrameDeclaration,
    Length,
    Status,
)
from verld.codec.frame.device import FrameCommandFraming, FramePortFraming
from verld.codec.frame.frames import FrameFormat, FrameReader
from verld.codec.frame.host import FrameCodec
from verld.codec.frame.rules import problems
from verld.codec.frame.stuffing import stuffing
from verld.session.calls import Call
from verld.session.window import Window

MAX = 256

#: u-blox UBX: B5 62, class, id, u16 LE payload length, payload, Fletcher-8 (A, B)
UBX = FrameDeclaration(
    header=4, start=b"\xb5\x62", length=Length(2, 2, "little"), check=Check("fletcher8")
)
#: "STX len seq cmd data CRC-16/MODBUS ETX", the seq numbering pipelined calls
STX = FrameDeclaration(
    header=3,
    start=b"\x02",
    length=Length(0, 1),
    check=Check("CRC-16/MODBUS", order="little"),
    end=b"\x03",
    seq=Field(1, 1),
    event=Event(2, (0x80,)),
)
#: Dynamixel Protocol 1.0: FF FF, id, length (parameters + 2), instruction, parameters,
#: checksum = ~(id + length + instruction + parameters)
DYNAMIXEL = FrameDeclaration(
    header=3,
    start=b"\xff\xff",
    length=Length(1, 1, adjust=-2),
    check=Check("sum8-inv"),
    match=(0,),
    status=Status(2),
)
#: SLIP with a CRC-32 and a one-byte header
SLIP = FrameDeclaration(header=1, check=Check("CRC-32/ISO-HDLC"), stuffing="slip")


def reader(frame: FrameDeclaration, max_payload: int = MAX) -> FrameReader:
    return FrameReader(FrameFormat(frame, max_payload))


def encode(frame: FrameDeclaration, data: bytes, seq: int | None = None) -> bytes:
    return FrameFormat(frame, MAX).encode(data, seq)


def reply(seq: int | None, data: bytes, status: int = 0) -> Inbound:
    return Inbound(Kind.REPLY, seq, status, data)


def event(data: bytes) -> Inbound:
    return Inbound(Kind.EVENT, None, None, data)


class TestCheck:
    @pytest.mark.parametrize("name", list(MODELS))
    def test_catalogue_check_value(self, name: str) -> None:
        """Every catalogue CRC gives the catalogue's check value, natively and in Python."""
        for native in (True, False):
            assert crc_function(name, native=native)(b"123456789") == MODELS[name].check

    def test_aliases_name_models(self) -> None:
        """Every alias names a catalogue model."""
        assert set(ALIASES.values()) <= set(MODELS)

    def test_names_are_case_insensitive(self) -> None:
        """A kind is found whatever its case, an alias as its model, a sum by its name."""
        assert canonical("crc-16/modbus") == "CRC-16/MODBUS"
        assert canonical("CRC-16/CCITT-FALSE") == "CRC-16/IBM-3740"
        assert canonical("Fletcher8") == "fletcher8"
        assert canonical("CRC-16/MODBU") is None

    @pytest.mark.parametrize(
        ("kind", "order", "data", "wire"),
        [
            ("sum8", "big", b"\x01\x02\xff", "02"),
            ("sum8-inv", "big", bytes.fromhex("0104022b01"), "cc"),  # Dynamixel's example
            ("xor8", "big", b"\x01\x02\x07", "04"),
            ("fletcher8", "little", bytes.fromhex("0a040000"), "0e34"),  # UBX MON-VER poll
            ("CRC-16/MODBUS", "little", bytes.fromhex("01030000000a"), "c5cd"),
            ("CRC-16/MODBUS", "big", bytes.fromhex("01030000000a"), "cdc5"),
            ("CRC-32/ISO-HDLC", "big", b"123456789", "cbf43926"),
            ("CRC-8/SMBUS", "big", b"123456789", "f4"),
        ],
    )
    def test_check_bytes(self, kind: str, order: str, data: bytes, wire: str) -> None:
        """Each check kind gives its known bytes, wider ones in the declared order."""
        assert make_check(kind, order).compute(data) == bytes.fromhex(wire)

    def test_sums_are_kinds(self) -> None:
        """The sums are known kinds beside the CRCs."""
        assert all(canonical(kind) == kind for kind in SUMS)


class TestStuffing:
    def test_slip_escapes(self) -> None:
        """SLIP escapes C0 and DB and ends the frame with C0; unstuffing reverses it."""
        slip = stuffing("slip")
        assert slip is not None
        assert slip.stuff(b"\x01\xc0\xdb\x02") == bytes.fromhex("01dbdcdbdd02c0")
        assert slip.unstuff(bytes.fromhex("01dbdcdbdd02")) == b"\x01\xc0\xdb\x02"

    @pytest.mark.parametrize("chunk", ["01db", "01db02", "dbdb"])
    def test_slip_bad_escape(self, chunk: str) -> None:
        """An ESC not followed by DC or DD is a bad escape."""
        slip = stuffing("slip")
        assert slip is not None
        with pytest.raises(ValueError, match="SLIP"):
            slip.unstuff(bytes.fromhex(chunk))

    def test_cobs(self) -> None:
        """COBS leaves no zero and ends the frame with 00."""
        stuffed = stuffing("cobs")
        assert stuffed is not None
        assert stuffed.stuff(b"\x11\x00\x22") == bytes.fromhex("021102220" + "0")


class TestEncode:
    def test_ubx_poll(self) -> None:
        """UBX MON-VER's poll: the length written little-endian, Fletcher-8 A then B."""
        assert encode(UBX, bytes.fromhex("0a04ffff")) == bytes.fromhex("b5620a0400000e34")

    def test_stx_frame_with_seq(self) -> None:
        """STX, length (payload), the seq modulo its field, cmd, data, CRC-16 LE, ETX."""
        wire = encode(STX, bytes.fromhex("000005") + b"ab", 300)
        assert wire == bytes.fromhex("02022c056162") + modbus_crc(wire) + b"\x03"

    def test_dynamixel_ping(self) -> None:
        """Dynamixel 1.0's ping of id 1: FF FF 01 02 01 FB (length = parameters + 2)."""
        assert encode(DYNAMIXEL, bytes.fromhex("010001")) == bytes.fromhex("ffff010201fb")

    def test_length_counts_frame(self) -> None:
        """`counts: frame` counts start to end, all included."""
        frame = FrameDeclaration(
            header=1, start=b"\x7e", length=Length(0, 1, counts="frame"), end=b"\x7f"
        )
        assert encode(frame, b"\x00ab") == bytes.fromhex("7e0561627f")

    def test_check_over_start(self) -> None:
        """`over: start+header+payload` puts the start under the check."""
        frame = FrameDeclaration(
            header=1, start=b"\x10", end=b"\x03", check=Check("sum8", over="start+header+payload")
        )
        assert encode(frame, b"\x01\x02") == bytes.fromhex("1001021303")

    def test_whole_frame_stuffed(self) -> None:
        """With stuffing, start, header, payload, check and end are stuffed, then delimited."""
        frame = FrameDeclaration(header=1, start=b"\xc0", end=b"\xdb", stuffing="slip")
        assert encode(frame, b"\x01") == bytes.fromhex("dbdc01dbddc0")

    def test_refuse(self) -> None:
        """Data shorter than the header, or too large for the length field, is refused."""
        form = FrameFormat(STX, MAX)
        assert form.refuse(b"\x00\x00") == "2 bytes, shorter than the frame's 3-byte header"
        assert form.refuse(b"\x00" * 300) == "300 bytes do not fit the frame's 1-byte length field"
        assert form.refuse(b"\x00\x00\x05") is None


def modbus_crc(wire: bytes) -> bytes:
    """The CRC-16/MODBUS of a STX frame's header and payload, low byte first."""
    return crc_function("CRC-16/MODBUS")(wire[1:-3]).to_bytes(2, "little")


class TestRead:
    @pytest.mark.parametrize(
        "frame", [UBX, STX, DYNAMIXEL, SLIP], ids=["ubx", "stx", "dxl", "slip"]
    )
    def test_one_byte_at_a_time(self, frame: FrameDeclaration) -> None:
        """A frame fed one byte at a time completes with its last byte."""
        data = b"\x01\x02\x03\x04\x05"
        wire = encode(frame, data)
        stream = reader(frame)
        found = [stream.feed(wire[i : i + 1]) for i in range(len(wire))]
        assert found[-1] == [_decoded(frame, data)]
        assert not any(found[:-1])

    def test_bad_check_resyncs_one_byte_after_start(self) -> None:
        """A bad check drops the frame and the search resumes one byte after its start."""
        # so a good frame inside the false frame's supposed extent is found
        good = encode(UBX, bytes.fromhex("0a040000"))
        false_start = bytes.fromhex("b5620101") + b"\x08\x00"  # claims 8 payload bytes
        stream = reader(UBX)
        assert stream.feed(false_start + good) == []  # waiting: 16 bytes from the start
        assert stream.feed(b"\x00\x00") == [bytes.fromhex("0a040000")]
        assert stream.bad_frames == 1

    def test_noise_before_a_frame(self) -> None:
        """Noise, a lone start byte and a broken start before a frame cost nothing."""
        good = encode(STX, b"\x00\x07\x01hi")
        assert reader(STX).feed(b"\xff\x02\x02\x00\x00" + good)[-1] == _decoded(
            STX, b"\x02\x07\x01hi"
        )

    def test_oversize_length_is_bad(self) -> None:
        """A length that makes the data larger than max_payload is a bad frame at once."""
        stream = reader(UBX, max_payload=16)
        good = FrameFormat(UBX, 16).encode(b"\x01\x02\x00\x00")
        assert stream.feed(bytes.fromhex("b5620102ff00") + good) == [b"\x01\x02\x00\x00"]
        assert stream.bad_frames == 1

    def test_wrong_end_is_bad(self) -> None:
        """A frame whose end bytes are wrong is a bad frame."""
        wire = bytearray(encode(STX, b"\x00\x01\x02"))
        wire[-1] = 0x04
        stream = reader(STX)
        assert stream.feed(bytes(wire)) == []
        assert stream.bad_frames == 1

    def test_end_delimited_skips_an_end_with_bad_check(self) -> None:
        """Without length, a frame ends at the first end whose check is good."""
        frame = FrameDeclaration(header=1, start=b"\x02", check=Check("CRC-16/XMODEM"), end=b"\x03")
        data = b"\x01a\x03b\x03c"
        assert reader(frame).feed(encode(frame, data)) == [data]

    def test_end_delimited_without_check(self) -> None:
        """Without length and check, a frame ends at its first end."""
        frame = FrameDeclaration(header=0, start=b"\x02", end=b"\x0d\x0a")
        stream = reader(frame)
        assert stream.feed(b"\x02ab\x0d") == []
        assert stream.feed(b"\x0a\x02cd\x0d\x0a") == [b"ab", b"cd"]

    def test_end_delimited_bound(self) -> None:
        """Without length, a frame with no good end within max_payload is a bad frame."""
        frame = FrameDeclaration(header=0, start=b"\x02", end=b"\x03")
        stream = reader(frame, max_payload=4)
        assert stream.feed(b"\x02abcdef") == []
        assert stream.bad_frames == 1
        assert stream.feed(b"\x02ok\x03") == [b"ok"]

    def test_slip_frames_and_bad_escape(self) -> None:
        """SLIP frames between C0s; a piece with a bad escape is a bad frame, empty ones skipped."""
        good = encode(SLIP, b"\x01\xc0\xdb")
        stream = reader(SLIP)
        assert stream.feed(b"\xc0\xc0\x01\xdb\x01\xc0" + good + good) == [b"\x01\xc0\xdb"] * 2
        assert stream.bad_frames == 1

    def test_cobs_frames(self) -> None:
        """COBS frames between zeros, the length counting unstuffed bytes."""
        frame = FrameDeclaration(
            header=2, length=Length(1, 1), check=Check("CRC-8/SMBUS"), stuffing="cobs"
        )
        wire = encode(frame, b"\x00\x00\x00\x05")
        assert b"\x00" not in wire[:-1]
        assert reader(frame).feed(b"\x00" + wire + wire) == [b"\x00\x02\x00\x05"] * 2

    def test_stuffed_frame_after_noise_in_its_piece(self) -> None:
        """With stuffing and a start, noise before the start in the same piece is skipped."""
        frame = FrameDeclaration(header=1, start=b"\x7e", check=Check("xor8"), stuffing="slip")
        assert reader(frame).feed(b"\x11\x22" + encode(frame, b"\x05")) == [b"\x05"]

    def test_guard_drops_an_incomplete_frame(self) -> None:
        """After a quiet guard an incomplete frame is dropped and the frames behind it read."""
        good = encode(UBX, bytes.fromhex("0a040000"))
        stream = reader(UBX)
        assert stream.feed(bytes.fromhex("b5620101f000") + good) == []
        assert stream.partial
        assert stream.flush() == [bytes.fromhex("0a040000")]
        assert stream.bad_frames == 1
        assert not stream.partial

    def test_buffer_is_bounded(self) -> None:
        """Input that never forms a frame is not kept beyond the largest frame."""
        stream = reader(UBX, max_payload=32)
        for _ in range(100):
            stream.feed(bytes.fromhex("b5620101") + b"\x10\x00" + b"\x00" * 30)
        assert len(stream._buf) <= 32 + 4 + 2


def _decoded(frame: FrameDeclaration, data: bytes) -> bytes:
    """`data` as it comes back out of its frame (the length field written)."""
    [out] = reader(frame).feed(encode(frame, data))
    return out


def _call(payload: bytes) -> Call:
    return Call(None, payload, lambda result: None, timeout=1.0, retry=0)


class TestHost:
    def test_event_is_tested_first(self) -> None:
        """A frame matching `event` is an event, even with a seq a call is waiting for."""
        codec = FrameCodec(STX, MAX)
        codec.encode_request(7, b"\x00\x00\x01")
        wire = encode(STX, b"\x00\x07\x80x") + encode(STX, b"\x00\x07\x01y")
        assert codec.feed(wire, True) == [
            event(_decoded(STX, b"\x00\x07\x80x")),
            reply(7, _decoded(STX, b"\x00\x07\x01y")),
        ]

    def test_seq_wraps_at_the_field_size(self) -> None:
        """The seq field holds the seq modulo 2^(8·size), and the session's window wraps there."""
        codec = FrameCodec(STX, MAX)
        assert codec.pipelined and codec.seq_space == 256
        assert encode(STX, b"\x00\x00\x01", 256 + 9)[2] == 9
        window = Window(8, codec.seq_space)
        calls = [_call(b"") for _ in range(300)]
        for call in calls:
            window.add(call, 0.0)
            window.match(call.seq)
        assert calls[255].seq == 255 and calls[256].seq == 0

    def test_unknown_seq_is_stale(self) -> None:
        """A reply carries its number; one that no call waits for matches nothing."""
        codec = FrameCodec(STX, MAX)
        window = Window(8, codec.seq_space)
        call = _call(b"\x00\x00\x01")
        window.add(call, 0.0)
        [got] = codec.feed(encode(STX, b"\x00\x00\x01", call.seq + 5), True)
        assert got.kind is Kind.REPLY and window.match(got.seq) is None

    def test_seq_and_match_must_agree(self) -> None:
        """With seq and match, a reply whose match bytes differ is dropped as bad."""
        frame = FrameDeclaration(
            header=3, start=b"\x02", length=Length(2, 1), seq=Field(0, 1), match=(1,)
        )
        codec = FrameCodec(frame, MAX)
        codec.encode_request(4, b"\x00\x11\x00")
        wrong = encode(frame, b"\x04\x22\x00")
        right = encode(frame, b"\x04\x11\x00")
        assert codec.feed(wrong + right, True) == [reply(4, b"\x04\x11\x00")]
        assert codec.bad_frames == 1

    def test_without_seq_the_match_bytes_pick_the_reply(self) -> None:
        """Without seq the reply is the first frame with the request's match bytes."""
        # (the others are events)
        codec = FrameCodec(DYNAMIXEL, MAX)
        codec.encode_request(0, bytes.fromhex("030001"))
        other = encode(DYNAMIXEL, bytes.fromhex("010000"))
        answer = encode(DYNAMIXEL, bytes.fromhex("030000"))
        assert codec.feed(other + answer + answer, True) == [
            event(bytes.fromhex("010200")),
            reply(None, bytes.fromhex("030200")),
            event(bytes.fromhex("030200")),
        ]

    def test_frames_nobody_waits_for_are_events(self) -> None:
        """Without seq and with no call outstanding, every frame is an event."""
        codec = FrameCodec(UBX, MAX)
        assert codec.feed(encode(UBX, b"\x01\x02\x00\x00"), False) == [event(b"\x01\x02\x00\x00")]

    def test_status(self) -> None:
        """A reply whose status byte is not in `ok` gets status 0xFF."""
        codec = FrameCodec(DYNAMIXEL, MAX)
        codec.encode_request(0, bytes.fromhex("010001"))
        [got] = codec.feed(encode(DYNAMIXEL, bytes.fromhex("010020")), True)
        assert got.status == 0xFF

    def test_quiet_feed(self) -> None:
        """In a quiet time, events go out and other frames are counted to drop."""
        codec = FrameCodec(STX, MAX)
        wire = encode(STX, b"\x00\x01\x80e") + encode(STX, b"\x00\x02\x01r")
        assert codec.quiet_feed(wire) == ([event(_decoded(STX, b"\x00\x01\x80e"))], 1)

    def test_refuse(self) -> None:
        """A call shorter than the header is refused before it is sent."""
        assert FrameCodec(UBX, MAX).refuse(b"\x01") == (
            "1 bytes, shorter than the frame's 4-byte header"
        )


class TestDevice:
    def test_port_keeps_the_programs_seq(self) -> None:
        """A program's seq is its request's tag and goes back in its reply's header."""
        port = FramePortFraming(STX, MAX)
        [request] = port.feed(encode(STX, b"\x00\x2a\x01hi"))
        assert request == PortRequest(0x2A, _decoded(STX, b"\x00\x2a\x01hi"))
        answer = port.reply(request.tag, 0, _decoded(STX, b"\x00\x07\x01ok"), None)
        assert answer == encode(STX, b"\x00\x2a\x01ok")

    def test_port_silent_reply(self) -> None:
        """A call that got no answer writes nothing to the program."""
        assert FramePortFraming(STX, MAX).reply(1, None, b"", None) == b""

    def test_command_framing_answers_with_the_request_header(self) -> None:
        """The simulator answers a command with the request's header, its status in it."""
        sim = FrameCommandFraming(DYNAMIXEL, MAX)
        [request] = sim.feed(encode(DYNAMIXEL, bytes.fromhex("050001") + b"\x01x"))
        assert request.payload == b"\x01x"
        answer = sim.reply(request.tag, 0x04, b"")
        assert answer == encode(DYNAMIXEL, bytes.fromhex("050004"))

    def test_command_framing_event(self) -> None:
        """A simulated event carries `event`'s first value at its offset."""
        sim = FrameCommandFraming(STX, MAX)
        assert sim.event(b"e") == encode(STX, b"\x00\x00\x80e")

    def test_damageable_bytes_are_caught(self) -> None:
        """Every byte the simulator may damage keeps the framing and fails the check."""
        sim = FrameCommandFraming(STX, MAX)
        [request] = sim.feed(encode(STX, b"\x00\x01\x01"))
        wire = sim.reply(request.tag, 0, b"hello")
        for index in sim.damageable(wire):
            damaged = bytearray(wire)
            damaged[index] ^= 0x40
            stream = reader(STX)
            assert stream.feed(bytes(damaged)) == []
            assert stream.bad_frames >= 1


class TestProblems:
    def test_good_declarations(self) -> None:
        """The worked declarations have no problem."""
        for frame in (UBX, STX, DYNAMIXEL, SLIP):
            assert problems(frame, window=8, max_payload=MAX, ping=None) == []

    @pytest.mark.parametrize(
        ("frame", "window", "paths", "words"),
        [
            (
                FrameDeclaration(header=2, start=b"\x02", length=Length(1, 2)),
                1,
                ("device.frame.length.offset",),
                "must lie inside the 2-byte header",
            ),
            (
                FrameDeclaration(header=4, start=b"\x02", length=Length(0, 2), seq=Field(1, 1)),
                1,
                ("device.frame.seq.offset", "device.frame.length.offset"),
                "overlaps",
            ),
            (
                FrameDeclaration(header=4, start=b"\x02", length=Length(0, 2), seq=Field(2, 1)),
                129,
                ("device.frame.seq.size", "device.window"),
                "at most 128",
            ),
            (
                FrameDeclaration(header=1, length=Length(0, 1)),
                1,
                ("device.frame.start", "device.frame.stuffing", "device.frame"),
                "a way to be found",
            ),
            (
                FrameDeclaration(header=1, start=b"\x02"),
                1,
                ("device.frame.length", "device.frame.end", "device.frame"),
                "a way to end",
            ),
            (
                FrameDeclaration(header=1, start=b"\x02", end=b"\x03", match=(1,)),
                1,
                ("device.frame.match[0]", "device.frame.match"),
                "offset 1 is not inside",
            ),
            (
                FrameDeclaration(header=1, start=b"\x02", end=b"\x03", event=Event(3, (1,))),
                1,
                ("device.frame.event.offset",),
                "offset 3",
            ),
            (
                FrameDeclaration(header=1, start=b"\x02", end=b"\x03", status=Status(2)),
                1,
                ("device.frame.status.offset",),
                "offset 2",
            ),
        ],
    )
    def test_each_problem(
        self, frame: FrameDeclaration, window: int, paths: tuple[str, ...], words: str
    ) -> None:
        """Each problem names its keys and says what is wrong."""
        [problem] = problems(frame, window=window, max_payload=MAX, ping=None)
        assert problem.paths == paths
        assert words in problem.message

    def test_ping_shorter_than_header(self) -> None:
        """A ping must hold at least the header."""
        [problem] = problems(UBX, window=1, max_payload=MAX, ping=b"\x01")
        assert problem.paths[0] == "heartbeat.payload"


# --- properties over random declarations -------------------------------------------------

_KINDS = (
    "sum8",
    "sum8-inv",
    "xor8",
    "fletcher8",
    "CRC-16/MODBUS",
    "CRC-32/ISO-HDLC",
    "CRC-8/SMBUS",
)


@st.composite
def declarations(draw: st.DrawFn) -> FrameDeclaration:
    header = draw(st.integers(0, 6))
    stuffed = draw(st.sampled_from(("none", "slip", "cobs")))
    start = draw(st.binary(min_size=0 if stuffed != "none" else 1, max_size=3))
    length = None
    if header and draw(st.booleans()):
        size = draw(st.sampled_from([s for s in (1, 2) if s <= header]))
        length = Length(
            draw(st.integers(0, header - size)),
            size,
            draw(st.sampled_from(("big", "little"))),
            draw(st.sampled_from(("payload", "header+payload", "frame"))),
            draw(st.integers(-2, 2)),
        )
    check = None
    if draw(st.booleans()):
        check = Check(
            draw(st.sampled_from(_KINDS)),
            draw(st.sampled_from(("header+payload", "start+header+payload"))),
            draw(st.sampled_from(("big", "little"))),
        )
    end = draw(st.binary(min_size=0 if length or stuffed != "none" else 1, max_size=2))
    frame = FrameDeclaration(
        header=header, start=start, length=length, check=check, end=end, stuffing=stuffed
    )
    assume(not problems(frame, window=1, max_payload=MAX, ping=None))
    return frame


def _clean(frame: FrameDeclaration, wire: bytes) -> bool:
    """Whether a frame read without length or stuffing ends only at its own end (an
    `end` earlier in its payload or check would end it there: a framing without
    length or escapes cannot carry its own end bytes)."""
    if frame.length is not None or frame.stuffing != "none":
        return True
    form = FrameFormat(frame, MAX)
    return wire.find(frame.end, len(frame.start) + frame.header + form.check_size) == len(
        wire
    ) - len(frame.end)


class TestProperties:
    @settings(max_examples=300, deadline=None)
    @given(
        declarations(),
        st.lists(st.binary(max_size=12), min_size=1, max_size=5),
        st.lists(st.binary(max_size=8), max_size=6),
        st.lists(st.integers(0, 400), max_size=12),
    )
    def test_any_cut_with_garbage_between(
        self, frame: FrameDeclaration, payloads: list[bytes], garbage: list[bytes], cuts: list[int]
    ) -> None:
        """Any cut of valid frames with garbage between them decodes to the same frames."""
        # What is guaranteed, for garbage that cannot begin a frame: without stuffing,
        # bytes other than the start's first; with stuffing, a piece of its own (ended by
        # the delimiter) that is not itself a frame.
        form = FrameFormat(frame, MAX)
        datas = [bytes(frame.header) + payload for payload in payloads]
        assume(all(form.refuse(data) is None for data in datas))
        wires = [form.encode(data) for data in datas]
        assume(all(_clean(frame, wire) for wire in wires))
        expected = [reader(frame).feed(wire)[0] for wire in wires]
        noise = []
        for junk in garbage:
            if form.stuffing is None:
                noise.append(bytes(b for b in junk if b != frame.start[0]))
            else:
                piece = junk.replace(bytes((form.stuffing.delimiter,)), b"") + bytes(
                    (form.stuffing.delimiter,)
                )
                assume(reader(frame).feed(piece) == [])
                noise.append(piece)
        stream = b"".join(
            (noise[i] if i < len(noise) else b"") + wire for i, wire in enumerate(wires)
        )
        stream += b"".join(noise[len(wires) :])
        decoder = reader(frame)
        found: list[bytes] = []
        at = 0
        for cut in [*sorted(cuts), len(stream)]:
            found += decoder.feed(stream[at:cut])
            at = max(at, cut)
        assert found == expected

    @settings(max_examples=200, deadline=None)
    @given(declarations(), st.binary(min_size=0, max_size=10))
    def test_encode_decode_round_trip(self, frame: FrameDeclaration, payload: bytes) -> None:
        """A frame's data comes back as sent, with its length field written."""
        form = FrameFormat(frame, MAX)
        data = bytes(frame.header) + payload
        assume(form.refuse(data) is None)
        wire = form.encode(data)
        assume(_clean(frame, wire))
        [got] = reader(frame).feed(wire)
        assert len(got) == len(data) and got[frame.header :] == payload
