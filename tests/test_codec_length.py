"""The length codec: framing, reply/event classification, desync."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from verld.codec.base import Inbound, Kind, PortRequest
from verld.codec.length import LengthCodec, LengthCommandFraming, LengthDecoder, encode

MAX = 64


class TestEncode:
    def test_prefix(self) -> None:
        """A frame is the payload's length as u32 big-endian, then the payload."""
        assert encode(b"\x01\x02\x03") == b"\x00\x00\x00\x03\x01\x02\x03"
        assert encode(b"") == b"\x00\x00\x00\x00"
        assert encode(b"x" * 300)[:4] == b"\x00\x00\x01\x2c"


class TestLengthDecoder:
    @settings(max_examples=100)
    @given(
        st.lists(st.binary(max_size=MAX), max_size=8),
        st.lists(st.integers(0, 8 * (MAX + 4)), max_size=20),
    )
    def test_round_trip_any_chunking(self, payloads: list[bytes], cuts: list[int]) -> None:
        """Frames come back whole and in order however the stream is chunked."""
        stream = b"".join(encode(payload) for payload in payloads)
        decoder = LengthDecoder(MAX)
        frames = []
        start = 0
        for cut in [*sorted(cuts), len(stream)]:
            frames += decoder.feed(stream[start:cut])
            start = max(start, cut)
        assert frames == payloads
        assert decoder.desync is None

    def test_one_byte_at_a_time(self) -> None:
        """A frame fed one byte at a time completes with its last byte."""
        decoder = LengthDecoder(MAX)
        stream = encode(b"hello")
        assert [decoder.feed(stream[i : i + 1]) for i in range(len(stream))][-2:] == [
            [],
            [b"hello"],
        ]

    def test_max_length_accepted(self) -> None:
        """A frame of exactly max_length bytes is accepted."""
        assert LengthDecoder(MAX).feed(encode(b"m" * MAX)) == [b"m" * MAX]

    def test_desync_on_oversize_length(self) -> None:
        """A length above max_length sets desync; frames before it are kept, later ones are not."""
        decoder = LengthDecoder(MAX)
        frames = decoder.feed(encode(b"ok") + encode(b"x" * (MAX + 1)) + encode(b"late"))
        assert frames == [b"ok"]
        assert decoder.desync == f"length {MAX + 1} exceeds {MAX}"
        assert decoder.feed(encode(b"later")) == []

    def test_desync_from_header_alone(self) -> None:
        """The bad length is caught from its header, before any of its body arrives."""
        decoder = LengthDecoder(MAX)
        assert decoder.feed(b"\xff\xff\xff\xff") == []
        assert decoder.desync is not None

    def test_reset_clears_desync(self) -> None:
        """reset clears desync and partial input; decoding starts afresh."""
        decoder = LengthDecoder(MAX)
        decoder.feed(b"\x00\x01\x00\x00")
        decoder.reset()
        assert decoder.desync is None
        decoder.feed(encode(b"part")[:5])
        decoder.reset()
        assert decoder.feed(encode(b"fresh")) == [b"fresh"]


class TestLengthCodec:
    def test_request(self) -> None:
        """A request is the length-prefixed payload; the seq is ignored."""
        codec = LengthCodec(MAX)
        assert codec.encode_request(1234, b"\x01ab") == encode(b"\x01ab")
        assert codec.encode_request(0, b"") == b"\x00\x00\x00\x00"
        assert codec.pipelined is False

    def test_reply_then_events(self) -> None:
        """While awaiting, the first frame is the reply and the rest of the feed are events."""
        codec = LengthCodec(MAX)
        messages = codec.feed(encode(b"\x00data") + encode(b"ev1") + encode(b""), True)
        assert messages == [
            Inbound(Kind.REPLY, None, 0x00, b"data"),
            Inbound(Kind.EVENT, None, None, b"ev1"),
            Inbound(Kind.EVENT, None, None, b""),
        ]

    def test_reply_status(self) -> None:
        """The reply's first byte is its status, the rest its data."""
        codec = LengthCodec(MAX)
        assert codec.feed(encode(b"\xff"), True) == [Inbound(Kind.REPLY, None, 0xFF, b"")]

    def test_events_when_not_awaiting(self) -> None:
        """With no call outstanding every frame is an event."""
        codec = LengthCodec(MAX)
        messages = codec.feed(encode(b"\x00a") + encode(b"\x01b"), False)
        assert [message.kind for message in messages] == [Kind.EVENT, Kind.EVENT]
        assert [message.data for message in messages] == [b"\x00a", b"\x01b"]

    def test_reply_across_feeds(self) -> None:
        """A reply split over several feeds is still the reply."""
        codec = LengthCodec(MAX)
        stream = encode(b"\x00" + b"r" * MAX)
        assert codec.feed(stream[:3], True) == []
        assert codec.feed(stream[3:], True) == [Inbound(Kind.REPLY, None, 0, b"r" * MAX)]

    def test_desync_on_oversize_length(self) -> None:
        """A length above max_payload + 1 sets desync with its reason; nothing more is decoded."""
        codec = LengthCodec(MAX)
        assert codec.feed(encode(b"\x00" + b"r" * MAX), True)  # max_payload + 1: fine
        assert codec.feed(encode(b"x" * (MAX + 2)) + encode(b"e"), False) == []
        assert codec.desync == f"length {MAX + 2} exceeds max_payload+1"
        assert codec.feed(encode(b"e"), False) == []

    def test_desync_on_empty_reply(self) -> None:
        """An empty frame while a reply is awaited sets desync "empty reply"."""
        codec = LengthCodec(MAX)
        assert codec.feed(encode(b"") + encode(b"\x00ok"), True) == []
        assert codec.desync == "empty reply"
        assert codec.feed(encode(b"\x00ok"), True) == []

    def test_reset_clears_desync(self) -> None:
        """reset clears desync and partial input; the next reply decodes."""
        codec = LengthCodec(MAX)
        codec.feed(b"\x7f\x00\x00\x00", True)
        before = codec.desync
        codec.reset()
        assert (before, codec.desync) == (f"length {0x7F000000} exceeds max_payload+1", None)
        assert codec.feed(encode(b"\x00ok"), True) == [Inbound(Kind.REPLY, None, 0, b"ok")]

    def test_oversize_event_dropped(self) -> None:
        """An event of max_payload + 1 bytes is dropped and counted; the stream stays in step."""
        codec = LengthCodec(MAX)
        messages = codec.feed(encode(b"e" * (MAX + 1)) + encode(b"e" * MAX), False)
        assert messages == [Inbound(Kind.EVENT, None, None, b"e" * MAX)]
        assert codec.bad_frames == 1
        assert codec.desync is None


class TestCommandFraming:
    def test_an_oversize_request_is_read_whole_and_passed_on(self) -> None:
        """A device reads a request above max_payload (up to 2x + 64) whole: it refuses it."""
        framing = LengthCommandFraming(MAX)
        assert framing.feed(encode(bytes(MAX + 1))) == [PortRequest(None, bytes(MAX + 1))]
        assert (framing.bad_frames, framing.oversize) == (0, 0)

    def test_an_impossible_length_is_noise_and_reading_goes_on(self) -> None:
        """A length beyond 2 x max_payload + 64 drops the stream, counts a bad frame, reads on."""
        framing = LengthCommandFraming(MAX)
        assert framing.feed((2 * MAX + 65).to_bytes(4, "big")) == []
        assert framing.feed(encode(b"\x01")) == [PortRequest(None, b"\x01")]
        assert framing.bad_frames == 1

    def test_reply_is_length_status_data_and_damage_spares_the_prefix(self) -> None:
        """A reply is length + status + data; only bytes after the prefix are damageable."""
        framing = LengthCommandFraming(MAX)
        reply = framing.reply(None, 0xFE, b"no")
        assert reply == encode(b"\xfeno")
        assert framing.damageable(reply) == [4, 5, 6]
