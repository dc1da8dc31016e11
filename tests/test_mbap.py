"""The Modbus TCP front's sans-I/O part: MBAP requests in, responses and exceptions out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verld.codec.modbus import MbapSplitter, mbap_frame
from verld.errors import RemoteProtocolError, VerldError
from verld.fronts.modbus.mbap import Malformed, RequestDecoder, answer, exception_for
from verld.session.calls import CallResult

READ = bytes.fromhex("01030000000a")


def result(error: str | None, status: int | None = 0, data: bytes = b"") -> CallResult:
    return CallResult(error, "", status, data, None, 0.1, 1)


class TestDecoder:
    def test_a_request_is_its_transaction_id_and_unit_plus_pdu(self) -> None:
        """`00 07 00 00 00 06 01 03 00 00 00 0A` → (7, 01 03 00 00 00 0A)."""
        assert RequestDecoder().feed(bytes.fromhex("000700000006") + READ) == [(7, READ)]

    def test_pipelined_requests_split_at_any_byte(self) -> None:
        """Three requests fed one byte at a time come out whole, in order."""
        stream = b"".join(mbap_frame(i, READ) for i in range(3))
        decoder = RequestDecoder()
        out = [r for b in stream for r in decoder.feed(bytes([b]))]
        assert out == [(0, READ), (1, READ), (2, READ)]

    @pytest.mark.parametrize(
        "header",
        ["000100010006", "000100000001", "0001000000ff"],
        ids=["proto-1", "len-1", "len-255"],
    )
    def test_a_malformed_header_is_malformed(self, header: str) -> None:
        """Protocol id not 0, length below 2 or above 254: the stream cannot be trusted."""
        with pytest.raises(Malformed):
            RequestDecoder().feed(bytes.fromhex(header) + READ)

    @given(st.lists(st.tuples(st.integers(0, 0xFFFF), st.binary(min_size=2, max_size=254))))
    def test_any_well_formed_stream_round_trips(self, frames: list[tuple[int, bytes]]) -> None:
        """Whatever valid frames are sent, the same (tid, body) pairs come out."""
        stream = b"".join(mbap_frame(tid, body) for tid, body in frames)
        assert RequestDecoder().feed(stream) == frames


class TestSplitter:
    def test_requests_before_an_impossible_header_come_out(self) -> None:
        """The requests before a bad header are returned; `malformed` says why."""
        splitter = MbapSplitter()
        stream = mbap_frame(1, READ) + bytes.fromhex("000200010006") + READ
        assert splitter.feed(stream) == [(1, READ)]
        assert splitter.malformed == "MBAP protocol id 1, not 0"

    def test_after_an_impossible_header_it_reads_afresh(self) -> None:
        """What was buffered is dropped; the next feed starts a new stream, malformed cleared."""
        splitter = MbapSplitter()
        splitter.feed(bytes.fromhex("0001000000ff") + READ[:3])
        assert splitter.malformed == "MBAP length 255 is not in 2..254"
        assert splitter.feed(mbap_frame(2, READ)) == [(2, READ)]
        assert splitter.malformed is None

    def test_reset_forgets_a_partial_request(self) -> None:
        """After reset, a cut frame's head is gone and the next whole frame decodes alone."""
        splitter = MbapSplitter()
        assert splitter.feed(mbap_frame(3, READ)[:7]) == []
        splitter.reset()
        assert splitter.feed(mbap_frame(4, READ)) == [(4, READ)]

    def test_malformed_is_a_remote_protocol_error_and_a_value_error(self) -> None:
        """Malformed belongs to verld's error hierarchy (a peer's fault) and is a ValueError."""
        assert issubclass(Malformed, RemoteProtocolError)
        assert issubclass(Malformed, VerldError)
        assert issubclass(Malformed, ValueError)


class TestMapping:
    @pytest.mark.parametrize(
        ("error", "inhibited", "code"),
        [
            ("timeout", False, 0x0B),
            ("link_down", False, 0x0A),
            ("shutting_down", False, 0x0A),
            ("bad_request", False, 0x0A),
            ("busy", True, 0x0A),
            ("busy", False, 0x06),
        ],
    )
    def test_failures_become_gateway_exceptions_by_cause(
        self, error: str, inhibited: bool, code: int
    ) -> None:
        """docs/modbus-gateway.md's mapping: timeout 0x0B, path unavailable 0x0A, busy 0x06."""
        assert exception_for(result(error, None), inhibited=inhibited) == code
        frame = answer(9, READ, result(error, None), inhibited=inhibited)
        assert frame == mbap_frame(9, bytes((1, 0x83, code)))

    def test_a_device_exception_passes_through_unchanged(self) -> None:
        """The slave's exception 02 reaches the master as it was."""
        frame = answer(3, READ, result("device_error", 2, bytes.fromhex("018302")), inhibited=False)
        assert frame == bytes.fromhex("000300000003018302")

    def test_a_response_keeps_the_transaction_id(self) -> None:
        """The unit + PDU the device sent, under the request's transaction id."""
        data = bytes.fromhex("0103020007")
        assert answer(0xBEEF, READ, result(None, 0, data), inhibited=False) == mbap_frame(
            0xBEEF, data
        )
