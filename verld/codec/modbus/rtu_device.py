"""The device side of `modbus-rtu`: requests in, RTU responses out.

A slave finds where a request ends from its function code (`rtu_request_length`);
one whose length its bytes do not tell is ended by 3.5 character times of silence.
Two scanners, for two kinds of device:

- `ModbusRtuPortFraming`, a virtual port (`PortFraming`; its front watches the
  clock): CRC-checked frames are calls (unit + PDU); a frame that fails (bad CRC,
  impossible length, not a valid request) loses its first byte and the hunt goes
  on, each run of dropped bytes one bad frame. A candidate with a function code of
  unknown length holds the hunt until `flush`, which ends it (or, if it fails,
  hunts on through what is buffered) and drops whatever is left. The reply is the
  unit + PDU in an RTU frame.
- `RtuRequestScanner`, the simulator, which has no 3.5-character timer: a request
  of unknown length ends at the first position whose CRC matches. A frame with a
  bad CRC loses its first byte and the hunt goes on; each run of dropped bytes
  counts as one bad frame.
"""

from __future__ import annotations

from verld.codec.base import Bounded, PortRequest
from verld.codec.modbus.wire import (
    MAX_RTU_FRAME,
    MAX_RTU_UNIT,
    MIN_RTU_FRAME,
    check_request,
    crc16,
    known_request,
    rtu_frame,
    rtu_request_length,
)

__all__ = ["ModbusRtuPortFraming", "RtuRequestScanner"]


class ModbusRtuPortFraming(Bounded):
    """`modbus-rtu` for a port (`PortFraming`): CRC-checked RTU requests in, RTU responses out."""

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
                if len(buf) >= 2 and not known_request(buf[1]):
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
            if not MIN_RTU_FRAME <= length <= MAX_RTU_FRAME:
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


class RtuRequestScanner:
    """RTU requests (unit + PDU, CRC checked and stripped) for a device without a clock."""

    def __init__(self) -> None:
        #: runs of dropped bytes since creation (a monotonic counter)
        self.bad_frames = 0
        self._buf = bytearray()
        self._noise = False  #: a run of dropped bytes is being counted (as one)

    def feed(self, data: bytes) -> list[bytes]:
        """The requests completed by `data`, in order."""
        self._buf += data
        requests: list[bytes] = []
        buf = self._buf
        while len(buf) >= 2:
            length = self._length(buf)
            if length is None:
                break  # need more bytes
            if length < 0:
                self._drop()  # no frame can start here
                continue
            frame = buf[:length]
            if crc16(frame[:-2]) != frame[-2] | frame[-1] << 8:
                self._drop()
                continue
            requests.append(bytes(frame[:-2]))
            del buf[:length]
            self._noise = False
        return requests

    def _length(self, buf: bytearray) -> int | None:
        """The length of the frame starting `buf`; None: need more bytes; -1: impossible."""
        length = rtu_request_length(buf)
        if length is None and known_request(buf[1]):
            return None  # a known function code: its length needs more bytes
        if length is None:
            # An unknown function code: the first CRC that matches ends it.
            for end in range(MIN_RTU_FRAME, min(len(buf), MAX_RTU_FRAME) + 1):
                if crc16(buf[: end - 2]) == buf[end - 2] | buf[end - 1] << 8:
                    return end
            return -1 if len(buf) >= MAX_RTU_FRAME else None
        if not MIN_RTU_FRAME <= length <= MAX_RTU_FRAME:
            return -1
        return length if len(buf) >= length else None

    def _drop(self) -> None:
        del self._buf[:1]
        if not self._noise:
            self._noise = True
            self.bad_frames += 1

    def reset(self) -> None:
        """Forget partial input."""
        self._buf.clear()
        self._noise = False
