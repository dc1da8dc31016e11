"""The device side of every codec, for a virtual serial port: requests in, answers out.

A program on a port speaks to it exactly as it would to the device, in the
device's codec, so on the port verld plays the device: `feed` decodes the
program's requests into `PortRequest`s (an opaque `tag` the front keeps, and the
payload as verld's API `call` takes it), `reply` and `event` encode what the
device said back in the same framing. Like the link codecs this is sans-I/O: no
file descriptor, no clock, no asyncio.

Strategy: the decoding is the simulated device's, which already plays the device
side of every codec: `verl` and `modbus-tcp` split requests with verld-sim's
personalities (`VerlPersonality`, `ModbusTcpPersonality`; only their `decode`,
never their command set), `length` and `line` with the codecs' own
`LengthDecoder` and `LineSplitter`, and answers are framed with the codecs'
encoders (`encode_frame`, `length.encode`, `rtu_frame`, `mbap_frame`). Modbus RTU
has its own small scanner: a request ends where its function code says
(`rtu_request_length`), any other at 3.5 character times of silence, which the
front reports by calling `flush`. The sim ends those at the first matching CRC
instead, so its personality does not fit here.

Per codec:

- `verl`: request frames (COBS, CRC-32) as a device decodes them; bad ones are
  dropped and counted in `bad_frames`. The tag is the program's seq; the reply is
  a reply frame with that seq, an event an event frame with seq 0.
- `length`: each length-prefixed message is a call; the reply is length + status
  + data, an event a length frame.
- `line`: each line (terminator stripped; with `\\n`, a `\\r` before it too) is a
  call, its text encoded; the reply's lines go back each with the terminator.
- `modbus-rtu`: CRC-checked frames are calls (unit + PDU); a frame that fails
  (bad CRC, impossible length, not a valid request) loses its first byte and the
  hunt goes on, each run of dropped bytes one bad frame. A candidate with a
  function code of unknown length holds the hunt until `flush`, which ends it
  (or, if it fails, hunts on through what is buffered) and drops whatever is
  left. The reply is the unit + PDU in an RTU frame.
- `modbus-tcp`: MBAP frames are calls, tagged with the transaction id; the reply
  is MBAP with the same id. A request with a function code outside 1..127 is
  dropped and counted.

Answers: `reply` takes how the call ended. A status of None means the device did
not answer (the call timed out or never went out): nothing is written, exactly
as from a silent device, and the program's own timeout takes over. On the Modbus
codecs an empty `data` is treated the same way; Modbus has no events, so `event`
writes nothing there.

Bounds: input that cannot become a request within `device.max_payload` (an
oversize length prefix, an impossible MBAP header, an over-long line or verl
frame, an RTU frame of unknown length longer than any RTU frame) is discarded:
its bytes are counted in `ignored`, `discarding` turns True and every byte fed
after is ignored too, until the front, having seen `device.guard` seconds of
quiet, calls `reset`. Whatever the program wrote in the meantime is out of step
and worthless; after a quiet spell it is starting afresh.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from verld.codec import cobs
from verld.codec.base import Kind
from verld.codec.length import LengthDecoder
from verld.codec.length import encode as length_encode
from verld.codec.line import LineSplitter
from verld.codec.modbus import (
    MAX_RTU_FRAME,
    MAX_RTU_UNIT,
    check_request,
    crc16,
    mbap_frame,
    rtu_frame,
    rtu_request_length,
)
from verld.codec.verl import encode_frame
from verld.config import Config
from verld.sim.device import VerlPersonality
from verld.sim.modbus import ModbusSlave, ModbusTcpPersonality

__all__ = [
    "LengthPortFraming",
    "LinePortFraming",
    "ModbusRtuPortFraming",
    "ModbusTcpPortFraming",
    "PortFraming",
    "PortRequest",
    "VerlPortFraming",
    "make_port_framing",
]

_MIN_RTU_FRAME = 4  #: unit + fc + CRC
_MBAP_HEAD = 6  #: transaction id, protocol id, length (the unit follows)


class PortRequest(NamedTuple):
    """One request a program wrote to its port."""

    #: what the front keeps for the answer: the program's seq (verl), its transaction
    #: id (modbus-tcp), or None (codecs without either)
    tag: int | None
    #: the call's payload as verld's API `call` takes it: the request payload (verl,
    #: length), unit + PDU (Modbus), the line's encoded text without terminator (line)
    payload: bytes


class PortFraming(Protocol):
    """The device side of one codec, for one port."""

    @property
    def bad_frames(self) -> int:
        """Requests dropped as malformed since creation (a monotonic counter)."""
        ...

    @property
    def ignored(self) -> int:
        """Bytes discarded since creation: past the bounds, and while `discarding`."""
        ...

    @property
    def discarding(self) -> bool:
        """Input overflowed: everything is ignored until `reset` (after a quiet guard)."""
        ...

    def feed(self, data: bytes) -> list[PortRequest]:
        """The requests completed by `data` (bytes the program wrote), in order."""
        ...

    def flush(self) -> list[PortRequest]:
        """The program fell quiet (3.5 character times): requests that ends; the
        rest of a partial request is dropped (modbus-rtu; a no-op elsewhere)."""
        ...

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        """The bytes to write for the call of `tag` that ended with this status and
        data (line: text); b"" when there is nothing to write (status None)."""
        ...

    def event(self, data: bytes, text: str | None) -> bytes:
        """The bytes to write for one device event."""
        ...

    def reset(self) -> None:
        """Forget partial input and end `discarding` (the port was quiet for the guard)."""
        ...


class _Bounded:
    """The `ignored` / `discarding` bookkeeping every framing shares."""

    def __init__(self) -> None:
        self.bad_frames = 0
        self.ignored = 0
        self.discarding = False

    def _discard(self, count: int) -> None:
        """`count` bytes could not become a request: ignore them and all that follows."""
        self.ignored += count
        self.discarding = True

    def flush(self) -> list[PortRequest]:
        return []  # self-delimiting framings: silence ends nothing


class VerlPortFraming(_Bounded):
    """`verl`: request frames in (the sim's decoder), reply frames with the program's seq out."""

    def __init__(self, max_payload: int) -> None:
        super().__init__()
        self._device = VerlPersonality(max_payload)
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
                self._device.reset()
                self._run = 0
                return requests
            start += len(piece) + 1
            run = 0
        self._run = len(data) - data.rfind(0) - 1 if 0 in data else self._run + len(data)
        return self._decode(data)

    def _decode(self, data: bytes) -> list[PortRequest]:
        requests = [PortRequest(seq, payload) for seq, payload in self._device.decode(data)]
        self.bad_frames = self._device.bad_frames + self._device.oversize
        return requests

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        if status is None:
            return b""
        return encode_frame(Kind.REPLY, tag or 0, bytes((status,)) + data)

    def event(self, data: bytes, text: str | None) -> bytes:
        return self._device.encode_event(data)

    def reset(self) -> None:
        self._device.reset()
        self._run = 0
        self.discarding = False


class LengthPortFraming(_Bounded):
    """`length`: length-prefixed requests in, length + status + data out."""

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
        if status is None:
            return b""
        return length_encode(bytes((status,)) + data)

    def event(self, data: bytes, text: str | None) -> bytes:
        return length_encode(data)

    def reset(self) -> None:
        self._decoder.reset()
        self._buffered = 0
        self.discarding = False


class LinePortFraming(_Bounded):
    """`line`: each line the program writes is a call; answers go back line by line."""

    def __init__(self, max_payload: int, terminator: str = "\n", encoding: str = "utf-8") -> None:
        super().__init__()
        self._terminator = terminator.encode(encoding)
        self._newline = "\n".encode(encoding)  #: what joins a multi-line reply's data
        self._encoding = encoding
        self._splitter = LineSplitter(self._terminator, max_payload)
        self._since = 0  #: bytes fed since the last line ended (the one being received)

    def feed(self, data: bytes) -> list[PortRequest]:
        if self.discarding:
            self.ignored += len(data)
            return []
        # Fed in pieces that each end at the terminator's last byte, the splitter ends
        # at most one line per piece, so an overlong one is caught where it is.
        splitter, last = self._splitter, self._terminator[-1]
        requests = []
        pos, size = 0, len(data)
        while pos < size:
            cut = data.find(last, pos)
            end = size if cut < 0 else cut + 1
            dropped = splitter.bad_frames
            lines = splitter.feed(data[pos:end])
            self._since += end - pos
            if splitter.bad_frames != dropped:  # an overlong line
                self._discard(self._since + size - end)
                splitter.reset()
                self._since = 0
                break
            if lines:
                self._since = 0
                requests += [PortRequest(None, line) for line in lines]
            pos = end
        return requests

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        return b"" if status is None else self._lines(data, text)

    def event(self, data: bytes, text: str | None) -> bytes:
        return self._lines(data, text)

    def _lines(self, data: bytes, text: str | None) -> bytes:
        """The text's lines (or, without text, data's), each with the terminator."""
        if text is None:
            lines = data.split(self._newline)
        else:
            lines = [line.encode(self._encoding, "replace") for line in text.split("\n")]
        return b"".join(line + self._terminator for line in lines)

    def reset(self) -> None:
        self._splitter.reset()
        self._since = 0
        self.discarding = False


def _known_length(fc: int) -> bool:
    """True when a request's length follows from its bytes (`rtu_request_length`)."""
    return rtu_request_length(bytes((0, fc)) + bytes(12)) is not None


class ModbusRtuPortFraming(_Bounded):
    """`modbus-rtu`: CRC-checked RTU requests in, RTU responses out."""

    def __init__(self) -> None:
        super().__init__()
        self._buf = bytearray()
        self._noise = False  #: a run of dropped bytes is being counted (as one)

    def feed(self, data: bytes) -> list[PortRequest]:
        if self.discarding:
            self.ignored += len(data)
            return []
        self._buf += data
        return self._scan(final=False)

    def flush(self) -> list[PortRequest]:
        if self.discarding:
            return []
        requests = self._scan(final=True)
        self._noise = False  # the next run of noise is another bad frame
        return requests

    def _scan(self, *, final: bool) -> list[PortRequest]:
        """Cut requests off the buffer; `final`: the line is quiet, nothing more comes."""
        buf = self._buf
        requests: list[PortRequest] = []
        while buf:
            if len(buf) >= 2 and (buf[0] > MAX_RTU_UNIT or not 1 <= buf[1] <= 0x7F):
                self._drop()  # no request starts with this unit and function code
                continue
            length = rtu_request_length(buf)
            if length is None:
                if len(buf) >= 2 and not _known_length(buf[1]):
                    if not final:  # only silence ends it, and it can be no longer
                        if len(buf) > MAX_RTU_FRAME:
                            self._discard(len(buf))
                            buf.clear()
                        break
                    length = len(buf)
                elif not final:
                    break  # its length needs more bytes
                else:
                    self._drop()  # incomplete at silence
                    continue
            if not _MIN_RTU_FRAME <= length <= MAX_RTU_FRAME:
                self._drop()
                continue
            if len(buf) < length:
                if not final:
                    break
                self._drop()
                continue
            body = bytes(buf[: length - 2])
            crc = buf[length - 2] | buf[length - 1] << 8
            if crc16(body) != crc or check_request(body, rtu=True) is not None:
                self._drop()
                continue
            del buf[:length]
            self._noise = False
            requests.append(PortRequest(None, body))
        return requests

    def _drop(self) -> None:
        """No request starts at the first byte: drop it (a run of them is one bad frame)."""
        del self._buf[:1]
        if not self._noise:
            self._noise = True
            self.bad_frames += 1

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        return b"" if status is None or not data else rtu_frame(data)

    def event(self, data: bytes, text: str | None) -> bytes:
        return b""  # Modbus has no events

    def reset(self) -> None:
        self._buf.clear()
        self._noise = False
        self.discarding = False


class ModbusTcpPortFraming(_Bounded):
    """`modbus-tcp`: MBAP requests in (the sim's decoder), MBAP responses with their tid out."""

    def __init__(self) -> None:
        super().__init__()
        self._device = ModbusTcpPersonality(ModbusSlave(()))  # only its framing is used
        self._buffered = 0  #: bytes fed that no request has used yet

    def feed(self, data: bytes) -> list[PortRequest]:
        if self.discarding:
            self.ignored += len(data)
            return []
        headers = self._device.bad_frames
        decoded = self._device.decode(data)
        self._buffered += len(data) - sum(_MBAP_HEAD + len(r.payload) for r in decoded)
        if self._device.bad_frames != headers:  # an impossible header: it dropped its buffer
            self._discard(self._buffered)
            self._device.reset()
            self._buffered = 0
        requests = []
        for tid, payload in decoded:
            if check_request(payload, rtu=False) is None:
                requests.append(PortRequest(tid, payload))
            else:
                self.bad_frames += 1
        return requests

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        return b"" if status is None or not data else mbap_frame(tag or 0, data)

    def event(self, data: bytes, text: str | None) -> bytes:
        return b""  # Modbus has no events

    def reset(self) -> None:
        self._device.reset()
        self._buffered = 0
        self.discarding = False


def make_port_framing(cfg: Config) -> PortFraming:
    """The device side of `device.codec`, with its settings."""
    dev = cfg.device
    if dev.codec == "verl":
        return VerlPortFraming(dev.max_payload)
    if dev.codec == "length":
        return LengthPortFraming(dev.max_payload)
    if dev.codec == "modbus-rtu":
        return ModbusRtuPortFraming()
    if dev.codec == "modbus-tcp":
        return ModbusTcpPortFraming()
    if dev.codec == "line":
        return LinePortFraming(dev.max_payload, dev.line.terminator, dev.line.encoding)
    raise ValueError(f"unknown codec {dev.codec!r}")
