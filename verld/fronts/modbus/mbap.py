"""The Modbus TCP server side, sans-I/O: MBAP requests in, responses and exceptions out.

Strategy: `RequestDecoder.feed` splits a connection's bytes into `(transaction id,
unit + PDU)` requests with the codec's MBAP splitter (`verld.codec.modbus.tcp`); a
header that cannot be a Modbus TCP request (protocol id not 0, length outside
2..254) makes the stream unusable: `feed` raises `Malformed` and the connection is
closed (its peer is not speaking Modbus TCP, or is out of step; nothing after it
can be trusted). `answer` turns how a call ended into the response frame, mapping
verld's errors to the gateway exceptions of the Modbus spec by cause
(docs/modbus-gateway.md, section 3).
"""

from __future__ import annotations

from verld.codec.modbus import MbapSplitter, mbap_frame
from verld.errors import ErrorCode, Malformed
from verld.session.calls import CallResult

__all__ = [
    "ILLEGAL_FUNCTION",
    "PATH_UNAVAILABLE",
    "READS",
    "SERVER_BUSY",
    "TARGET_FAILED",
    "Malformed",
    "RequestDecoder",
    "answer",
    "exception_for",
    "exception_frame",
]

ILLEGAL_FUNCTION = 0x01
SERVER_BUSY = 0x06
PATH_UNAVAILABLE = 0x0A  #: gateway path unavailable
TARGET_FAILED = 0x0B  #: gateway target device failed to respond
#: the function codes a `read_only` front lets through: the four reads
READS = frozenset({0x01, 0x02, 0x03, 0x04})


class RequestDecoder:
    """One connection's requests, cut out of its byte stream by the MBAP header."""

    __slots__ = ("_splitter",)

    def __init__(self) -> None:
        self._splitter = MbapSplitter()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The complete requests in `data` (and what was buffered): (tid, unit + PDU).

        Raises `Malformed` at a header that cannot be Modbus TCP.
        """
        requests = self._splitter.feed(data)
        if self._splitter.malformed is not None:
            raise Malformed(self._splitter.malformed)
        return requests


def exception_frame(tid: int, request: bytes, code: int) -> bytes:
    """The exception response to `request` (unit + PDU): unit, fc | 0x80, code."""
    return mbap_frame(tid, bytes((request[0], request[1] | 0x80, code)))


def exception_for(result: CallResult, *, inhibited: bool) -> int | None:
    """The exception a failed call becomes (None: it did not fail, or the device's own
    exception passes through)."""
    error = result.error
    if error is None or error in (ErrorCode.DEVICE_ERROR, ErrorCode.REMOTE_FAILURE):
        return None
    if error == ErrorCode.TIMEOUT:
        return TARGET_FAILED
    if error == ErrorCode.BUSY:
        return PATH_UNAVAILABLE if inhibited else SERVER_BUSY
    return PATH_UNAVAILABLE  # link_down, shutting_down, bad_request, ...


def answer(tid: int, request: bytes, result: CallResult, *, inhibited: bool) -> bytes:
    """The response frame for `request` from how its call ended."""
    code = exception_for(result, inhibited=inhibited)
    if code is not None:
        return exception_frame(tid, request, code)
    data = result.data
    if result.error is not None and (len(data) != 3 or not data[1] & 0x80):
        return exception_frame(tid, request, TARGET_FAILED)  # (not an exception frame)
    return mbap_frame(tid, data)
