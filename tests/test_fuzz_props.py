"""Property tests for every link codec, the API framing and the ports' device-side
decoders (issue 6, docs/security.md).

Three properties each: a round trip (frames in garbage come out exactly, the
garbage is counted), arbitrary bytes never raise, and chunking never changes the
result. The last two, with the buffer bounds, are the `check` functions of the
atheris targets in tools/fuzz/, run here under hypothesis; crash inputs the
fuzzers found are regression tests.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from verld import wire
from verld.codec import cobs
from verld.codec.base import Inbound, Kind
from verld.codec.length import LengthCodec, LengthDecoder
from verld.codec.length import encode as length_encode
from verld.codec.line import LineCodec, LineSplitter
from verld.codec.verl import FrameDecoder, VerlCodec, VerlFrame, encode_frame
from verld.errors import ApiError
from verld.fronts.api.ops import OPS

FUZZ_DIR = Path(__file__).resolve().parents[1] / "tools" / "fuzz"
TARGETS = ("api", "verl", "length", "line", "port", "telnet", "frame")
MAX = 64
DAEMON = frozenset({0x12, 0x13})

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def target(name: str) -> ModuleType:
    """One of tools/fuzz/fuzz_NAME.py, imported as a module."""
    if str(FUZZ_DIR) not in sys.path:
        sys.path.insert(0, str(FUZZ_DIR))
    return importlib.import_module(f"fuzz_{name}")


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at the given offsets."""
    out, start = [], 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        out.append(data[start:cut])
        start = cut
    return [*out, data[start:]]


cuts = st.lists(st.integers(0, 10_000), max_size=12)


# --- the fuzz targets' invariants under hypothesis -------------------------------------------
class TestFuzzTargets:
    @pytest.mark.parametrize("name", TARGETS)
    def test_seeds_hold(self, name: str) -> None:
        """Every seed input of every target satisfies its invariants."""
        mod = target(name)
        for seed in mod.seeds():
            mod.check(seed)

    @pytest.mark.parametrize("name", TARGETS)
    @PROPS
    @given(data=st.binary(max_size=700))
    def test_arbitrary_bytes(self, name: str, data: bytes) -> None:
        """Arbitrary bytes: no exception, chunking changes nothing, buffers stay bounded."""
        target(name).check(data)

    @pytest.mark.parametrize("name", TARGETS)
    @PROPS
    @given(st.data())
    def test_mutated_seeds(self, name: str, data: st.DataObject) -> None:
        """Seeds with random bytes spliced in: the same invariants."""
        mod = target(name)
        seed = data.draw(st.sampled_from(mod.seeds()))
        at = data.draw(st.integers(0, len(seed)))
        junk = data.draw(st.binary(max_size=40))
        drop = data.draw(st.integers(0, 8))
        mod.check(seed[:at] + junk + seed[at + drop :])


# --- API framing and request parsing --------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**300), 10**300)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ("data", "text", "timeout", "retry", "wait", "topics", "lines", "client", "seconds")


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A request object: op from OPS (mostly), id of any type, fields of any JSON type."""
    req: dict[str, Any] = {
        "op": draw(st.sampled_from(sorted(OPS)) | json_values),
        "id": draw(st.integers() | st.text() | json_values),
    }
    for key in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        req[key] = draw(
            json_values | st.sampled_from(["AQ==", "events", ["logs", "link"], 1.5, 0, -1, True])
        )
    return req


class TestApi:
    @PROPS
    @given(st.lists(st.binary(max_size=300), max_size=8), cuts)
    def test_round_trip_in_any_chunks(self, bodies: list[bytes], at: list[int]) -> None:
        """Framed bodies come out whole and in order however the stream is cut."""
        stream = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
        decoder = wire.MessageDecoder(300)
        out = [body for piece in pieces(stream, at) for body in decoder.feed(piece)]
        assert (out, decoder.buffered) == (bodies, 0)

    @PROPS
    @given(st.binary(max_size=2000), cuts, st.sampled_from([0, 1, 100, 1 << 20]))
    def test_arbitrary_bytes_only_oversize(self, data: bytes, at: list[int], limit: int) -> None:
        """Any stream: bodies within max_message, or Oversize; one partial message buffered."""
        decoder = wire.MessageDecoder(limit)
        try:
            for piece in pieces(data, at):
                assert all(len(body) <= limit for body in decoder.feed(piece))
                assert decoder.buffered <= limit + 3
        except wire.Oversize as exc:
            assert exc.length > limit

    def test_bodies_before_an_oversize_length_are_kept(self) -> None:
        """Messages completed before an oversize length come with the Oversize (regression)."""
        body = b'{"op":"status","id":1}'
        stream = len(body).to_bytes(4, "big") + body + (1 << 30).to_bytes(4, "big")
        with pytest.raises(wire.Oversize) as info:
            wire.MessageDecoder(1 << 20).feed(stream)
        assert (info.value.bodies, info.value.length) == ([body], 1 << 30)

    @PROPS
    @given(st.binary(max_size=500))
    @example(b'{"op":"call","id":1,"text":"\\udc80"}')
    @example(b"[" * 50_000)
    @example(b'{"id":' + b"9" * 5000 + b',"op":"status"}')
    def test_parse_arbitrary_bytes(self, body: bytes) -> None:
        """Any body: a typed request or ApiError, never another exception."""
        target("api").check_body(body)

    @PROPS
    @given(requests())
    def test_parse_requests_of_every_shape(self, req: dict[str, Any]) -> None:
        """Requests with fields of every JSON type: accessors give typed values or ApiError."""
        target("api").check_body(json.dumps(req).encode())

    @pytest.mark.parametrize("key", ["timeout"])
    def test_huge_integer_timeout_is_bad_request(self, key: str) -> None:
        """A 400-digit integer timeout is a bad_request with its id (regression: OverflowError)."""
        body = b'{"op":"call","id":7,"data":"AQ==","' + key.encode() + b'":1' + b"0" * 400 + b"}"
        with pytest.raises(ApiError) as info:
            wire.call_fields(wire.parse_request(body))
        assert (info.value.code, info.value.req_id) == ("bad_request", 7)

    @PROPS
    @given(json_values, st.text())
    def test_replies_round_trip(self, value: Any, text: str) -> None:
        """Any reply verld encodes (lone surrogates included) decodes to the same object."""
        reply = {"id": text, "ok": True, "value": value}
        (body,) = wire.MessageDecoder(1 << 24).feed(wire.encode(reply))
        assert json.loads(body) == reply


# --- verl --------------------------------------------------------------------------------------
verl_frames = st.builds(
    VerlFrame,
    st.sampled_from([0x12, 0x13]),
    st.integers(0, 0xFFFF),
    st.binary(max_size=MAX),
).filter(lambda f: f.kind == 0x13 or len(f.payload) >= 1)
garbage_chunks = st.binary(min_size=1, max_size=300).filter(lambda b: 0 not in b)


class TestVerl:
    @PROPS
    @given(st.lists(st.tuples(verl_frames, st.lists(garbage_chunks, max_size=2))), cuts)
    def test_frames_in_garbage(
        self, items: list[tuple[VerlFrame, list[bytes]]], at: list[int]
    ) -> None:
        """Frames between garbage chunks come out exactly; each chunk is one bad frame."""
        stream = b"".join(
            b"".join(chunk + b"\x00" for chunk in junk) + encode_frame(*frame)
            for frame, junk in items
        )
        frames = [frame for frame, _ in items]
        decoder = FrameDecoder(MAX, DAEMON)
        out = [f for piece in pieces(stream, at) for f in decoder.feed(piece)]
        assert out == frames
        assert decoder.bad_frames == sum(len(junk) for _, junk in items)

    @PROPS
    @given(st.lists(verl_frames, max_size=6), cuts)
    def test_codec_messages(self, frames: list[VerlFrame], at: list[int]) -> None:
        """VerlCodec turns reply frames into (seq, status, data) and events into data."""
        codec = VerlCodec(MAX)
        stream = b"".join(encode_frame(*f) for f in frames)
        out = [m for piece in pieces(stream, at) for m in codec.feed(piece, True)]
        assert out == [
            Inbound(Kind.REPLY, f.seq, f.payload[0], f.payload[1:])
            if f.kind == 0x12
            else Inbound(Kind.EVENT, None, None, f.payload)
            for f in frames
        ]

    @PROPS
    @given(st.binary(max_size=1000))
    def test_cobs_round_trip(self, data: bytes) -> None:
        """COBS encodes to zero-free bytes that decode back; decode raises only ValueError."""
        assert cobs.decode(cobs.encode(data)) == data
        try:
            cobs.decode(data)
        except ValueError:
            pass


# --- length ------------------------------------------------------------------------------------
class TestLength:
    @PROPS
    @given(st.lists(st.binary(max_size=MAX + 1), max_size=8), cuts)
    def test_round_trip(self, frames: list[bytes], at: list[int]) -> None:
        """Frames up to the limit come out whole in any chunking, and stay in step."""
        stream = b"".join(length_encode(f) for f in frames)
        decoder = LengthDecoder(MAX + 1)
        out = [f for piece in pieces(stream, at) for f in decoder.feed(piece)]
        assert (out, decoder.desync) == (frames, None)

    @PROPS
    @given(st.lists(st.binary(min_size=1, max_size=MAX + 1), min_size=1, max_size=6), cuts)
    def test_first_frame_is_the_reply(self, frames: list[bytes], at: list[int]) -> None:
        """With a call outstanding the first frame is its reply; the rest are events."""
        codec = LengthCodec(MAX)
        awaiting = True
        out: list[Inbound] = []
        for piece in pieces(b"".join(length_encode(f) for f in frames), at):
            got = codec.feed(piece, awaiting)
            awaiting = awaiting and not any(m.kind is Kind.REPLY for m in got)
            out += got
        reply, events = frames[0], [f for f in frames[1:] if len(f) <= MAX]
        assert out[0] == Inbound(Kind.REPLY, None, reply[0], reply[1:])
        assert [m.data for m in out[1:]] == events
        assert codec.bad_frames == len(frames) - 1 - len(events)

    @PROPS
    @given(st.integers(MAX + 2, 2**32 - 1), st.binary(max_size=100))
    def test_length_past_the_limit_desyncs(self, length: int, rest: bytes) -> None:
        """A length above max_payload + 1 sets desync; nothing after it is decoded."""
        codec = LengthCodec(MAX)
        assert codec.feed(length.to_bytes(4, "big") + rest, False) == []
        assert codec.desync is not None
        assert codec.feed(length_encode(b"ok"), False) == []


# --- line --------------------------------------------------------------------------------------
class TestLine:
    @PROPS
    @given(
        st.sampled_from(["\n", "\r\n", ";", "END"]),
        st.lists(st.text(max_size=MAX // 4), max_size=8),
        cuts,
    )
    def test_lines_round_trip(self, term: str, lines: list[str], at: list[int]) -> None:
        """Lines without the terminator (and no trailing CR on \\n) come back exactly."""
        lines = [
            line for line in lines if term not in line and "\n" not in line and "\r" not in line
        ]
        lines = [line for line in lines if not (term == "END" and line.endswith(("E", "EN")))]
        stream = "".join(line + term for line in lines).encode()
        splitter = LineSplitter(term.encode(), MAX)
        out = [line for piece in pieces(stream, at) for line in splitter.feed(piece)]
        assert out == [line.encode() for line in lines if len(line.encode()) <= MAX]
        assert splitter.bad_frames == sum(len(line.encode()) > MAX for line in lines)

    @PROPS
    @given(st.lists(st.sampled_from(["+EV", "a", "b", "OK", "ERROR"]), max_size=10), cuts)
    def test_multi_line_replies(self, lines: list[str], at: list[int]) -> None:
        """With `end`, a reply is every line up to the end line; `event` lines stay events."""
        codec = LineCodec(MAX, end=r"^(OK|ERROR)$", error=r"^ERROR$", event=r"^\+")
        stream = "".join(line + "\n" for line in lines).encode()
        awaiting, out = True, []
        for piece in pieces(stream, at):
            got = codec.feed(piece, awaiting)
            awaiting = awaiting and not any(m.kind is Kind.REPLY for m in got)
            out += got
        expected: list[tuple[int | None, str | None]] = []
        reply: list[str] = []
        awaiting = True
        for line in lines:
            if not awaiting or line.startswith("+"):
                expected.append((None, line))
                continue
            reply.append(line)
            if line in ("OK", "ERROR"):
                expected.append((0xFF if line == "ERROR" else 0, "\n".join(reply)))
                awaiting = False
        assert [(m.status, m.text) for m in out] == expected

    def test_reply_data_is_the_device_bytes(self) -> None:
        """A reply with bytes invalid in its encoding keeps them as data, within max_payload."""
        # Regression, found by fuzz_line: data was the text re-encoded, each undecodable byte a
        # U+FFFD
        # (3 bytes in UTF-8), so data was not the device's and reached 3 × max_payload.
        raw = b"V " + b"\xff" * 24 + b"2"
        codec = LineCodec(32)
        (reply,) = codec.feed(raw + b"\r\n", True)
        assert reply.data == raw and len(reply.data) <= 32
