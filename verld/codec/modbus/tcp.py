"""The `modbus-tcp` codec: verld as a Modbus TCP client, and the MBAP request splitter.

Wire: the MBAP header (transaction id = verld's seq u16 BE, protocol id 0 u16,
length = 1 + PDU length u16 BE, unit u8) + PDU, no CRC. A call's data is the unit
id and the PDU; see `verld.codec.modbus` for replies and exception responses.

Host side (`ModbusTcpCodec`): calls are pipelined and replies matched by
transaction id (`Inbound.seq`). A reply whose transaction id is not outstanding is
passed up as a reply with that seq (the session counts it stale). The length field
frames the stream, so a protocol id other than 0 or a length outside 2..254 means
the stream is out of step: it is counted, `desync` is set and nothing more is
decoded until `reset`.

Device side: `MbapSplitter` cuts `(transaction id, unit + PDU)` requests out of a
byte stream by the MBAP length; on an impossible header it drops what it holds and
says why in `malformed`. Every device side uses it: the Modbus TCP server front
(which closes the connection), the simulator (which counts a bad frame and reads
on) and `ModbusTcpPortFraming`, a virtual port: MBAP frames are calls, tagged with
the transaction id; the reply is MBAP with the same id. A request with a function
code outside 1..127 is dropped and counted; an impossible header puts the port out
of step (see `verld.codec.base`, bounds).
"""

from __future__ import annotations

from verld.codec.base import Bounded, Inbound, Kind, PortRequest
from verld.codec.modbus.pdu import MAX_PDU
from verld.codec.modbus.wire import (
    MBAP,
    MBAP_HEAD,
    check_ping,
    check_request,
    device_ping,
    mbap_frame,
)
from verld.codec.spec import CodecSpec

__all__ = ["MODBUS_TCP", "MbapSplitter", "ModbusTcpCodec", "ModbusTcpPortFraming"]

_KIND_REPLY = Kind.REPLY
#: transactions remembered for matching; older unanswered ones are forgotten
_MAX_PENDING = 4096
_new_tuple = tuple.__new__


class ModbusTcpCodec:
    """The daemon side of `modbus-tcp` (`LinkCodec`): pipelined, matched by transaction id."""

    pipelined = True

    def __init__(self, max_payload: int) -> None:
        #: frames dropped since creation (a monotonic counter)
        self.bad_frames = 0
        #: set (to a reason) when an MBAP header is impossible: the link must be reopened
        self.desync: str | None = None
        self._max_data = min(max_payload, 1 + MAX_PDU)
        self._buf = bytearray()
        #: outstanding transactions: tid → (unit, function code), oldest first (bounded)
        self._pending: dict[int, tuple[int, int]] = {}

    def encode_request(self, seq: int, payload: bytes) -> bytes:
        """The MBAP frame of `payload` (unit + PDU) with transaction id `seq`."""
        reason = check_request(payload, rtu=False)
        if reason is not None:
            raise ValueError(reason)
        frame = mbap_frame(seq, payload)
        pending = self._pending
        pending.pop(seq, None)  # (re-added last: the dict stays in sending order)
        pending[seq] = (payload[0], payload[1])
        if len(pending) > _MAX_PENDING:  # tids that never got an answer: the oldest go
            del pending[next(iter(pending))]
        return frame

    def feed(self, data: bytes, awaiting_reply: bool) -> list[Inbound]:
        """Replies completed by `data`, with their transaction ids; `awaiting_reply` is moot."""
        if self.desync is not None:
            return []
        buf = self._buf
        buf += data
        messages: list[Inbound] = []
        pos = 0
        end = len(buf)
        while end - pos >= 6:
            tid, protocol, length = MBAP.unpack_from(buf, pos)
            if protocol != 0 or not 2 <= length <= 1 + MAX_PDU:
                self.bad_frames += 1
                self.desync = (
                    f"MBAP protocol id {protocol}"
                    if protocol != 0
                    else f"MBAP length {length} is not in 2..{1 + MAX_PDU}"
                )
                buf.clear()
                return messages
            if end - pos - 6 < length:
                break
            body = bytes(buf[pos + 6 : pos + 6 + length])
            pos += 6 + length
            message = self._check(tid, body)
            if message is None:
                self.bad_frames += 1
            else:
                messages.append(message)
        del buf[:pos]
        return messages

    def reset(self) -> None:
        """Forget partial input, any desync and the outstanding transactions (link reopened)."""
        self.desync = None
        self._buf.clear()
        self._pending.clear()

    def _check(self, tid: int, body: bytes) -> Inbound | None:
        """The reply in one framed unit + PDU, or None if it is bad."""
        fc = body[1]
        pending = self._pending.get(tid)
        if pending is not None:
            unit, want = pending
            if body[0] != unit or fc & 0x7F != want:
                return None
        if fc & 0x80:
            if len(body) != 3 or body[2] == 0:
                return None
            status = body[2]
        elif len(body) > self._max_data:
            return None
        else:
            status = 0
        if pending is not None:
            del self._pending[tid]
        return _new_tuple(Inbound, (_KIND_REPLY, tid, status, body, None))


# --- the device side ---------------------------------------------------------


class MbapSplitter:
    """One stream's requests, cut out of its bytes by the MBAP header."""

    __slots__ = ("_buf", "malformed")

    def __init__(self) -> None:
        #: why the last `feed` dropped what was buffered (an impossible header), else None
        self.malformed: str | None = None
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The complete requests in `data` (and what was buffered): (tid, unit + PDU).

        An impossible header ends the scan: the requests before it are returned, the
        rest is dropped and `malformed` says why.
        """
        self.malformed = None
        buf = self._buf
        buf += data
        out: list[tuple[int, bytes]] = []
        pos, end = 0, len(buf)
        while end - pos >= MBAP_HEAD:
            tid, protocol, length = MBAP.unpack_from(buf, pos)
            if protocol != 0:
                return self._drop(out, f"MBAP protocol id {protocol}, not 0")
            if not 2 <= length <= 1 + MAX_PDU:
                return self._drop(out, f"MBAP length {length} is not in 2..{1 + MAX_PDU}")
            if end - pos - MBAP_HEAD < length:
                break
            out.append((tid, bytes(buf[pos + MBAP_HEAD : pos + MBAP_HEAD + length])))
            pos += MBAP_HEAD + length
        del buf[:pos]
        return out

    def _drop(self, out: list[tuple[int, bytes]], reason: str) -> list[tuple[int, bytes]]:
        self._buf.clear()
        self.malformed = reason
        return out

    def reset(self) -> None:
        """Forget partial input."""
        self._buf.clear()
        self.malformed = None


class ModbusTcpPortFraming(Bounded):
    """`modbus-tcp` for a port (`PortFraming`): MBAP requests in, MBAP responses with
    their transaction id out."""

    def __init__(self) -> None:
        super().__init__()
        self._splitter = MbapSplitter()
        self._buffered = 0  #: bytes fed that no request has used yet

    def feed(self, data: bytes) -> list[PortRequest]:
        if self.discarding:
            self.ignored += len(data)
            return []
        decoded = self._splitter.feed(data)
        self._buffered += len(data) - sum(MBAP_HEAD + len(body) for _, body in decoded)
        if self._splitter.malformed is not None:  # it dropped its buffer
            self._discard(self._buffered)
            self._splitter.reset()
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
        self._splitter.reset()
        self._buffered = 0
        self.discarding = False


MODBUS_TCP = CodecSpec(
    "modbus-tcp",
    host=lambda cfg: ModbusTcpCodec(cfg.device.max_payload),
    device=lambda cfg: ModbusTcpPortFraming(),
    device_ping=device_ping,
    pipelined=True,
    bus=True,
    events=False,
    retry=1,
    check=lambda cfg: check_ping(cfg, rtu=False),
)
