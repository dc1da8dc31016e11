"""Client-API framing and request validation, by feeding bytes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verld import wire
from verld.errors import ApiError


def frame(obj: object) -> bytes:
    body = json.dumps(obj).encode()
    return len(body).to_bytes(4, "big") + body


class TestDecoder:
    def test_one_byte_at_a_time(self) -> None:
        """Messages fed one byte at a time come out whole and in order."""
        stream = frame({"op": "status", "id": 1}) + frame({"op": "hello", "id": "x"})
        dec = wire.MessageDecoder(1 << 20)
        out = [m for b in stream for m in dec.feed(bytes([b]))]
        assert [json.loads(m)["id"] for m in out] == [1, "x"]
        assert dec.buffered == 0

    def test_oversize_length_raises(self) -> None:
        """A length above max_message is Oversize before any body is buffered."""
        dec = wire.MessageDecoder(100)
        with pytest.raises(wire.Oversize):
            dec.feed((101).to_bytes(4, "big"))

    @settings(max_examples=50, deadline=None)
    @given(st.lists(st.binary(max_size=50), max_size=10), st.data())
    def test_chunking_never_changes_the_result(
        self, bodies: list[bytes], data: st.DataObject
    ) -> None:
        """However the stream is cut, the same bodies come out."""
        stream = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
        dec = wire.MessageDecoder(1 << 20)
        out: list[bytes] = []
        prev = 0
        for cut in [*cuts, len(stream)]:
            out += dec.feed(stream[prev:cut])
            prev = cut
        assert out == bodies

    def test_encode_round_trips(self) -> None:
        """encode() frames compact JSON that the decoder gives back."""
        msg = {"id": 1, "ok": True, "text": "héllo \ud800"}
        (body,) = wire.MessageDecoder(1 << 20).feed(wire.encode(msg))
        assert json.loads(body) == msg


class TestParseRequest:
    @pytest.mark.parametrize(
        "body",
        [
            b"\xff\xfe",
            b"not json",
            b"[1,2]",
            b"42",
            b'{"id": NaN, "op": "status"}',
            b"[" * 100000 + b"]" * 100000,
            b'{"id": 1' + b"9" * 5000 + b', "op": "x"}',
        ],
    )
    def test_unparseable_is_bad_request_with_null_id(self, body: bytes) -> None:
        """Bad UTF-8, bad JSON, non-objects, NaN, deep nesting, huge ints → bad_request, id null."""
        with pytest.raises(ApiError) as info:
            wire.parse_request(body)
        assert info.value.code == "bad_request"
        assert info.value.req_id is None

    @pytest.mark.parametrize("req_id", [True, 1.5, None, [1], {"a": 1}])
    def test_unusable_id(self, req_id: object) -> None:
        """An id that is not an integer or a string gets bad_request with id null."""
        with pytest.raises(ApiError) as info:
            wire.parse_request(json.dumps({"op": "status", "id": req_id}).encode())
        assert (info.value.code, info.value.req_id) == ("bad_request", None)

    def test_op_names_are_the_fronts_table(self) -> None:
        """The envelope parser leaves which ops exist to the API front's table."""
        req = wire.parse_request(b'{"op": "frobnicate", "id": 7}')
        assert (req.op, req.id) == ("frobnicate", 7)


class TestCallFields:
    def req(self, **fields: object) -> wire.Request:
        return wire.Request("call", 1, {"op": "call", "id": 1, **fields})

    def test_data_is_strict_base64(self) -> None:
        """data decodes as standard base64; anything else is bad_request."""
        assert wire.call_fields(self.req(data="AaoA"))[0] == b"\x01\xaa\x00"
        with pytest.raises(ApiError):
            wire.call_fields(self.req(data="AA=A"))

    def test_data_alone_gets_the_defaults(self) -> None:
        """A call of data alone (the usual form): no timeout, retry or wait of its own."""
        assert wire.call_fields(self.req(data="AaoA")) == (b"\x01\xaa\x00", None, None, False, None)
        assert wire.call_fields(self.req(data="AaoA", wait=True))[3] is True

    def test_text_is_sent_as_utf8(self) -> None:
        """text is sent as its UTF-8 bytes."""
        assert wire.call_fields(self.req(text="é"))[0] == "é".encode()

    @pytest.mark.parametrize(
        "fields",
        [
            {},
            {"data": "AA==", "text": "x"},
            {"data": 5},
            {"data": None},
            {"data": "é"},
            {"data": "AA=A"},
            {"text": None, "data": None},
            {"data": "", "timeout": 0},
            {"data": "", "timeout": True},
            {"data": "", "timeout": "1"},
            {"data": "", "retry": -1},
            {"data": "", "retry": 1.0},
            {"data": "", "retry": 101},
            {"data": "", "wait": 1},
            {"text": "\ud800"},
        ],
    )
    def test_malformed_fields_are_bad_request(self, fields: dict[str, object]) -> None:
        """Missing or doubled data, wrong types and bad values are all bad_request."""
        with pytest.raises(ApiError) as info:
            wire.call_fields(self.req(**fields))
        assert info.value.code == "bad_request"

    def test_unknown_topic_is_bad_request(self) -> None:
        """Subscribing to a topic that does not exist is bad_request."""
        req = wire.Request("subscribe", 1, {"topics": ["events", "nope"]})
        with pytest.raises(ApiError):
            wire.topics_field(req, required=True)


class TestFastReply:
    @pytest.mark.parametrize("req_id", [0, -5, 2**70, "x", 'q"u\\o\u00e9\ud800', ""])
    @pytest.mark.parametrize("data", [b"", b"\x00\xff" * 40])
    def test_matches_the_generic_encoder(self, req_id: int | str, data: bytes) -> None:
        """ok_call_reply makes exactly the bytes encode() makes of the same reply."""
        fast = wire.ok_call_reply(req_id, 0, data, 0.123456, 3)
        slow = wire.encode(
            {
                "id": req_id,
                "ok": True,
                "status": 0,
                "data": wire.b64(data),
                "ms": 0.123,
                "generation": 3,
            }
        )
        assert fast == slow

    @pytest.mark.parametrize("ms", [0.0, 0.41, 1.0, 0.0005, 0.1234999, 3600000.0])
    def test_ms_has_three_decimals_and_the_same_value(self, ms: float) -> None:
        """`ms` is written with three decimals: the value a client parses is round(ms, 3)."""
        framed = wire.ok_call_reply(7, 0, b"x", ms, 1)
        assert int.from_bytes(framed[:4], "big") == len(framed) - 4
        body = framed[4:]
        reply = json.loads(body)
        assert list(reply) == ["id", "ok", "status", "data", "ms", "generation"]
        assert reply["ms"] == pytest.approx(round(ms, 3), abs=1e-9)
        assert b'"ms":%.3f,' % ms in body
