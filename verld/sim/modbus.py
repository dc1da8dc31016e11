"""The simulated device as a Modbus slave (`--codec modbus-rtu` / `modbus-tcp`), without I/O.

Strategy: `ModbusSlave` is the register map of every served unit and answers
one request (unit + PDU) with one response (unit + PDU), or None: a unit it
does not serve stays silent, like an offline slave on the bus. It owns the
tables; the PDUs are parsed and built by the device side of
`verld.codec.modbus.pdu`. The two
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
from collections.abc import Iterable

from verld.codec.modbus import MbapSplitter, RtuRequestScanner, mbap_frame, pdu, rtu_frame
from verld.sim.personality import Request, Response

__all__ = [
    "SIZE",
    "ModbusRtuPersonality",
    "ModbusSlave",
    "ModbusTcpPersonality",
    "Unit",
    "parse_units",
]

SIZE = 100  #: coils, discrete inputs, holding and input registers per unit


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


def _check_range(unit: Unit, address: int, count: int) -> None:
    if address + count > unit.size:
        raise pdu.DeviceException(pdu.ILLEGAL_DATA_ADDRESS)


#: the function codes a broadcast may carry
_WRITES = frozenset(pdu.SINGLE_WRITES + pdu.MULTIPLE_WRITES)


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
        unit_id, fc = request[0], request[1]
        if unit_id == 0 and self.broadcast:
            if fc in _WRITES:
                for each in self.units.values():
                    try:
                        _run(each, request[1:])
                    except pdu.DeviceException:
                        pass  # (no answer to say so: a broadcast is never answered)
            return None
        unit = self.units.get(unit_id)
        if unit is None:
            return None
        try:
            response = _run(unit, request[1:])
        except pdu.DeviceException as exc:
            response = pdu.exception_response(fc, exc.code)
        return bytes((unit_id,)) + response


def _run(unit: Unit, request: bytes) -> bytes:
    """The response PDU to the request PDU `request` (DeviceException: an exception's)."""
    parsed = pdu.parse_request(request)
    fc = parsed.fc
    if isinstance(parsed, pdu.ReadRequest):
        address, count = parsed.address, parsed.count
        _check_range(unit, address, count)
        if fc in pdu.READ_BITS:
            bits = unit.coils if fc == pdu.FunctionCode.READ_COILS else unit.discrete
            return pdu.read_bits_response(fc, bits[address : address + count])
        registers = unit.holding if fc == pdu.FunctionCode.READ_HOLDING_REGISTERS else unit.input
        return pdu.read_registers_response(fc, registers[address : address + count])
    if isinstance(parsed, pdu.WriteSingle):
        _check_range(unit, parsed.address, 1)
        if fc == pdu.FunctionCode.WRITE_SINGLE_COIL:
            unit.coils[parsed.address] = parsed.value == pdu.COIL_ON
        else:
            unit.holding[parsed.address] = parsed.value
        return pdu.write_response(parsed)
    address, values = parsed.address, parsed.values
    _check_range(unit, address, len(values))
    if fc == pdu.FunctionCode.WRITE_MULTIPLE_COILS:
        unit.coils[address : address + len(values)] = bytes(values)
    else:
        unit.holding[address : address + len(values)] = values
    return pdu.write_response(parsed)


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
