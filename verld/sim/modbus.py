"""The simulated device as a Modbus slave (`--codec modbus-rtu` / `modbus-tcp`), without I/O.

Strategy: `ModbusSlave` is the register map of every served unit and answers
one request (unit + PDU) with one response (unit + PDU), or None: a unit it
does not serve stays silent, like an offline slave on the bus. The two
personalities (`ModbusRtuPersonality`, `ModbusTcpPersonality`) only frame: they
split the input into requests with the codecs' device side (`verld.codec.modbus`)
and wrap each response again, so the `Device` applies the faults (hang, drop,
latency/jitter, garbage, corrupt) as on every other codec.

RTU has no delimiter and the sim no 3.5-character timer: a request ends where
its function code says, or at the first matching CRC (`RtuRequestScanner`). TCP
is framed by the MBAP length (`MbapSplitter`); a protocol id other than 0 or a
length outside 2..254 drops what is buffered and counts a bad frame.

Each unit holds `SIZE` coils, discrete inputs, holding and input registers,
initially: coil i = i % 2, discrete input i = (i // 2) % 2, holding register
i = i, input register i = 1000 + i. Writes (fc 5, 6, 15, 16) change them.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable

from verld.codec.modbus import MbapSplitter, RtuRequestScanner, mbap_frame, rtu_frame
from verld.sim.personality import Request, Response

__all__ = [
    "ILLEGAL_ADDRESS",
    "ILLEGAL_FUNCTION",
    "ILLEGAL_VALUE",
    "SIZE",
    "ModbusRtuPersonality",
    "ModbusSlave",
    "ModbusTcpPersonality",
    "Unit",
    "parse_units",
]

SIZE = 100  #: coils, discrete inputs, holding and input registers per unit
ILLEGAL_FUNCTION, ILLEGAL_ADDRESS, ILLEGAL_VALUE = 0x01, 0x02, 0x03
MAX_READ_BITS, MAX_READ_REGISTERS = 2000, 125
MAX_WRITE_BITS, MAX_WRITE_REGISTERS = 1968, 123
_ADDR_COUNT = struct.Struct(">HH")


class ModbusError(Exception):
    """A request answered with an exception response (`code` 1..3)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Unit:
    """One slave's four tables, `size` entries each, in their initial state."""

    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        self.coils = bytearray(i % 2 for i in range(size))
        self.discrete = bytearray((i // 2) % 2 for i in range(size))
        self.holding = [i & 0xFFFF for i in range(size)]
        self.input = [(1000 + i) & 0xFFFF for i in range(size)]


def parse_units(text: str) -> tuple[int, ...]:
    """`1,2,7` → (1, 2, 7): unit ids 0..255, no repeats; ValueError otherwise."""
    units: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part.isdigit() or not 0 <= int(part) <= 255:
            raise ValueError(f"a unit id is 0..255, got {part!r}")
        if int(part) in units:
            raise ValueError(f"unit {part} given twice")
        units.append(int(part))
    return tuple(units)


def _bits(values: bytes | bytearray) -> bytes:
    """Pack 0/1 values LSB first, 8 to a byte (the coil / discrete input layout)."""
    out = bytearray((len(values) + 7) // 8)
    for i, value in enumerate(values):
        if value:
            out[i // 8] |= 1 << (i % 8)
    return bytes(out)


def _check_range(unit: Unit, address: int, count: int) -> None:
    if address + count > unit.size:
        raise ModbusError(ILLEGAL_ADDRESS)


def _addr_count(data: bytes, most: int, *, exact: bool = False) -> tuple[int, int]:
    """Address and quantity of a read (`exact`: no more data) or multiple write.

    Exception 03 for a bad quantity or a request of the wrong length.
    """
    if len(data) < 4 or (exact and len(data) != 4):
        raise ModbusError(ILLEGAL_VALUE)
    address, count = _ADDR_COUNT.unpack_from(data)
    if not 1 <= count <= most:
        raise ModbusError(ILLEGAL_VALUE)
    return address, count


_WRITES = frozenset({0x05, 0x06, 0x0F, 0x10})  #: the function codes a broadcast may carry


class ModbusSlave:
    """The register maps of the served units; `handle` answers one request."""

    def __init__(
        self, units: Iterable[int] = (1,), size: int = SIZE, *, broadcast: bool = False
    ) -> None:
        self.units = {unit: Unit(size) for unit in units}
        self.broadcast = broadcast  #: RTU: unit 0 is every unit, and nobody answers

    def handle(self, request: bytes) -> bytes | None:
        """The response (unit + PDU) to `request` (unit + PDU), or None: stay silent.

        Silent for a unit not served and for a request without a function code
        in 1..127; exception 01 for a function code other than 1–6, 15, 16. With
        `broadcast` (RTU), a write to unit 0 is done by every unit, unanswered.
        """
        if len(request) < 2 or not 1 <= request[1] <= 0x7F:
            return None
        unit_id, fc, data = request[0], request[1], request[2:]
        if unit_id == 0 and self.broadcast:
            if fc in _WRITES:
                for each in self.units.values():
                    try:
                        self._run(each, fc, data)
                    except ModbusError:
                        pass  # (no answer to say so: a broadcast is never answered)
            return None
        unit = self.units.get(unit_id)
        if unit is None:
            return None
        try:
            pdu = self._run(unit, fc, data)
        except ModbusError as exc:
            pdu = bytes((fc | 0x80, exc.code))
        return bytes((unit_id,)) + pdu

    def _run(self, unit: Unit, fc: int, data: bytes) -> bytes:
        if fc in (0x01, 0x02):
            address, count = _addr_count(data, MAX_READ_BITS, exact=True)
            _check_range(unit, address, count)
            table = unit.coils if fc == 0x01 else unit.discrete
            packed = _bits(table[address : address + count])
            return bytes((fc, len(packed))) + packed
        if fc in (0x03, 0x04):
            address, count = _addr_count(data, MAX_READ_REGISTERS, exact=True)
            _check_range(unit, address, count)
            regs = (unit.holding if fc == 0x03 else unit.input)[address : address + count]
            return bytes((fc, 2 * count)) + struct.pack(f">{count}H", *regs)
        if fc == 0x05:
            address, value = _fixed_pair(data)
            if value not in (0x0000, 0xFF00):
                raise ModbusError(ILLEGAL_VALUE)
            _check_range(unit, address, 1)
            unit.coils[address] = value == 0xFF00
            return bytes((fc,)) + data
        if fc == 0x06:
            address, value = _fixed_pair(data)
            _check_range(unit, address, 1)
            unit.holding[address] = value
            return bytes((fc,)) + data
        if fc == 0x0F:
            address, count = _addr_count(data, MAX_WRITE_BITS)
            nbytes = (count + 7) // 8
            if len(data) < 5 or data[4] != nbytes or len(data) != 5 + nbytes:
                raise ModbusError(ILLEGAL_VALUE)
            _check_range(unit, address, count)
            for i in range(count):
                unit.coils[address + i] = (data[5 + i // 8] >> (i % 8)) & 1
            return bytes((fc,)) + data[:4]
        if fc == 0x10:
            address, count = _addr_count(data, MAX_WRITE_REGISTERS)
            if len(data) < 5 or data[4] != 2 * count or len(data) != 5 + 2 * count:
                raise ModbusError(ILLEGAL_VALUE)
            _check_range(unit, address, count)
            unit.holding[address : address + count] = struct.unpack_from(f">{count}H", data, 5)
            return bytes((fc,)) + data[:4]
        raise ModbusError(ILLEGAL_FUNCTION)


def _fixed_pair(data: bytes) -> tuple[int, int]:
    """Address and value of a single write (fc 5, 6): exactly 4 bytes, else exception 03."""
    if len(data) != 4:
        raise ModbusError(ILLEGAL_VALUE)
    address, value = _ADDR_COUNT.unpack(data)
    return address, value


def _flip(chunk: bytes, start: int, rng: random.Random) -> bytes:
    """Flip one byte at `start` or after it (to another value)."""
    if len(chunk) <= start:
        return chunk
    index = rng.randrange(start, len(chunk))
    new = rng.choice([v for v in range(256) if v != chunk[index]])
    return chunk[:index] + bytes((new,)) + chunk[index + 1 :]


class ModbusRtuPersonality:
    """`modbus-rtu`: unit + PDU + CRC-16/MODBUS; one request at a time."""

    pipelined = False
    oversize = 0  #: a request is never longer than an RTU frame can be

    def __init__(self, slave: ModbusSlave) -> None:
        self.slave = slave
        self._requests = RtuRequestScanner()

    @property
    def bad_frames(self) -> int:
        return self._requests.bad_frames

    def decode(self, data: bytes) -> list[Request]:
        return [Request(0, body) for body in self._requests.feed(data)]

    def respond(self, request: Request) -> Response:
        answer = self.slave.handle(request.payload)
        return Response(0, [] if answer is None else [rtu_frame(answer)], [])

    def encode_event(self, payload: bytes) -> bytes:
        return payload  # Modbus has no events: the bytes go out as they are

    def corrupt(self, chunk: bytes, rng: random.Random) -> bytes:
        return _flip(chunk, 0, rng)  # any byte: the CRC catches it

    def reset(self) -> None:
        self._requests.reset()


class ModbusTcpPersonality:
    """`modbus-tcp`: MBAP header + PDU; the transaction id is echoed."""

    pipelined = True
    oversize = 0

    def __init__(self, slave: ModbusSlave) -> None:
        self.slave = slave
        self.bad_frames = 0
        self._requests = MbapSplitter()

    def decode(self, data: bytes) -> list[Request]:
        requests = [Request(tid, body) for tid, body in self._requests.feed(data)]
        if self._requests.malformed is not None:  # out of step: it starts afresh
            self.bad_frames += 1
        return requests

    def respond(self, request: Request) -> Response:
        answer = self.slave.handle(request.payload)
        return Response(0, [] if answer is None else [mbap_frame(request.seq, answer)], [])

    def encode_event(self, payload: bytes) -> bytes:
        return payload  # Modbus has no events: the bytes go out as they are

    def corrupt(self, chunk: bytes, rng: random.Random) -> bytes:
        return _flip(chunk, 7, rng)  # a PDU byte after the function code: framing stays

    def reset(self) -> None:
        self._requests.reset()
