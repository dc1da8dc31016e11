"""The `length` link codec: a 4-byte big-endian length, then that many bytes.

This is the reference transport's framing. It has no seq, no CRC and no
delimiter, so a receiver cannot resync inside the stream: a length above the
limit means it is out of step, and the only cure is to reopen the link. The
decoder then sets `desync` and decodes nothing more until `reset`.

Without seqs, which frame answers a call is decided by timing: the session says
whether a call is outstanding (`awaiting_reply`), and the first frame completed
while one is, is its reply; every other frame is an event.

Device side (`LengthPortFraming`): each length-prefixed message is a call; the
reply is length + status + data, an event a length frame. A length above
max_payload puts the port out of step (see `verld.codec.base`, bounds). A device's
own side (`LengthCommandFraming`) is more forgiving: it reads a request up to twice
max_payload whole and passes it on (the device refuses it), and takes a longer
length for noise, dropping what it holds and reading on.
"""

from __future__ import annotations

import struct

from verld.codec.base import Bounded, Inbound, Kind, PortRequest
from verld.codec.spec import CodecSpec, Problem, Settings

__all__ = [
    "LENGTH",
    "LengthCodec",
    "LengthCommandFraming",
    "LengthDecoder",
    "LengthPortFraming",
    "encode",
]

_LENGTH = struct.Struct(">I")


def encode(payload: bytes) -> bytes:
    """One frame: the payload's length (u32 BE), then the payload."""
    return _LENGTH.pack(len(payload)) + payload


class LengthDecoder:
    """Turns a byte stream into length-prefixed frames (used by both ends)."""

    def __init__(self, max_length: int, *, limit_name: str | None = None) -> None:
        #: set (to a reason) once a length above `max_length` arrives
        self.desync: str | None = None
        self._max_length = max_length
        #: how `desync` names the limit (default: its value)
        self._limit_name = str(max_length) if limit_name is None else limit_name
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Frames completed by `data`, in order; none once out of step."""
        if self.desync is not None:
            return []
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (length,) = _LENGTH.unpack_from(buf, pos)
            if length > self._max_length:
                self.desync = f"length {length} exceeds {self._limit_name}"
                buf.clear()
                return frames
            if end - pos - 4 < length:
                break
            pos += 4
            frames.append(bytes(buf[pos : pos + length]))
            pos += length
        del buf[:pos]
        return frames

    def reset(self) -> None:
        """Forget partial input and any desync (the link was reopened)."""
        self.desync = None
        self._buf.clear()


class LengthCodec:
    """The daemon side of `length` (`LinkCodec`): one call outstanding at a time."""

    pipelined = False

    def __init__(self, max_payload: int) -> None:
        #: events dropped for exceeding `max_payload` (the stream stays in step)
        self.bad_frames = 0
        #: set (to a reason) when the stream is out of step: the link must be reopened
        self.desync: str | None = None
        self._max_payload = max_payload
        # a reply may carry max_payload data bytes after its status byte
        self._decoder = LengthDecoder(max_payload + 1, limit_name="max_payload+1")

    def encode_request(self, seq: int, payload: bytes) -> bytes:
        """One frame carrying `payload` (no seq on this codec)."""
        return encode(payload)

    def quiet_feed(self, data: bytes) -> tuple[list[Inbound], int]:
        """Frames in a quiet time: none is an event there; how many came (to drop)."""
        if self.desync is not None:
            return [], 0
        frames = self._decoder.feed(data)
        self.desync = self._decoder.desync
        return [], len(frames)

    def feed(self, data: bytes, awaiting_reply: bool) -> list[Inbound]:
        """The reply (first frame, if one is awaited) and events decoded from `data`."""
        if self.desync is not None:
            return []
        frames = self._decoder.feed(data)
        self.desync = self._decoder.desync
        messages = []
        for frame in frames:
            if awaiting_reply:
                awaiting_reply = False
                if not frame:
                    self.desync = "empty reply"
                    break
                messages.append(Inbound(Kind.REPLY, None, frame[0], frame[1:]))
            elif len(frame) > self._max_payload:
                self.bad_frames += 1
            else:
                messages.append(Inbound(Kind.EVENT, None, None, frame))
        return messages

    def reset(self) -> None:
        """Forget partial input and any desync (after a reconnect)."""
        self.desync = None
        self._decoder.reset()


class LengthPortFraming(Bounded):
    """`length` for a port (`PortFraming`): length-prefixed requests in, length +
    status + data out."""

    def __init__(self, max_payload: int) -> None:
        super().__init__()
        self._decoder = LengthDecoder(max_payload, limit_name="max_payload")
        self._buffered = 0  #: bytes fed that no frame has used yet

    def feed(self, data: bytes) -> list[PortRequest]:
        if self.discarding:
            self.ignored += len(data)
            return []
        frames = self._decoder.feed(data)
        self._buffered += len(data) - sum(4 + len(frame) for frame in frames)
        if self._decoder.desync is not None:  # a length above max_payload
            self._discard(self._buffered)  # the decoder dropped all it held
            self._decoder.reset()
            self._buffered = 0
        return [PortRequest(None, frame) for frame in frames]

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        return b"" if status is None else encode(bytes((status,)) + data)

    def event(self, data: bytes, text: str | None) -> bytes:
        return encode(data)

    def reset(self) -> None:
        self._decoder.reset()
        self._buffered = 0
        self.discarding = False


class LengthCommandFraming:
    """`length` as a device reads and answers it (`CommandFraming`)."""

    oversize = 0  #: none dropped: an oversize request is passed on, for the device to refuse

    def __init__(self, max_payload: int) -> None:
        self.bad_frames = 0
        # Oversize but plausible lengths are read whole; a length beyond this is
        # noise: the stream is dropped and read afresh.
        self._decoder = LengthDecoder(2 * max_payload + 64)

    def feed(self, data: bytes) -> list[PortRequest]:
        frames = self._decoder.feed(data)
        if self._decoder.desync:
            self.bad_frames += 1
            self._decoder.reset()
        return [PortRequest(None, frame) for frame in frames]

    def reply(self, tag: int | None, status: int, data: bytes) -> bytes:
        return encode(bytes((status,)) + data)

    def event(self, data: bytes) -> bytes:
        return encode(data)

    def damageable(self, chunk: bytes) -> list[int]:
        # Only the payload: a changed length prefix would desync the stream instead.
        return list(range(4, len(chunk)))

    def reset(self) -> None:
        self._decoder.reset()


def _device_ping(cfg: Settings) -> bytes:
    """`heartbeat.payload` (hex; empty by default: a zero-length message)."""
    return bytes.fromhex(cfg.heartbeat.payload)


def _check(cfg: Settings) -> list[Problem]:
    """A heartbeat payload that is not hex, or longer than a request may be."""
    where, payload = ("heartbeat.payload", "device.codec"), cfg.heartbeat.payload
    try:
        size = len(bytes.fromhex(payload))
    except ValueError as exc:
        message = (
            f'codec length sends the payload as hex bytes (e.g. "00" or '
            f'"de ad"), got {payload!r}: {exc}'
        )
        return [Problem(where, message)]
    if size > cfg.device.max_payload:
        message = f"{size} bytes, more than device.max_payload ({cfg.device.max_payload})"
        return [Problem(where, message)]
    return []


LENGTH = CodecSpec(
    "length",
    host=lambda cfg: LengthCodec(cfg.device.max_payload),
    device=lambda cfg: LengthPortFraming(cfg.device.max_payload),
    device_ping=_device_ping,
    quiet=True,
    commands=LengthCommandFraming,
    check=_check,
)
