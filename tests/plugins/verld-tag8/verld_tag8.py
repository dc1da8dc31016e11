"""`tag8`, a codec plugin with all three sides: a frame is a kind byte (A5 request, A6
reply, A7 event), a length byte, the body and the XOR of the body. A reply's body is
the status byte, then the data. Its `commands` lets verld-sim play the device."""

from __future__ import annotations

from verld.codec.api import Bounded, CodecSpec, Inbound, Kind, PortRequest, Settings

REQUEST, REPLY, EVENT = 0xA5, 0xA6, 0xA7


def frame(kind: int, body: bytes) -> bytes:
    """One frame: kind, length, body, XOR of the body."""
    check = 0
    for byte in body:
        check ^= byte
    return bytes((kind, len(body))) + body + bytes((check,))


class Reader:
    """The frames of `kinds` in a byte stream; anything else is skipped a byte at a time
    and counted."""

    def __init__(self, kinds: set[int]) -> None:
        self.kinds, self.buf, self.bad_frames = kinds, bytearray(), 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self.buf += data
        frames = []
        while len(self.buf) >= 2:
            kind, size = self.buf[0], self.buf[1]
            if kind not in self.kinds:
                del self.buf[0]
                self.bad_frames += 1
                continue
            if len(self.buf) < size + 3:
                break
            body = bytes(self.buf[2 : 2 + size])
            if frame(kind, body)[-1] != self.buf[2 + size]:
                del self.buf[0]
                self.bad_frames += 1
                continue
            frames.append((kind, body))
            del self.buf[: size + 3]
        return frames

    def reset(self) -> None:
        self.buf.clear()


class Tag8Host:
    """verld's side (a `LinkCodec`)."""

    pipelined = False

    def __init__(self) -> None:
        self.bad_frames = 0
        self.desync: str | None = None
        self._reader = Reader({REPLY, EVENT})

    def encode_request(self, seq: int, payload: bytes) -> bytes:
        return frame(REQUEST, payload)

    def feed(self, data: bytes, awaiting_reply: bool) -> list[Inbound]:
        out = []
        for kind, body in self._reader.feed(data):
            if kind == REPLY and body:
                out.append(Inbound(Kind.REPLY, None, body[0], body[1:]))
            else:
                out.append(Inbound(Kind.EVENT, None, None, body))
        self.bad_frames = self._reader.bad_frames
        return out

    def reset(self) -> None:
        self._reader.reset()


class Tag8Port(Bounded):
    """The device's side for a program on a port (a `PortFraming`)."""

    def __init__(self) -> None:
        super().__init__()
        self._reader = Reader({REQUEST})

    def feed(self, data: bytes) -> list[PortRequest]:
        requests = [PortRequest(None, body) for _, body in self._reader.feed(data)]
        self.bad_frames = self._reader.bad_frames
        return requests

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        return b"" if status is None else frame(REPLY, bytes((status,)) + data)

    def event(self, data: bytes, text: str | None) -> bytes:
        return frame(EVENT, data)

    def reset(self) -> None:
        self._reader.reset()


class Tag8Commands:
    """A device's own side (a `CommandFraming`): what verld-sim runs its commands over."""

    oversize = 0

    def __init__(self, max_payload: int) -> None:
        self._reader = Reader({REQUEST})

    @property
    def bad_frames(self) -> int:
        return self._reader.bad_frames

    def feed(self, data: bytes) -> list[PortRequest]:
        return [PortRequest(None, body) for _, body in self._reader.feed(data)]

    def reply(self, tag: int | None, status: int, data: bytes) -> bytes:
        return frame(REPLY, bytes((status,)) + data)

    def event(self, data: bytes) -> bytes:
        return frame(EVENT, data)

    def damageable(self, chunk: bytes) -> list[int]:
        return list(range(2, len(chunk) - 1))

    def reset(self) -> None:
        self._reader.reset()


def _ping(cfg: Settings) -> bytes:
    return bytes.fromhex(cfg.heartbeat.payload)


TAG8 = CodecSpec(
    "tag8",
    host=lambda cfg: Tag8Host(),
    device=lambda cfg: Tag8Port(),
    device_ping=_ping,
    commands=Tag8Commands,
)
