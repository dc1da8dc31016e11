"""The verl codec: vectors byte for byte, rejects, resync, chunking, bounds."""

from __future__ import annotations

import tracemalloc
import zlib
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from verld.codec import cobs
from verld.codec.base import Inbound, Kind, PortRequest
from verld.codec.verl import (
    FrameDecoder,
    RequestDecoder,
    VerlCodec,
    VerlCommandFraming,
    VerlFrame,
    encode_event,
    encode_frame,
    encode_reply,
)

MAX = 600  #: max_payload for most tests: room for 254-, 255- and 508-byte runs
DAEMON = frozenset({0x12, 0x13})  #: what the daemon may receive
DEVICE = frozenset({0x11})  #: what a device may receive

#: a stream of frames the daemon accepts, with the frames it must yield
FRAMES = [
    VerlFrame(0x12, 0, b"\x00"),
    VerlFrame(0x13, 0, b"temp=21.5"),
    VerlFrame(0x12, 258, b"\x00\x00\x01\x00"),
    VerlFrame(0x12, 65535, b"\xff"),
    VerlFrame(0x13, 0, b""),
    VerlFrame(0x12, 7, b"\x00" + bytes(range(1, 256)) * 2),
]
STREAM = b"".join(encode_frame(*frame) for frame in FRAMES)

#: payloads that stress COBS block boundaries
RUNS = [bytes([fill]) * size for fill in (0x00, 0xFF) for size in (0, 1, 253, 254, 255, 508, MAX)]


def feed_in_pieces(decoder: FrameDecoder, data: bytes, cuts: list[int]) -> list[VerlFrame]:
    """Feed `data` split at `cuts` (offsets); all frames decoded."""
    frames = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        frames += decoder.feed(data[start:cut])
        start = max(start, cut)
    return frames


def zero_free_reply(payload_size: int) -> bytes:
    """The wire bytes of a reply whose body holds no zero: the longest COBS encoding."""
    payload = bytes(1 + i % 255 for i in range(payload_size))
    for seq in range(0x0101, 0xFFFF):
        wire = encode_frame(0x12, seq, payload)
        if 0 not in wire[1:-1] and len(wire) == len(payload) + 7 + (len(payload) + 7) // 254 + 3:
            return wire
    raise AssertionError("no zero-free seq found")


class TestVectors:
    def test_crc_check_value(self, verl_vectors: dict[str, Any]) -> None:
        """zlib.crc32 gives the vectors' CRC-32 check value for "123456789"."""
        check = verl_vectors["crc32_check"]
        assert f"{zlib.crc32(check['input_ascii'].encode()):08x}" == check["crc32"] == "cbf43926"

    def test_encode_frames(self, verl_vectors: dict[str, Any]) -> None:
        """encode_frame reproduces every vector frame's wire_hex byte for byte."""
        for case in verl_vectors["frames"]:
            wire = encode_frame(case["type"], case["seq"], bytes.fromhex(case["payload_hex"]))
            assert wire.hex() == case["wire_hex"], case["name"]

    def test_bodies(self, verl_vectors: dict[str, Any]) -> None:
        """Every vector frame's wire bytes hold its body_hex, ending in its crc32."""
        for case in verl_vectors["frames"]:
            body = cobs.decode(bytes.fromhex(case["wire_hex"])[1:-1])
            assert body.hex() == case["body_hex"], case["name"]
            assert f"{zlib.crc32(body[:-4]):08x}" == case["crc32"] == body[-4:].hex(), case["name"]

    def test_decode_frames(self, verl_vectors: dict[str, Any]) -> None:
        """Every vector frame decodes to its type, seq and payload on the side that receives it."""
        for case in verl_vectors["frames"]:
            decoder = FrameDecoder(4096, frozenset({case["type"]}))
            frames = decoder.feed(bytes.fromhex(case["wire_hex"]))
            expected = VerlFrame(case["type"], case["seq"], bytes.fromhex(case["payload_hex"]))
            assert frames == [expected], case["name"]
            assert decoder.bad_frames == 0, case["name"]

    def test_rejects(self, verl_vectors: dict[str, Any]) -> None:
        """Every reject is dropped and counted, and the frame right after it still decodes."""
        assert verl_vectors["rejects"]
        after = VerlFrame(0x12, 1, b"\x00ok")
        for case in verl_vectors["rejects"]:
            decoder = FrameDecoder(4096, DAEMON)
            frames = decoder.feed(bytes.fromhex(case["wire_hex"]) + encode_frame(*after))
            assert frames == [after], case["name"]
            assert decoder.bad_frames == 1, case["name"]

    def test_rejects_without_delimiter_between(self, verl_vectors: dict[str, Any]) -> None:
        """A reject whose closing zero is the next frame's only delimiter costs just itself."""
        after = VerlFrame(0x13, 0, b"event")
        for case in verl_vectors["rejects"]:
            decoder = FrameDecoder(4096, DAEMON)
            frames = decoder.feed(bytes.fromhex(case["wire_hex"]) + encode_frame(*after)[1:])
            assert frames == [after], case["name"]
            assert decoder.bad_frames == 1, case["name"]


class TestReceiver:
    def test_stream(self) -> None:
        """A stream of frames decodes to the frames, in order, with nothing counted."""
        decoder = FrameDecoder(MAX, DAEMON)
        assert decoder.feed(STREAM) == FRAMES
        assert decoder.bad_frames == 0

    def test_one_byte_at_a_time(self) -> None:
        """Feeding one byte at a time gives the same frames."""
        decoder = FrameDecoder(MAX, DAEMON)
        assert feed_in_pieces(decoder, STREAM, list(range(len(STREAM)))) == FRAMES
        assert decoder.bad_frames == 0

    @settings(max_examples=100)
    @given(st.lists(st.integers(0, len(STREAM)), max_size=40))
    def test_random_chunks(self, cuts: list[int]) -> None:
        """Feeding the stream in random chunks gives the same frames."""
        decoder = FrameDecoder(MAX, DAEMON)
        assert feed_in_pieces(decoder, STREAM, cuts) == FRAMES
        assert decoder.bad_frames == 0

    @settings(max_examples=100)
    @given(
        st.lists(st.binary(max_size=30), min_size=len(FRAMES) + 1, max_size=len(FRAMES) + 1),
        st.lists(st.integers(0, 2000), max_size=30),
    )
    @example([b"\x01\x02\x03"] * (len(FRAMES) + 1), [])
    @example([b"\x00\x00\x00"] * (len(FRAMES) + 1), [])
    @example([b"\x05\x00\x11\x00\xff\xff"] * (len(FRAMES) + 1), [])
    def test_garbage_between_frames(self, garbage: list[bytes], cuts: list[int]) -> None:
        """Garbage (zero bytes included) around frames loses no frame, however it is chunked."""
        wires = [encode_frame(*frame) for frame in FRAMES]
        stream = garbage[0] + b"".join(
            wire + noise for wire, noise in zip(wires, garbage[1:], strict=True)
        )
        whole = FrameDecoder(MAX, DAEMON)
        pieces = FrameDecoder(MAX, DAEMON)
        assert whole.feed(stream) == FRAMES
        assert feed_in_pieces(pieces, stream, cuts) == FRAMES
        assert pieces.bad_frames == whole.bad_frames
        assert whole.bad_frames <= sum(len(noise.split(b"\x00")) for noise in garbage)

    def test_zero_runs_are_one_delimiter(self) -> None:
        """Runs of zero bytes delimit once; the empty chunks between them are not bad frames."""
        wire = encode_frame(0x12, 3, b"\x00x")
        decoder = FrameDecoder(MAX, DAEMON)
        assert decoder.feed(b"\x00" * 5 + wire + b"\x00" * 7 + wire) == [(0x12, 3, b"\x00x")] * 2
        assert decoder.bad_frames == 0

    def test_leading_delimiter_optional(self) -> None:
        """Bytes before the first zero of a stream are a frame like any other."""
        decoder = FrameDecoder(MAX, DAEMON)
        assert decoder.feed(encode_frame(0x13, 0, b"e")[1:]) == [(0x13, 0, b"e")]

    def test_incomplete_frame_waits(self) -> None:
        """A frame without its closing zero is held until the zero arrives."""
        decoder = FrameDecoder(MAX, DAEMON)
        wire = encode_frame(0x12, 9, b"\x00abc")
        assert decoder.feed(wire[:-1]) == []
        assert decoder.feed(b"\x00") == [(0x12, 9, b"\x00abc")]

    def test_reset_drops_partial_chunk(self) -> None:
        """reset forgets the incomplete chunk without counting it; the counter survives."""
        decoder = FrameDecoder(MAX, DAEMON)
        decoder.feed(b"\x00\x01\x00")  # one bad chunk
        decoder.feed(encode_frame(0x12, 9, b"\x00abc")[:-3])
        decoder.reset()
        assert decoder.feed(encode_frame(0x13, 0, b"ev")) == [(0x13, 0, b"ev")]
        assert decoder.bad_frames == 1

    def test_event_seq_kept_as_sent(self) -> None:
        """An event with a non-zero seq is still an event (its seq means nothing)."""
        decoder = FrameDecoder(MAX, DAEMON)
        assert decoder.feed(encode_frame(0x13, 42, b"e")) == [(0x13, 42, b"e")]

    @pytest.mark.parametrize(
        ("accept", "kind", "payload_size", "ok"),
        [
            (DAEMON, 0x12, MAX + 1, True),  # a reply's status byte is extra
            (DAEMON, 0x12, MAX + 2, False),
            (DAEMON, 0x12, 1, True),
            (DAEMON, 0x12, 0, False),  # a reply needs its status byte
            (DAEMON, 0x13, MAX, True),
            (DAEMON, 0x13, MAX + 1, False),
            (DAEMON, 0x13, 0, True),
            (DEVICE, 0x11, MAX, True),
            (DEVICE, 0x11, MAX + 1, False),
            (DEVICE, 0x11, 0, True),  # a ping
            (DEVICE, 0x12, 1, False),  # a device receives only requests
            (DAEMON, 0x11, 0, False),  # the daemon never receives requests
        ],
    )
    def test_payload_bounds(
        self, accept: frozenset[int], kind: int, payload_size: int, ok: bool
    ) -> None:
        """Payloads are bounded by max_payload (+1 for a reply); wrong kinds are dropped."""
        decoder = FrameDecoder(MAX, accept)
        frame = VerlFrame(kind, 5, b"\x07" * payload_size)
        after = encode_frame(min(accept), 6, b"\x00")
        frames = decoder.feed(encode_frame(*frame) + after)
        assert frames[:-1] == ([frame] if ok else [])
        assert frames[-1] == (min(accept), 6, b"\x00")
        assert decoder.bad_frames == (0 if ok else 1)

    def test_unknown_accept_type(self) -> None:
        """A decoder cannot be asked to accept a type the protocol does not define."""
        with pytest.raises(ValueError, match="0x14"):
            FrameDecoder(MAX, frozenset({0x12, 0x14}))

    def test_encode_rejects_bad_seq(self) -> None:
        """encode_frame refuses a seq outside 0..65535."""
        with pytest.raises(ValueError, match="seq"):
            encode_frame(0x11, 65536, b"")
        with pytest.raises(ValueError, match="seq"):
            encode_frame(0x11, -1, b"")


class TestProperties:
    @settings(max_examples=150)
    @given(
        st.binary(max_size=MAX) | st.sampled_from(RUNS),
        st.integers(0, 0xFFFF),
        st.sampled_from([(0x11, DEVICE, b""), (0x12, DAEMON, b"\x00"), (0x13, DAEMON, b"")]),
    )
    def test_round_trip(
        self, data: bytes, seq: int, case: tuple[int, frozenset[int], bytes]
    ) -> None:
        """decode(encode_frame(...)) gives the frame back for every kind and payload size."""
        kind, accept, status = case
        frame = VerlFrame(kind, seq, status + data)
        decoder = FrameDecoder(MAX, accept)
        wire = encode_frame(*frame)
        assert 0 not in wire[1:-1]
        assert decoder.feed(wire) == [frame]
        assert decoder.bad_frames == 0

    @settings(max_examples=200)
    @given(st.binary(max_size=800), st.lists(st.integers(0, 800), max_size=10))
    @example(b"\x01" * 800, [])
    @example(b"\x01" * 799 + b"\x00", [100, 200])
    def test_arbitrary_bytes_never_raise(self, data: bytes, cuts: list[int]) -> None:
        """Arbitrary bytes never raise; the counter only grows; a frame after them decodes."""
        decoder = FrameDecoder(64, DAEMON)
        counts = [decoder.bad_frames]
        start = 0
        for cut in [*sorted(cuts), len(data)]:
            decoder.feed(data[start:cut])
            counts.append(decoder.bad_frames)
            start = max(start, cut)
        assert counts == sorted(counts)
        assert decoder.feed(encode_frame(0x12, 1, b"\x00"))[-1:] == [(0x12, 1, b"\x00")]

    @settings(max_examples=100)
    @given(st.binary(max_size=400))
    def test_codec_arbitrary_bytes(self, data: bytes) -> None:
        """VerlCodec.feed on arbitrary bytes yields only well-formed replies and events."""
        codec = VerlCodec(64)
        for message in codec.feed(data, awaiting_reply=True):
            assert message.kind in (Kind.REPLY, Kind.EVENT)
            assert len(message.data) <= 64


class TestBufferBound:
    def test_largest_frame_fits(self) -> None:
        """A maximal reply with the longest COBS encoding decodes, even one byte at a time."""
        for max_payload in (64, 245, 246, 247, 500):
            wire = zero_free_reply(max_payload + 1)
            decoder = FrameDecoder(max_payload, DAEMON)
            frames = feed_in_pieces(decoder, wire, list(range(len(wire))))
            assert [len(frame.payload) for frame in frames] == [max_payload + 1], max_payload
            assert decoder.bad_frames == 0

    def test_endless_chunk_dropped(self) -> None:
        """A huge stream without a zero is dropped once and counted; memory stays bounded."""
        decoder = FrameDecoder(64, DAEMON)
        piece = bytes(range(1, 256)) * 16  # 4080 bytes, no zero
        tracemalloc.start()
        try:
            decoder.feed(piece)  # let the first allocations settle
            baseline = tracemalloc.get_traced_memory()[0]
            for _ in range(256):  # about 1 MiB
                assert decoder.feed(piece) == []
            grown = tracemalloc.get_traced_memory()[0] - baseline
        finally:
            tracemalloc.stop()
        assert grown < 2048
        assert decoder.bad_frames == 1
        assert decoder.feed(b"\x00" + encode_frame(0x12, 2, b"\x00")) == [(0x12, 2, b"\x00")]
        assert decoder.bad_frames == 1

    def test_endless_chunk_byte_by_byte(self) -> None:
        """An overlong chunk fed byte by byte is dropped once; the next frame decodes."""
        decoder = FrameDecoder(16, DAEMON)
        for _ in range(500):
            decoder.feed(b"\x42")
        assert decoder.bad_frames == 1
        assert decoder.feed(encode_frame(0x13, 0, b"x")) == [(0x13, 0, b"x")]

    def test_overlong_complete_chunk(self) -> None:
        """An overlong chunk that arrives whole, zeros around it, is dropped and counted once."""
        decoder = FrameDecoder(16, DAEMON)
        assert decoder.feed(b"\x00" + b"\x42" * 1000 + encode_frame(0x13, 0, b"x")) == [
            (0x13, 0, b"x")
        ]
        assert decoder.bad_frames == 1


class TestVerlCodec:
    def test_reply(self) -> None:
        """A reply becomes Inbound(REPLY, seq, status, data)."""
        codec = VerlCodec(MAX)
        messages = codec.feed(encode_frame(0x12, 300, b"\x05abc"), awaiting_reply=False)
        assert messages == [Inbound(Kind.REPLY, 300, 0x05, b"abc")]
        assert messages[0].kind is Kind.REPLY

    def test_event(self) -> None:
        """An event becomes Inbound(EVENT, None, None, payload), whatever is awaited."""
        codec = VerlCodec(MAX)
        messages = codec.feed(encode_frame(0x13, 0, b"\x00ev"), awaiting_reply=True)
        assert messages == [Inbound(Kind.EVENT, None, None, b"\x00ev")]
        assert messages[0].kind is Kind.EVENT

    def test_request_bytes(self) -> None:
        """encode_request is encode_frame with type 0x11 and the given seq."""
        codec = VerlCodec(MAX)
        assert codec.encode_request(258, b"\x00\x01\x00\x00\xff").hex() == (
            "000411010202010106ffab32cc8b00"
        )
        assert codec.encode_request(0, b"") == encode_frame(0x11, 0, b"")

    def test_counters_and_flags(self) -> None:
        """bad_frames mirrors the decoder, desync stays None, the codec is pipelined."""
        codec = VerlCodec(MAX)
        assert codec.pipelined is True
        codec.feed(b"\x00\x01\x02\x00" + encode_frame(0x11, 1, b""), awaiting_reply=True)
        assert codec.bad_frames == 2
        assert codec.desync is None

    def test_reset(self) -> None:
        """reset drops partial input; the next frame decodes alone."""
        codec = VerlCodec(MAX)
        codec.feed(encode_frame(0x12, 1, b"\x00a")[:-4], awaiting_reply=True)
        codec.reset()
        assert codec.feed(encode_frame(0x12, 2, b"\x00b"), awaiting_reply=True) == [
            Inbound(Kind.REPLY, 2, 0, b"b")
        ]
        assert codec.bad_frames == 0


class TestDeviceSide:
    def test_requests_come_out_as_seq_and_payload(self) -> None:
        """The device's decoder turns request frames into (seq, payload), in order."""
        decoder = RequestDecoder(MAX)
        wire = encode_frame(0x11, 7, b"\x01hi") + encode_frame(0x11, 0xFFFF, b"")
        assert decoder.feed(wire) == [(7, b"\x01hi"), (0xFFFF, b"")]

    def test_replies_and_events_are_noise_to_a_device(self) -> None:
        """A reply or event frame sent to the device is dropped and counted, not a request."""
        decoder = RequestDecoder(MAX)
        assert decoder.feed(encode_frame(0x12, 1, b"\x00") + encode_frame(0x13, 0, b"e")) == []
        assert decoder.bad_frames == 2
        assert decoder.oversize == 0

    def test_reset_forgets_a_partial_request(self) -> None:
        """After reset, the rest of a cut request frame is noise and the next one decodes."""
        decoder = RequestDecoder(MAX)
        frame = encode_frame(0x11, 1, b"abc")
        assert decoder.feed(frame[:5]) == []
        decoder.reset()
        assert decoder.feed(frame[5:] + encode_frame(0x11, 2, b"d")) == [(2, b"d")]

    def test_reply_and_event_decode_on_the_host_side(self) -> None:
        """encode_reply / encode_event are what VerlCodec reads as that reply and that event."""
        codec = VerlCodec(MAX)
        wire = encode_reply(300, 0x05, b"abc") + encode_event(b"ev")
        assert codec.feed(wire, awaiting_reply=True) == [
            Inbound(Kind.REPLY, 300, 0x05, b"abc"),
            Inbound(Kind.EVENT, None, None, b"ev"),
        ]


class TestCommandFraming:
    def test_a_request_in_and_its_reply_out_carry_the_seq(self) -> None:
        """A device reads (seq, payload) and its reply is what VerlCodec takes as that seq's."""
        framing = VerlCommandFraming(MAX)
        assert framing.feed(encode_frame(0x11, 9, b"\x01a")) == [PortRequest(9, b"\x01a")]
        wire = framing.reply(9, 0x00, b"a") + framing.event(b"ev")
        assert VerlCodec(MAX).feed(wire, awaiting_reply=True) == [
            Inbound(Kind.REPLY, 9, 0x00, b"a"),
            Inbound(Kind.EVENT, None, None, b"ev"),
        ]

    def test_noise_and_oversize_are_counted_and_skipped(self) -> None:
        """Noise and a request above max_payload are dropped and counted; reading goes on."""
        framing = VerlCommandFraming(8)
        wire = b"\x00junk\x00" + encode_frame(0x11, 1, bytes(9)) + encode_frame(0x11, 2, b"")
        assert framing.feed(wire) == [PortRequest(2, b"")]
        assert framing.bad_frames + framing.oversize == 2

    def test_only_non_zero_bytes_are_damageable(self) -> None:
        """The damageable bytes are the non-zero ones: the zeros delimit the frame."""
        frame = encode_reply(5, 0, bytes(3))
        assert VerlCommandFraming(MAX).damageable(frame) == [i for i, b in enumerate(frame) if b]
