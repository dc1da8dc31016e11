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

Device side (`VerlPortFraming`, and a device's own, `VerlCommandFraming`): request
frames are decoded as a device decodes them (`RequestDecoder`); bad ones are
dropped and counted in `bad_frames`. The tag is the program's seq; the reply is a reply frame
with that seq (`encode_reply`), an event an event frame with seq 0 (`encode_event`).
A zero-free run longer than any request frame puts the port framing out of step
(see `verld.codec.base`, bounds).
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from verld.codec import cobs
from verld.codec.base import Bounded, Inbound, Kind, PortRequest
from verld.codec.spec import CodecSpec, Settings

__all__ = [
    "VERL",
    "FrameDecoder",
    "RequestDecoder",
    "VerlCodec",
    "VerlCommandFraming",
    "VerlFrame",
    "VerlPortFraming",
    "encode_event",
    "encode_frame",
    "encode_reply",
]

_HEAD = struct.Struct(">BH")  #: type, seq
_CRC = struct.Struct(">I")
_OVERHEAD = 7  #: body bytes around the payload: type, seq, crc
_REQUEST, _REPLY, _EVENT = Kind.REQUEST.value, Kind.REPLY.value, Kind.EVENT.value
_KIND_REPLY, _KIND_EVENT = Kind.REPLY, Kind.EVENT  #: module globals: faster than enum lookups
_DAEMON_ACCEPTS = frozenset({_REPLY, _EVENT})
_DEVICE_ACCEPTS = frozenset({_REQUEST})
_new_tuple = tuple.__new__
_encode_short, _decode, _DECODE_ERRORS = cobs.encode_short, cobs.decode_nonempty, cobs.DECODE_ERRORS
_SHORT = 254  #: bodies shorter than this take `cobs.encode_short`
_crc32, _CRC_UNPACK = zlib.crc32, _CRC.unpack_from


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
        # Each chunk between zeros is checked here, in one loop (once per frame): not too
        # long, valid COBS, a type this side accepts, its size, its CRC.
        bodies = []
        bad = 0
        max_chunk, max_body, accept = self._max_chunk, self._max_body, self._accept
        for chunk in chunks:
            if not chunk:
                continue
            if len(chunk) <= max_chunk:
                try:
                    body = _decode(chunk)  # (never empty)
                except _DECODE_ERRORS:
                    body = b""
                size = len(body)
                if (
                    _OVERHEAD <= size <= max_body
                    and body[0] in accept  # a bad version fails here too
                    and _crc32(body[:-4]) == _CRC_UNPACK(body, size - 4)[0]
                    # a reply needs its status byte; a request's or event's payload has
                    # none: one byte less allowed
                    and (size > _OVERHEAD if body[0] == _REPLY else size < max_body)
                ):
                    bodies.append(body)
                    continue
            bad += 1
        if bad:
            self.bad_frames += bad
        return bodies

    def _overflow(self) -> None:
        """The incomplete chunk can no longer become a frame: drop it and skip to the next zero."""
        self.bad_frames += 1
        self._tail.clear()
        self._skipping = True


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
        body = _HEAD.pack(_REQUEST, seq) + payload  # struct.error for a seq outside 0..65535
        body += _CRC.pack(zlib.crc32(body))
        return b"\x00%s\x00" % (_encode_short if len(body) < _SHORT else cobs.encode)(body)

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


# --- the device side ---------------------------------------------------------


def encode_reply(seq: int, status: int, data: bytes) -> bytes:
    """The reply frame to request `seq`: its status byte, then its data."""
    return encode_frame(_REPLY, seq, bytes((status,)) + data)


def encode_event(payload: bytes) -> bytes:
    """One event frame (seq 0: an event's seq means nothing)."""
    return encode_frame(_EVENT, 0, payload)


class RequestDecoder:
    """The device's decoder: request frames in, `(seq, payload)` out; the rest is noise."""

    def __init__(self, max_payload: int) -> None:
        self.max_payload = max_payload
        #: requests above max_payload, dropped (the frame decoder's bound comes first)
        self.oversize = 0
        self._frames = FrameDecoder(max_payload, _DEVICE_ACCEPTS)

    @property
    def bad_frames(self) -> int:
        """Chunks dropped as noise since creation."""
        return self._frames.bad_frames

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The requests completed by `data`, in order."""
        requests = []
        for frame in self._frames.feed(data):
            if len(frame.payload) > self.max_payload:
                self.oversize += 1
                continue
            requests.append((frame.seq, frame.payload))
        return requests

    def reset(self) -> None:
        """Forget the incomplete frame."""
        self._frames.reset()


class VerlCommandFraming:
    """`verl` as a device reads and answers it (`CommandFraming`): a frame that is not
    a request is noise, and the next zero byte starts afresh."""

    def __init__(self, max_payload: int) -> None:
        self._requests = RequestDecoder(max_payload)

    @property
    def bad_frames(self) -> int:
        return self._requests.bad_frames

    @property
    def oversize(self) -> int:
        return self._requests.oversize

    def feed(self, data: bytes) -> list[PortRequest]:
        return [PortRequest(seq, payload) for seq, payload in self._requests.feed(data)]

    def reply(self, tag: int | None, status: int, data: bytes) -> bytes:
        return encode_reply(tag or 0, status, data)

    def event(self, data: bytes) -> bytes:
        return encode_event(data)

    def damageable(self, chunk: bytes) -> list[int]:
        # A non-zero byte that stays non-zero keeps the framing: the CRC catches it.
        return [i for i, b in enumerate(chunk) if b]

    def reset(self) -> None:
        self._requests.reset()


class VerlPortFraming(Bounded):
    """`verl` for a port (`PortFraming`): request frames in, replies with the program's seq out."""

    def __init__(self, max_payload: int) -> None:
        super().__init__()
        self._requests = RequestDecoder(max_payload)
        #: the longest zero-free run the frame decoder keeps (reply frames included)
        self._max_run = cobs.max_encoded_length(max_payload + 8) + 1
        self._run = 0  #: zero-free bytes since the last zero (the decoder's tail)

    def feed(self, data: bytes) -> list[PortRequest]:
        if self.discarding:
            self.ignored += len(data)
            return []
        if self._run + len(data) <= self._max_run:  # no run can be too long: no scan
            self._run = len(data) - data.rfind(0) - 1 if 0 in data else self._run + len(data)
            return self._decode(data)
        run, start = self._run, 0
        for piece in data.split(b"\x00"):
            run += len(piece)
            if run > self._max_run:  # no request frame is that long: out of step
                requests = self._decode(data[:start])
                self._discard(len(data) - start + (self._run if start == 0 else 0))
                self._requests.reset()
                self._run = 0
                return requests
            start += len(piece) + 1
            run = 0
        self._run = len(data) - data.rfind(0) - 1 if 0 in data else self._run + len(data)
        return self._decode(data)

    def _decode(self, data: bytes) -> list[PortRequest]:
        requests = [PortRequest(seq, payload) for seq, payload in self._requests.feed(data)]
        self.bad_frames = self._requests.bad_frames + self._requests.oversize
        return requests

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        return b"" if status is None else encode_reply(tag or 0, status, data)

    def event(self, data: bytes, text: str | None) -> bytes:
        return encode_event(data)

    def reset(self) -> None:
        self._requests.reset()
        self._run = 0
        self.discarding = False


# --- the spec ----------------------------------------------------------------


def _ping(cfg: Settings) -> bytes:
    """The empty request: verl always has a handshake and (heartbeat on) pings."""
    return b""


VERL = CodecSpec(
    "verl",
    host=lambda cfg: VerlCodec(cfg.device.max_payload),
    device=lambda cfg: VerlPortFraming(cfg.device.max_payload),
    device_ping=_ping,
    pipelined=True,
    port_window=True,
    retry=3,
    commands=VerlCommandFraming,
)
