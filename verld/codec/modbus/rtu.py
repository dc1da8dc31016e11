"""The `modbus-rtu` codec: verld as the master on a serial Modbus line.

Wire: unit + PDU + CRC-16/MODBUS, low byte first. One call at a time. A call's
data is the unit id and the PDU; see `verld.codec.modbus` for replies and
exception responses.

Strategy (host side, `ModbusRtuCodec`): a Modbus RTU frame has no delimiter; a
real receiver ends it at 3.5 character times of silence. The codec has no clock,
so it finds the end of a response from its function code (`rtu_response_length`)
and checks the CRC; for a function code whose response length is not known from
its bytes, the session calls `flush` on a quiet line and the buffered bytes are
judged as one frame. Resync is by hunting: bytes are dropped until one equals the
outstanding request's unit and is followed by its function code (or fc | 0x80); a
candidate that fails (bad CRC, impossible length, exception code 0) loses its
first byte and the hunt goes on. All bytes dropped in one run (until a frame is
accepted, a call is sent or the line falls quiet) count as one bad frame. Bytes
that arrive with no call outstanding, or after its reply, are dropped the same
way. `flush` ends every candidate: whatever is buffered then is scanned once more
as complete, and what is left is dropped. RTU never sets `desync`.

The device side (requests in, responses out) is in `verld.codec.modbus.rtu_device`.
"""

from __future__ import annotations

from verld.codec.base import Inbound, Kind
from verld.codec.modbus.pdu import MAX_PDU, response_shape
from verld.codec.modbus.rtu_device import ModbusRtuPortFraming
from verld.codec.modbus.wire import (
    MAX_RTU_FRAME,
    MIN_RTU_FRAME,
    check_ping,
    check_request,
    crc16,
    device_ping,
    known_response,
    rtu_frame,
    rtu_response_length,
)
from verld.codec.spec import CodecSpec

__all__ = ["MODBUS_RTU", "ModbusRtuCodec"]

_KIND_REPLY = Kind.REPLY
_new_tuple = tuple.__new__


class ModbusRtuCodec:
    """The daemon side of `modbus-rtu` (`LinkCodec`): one call at a time, CRC-checked."""

    pipelined = False
    desync: str | None = None  #: RTU resyncs by hunting: never out of step

    def __init__(self, max_payload: int) -> None:
        #: frames and runs of noise dropped since creation (a monotonic counter)
        self.bad_frames = 0
        #: replies longer than this (unit + PDU) are dropped
        self._max_data = min(max_payload, 1 + MAX_PDU)
        self._buf = bytearray()
        #: the outstanding request's (unit, function code); None once answered
        self._pending: tuple[int, int] | None = None
        #: what the pending call's normal response must hold: its byte count (reads)
        #: or the echo of address and value/quantity (writes); None: not checked
        self._count: int | None = None
        self._echo: bytes | None = None
        self._noise = False  #: a run of dropped bytes is being counted (as one)

    def encode_request(self, seq: int, payload: bytes) -> bytes:
        """The RTU frame of `payload` (unit + PDU), now the pending call; the seq is ignored."""
        reason = check_request(payload, rtu=True)
        if reason is not None:
            raise ValueError(reason)
        if self._buf:  # leftovers of an earlier exchange cannot be this call's reply
            self._drop(len(self._buf))
        self._noise = False
        self._pending = (payload[0], payload[1])
        self._count, self._echo = response_shape(payload[1:])
        return rtu_frame(payload)

    def feed(self, data: bytes, awaiting_reply: bool) -> list[Inbound]:
        """The reply, if `data` completes it; everything else is dropped and counted."""
        if not data:
            return []
        if not awaiting_reply or self._pending is None:
            self._buf.clear()
            self._count_noise()
            return []
        self._buf += data
        return self._scan(final=False)

    def expect_nothing(self) -> None:
        """The request just encoded was a broadcast: nothing that comes is its reply."""
        self._pending = None

    @property
    def partial(self) -> bool:
        """A reply whose length its bytes do not tell is buffered: only the line falling
        quiet (`flush`) ends it. A reply of known length is never ended by silence: a
        USB adapter (or a paced line) may pause in mid-frame for longer than 3.5
        characters, so it is waited for until the call's timeout."""
        buf = self._buf
        return len(buf) >= 2 and self._pending is not None and not known_response(buf[1])

    def flush(self) -> list[Inbound]:
        """The line fell quiet (3.5 character times): frames it completes; the rest is dropped."""
        messages = self._scan(final=True) if self._pending is not None else []
        if self._buf:
            self._drop(len(self._buf))
        self._noise = False
        return messages

    def reset(self) -> None:
        """Forget partial input and the pending call (the link was reopened, or a guard ended)."""
        self._buf.clear()
        self._pending = None
        self._noise = False

    def _count_noise(self) -> None:
        if not self._noise:
            self._noise = True
            self.bad_frames += 1

    def _drop(self, count: int) -> None:
        del self._buf[:count]
        self._count_noise()

    def _scan(self, *, final: bool) -> list[Inbound]:
        """Hunt for the pending call's reply in the buffer; `final`: no more bytes will come."""
        buf = self._buf
        while buf and self._pending is not None:
            unit, fc = self._pending
            start = buf.find(unit)
            if start < 0:
                self._drop(len(buf))
                break
            if start:
                self._drop(start)
            if len(buf) >= 2 and buf[1] != fc and buf[1] != fc | 0x80:
                self._drop(1)
                continue
            length = rtu_response_length(buf)
            if length is None:
                if not final:
                    if len(buf) > MAX_RTU_FRAME:  # an unknown-length frame can be no longer
                        self._drop(1)
                        continue
                    break
                if len(buf) >= 2 and not known_response(buf[1]):
                    length = min(len(buf), MAX_RTU_FRAME)  # silence ends it
                else:
                    self._drop(1)  # incomplete at silence
                    continue
            if length > MAX_RTU_FRAME or length < MIN_RTU_FRAME:
                self._drop(1)
                continue
            if len(buf) < length:
                if not final:
                    break
                self._drop(1)
                continue
            message = self._check(bytes(buf[:length]))
            if message is None:
                self._drop(1)
                continue
            del buf[:length]
            self._pending = None
            self._noise = False
            if buf:  # nothing may follow the reply
                self._drop(len(buf))
            return [message]
        return []

    def _check(self, frame: bytes) -> Inbound | None:
        """The reply in a candidate frame (unit and fc already match), or None if it is bad."""
        body = frame[:-2]
        if crc16(body) != frame[-2] | frame[-1] << 8:
            return None
        if body[1] & 0x80:
            code = body[2]
            return None if code == 0 else _new_tuple(Inbound, (_KIND_REPLY, None, code, body, None))
        if len(body) > self._max_data:
            return None
        # The response of another request of this unit and function (a late one) must
        # not pass for this one's where its shape tells them apart.
        if self._count is not None and body[2] != self._count:
            return None
        if self._echo is not None and body[2:6] != self._echo:
            return None
        return _new_tuple(Inbound, (_KIND_REPLY, None, 0, body, None))


MODBUS_RTU = CodecSpec(
    "modbus-rtu",
    host=lambda cfg: ModbusRtuCodec(cfg.device.max_payload),
    device=lambda cfg: ModbusRtuPortFraming(),
    device_ping=device_ping,
    bus=True,
    rtu=True,
    events=False,
    retry=1,
    check=lambda cfg: check_ping(cfg, rtu=True),
)
