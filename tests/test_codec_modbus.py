"""The modbus-rtu and modbus-tcp codecs: CRC, framing, reply matching, resync, desync."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verld.codec.base import Inbound, Kind, LinkCodec
from verld.codec.modbus import (
    ModbusRtuCodec,
    ModbusTcpCodec,
    RtuRequestScanner,
    check_request,
    crc16,
    mbap_frame,
    rtu_frame,
    rtu_misframed,
    rtu_request_length,
    rtu_response_length,
)
from verld.codec.modbus.pdu import response_shape

MAX = 4096
VECTORS = Path(__file__).resolve().parent / "vectors" / "modbus-frames.json"


def _load() -> dict[str, Any]:
    vectors: dict[str, Any] = json.loads(VECTORS.read_text())
    return vectors


V = _load()  # module level: the tables below parametrize on it


@pytest.fixture(scope="module")
def modbus_vectors() -> dict[str, Any]:
    """tests/vectors/modbus-frames.json."""
    return V


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [case["name"] for case in cases]


def rtu_exchange(request: bytes) -> ModbusRtuCodec:
    """An RTU codec with `request` (unit + PDU) sent."""
    codec = ModbusRtuCodec(MAX)
    codec.encode_request(0, request)
    return codec


def rtu_feed(codec: ModbusRtuCodec, stream: bytes, *, bytewise: bool, flush: bool) -> list[Inbound]:
    messages: list[Inbound] = []
    if bytewise:
        for i in range(len(stream)):
            messages += codec.feed(stream[i : i + 1], True)
    else:
        messages += codec.feed(stream, True)
    if flush:
        messages += codec.flush()
    return messages


def test_protocol() -> None:
    """Both codecs have what the session needs."""
    codecs: list[LinkCodec] = [ModbusRtuCodec(MAX), ModbusTcpCodec(MAX)]
    assert [codec.pipelined for codec in codecs] == [False, True]
    assert all(codec.bad_frames == 0 and codec.desync is None for codec in codecs)


class TestCrc:
    @pytest.mark.parametrize("case", V["crc"], ids=[c["data"] or "empty" for c in V["crc"]])
    def test_vector(self, case: dict[str, Any]) -> None:
        """crc16 gives the check value; rtu_frame appends it low byte first."""
        data = h(case["data"])
        assert crc16(data) == int(case["crc"], 16)
        assert rtu_frame(data)[len(data) :] == h(case["wire"])

    def test_standard_example(self) -> None:
        """crc16 gives the standard check values and rtu_frame appends the CRC low byte first."""
        assert crc16(b"\x01\x03\x00\x00\x00\x0a") == 0xCDC5
        assert rtu_frame(h("01 03 00 00 00 0a")) == h("01 03 00 00 00 0a c5 cd")
        assert crc16(b"123456789") == 0x4B37  # the catalogue check value

    @given(st.binary(max_size=300))
    def test_bitwise_reference(self, data: bytes) -> None:
        """The table matches a bit-at-a-time CRC-16/MODBUS; a frame's CRC over all of it is 0."""
        crc = 0xFFFF
        for byte in data:
            crc ^= byte
            for _ in range(8):
                crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        assert crc16(data) == crc
        assert crc16(rtu_frame(data)) == 0


class TestCheckRequest:
    def test_valid(self) -> None:
        """Well-formed RTU and TCP requests, a 253-byte PDU included, pass check_request."""
        assert check_request(h("01 03 00 00 00 0a"), rtu=True) is None
        assert check_request(b"\xf7\x11", rtu=True) is None
        assert check_request(b"\xff\x03" + bytes(252), rtu=False) is None  # PDU of 253

    @pytest.mark.parametrize(
        ("payload", "rtu", "reason"),
        [
            (b"", True, "needs a unit id"),
            (b"\x01", False, "needs a unit id"),
            (b"\x01\x03" + bytes(253), False, "PDU of 254 bytes exceeds 253"),
            (b"\xf8\x03\x00\x00\x00\x01", True, "unit 248 is not in 0..247"),
            (b"\x01\x00", False, "function code 0"),
            (b"\x01\x83\x02", True, "function code 131"),
        ],
    )
    def test_invalid(self, payload: bytes, rtu: bool, reason: str) -> None:
        """check_request names why a request is invalid: no unit, long PDU, bad unit or function."""
        found = check_request(payload, rtu=rtu)
        assert found is not None
        assert reason in found

    def test_encode_rejects_invalid(self) -> None:
        """Both codecs' encode_request raise ValueError naming why a request is invalid."""
        with pytest.raises(ValueError, match="unit 248"):
            ModbusRtuCodec(MAX).encode_request(0, b"\xf8\x03\x00\x00\x00\x01")
        with pytest.raises(ValueError, match="needs a unit id"):
            ModbusTcpCodec(MAX).encode_request(1, b"\x01")


class TestRtuLengths:
    @pytest.mark.parametrize("case", V["rtu"]["requests"], ids=_ids(V["rtu"]["requests"]))
    def test_request_length(self, case: dict[str, Any]) -> None:
        """rtu_request_length gives each vector request's length from its head; None before."""
        frame = h(case["frame"])
        fc = frame[1]
        assert rtu_request_length(frame) == len(frame)
        assert rtu_request_length(frame[:1]) is None
        needed = {0x0F: 7, 0x10: 7, 0x17: 11, 0x14: 3, 0x15: 3}.get(fc, 2)
        assert rtu_request_length(frame[: needed - 1]) is None
        assert rtu_request_length(frame[:needed]) == len(frame)

    def test_request_length_unknown(self) -> None:
        """rtu_request_length is None for requests whose length their bytes do not tell."""
        assert rtu_request_length(h("01 2b 0e 01 00")) is None
        assert rtu_request_length(h("01 83 02 c0 f1")) is None

    @pytest.mark.parametrize("case", V["rtu"]["responses"], ids=_ids(V["rtu"]["responses"]))
    def test_response_length(self, case: dict[str, Any]) -> None:
        """rtu_response_length is each vector's frame length, or None where only silence ends it."""
        frame = h(case["frame"])
        assert rtu_response_length(frame) == (None if case["flush"] else len(frame))


class TestRtuCodec:
    @pytest.mark.parametrize("case", V["rtu"]["requests"], ids=_ids(V["rtu"]["requests"]))
    def test_encode(self, case: dict[str, Any]) -> None:
        """A request is unit + PDU + CRC, byte for byte; the seq is ignored."""
        codec = ModbusRtuCodec(MAX)
        assert codec.encode_request(77, h(case["unit_pdu"])) == h(case["frame"])
        assert rtu_frame(h(case["unit_pdu"])) == h(case["frame"])

    @pytest.mark.parametrize("bytewise", [False, True])
    @pytest.mark.parametrize("case", V["rtu"]["responses"], ids=_ids(V["rtu"]["responses"]))
    def test_decode(self, case: dict[str, Any], bytewise: bool) -> None:
        """Each vector response decodes to its reply, whole or one byte at a time."""
        codec = rtu_exchange(h(case["request"]))
        messages = rtu_feed(codec, h(case["frame"]), bytewise=bytewise, flush=False)
        if case["flush"]:  # unknown length: only silence ends it
            assert messages == []
            messages = codec.flush()
        assert messages == [Inbound(Kind.REPLY, None, case["status"], h(case["data"]))]
        assert codec.bad_frames == 0
        assert codec.flush() == []

    @pytest.mark.parametrize("case", V["rtu"]["rejects"], ids=_ids(V["rtu"]["rejects"]))
    def test_reject(self, case: dict[str, Any]) -> None:
        """Each reject is dropped and counted once; a good reply after it still decodes."""
        request = h(case["request"])
        codec = rtu_exchange(request)
        assert rtu_feed(codec, h(case["frame"]), bytewise=False, flush=True) == []
        assert codec.bad_frames == 1
        assert codec.desync is None
        count = 2 * (request[4] << 8 | request[5])  # (the byte count must fit the request)
        good = rtu_frame(request[:2] + bytes([count]) + bytes(count)) if request[1] == 3 else None
        if good is not None:
            assert codec.feed(good, True) == [Inbound(Kind.REPLY, None, 0, good[:-2])]

    def test_reject_bytewise(self, modbus_vectors: dict[str, Any]) -> None:
        """Rejects fed one byte at a time are dropped too."""
        for case in modbus_vectors["rtu"]["rejects"]:
            codec = rtu_exchange(h(case["request"]))
            assert rtu_feed(codec, h(case["frame"]), bytewise=True, flush=True) == [], case["name"]
            assert codec.bad_frames == 1, case["name"]

    def test_garbage_around_frame(self) -> None:
        """Noise before the reply is skipped (one bad frame); noise after it is dropped."""
        reply = rtu_frame(h("01 03 04 00 0a 01 02"))
        noise = h("ff 00 01 03 ff 01 02 99 01 83")  # holds false starts: unit 01, fc 03/83
        for bytewise in (False, True):
            codec = rtu_exchange(h("01 03 00 00 00 02"))
            messages = rtu_feed(codec, noise + reply + b"\x55\x01", bytewise=bytewise, flush=True)
            assert messages == [Inbound(Kind.REPLY, None, 0, reply[:-2])]
            assert codec.bad_frames == 2  # the run before the reply, the run after it

    def test_false_start_longer_than_reply(self) -> None:
        """A false start claiming more bytes than come is dropped at silence; the reply is found."""
        reply = rtu_frame(h("01 03 02 00 0a"))
        codec = rtu_exchange(h("01 03 00 00 00 01"))
        stream = h("01 03 40") + reply  # says 64 data bytes follow
        assert codec.feed(stream, True) == []
        assert codec.flush() == [Inbound(Kind.REPLY, None, 0, reply[:-2])]
        assert codec.bad_frames == 1

    def test_not_awaiting(self) -> None:
        """Input with no call outstanding is dropped and counted, once per quiet period."""
        codec = ModbusRtuCodec(MAX)
        reply = rtu_frame(h("01 03 02 00 0a"))
        assert codec.feed(reply, True) == []  # no request was sent
        codec.encode_request(0, h("01 03 00 00 00 01"))
        assert codec.feed(reply[:3], False) == []
        assert codec.feed(reply[3:], False) == []
        assert codec.flush() == []
        assert codec.bad_frames == 2

    def test_one_call_at_a_time(self) -> None:
        """After the reply, a second copy of it is noise until the next request."""
        codec = rtu_exchange(h("01 03 00 00 00 01"))
        reply = rtu_frame(h("01 03 02 00 0a"))
        assert codec.feed(reply + reply, True) == [Inbound(Kind.REPLY, None, 0, reply[:-2])]
        assert codec.feed(reply, True) == []
        assert codec.bad_frames == 1
        codec.encode_request(0, h("01 03 00 00 00 01"))
        assert codec.feed(reply, True) == [Inbound(Kind.REPLY, None, 0, reply[:-2])]

    def test_partial_dropped_by_next_request(self) -> None:
        """Bytes left over when the next call is sent are dropped and counted."""
        codec = rtu_exchange(h("01 03 00 00 00 01"))
        assert codec.feed(h("01 03 02"), True) == []
        codec.encode_request(0, h("01 06 00 01 00 03"))
        assert codec.bad_frames == 1
        echo = rtu_frame(h("01 06 00 01 00 03"))
        assert codec.feed(echo, True) == [Inbound(Kind.REPLY, None, 0, echo[:-2])]

    def test_reset(self) -> None:
        """reset forgets partial input and the pending call."""
        codec = rtu_exchange(h("01 03 00 00 00 01"))
        reply = rtu_frame(h("01 03 02 00 0a"))
        codec.feed(reply[:4], True)
        codec.reset()
        assert codec.feed(reply, True) == []  # nothing pending any more
        codec.encode_request(0, h("01 03 00 00 00 01"))
        assert codec.feed(reply, True) == [Inbound(Kind.REPLY, None, 0, reply[:-2])]

    def test_unknown_length_overlong(self) -> None:
        """An unknown-length response cannot exceed 256 bytes: longer input is noise."""
        codec = rtu_exchange(h("01 2b 0e 01 00"))
        assert codec.feed(h("01 2b") + bytes(300), True) == []
        assert codec.flush() == []
        assert codec.bad_frames == 1

    def test_oversize_for_max_payload(self) -> None:
        """A reply longer than max_payload is dropped."""
        codec = ModbusRtuCodec(4)
        codec.encode_request(0, h("01 03 00 00 00 02"))
        assert codec.feed(rtu_frame(h("01 03 04 00 0a 01 02")), True) == []
        assert codec.flush() == []
        assert codec.bad_frames == 1


class TestTcpCodec:
    @pytest.mark.parametrize("case", V["tcp"]["requests"], ids=_ids(V["tcp"]["requests"]))
    def test_encode(self, case: dict[str, Any]) -> None:
        """A request is the MBAP header (tid = seq) + unit + PDU, byte for byte."""
        payload = h(case["unit_pdu"])
        assert ModbusTcpCodec(MAX).encode_request(case["tid"], payload) == h(case["frame"])
        assert mbap_frame(case["tid"], payload) == h(case["frame"])

    def test_encode_bad_tid(self) -> None:
        """ModbusTcpCodec refuses a transaction id above 65535 with ValueError."""
        with pytest.raises(ValueError, match="transaction id"):
            ModbusTcpCodec(MAX).encode_request(65536, h("01 03 00 00 00 01"))

    @pytest.mark.parametrize("bytewise", [False, True])
    @pytest.mark.parametrize("case", V["tcp"]["responses"], ids=_ids(V["tcp"]["responses"]))
    def test_decode(self, case: dict[str, Any], bytewise: bool) -> None:
        """Each vector's MBAP response decodes to its reply, whole or bytewise, no bad frame."""
        codec = ModbusTcpCodec(MAX)
        codec.encode_request(case["tid"], h(case["request"]))
        frame = h(case["frame"])
        messages: list[Inbound] = []
        chunks = [frame[i : i + 1] for i in range(len(frame))] if bytewise else [frame]
        for chunk in chunks:
            messages += codec.feed(chunk, False)
        assert messages == [Inbound(Kind.REPLY, case["seq"], case["status"], h(case["data"]))]
        assert (codec.bad_frames, codec.desync) == (0, None)

    @pytest.mark.parametrize("case", V["tcp"]["rejects"], ids=_ids(V["tcp"]["rejects"]))
    def test_reject(self, case: dict[str, Any]) -> None:
        """Each reject is counted; a bad MBAP header also sets desync until reset."""
        codec = ModbusTcpCodec(MAX)
        codec.encode_request(case["tid"], h(case["request"]))
        good = mbap_frame(case["tid"], h("01 03 02 00 07"))
        assert codec.feed(h(case["frame"]), True) == []
        assert codec.bad_frames == 1
        assert (codec.desync is not None) == case["desync"]
        if case["desync"]:
            assert codec.feed(good, True) == []
            codec.reset()
            assert codec.desync is None
            codec.encode_request(case["tid"], h(case["request"]))
        assert codec.feed(good, True) == [Inbound(Kind.REPLY, case["tid"], 0, good[6:])]

    def test_pipelined_out_of_order(self) -> None:
        """Several transactions outstanding; replies matched by tid in any order."""
        codec = ModbusTcpCodec(MAX)
        codec.encode_request(1, h("01 03 00 00 00 01"))
        codec.encode_request(2, h("02 06 00 01 00 03"))
        codec.encode_request(3, h("01 03 00 00 00 01"))
        stream = (
            mbap_frame(2, h("02 06 00 01 00 03"))
            + mbap_frame(3, h("01 83 02"))
            + mbap_frame(1, h("01 03 02 00 0a"))
        )
        assert codec.feed(stream, True) == [
            Inbound(Kind.REPLY, 2, 0, h("02 06 00 01 00 03")),
            Inbound(Kind.REPLY, 3, 2, h("01 83 02")),
            Inbound(Kind.REPLY, 1, 0, h("01 03 02 00 0a")),
        ]
        # answered: a repeat of tid 1 is unknown now, so it is passed up (the session counts stale)
        assert codec.feed(mbap_frame(1, h("09 41 00")), True) == [
            Inbound(Kind.REPLY, 1, 0, h("09 41 00"))
        ]

    def test_wrong_unit_keeps_pending(self) -> None:
        """A mismatched reply is dropped; the right one for the same tid still matches."""
        codec = ModbusTcpCodec(MAX)
        codec.encode_request(5, h("01 03 00 00 00 01"))
        stream = mbap_frame(5, h("02 03 02 00 0a")) + mbap_frame(5, h("01 03 02 00 0a"))
        assert codec.feed(stream, True) == [Inbound(Kind.REPLY, 5, 0, h("01 03 02 00 0a"))]
        assert codec.bad_frames == 1


# --- properties: a simulated device answers with a well-formed reply for its function code ---

_COUNTED = [0x01, 0x02, 0x03, 0x04, 0x0C, 0x11, 0x14, 0x15, 0x17]


@st.composite
def replies(draw: st.DrawFn) -> tuple[bytes, bytes, bool]:
    """(request unit + PDU, reply unit + PDU, needs flush)."""
    unit = draw(st.integers(0, 247))
    kind = draw(st.sampled_from(["counted", "fixed", "mask", "fifo", "exception", "unknown"]))
    flush = False
    if kind == "counted":
        fc = draw(st.sampled_from(_COUNTED))
        values = draw(st.binary(max_size=251))
        pdu = bytes((fc, len(values))) + values
    elif kind == "fixed":
        fc = draw(st.sampled_from([0x05, 0x06, 0x0F, 0x10]))
        pdu = bytes((fc,)) + draw(st.binary(min_size=4, max_size=4))
    elif kind == "mask":
        fc = 0x16
        pdu = b"\x16" + draw(st.binary(min_size=6, max_size=6))
    elif kind == "fifo":
        fc = 0x18
        values = draw(st.binary(max_size=250))
        pdu = b"\x18" + len(values).to_bytes(2, "big") + values
    elif kind == "exception":
        fc = draw(st.integers(1, 0x7F))
        pdu = bytes((fc | 0x80, draw(st.integers(1, 255))))
    else:
        known = {*_COUNTED, 0x05, 0x06, 0x0F, 0x10, 0x16, 0x18}
        fc = draw(st.integers(1, 0x7F).filter(lambda x: x not in known))
        pdu = bytes((fc,)) + draw(st.binary(max_size=252))
        flush = True
    return bytes((unit, fc)), bytes((unit,)) + pdu, flush


def _chunks(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300)
@given(replies(), st.lists(st.integers(0, 300), max_size=6))
def test_rtu_round_trip(reply: tuple[bytes, bytes, bool], cuts: list[int]) -> None:
    """Any well-formed reply round-trips through the RTU device encoder and the codec."""
    request, unit_pdu, flush = reply
    codec = ModbusRtuCodec(MAX)
    codec.encode_request(0, request)
    messages: list[Inbound] = []
    for chunk in _chunks(rtu_frame(unit_pdu), cuts):
        messages += codec.feed(chunk, True)
    if flush:
        assert messages == []  # unknown length: only silence ends it
    messages += codec.flush()
    status = unit_pdu[2] if unit_pdu[1] & 0x80 else 0
    assert messages == [Inbound(Kind.REPLY, None, status, unit_pdu)]
    assert codec.bad_frames == 0


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(st.integers(0, 255), st.integers(1, 0x7F), st.binary(max_size=252)), max_size=6
    ),
    st.lists(st.integers(0, 2000), max_size=8),
)
def test_tcp_round_trip(calls: list[tuple[int, int, bytes]], cuts: list[int]) -> None:
    """Any unit + PDU round-trips through the MBAP device encoder and the codec, in order."""
    codec = ModbusTcpCodec(MAX)
    expected = []
    stream = b""
    for tid, (unit, fc, data) in enumerate(calls):
        codec.encode_request(tid, bytes((unit, fc)))
        unit_pdu = bytes((unit, fc)) + data
        stream += mbap_frame(tid, unit_pdu)
        expected.append(Inbound(Kind.REPLY, tid, 0, unit_pdu))
    messages: list[Inbound] = []
    for chunk in _chunks(stream, cuts):
        messages += codec.feed(chunk, False)
    assert messages == expected
    assert (codec.bad_frames, codec.desync) == (0, None)


@settings(max_examples=300)
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=8), st.booleans())
def test_random_bytes_never_raise(noise: bytes, cuts: list[int], awaiting: bool) -> None:
    """Random input never raises; whatever the RTU codec accepts has a good CRC's shape."""
    rtu = ModbusRtuCodec(MAX)
    rtu.encode_request(0, h("01 03 00 00 00 01"))
    tcp = ModbusTcpCodec(MAX)
    tcp.encode_request(1, h("01 03 00 00 00 01"))
    for chunk in _chunks(noise, cuts):
        for message in rtu.feed(chunk, awaiting):
            assert message.data[:1] == b"\x01" and message.data[1] & 0x7F == 3
        tcp.feed(chunk, awaiting)
    rtu.flush()
    assert rtu.desync is None
    assert rtu.flush() == []


class TestResponseShape:
    @pytest.mark.parametrize(
        ("request_hex", "late_hex"),
        [
            ("010300000002", "0103020007"),  # 2 registers asked, 1 in the reply
            ("010100000010", "01010100"),  # 16 coils asked: 2 bytes, 1 came
            ("010600050007", "010600040007"),  # another register's write echo
            ("011000000002", "011000000003"),  # another quantity's echo
        ],
        ids=["fc3-count", "fc1-count", "fc6-echo", "fc16-echo"],
    )
    def test_a_reply_that_does_not_fit_the_request_is_a_bad_frame(
        self, request_hex: str, late_hex: str
    ) -> None:
        """A late answer to another request of the same unit and function is dropped."""
        # It is told apart by its byte count or echo.
        codec = rtu_exchange(h(request_hex))
        assert codec.feed(rtu_frame(h(late_hex)), True) == []
        assert codec.flush() == [] and codec.bad_frames == 1

    def test_shapes_by_function_code(self) -> None:
        """Reads: the byte count; writes: the echo of address and value or quantity."""
        assert response_shape(h("0300000003")) == (6, None)
        assert response_shape(h("0200000009")) == (2, None)
        assert response_shape(h("050001ff00")) == (None, h("0001ff00"))
        assert response_shape(h("0f0013000a02cd01")) == (None, h("0013000a"))
        assert response_shape(h("2b0e0100")) == (None, None)


class TestRtuFraming:
    def test_a_request_longer_than_its_function_code_says_is_misframed(self) -> None:
        """A read with a second request glued on is not one RTU request."""
        reason = rtu_misframed(bytes.fromhex("020300000001020300010001"))
        assert reason is not None and "0x03 request is 6 bytes" in reason

    def test_short_and_counted_requests_are_checked(self) -> None:
        """A write-multiple shorter than its byte count, or too short to hold it, is refused."""
        assert rtu_misframed(bytes.fromhex("0110000000010200")) is not None  # 1 byte of 2
        assert rtu_misframed(bytes.fromhex("011000")) is not None

    def test_well_formed_requests_pass(self) -> None:
        """Reads, single writes, write-multiple with its data, and unknown codes pass."""
        for hexed in ("010300000001", "0106000a0007", "01100000000102abcd", "0141deadbeef"):
            assert rtu_misframed(bytes.fromhex(hexed)) is None, hexed


class TestRtuRequestScanner:
    """The device side without a clock (the simulator's): CRC ends unknown lengths."""

    def test_requests_fed_a_byte_at_a_time_come_out_whole(self) -> None:
        """Two requests of known length, fed byte by byte, come out as unit + PDU."""
        scanner = RtuRequestScanner()
        write = bytes.fromhex("01100001000204000a0102")
        stream = rtu_frame(h("01 03 00 00 00 0a")) + rtu_frame(write)
        got = [r for b in stream for r in scanner.feed(bytes((b,)))]
        assert got == [h("01 03 00 00 00 0a"), write]
        assert scanner.bad_frames == 0

    def test_an_unknown_function_code_ends_at_the_first_matching_crc(self) -> None:
        """A request whose length its bytes do not tell ends where its CRC first matches."""
        scanner = RtuRequestScanner()
        custom = h("01 41 de ad be ef")
        assert scanner.feed(rtu_frame(custom) + rtu_frame(h("01 07"))) == [custom, h("01 07")]

    def test_a_run_of_noise_is_one_bad_frame(self) -> None:
        """Bytes dropped before a good request count as one bad frame, however many."""
        scanner = RtuRequestScanner()
        read = h("01 03 00 00 00 0a")
        noise = h("01 03") * 4  # every byte starts a read whose CRC fails
        stream = noise + rtu_frame(h("02 07")) + rtu_frame(read)
        assert scanner.feed(stream) == [h("02 07"), read]
        assert scanner.bad_frames == 1

    def test_reset_forgets_a_partial_request(self) -> None:
        """After reset, the tail of a cut request is not joined to its head."""
        scanner = RtuRequestScanner()
        frame = rtu_frame(h("01 03 00 00 00 0a"))
        assert scanner.feed(frame[:4]) == []
        scanner.reset()
        assert scanner.feed(rtu_frame(h("01 07"))) == [h("01 07")]
