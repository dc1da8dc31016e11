"""The line codec: splitting, CRLF, multi-line replies, events, bounds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from verld.codec.base import Inbound, Kind
from verld.codec.line import LineCodec, LineSplitter

MAX = 32


def split_in_pieces(splitter: LineSplitter, data: bytes, cuts: list[int]) -> list[bytes]:
    """Feed `data` split at `cuts` (offsets); all lines."""
    lines = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        lines += splitter.feed(data[start:cut])
        start = max(start, cut)
    return lines


def session(codec: LineCodec, data: bytes, cuts: list[int]) -> list[Inbound]:
    """Feed `data` in pieces as a session with one call outstanding would."""
    messages: list[Inbound] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        awaiting = not any(message.kind is Kind.REPLY for message in messages)
        messages += codec.feed(data[start:cut], awaiting)
        start = max(start, cut)
    return messages


class TestLineSplitter:
    def test_lines(self) -> None:
        """Complete lines come out without their terminator; the rest waits."""
        splitter = LineSplitter(b"\n", MAX)
        assert splitter.feed(b"one\ntwo\n\nthr") == [b"one", b"two", b""]
        assert splitter.feed(b"ee\n") == [b"three"]

    def test_crlf_stripped(self) -> None:
        """With terminator \\n, a \\r just before it is stripped too (only one)."""
        splitter = LineSplitter(b"\n", MAX)
        assert splitter.feed(b"OK\r\nbare\r\r\nmid\rdle\n") == [b"OK", b"bare\r", b"mid\rdle"]

    def test_cr_kept_for_other_terminators(self) -> None:
        """With another terminator, a \\r is data."""
        splitter = LineSplitter(b";", MAX)
        assert splitter.feed(b"a\r;b;") == [b"a\r", b"b"]

    def test_multibyte_terminator_split_across_feeds(self) -> None:
        """A multi-byte terminator split across feeds still ends the line."""
        splitter = LineSplitter(b"\r\n", MAX)
        assert splitter.feed(b"abc\r") == []
        assert splitter.feed(b"\ndef\r\n") == [b"abc", b"def"]

    def test_overlong_partial_dropped(self) -> None:
        """A line growing past the limit without a terminator is dropped, counted once."""
        splitter = LineSplitter(b"\n", MAX)
        for _ in range(10):
            assert splitter.feed(b"x" * MAX) == []
        assert splitter.bad_frames == 1
        assert splitter.feed(b"tail\nnext\n") == [b"next"]
        assert splitter.bad_frames == 1

    def test_overlong_whole_line_dropped(self) -> None:
        """A complete line over the limit is dropped and counted too."""
        splitter = LineSplitter(b"\n", MAX)
        assert splitter.feed(b"y" * (MAX + 1) + b"\nok\n") == [b"ok"]
        assert splitter.bad_frames == 1

    def test_limit_counts_stripped_line(self) -> None:
        """A line of exactly max_length bytes plus CRLF passes, even byte by byte."""
        data = b"z" * MAX + b"\r\n"
        splitter = LineSplitter(b"\n", MAX)
        assert split_in_pieces(splitter, data, list(range(len(data)))) == [b"z" * MAX]
        assert splitter.bad_frames == 0

    def test_reset(self) -> None:
        """reset forgets the incomplete line and any skipping."""
        splitter = LineSplitter(b"\n", MAX)
        splitter.feed(b"x" * (MAX + 5))
        splitter.reset()
        assert splitter.feed(b"fresh\n") == [b"fresh"]

    @settings(max_examples=150)
    @given(
        st.lists(
            st.sampled_from([b"a", b"\r", b"\n", b"\r\n", b"x" * 10, b"\xff", b"<>", b"!"]),
            max_size=60,
        ).map(b"".join),
        st.lists(st.integers(0, 200), max_size=20),
        st.sampled_from([b"\n", b"\r\n", b";", b"<!<>"]),
    )
    def test_chunking_invariance(self, data: bytes, cuts: list[int], terminator: bytes) -> None:
        """However the stream is chunked, the lines and the drop count are the same."""
        whole = LineSplitter(terminator, 16)
        pieces = LineSplitter(terminator, 16)
        assert split_in_pieces(pieces, data, cuts) == whole.feed(data)
        assert pieces.bad_frames == whole.bad_frames


class TestLineCodec:
    def test_request(self) -> None:
        """A request is its bytes plus the terminator, unless they already end with it."""
        codec = LineCodec(MAX)
        assert codec.encode_request(0, b"*IDN?") == b"*IDN?\n"
        assert codec.encode_request(0, b"AT\n") == b"AT\n"
        assert LineCodec(MAX, terminator="\r\n").encode_request(5, b"AT") == b"AT\r\n"
        assert codec.pipelined is False
        assert codec.desync is None

    def test_single_line_reply(self) -> None:
        """Without `end`, the next line is the reply; later lines in the feed are events."""
        codec = LineCodec(MAX)
        assert codec.feed(b"PONG\r\nlater\r\n", True) == [
            Inbound(Kind.REPLY, None, 0x00, b"PONG", "PONG"),
            Inbound(Kind.EVENT, None, None, b"later", "later"),
        ]

    def test_events_when_not_awaiting(self) -> None:
        """Lines with no call outstanding are events with their bytes and text."""
        codec = LineCodec(MAX)
        assert codec.feed(b"$GPGGA,1\n", False) == [
            Inbound(Kind.EVENT, None, None, b"$GPGGA,1", "$GPGGA,1")
        ]

    def test_multi_line_reply(self) -> None:
        """With `end`, the reply is every line up to and including the first match."""
        codec = LineCodec(MAX, end=r"^(OK|ERROR)$")
        assert codec.feed(b"+CSQ: 20,0\r\n\r\n", True) == []
        assert codec.feed(b"OK\r\nafter\r\n", True) == [
            Inbound(Kind.REPLY, None, 0x00, b"+CSQ: 20,0\n\nOK", "+CSQ: 20,0\n\nOK"),
            Inbound(Kind.EVENT, None, None, b"after", "after"),
        ]

    def test_end_uses_search(self) -> None:
        """`end` is searched anywhere in a line unless it is anchored."""
        codec = LineCodec(MAX, end="OK")
        assert codec.feed(b"a\nall OK here\n", True) == [
            Inbound(Kind.REPLY, None, 0x00, b"a\nall OK here", "a\nall OK here")
        ]

    def test_error_status(self) -> None:
        """A reply with any line matching `error` gets status 0xFF."""
        codec = LineCodec(MAX, end=r"^(OK|ERROR)$", error=r"^(ERROR|\+CME ERROR)")
        [reply] = codec.feed(b"+CME ERROR: 10\r\nOK\r\n", True)
        assert (reply.kind, reply.status, reply.text) == (Kind.REPLY, 0xFF, "+CME ERROR: 10\nOK")
        [reply] = codec.feed(b"ERROR\n", True)
        assert reply.status == 0xFF

    def test_event_lines_interleaved(self) -> None:
        """Lines matching `event` are events even in the middle of a reply."""
        codec = LineCodec(MAX, end="^OK$", event=r"^\+CMTI:")
        assert codec.feed(b"line1\n+CMTI: 3\nOK\n", True) == [
            Inbound(Kind.EVENT, None, None, b"+CMTI: 3", "+CMTI: 3"),
            Inbound(Kind.REPLY, None, 0x00, b"line1\nOK", "line1\nOK"),
        ]

    def test_partial_reply_survives_feeds(self) -> None:
        """A multi-line reply accumulates across feeds while the call is outstanding."""
        codec = LineCodec(MAX, end="^END$")
        assert codec.feed(b"a\n", True) == []
        assert codec.feed(b"b\n", True) == []
        assert codec.feed(b"END\n", True) == [
            Inbound(Kind.REPLY, None, 0, b"a\nb\nEND", "a\nb\nEND")
        ]

    def test_reset_clears_partial_reply(self) -> None:
        """reset forgets lines accumulated for a reply."""
        codec = LineCodec(MAX, end="^END$")
        codec.feed(b"stale\n", True)
        codec.reset()
        assert codec.feed(b"END\n", True) == [Inbound(Kind.REPLY, None, 0, b"END", "END")]

    def test_abandoned_reply_dropped(self) -> None:
        """Once no call is outstanding, a partial reply is forgotten; its lines are not reused."""
        codec = LineCodec(MAX, end="^END$")
        codec.feed(b"stale\n", True)
        assert codec.feed(b"x\n", False) == [Inbound(Kind.EVENT, None, None, b"x", "x")]
        assert codec.feed(b"END\n", True) == [Inbound(Kind.REPLY, None, 0, b"END", "END")]

    def test_overlong_line_dropped(self) -> None:
        """A line longer than max_payload is dropped and counted in bad_frames."""
        codec = LineCodec(MAX)
        assert codec.feed(b"q" * (MAX + 10), True) == []
        assert codec.feed(b"q\nPONG\n", True) == [Inbound(Kind.REPLY, None, 0, b"PONG", "PONG")]
        assert codec.bad_frames == 1

    def test_overlong_reply_dropped(self) -> None:
        """A multi-line reply outgrowing max_payload is dropped through its `end`, counted."""
        codec = LineCodec(MAX, end="^OK$")
        lines = b"".join(b"%02d-45678901234\n" % i for i in range(5))  # 5 x 15 bytes
        assert codec.feed(lines + b"OK\n", True) == []
        assert codec.bad_frames == 1
        assert codec.feed(b"short\nOK\n", True) == [
            Inbound(Kind.REPLY, None, 0, b"short\nOK", "short\nOK")
        ]

    def test_non_utf8_does_not_raise(self) -> None:
        """Undecodable bytes are replaced in text (never raise); data keeps the device's bytes."""
        codec = LineCodec(MAX)
        [reply, event] = codec.feed(b"\xff\xfe ok\n\xc3\n", True)
        assert reply.text == "\ufffd\ufffd ok"
        assert reply.data == b"\xff\xfe ok"
        assert event.data == b"\xc3"
        assert event.text == "\ufffd"
        ascii_codec = LineCodec(MAX, encoding="ascii")
        [reply] = ascii_codec.feed(b"caf\xe9\n", True)
        assert reply.text == "caf\ufffd"

    def test_other_encoding_and_terminator(self) -> None:
        """Lines are decoded with `encoding` and split at `terminator`."""
        codec = LineCodec(MAX, terminator="\r", encoding="latin-1")
        assert codec.feed(b"caf\xe9\r", True) == [Inbound(Kind.REPLY, None, 0, b"caf\xe9", "café")]

    @settings(max_examples=100)
    @given(
        st.lists(
            st.sampled_from([b"+EV 1\n", b"data\r\n", b"OK\n", b"ERROR\n", b"\xff\n", b"y" * 40]),
            max_size=12,
        ).map(b"".join),
        st.lists(st.integers(0, 200), max_size=15),
    )
    def test_chunking_invariance(self, data: bytes, cuts: list[int]) -> None:
        """A session sees the same reply, events and counts however the input is chunked."""
        options = {"end": "^(OK|ERROR)$", "error": "^ERROR$", "event": r"^\+EV"}
        whole = LineCodec(MAX, **options)
        pieces = LineCodec(MAX, **options)
        assert session(pieces, data, cuts) == session(whole, data, [])
        assert pieces.bad_frames == whole.bad_frames


class TestOneLinePerCall:
    def test_requests_with_a_terminator_inside_are_refused(self) -> None:
        """A terminator anywhere but at the end, or a lone CR with `\\n`, is refused."""
        codec = LineCodec(MAX)
        for payload in (b"A\nB", b"A\n\n", b"\nA", b"A\rB", b"\r\rX\n", b"A\r\r\n"):
            assert codec.refuse(payload) is not None, payload

    def test_one_line_requests_pass(self) -> None:
        """One line, with or without its terminator or a CR before it, is one call."""
        codec = LineCodec(MAX)
        for payload in (b"", b"A", b"A\n", b"A\r\n", b"A\r", b"\n", b"\r\n"):
            assert codec.refuse(payload) is None, payload

    def test_other_terminators_keep_cr(self) -> None:
        """With a terminator other than `\\n`, CR is ordinary; the terminator inside is refused."""
        codec = LineCodec(MAX, terminator="\r")
        assert codec.refuse(b"A\nB\r") is None
        assert codec.refuse(b"A\rB") is not None

    @given(st.binary(max_size=40))
    @settings(max_examples=300)
    def test_refused_exactly_when_the_device_would_see_two_lines(self, payload: bytes) -> None:
        """Refused iff the device's splitter finds more than one line in what is sent."""
        codec = LineCodec(1000)
        lines = LineSplitter(b"\n", 1000).feed(codec.encode_request(0, payload))
        two = len(lines) > 1 or any(b"\r" in line for line in lines)
        assert (codec.refuse(payload) is not None) is two
