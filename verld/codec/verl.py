"""The `verl` link codec: CRC-checked frames, COBS-delimited by zero bytes.

Wire: `00 COBS(body) 00`, body = type u8, seq u16 BE, payload, CRC-32 u32 BE
(zlib.crc32 over type..payload). The type byte's high nibble is the protocol
version (1), the low nibble the kind (0x11 request, 0x12 reply, 0x13 event).

Strategy: zero never occurs inside an encoded frame, so the receiver cuts the
stream at every zero byte (`bytes.split`) and judges each chunk on its own. A
chunk that is not a well-formed frame this side may receive is dropped and
counted in `bad_frames`; the next zero starts a fresh frame, so noise costs at
most the frame it hits. Only the incomplete tail is kept between `feed` calls,
and it is bounded: a tail longer than the largest possible encoded frame cannot
become a frame, so it is dropped and input is skipped up to the next zero.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from verld.codec import cobs
from verld.codec.base import Inbound, Kind

__all__ = ["FrameDecoder", "VerlCodec", "VerlFrame", "encode_frame"]

_HEAD = struct.Struct(">BH")  #: type, seq
_CRC = struct.Struct(">I")
_OVERHEAD = 7  #: body bytes around the payload: type, seq, crc
_REQUEST, _REPLY, _EVENT = Kind.REQUEST.value, Kind.REPLY.value, Kind.EVENT.value
_KIND_REPLY, _KIND_EVENT = Kind.REPLY, Kind.EVENT  #: module globals: faster than enum lookups
_DAEMON_ACCEPTS = frozenset({_REPLY, _EVENT})
_new_tuple = tuple.__new__


class VerlFrame(NamedTuple):
    """One decoded frame."""

    kind: int  #: the type byte: 0x11, 0x12 or 0x13
    seq: int  #: 0..65535 (as sent; an event's seq means nothing)
    payload: bytes  #: a reply's payload starts with its status byte


def encode_frame(kind: int, seq: int, payload: bytes) -> bytes:
    """The wire bytes of one frame: `00 COBS(type seq payload crc) 00`."""
    if not 0 <= seq <= 0xFFFF:
        raise ValueError(f"verl: seq {seq} is not in 0..65535")
    if not 0 <= kind <= 0xFF:
        raise ValueError(f"verl: type {kind} is not a byte")
    head = _HEAD.pack(kind, seq)
    crc = zlib.crc32(payload, zlib.crc32(head))
    return b"\x00" + cobs.encode(head + payload + _CRC.pack(crc)) + b"\x00"


class FrameDecoder:
    """Turns a byte stream into frames, dropping and counting anything else.

    `accept` is the set of type bytes this side may receive: {0x12, 0x13} for the
    daemon, {0x11} for a device. Payloads are bounded by `max_payload`, plus one
    for a reply (its status byte is extra).
    """

    def __init__(self, max_payload: int, accept: frozenset[int]) -> None:
        if max_payload < 0:
            raise ValueError(f"verl: max_payload {max_payload} is negative")
        if unknown := accept - {_REQUEST, _REPLY, _EVENT}:
            names = ", ".join(f"{kind:#04x}" for kind in sorted(unknown))
            raise ValueError(f"verl: accept holds unknown types: {names}")
        #: chunks dropped since creation (a monotonic counter; `reset` keeps it)
        self.bad_frames = 0
        self._accept = accept
        self._max_body = max_payload + 1 + _OVERHEAD
        #: longest chunk that may still be a frame, with room for either end form
        self._max_chunk = cobs.max_encoded_length(self._max_body) + 1
        self._tail = bytearray()  #: the incomplete chunk after the last zero
        self._skipping = False  #: an overlong chunk is being discarded up to the next zero

    def feed(self, data: bytes) -> list[VerlFrame]:
        """Frames completed by `data`, in order."""
        return [
            VerlFrame(body[0], body[1] << 8 | body[2], body[3:-4]) for body in self._bodies(data)
        ]

    def reset(self) -> None:
        """Forget the incomplete chunk (the stream restarts, e.g. after a reconnect)."""
        self._tail.clear()
        self._skipping = False

    def _bodies(self, data: bytes) -> list[bytes]:
        """The checked bodies (type..crc) of the frames completed by `data`."""
        if self._skipping:
            start = data.find(0)
            if start < 0:
                return []
            self._skipping = False
            data = data[start:]
        if self._tail:
            self._tail += data
            if 0 not in data:
                if len(self._tail) > self._max_chunk:
                    self._overflow()
                return []
            data = bytes(self._tail)
            self._tail.clear()
        chunks = data.split(b"\x00")
        last = chunks.pop()
        if len(last) > self._max_chunk:
            self._overflow()
        elif last:
            self._tail += last
        bodies = []
        for chunk in chunks:
            if chunk:
                body = self._check(chunk)
                if body is None:
                    self.bad_frames += 1
                else:
                    bodies.append(body)
        return bodies

    def _overflow(self) -> None:
        """The incomplete chunk can no longer become a frame: drop it and skip to the next zero."""
        self.bad_frames += 1
        self._tail.clear()
        self._skipping = True

    def _check(self, chunk: bytes) -> bytes | None:
        """The body of a chunk that is a frame this side may receive, else None."""
        if len(chunk) > self._max_chunk:
            return None
        try:
            body = cobs.decode(chunk)
        except ValueError:
            return None
        size = len(body)
        if size < _OVERHEAD or size > self._max_body:
            return None
        kind = body[0]
        if kind not in self._accept:  # a bad version fails here too
            return None
        if zlib.crc32(body[:-4]) != _CRC.unpack_from(body, size - 4)[0]:
            return None
        if kind == _REPLY:
            return body if size > _OVERHEAD else None  # needs its status byte
        # a request's or an event's payload has no status byte: one less allowed
        return body if size < self._max_body else None


class VerlCodec:
    """The daemon side of `verl` (`LinkCodec`): requests out, replies and events in."""

    pipelined = True
    desync: str | None = None  #: verl resyncs at the next zero byte: never out of step

    def __init__(self, max_payload: int) -> None:
        self._decoder = FrameDecoder(max_payload, _DAEMON_ACCEPTS)
        #: the decoder's count, refreshed by every `feed`
        self.bad_frames = 0

    def encode_request(self, seq: int, payload: bytes) -> bytes:
        """The wire bytes of request `seq` (`encode_frame`, inlined: once per call)."""
        head = _HEAD.pack(_REQUEST, seq)  # struct.error for a seq outside 0..65535
        crc = zlib.crc32(payload, zlib.crc32(head))
        return b"\x00" + cobs.encode(head + payload + _CRC.pack(crc)) + b"\x00"

    def feed(self, data: bytes, awaiting_reply: bool) -> list[Inbound]:
        """Replies (with their seq) and events from `data`; `awaiting_reply` is moot here."""
        decoder = self._decoder
        new = _new_tuple  # Inbound's own __new__ is a Python function: once per frame
        messages = [
            new(Inbound, (_KIND_REPLY, body[1] << 8 | body[2], body[3], body[4:-4], None))
            if body[0] == _REPLY
            else new(Inbound, (_KIND_EVENT, None, None, body[3:-4], None))
            for body in decoder._bodies(data)  # same module; skips building a VerlFrame
        ]
        self.bad_frames = decoder.bad_frames
        return messages

    def reset(self) -> None:
        """Forget partial input (after a reconnect)."""
        self._decoder.reset()
