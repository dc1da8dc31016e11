"""Dynamixel Protocol 2.0 for verld: a codec plugin (docs/codecs.md, "Writing a codec").

A packet is `FF FF FD 00`, the servo's ID, LENGTH (u16 little-endian: the bytes after
it), the instruction, its parameters and a CRC-16/UMTS (little-endian) of everything
before it. Inside a packet, from the instruction on, every `FF FF FD` is followed by
an extra `FD` (byte stuffing), so the header never appears inside one: a reader that
lost its place finds the next packet by its header. LENGTH counts the stuffed bytes.
A servo answers an instruction with a status packet: instruction 0x55, an error byte,
then its parameters.

What a call is: the payload is the instruction packet's ID, instruction and
parameters (`01 02 84 00 04 00`: servo 1, READ, 4 bytes from 132); the reply's status
is the status packet's error byte (0: done) and its data the status packet's
parameters. A servo sends nothing unasked: a status packet nobody waits for is noise.
"""

from __future__ import annotations

from verld.codec.api import (
    Bounded,
    CodecSpec,
    Inbound,
    Kind,
    PortRequest,
    Problem,
    Settings,
    crc_function,
)

HEADER = b"\xff\xff\xfd\x00"
#: the status packet's instruction
STATUS = 0x55
#: header, ID and LENGTH
_HEAD = 7
_crc = crc_function("CRC-16/UMTS")


def stuff(body: bytes) -> bytes:
    """`body` (instruction and parameters) with an `FD` after each `FF FF FD`."""
    out = bytearray()
    for i, byte in enumerate(body):
        out.append(byte)
        if byte == 0xFD and i >= 2 and body[i - 2 : i] == b"\xff\xff":
            out.append(0xFD)
    return bytes(out)


def unstuff(body: bytes) -> bytes:
    """`body` as it was before `stuff`: the `FD` after each `FF FF FD` dropped."""
    out = bytearray()
    i = 0
    while i < len(body):
        out.append(body[i])
        if i >= 2 and body[i - 2 : i + 2] == b"\xff\xff\xfd\xfd":
            i += 1  # the stuffed FD
        i += 1
    return bytes(out)


def packet(ident: int, instruction: int, params: bytes) -> bytes:
    """One packet on the wire: header, ID, LENGTH, stuffed body, CRC."""
    body = stuff(bytes((instruction,)) + params)
    head = HEADER + bytes((ident,)) + (len(body) + 2).to_bytes(2, "little")
    return head + body + _crc(head + body).to_bytes(2, "little")


class Reader:
    """The packets in a byte stream: `(ID, instruction, parameters)` each. Noise and
    packets failing their CRC are skipped up to the next header; each run of such
    bytes counts once in `bad_frames`."""

    def __init__(self, max_length: int) -> None:
        #: a LENGTH above this is noise: no packet of max_payload bytes is so long
        self.max_length = max_length
        self.bad_frames = 0
        self.buf = bytearray()
        self._in_noise = False  #: the bytes dropped last were noise, already counted

    def _drop(self, count: int) -> None:
        del self.buf[:count]
        if not self._in_noise:
            self.bad_frames += 1
            self._in_noise = True

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        buf = self.buf
        buf += data
        found: list[tuple[int, int, bytes]] = []
        while True:
            start = buf.find(HEADER)
            if start < 0:  # keep what may be the beginning of a header
                if len(buf) >= len(HEADER):
                    self._drop(len(buf) - len(HEADER) + 1)
                return found
            if start:
                self._drop(start)
            if len(buf) < _HEAD:
                return found
            length = int.from_bytes(buf[5:7], "little")
            if not 3 <= length <= self.max_length:
                self._drop(1)
                continue
            end = _HEAD + length
            if len(buf) < end:
                return found
            if _crc(bytes(buf[: end - 2])).to_bytes(2, "little") != buf[end - 2 : end]:
                self._drop(1)
                continue
            body = unstuff(bytes(buf[_HEAD : end - 2]))
            found.append((buf[4], body[0], body[1:]))
            del buf[:end]
            self._in_noise = False

    def reset(self) -> None:
        self.buf.clear()
        self._in_noise = False


def _max_length(max_payload: int) -> int:
    """The longest LENGTH of a packet carrying `max_payload` bytes of ID, instruction
    and parameters (each third byte may be stuffed), with an error byte and the CRC."""
    return max_payload + max_payload // 3 + 4


class DynamixelHost:
    """verld's side (a `LinkCodec`): instruction packets out, status packets in."""

    pipelined = False

    def __init__(self, max_payload: int) -> None:
        self.desync: str | None = None
        self.bad_frames = 0  #: noise, failed CRCs and status packets nobody waited for
        self._reader = Reader(_max_length(max_payload))

    def refuse(self, payload: bytes) -> str | None:
        """A call must name a servo and an instruction."""
        return None if len(payload) >= 2 else "a Dynamixel call is ID, instruction, parameters"

    def encode_request(self, seq: int, payload: bytes) -> bytes:
        return packet(payload[0], payload[1], payload[2:])

    def feed(self, data: bytes, awaiting_reply: bool) -> list[Inbound]:
        replies = []
        before = self._reader.bad_frames
        for _ident, instruction, params in self._reader.feed(data):
            if awaiting_reply and instruction == STATUS and params:
                awaiting_reply = False
                replies.append(Inbound(Kind.REPLY, None, params[0], params[1:]))
            else:  # unasked, or our own instruction echoed by a half-duplex adapter
                self.bad_frames += 1
        self.bad_frames += self._reader.bad_frames - before
        return replies

    def reset(self) -> None:
        self._reader.reset()


class DynamixelPort(Bounded):
    """The servo's side for a program on a virtual port or network connection (a
    `PortFraming`): instruction packets in, status packets out. The ID a request was
    sent to is its tag: the status packet answers from that ID. The header finds every
    packet, so noise is skipped and reading goes on: it never has to discard."""

    def __init__(self, max_payload: int) -> None:
        super().__init__()
        self._reader = Reader(_max_length(max_payload))

    def feed(self, data: bytes) -> list[PortRequest]:
        before = self._reader.bad_frames
        packets = self._reader.feed(data)
        self.bad_frames += self._reader.bad_frames - before
        return [
            PortRequest(ident, bytes((ident, instruction)) + params)
            for ident, instruction, params in packets
        ]

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        if status is None or tag is None:
            return b""
        return packet(tag, STATUS, bytes((status,)) + data)

    def event(self, data: bytes, text: str | None) -> bytes:
        return b""  # a servo sends nothing unasked

    def reset(self) -> None:
        self._reader.reset()


def _ping(cfg: Settings) -> bytes | None:
    """`heartbeat.payload` as hex, a call like any other (e.g. "01 01": PING servo 1);
    empty: no ping."""
    payload = bytes.fromhex(cfg.heartbeat.payload)
    return payload or None


def _check(cfg: Settings) -> list[Problem]:
    """A ping that is not hex, or not a whole call."""
    where = ("heartbeat.payload", "device.codec")
    try:
        ping = bytes.fromhex(cfg.heartbeat.payload)
    except ValueError:
        return [Problem(where, "codec dynamixel sends the ping as hex: ID, instruction")]
    if len(ping) == 1 or len(ping) > cfg.device.max_payload:
        return [Problem(where, "the ping is a call: ID, instruction, parameters")]
    return []


DYNAMIXEL = CodecSpec(
    "dynamixel",
    host=lambda cfg: DynamixelHost(cfg.device.max_payload),
    device=lambda cfg: DynamixelPort(cfg.device.max_payload),
    device_ping=_ping,
    events=False,
    check=_check,
)
