"""The Modbus application PDU (function code + data), sans-I/O, for both sides.

Strategy: a PDU is what is left of a Modbus frame without its framing (the unit id,
the MBAP header, the CRC: `wire`, `rtu`, `tcp`). A verld call carries unit + PDU, so
each user takes the unit off and hands the rest here. Everything about the PDU's
fields lives in this module: the function codes and exception codes with their names,
the quantity limits, how bits are packed, and the field layouts of the function codes
verld builds and serves (fc 1-6, 15, 16). Three users, three kinds of function:

- the host side builds requests (`read_request`, `write_coil`, `write_register`,
  `write_coils`, `write_registers`: ValueError for an argument out of range) and
  reads responses (`exception_code`, `counted`, `fields`, `bit`, `unpack_bits`,
  `unpack_registers`); `response_shape` says what a normal response must hold;
- the device side parses a request (`parse_request` → `ReadRequest`, `WriteSingle`,
  `WriteMultiple`, or `DeviceException` with the code a device answers with) and
  builds the response (`read_bits_response`, `read_registers_response`,
  `write_response`, `exception_response`);
- verlctl also reads three function codes verld does not build: fc 8's sub-function
  (`sub_function`), fc 23's fields (`READ_WRITE_FIELDS`) and fc 43's device
  identification (`device_identification_request`, `device_identification`);
- a reader of a PDU that does not fit its function code gets a `PduError` subclass
  carrying the numbers (`WrongLength`, `CountMismatch`, `OddLength`, `CutObject`,
  `ExtraBytes`, `ZeroExceptionCode`), not a sentence: the client, verld-mqtt and
  verlctl each say it in their own words.
"""

from __future__ import annotations

import enum
import operator
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import SupportsIndex

MAX_PDU = 253  #: function code + data
EXCEPTION_BIT = 0x80  #: set in an exception response's function code
ILLEGAL_FUNCTION, ILLEGAL_DATA_ADDRESS, ILLEGAL_DATA_VALUE = 0x01, 0x02, 0x03
#: the standard exception codes' names (Modbus Application Protocol v1.1b3, section 7)
EXCEPTION_NAMES = {
    0x01: "illegal function",
    0x02: "illegal data address",
    0x03: "illegal data value",
    0x04: "server device failure",
    0x05: "acknowledge",
    0x06: "server device busy",
    0x08: "memory parity error",
    0x0A: "gateway path unavailable",
    0x0B: "gateway target device failed to respond",
}
MAX_READ_BITS = 2000  #: coils / discrete inputs one read may ask for
MAX_READ_REGISTERS = 125
MAX_WRITE_BITS = 1968  #: coils one fc 15 may write
MAX_WRITE_REGISTERS = 123
COIL_ON, COIL_OFF = 0xFF00, 0x0000  #: the two values of a fc 5 write
FIELDS = struct.Struct(">HH")  #: address, then a count or a value (fc 1-6, 15, 16)
#: fc 23's request: read address, read count, write address, write count
READ_WRITE_FIELDS = struct.Struct(">HHHH")
MEI_DEVICE_ID = 0x0E  #: fc 43's MEI type "read device identification"


class FunctionCode(enum.IntEnum):
    """The function codes verld builds, decodes and serves."""

    READ_COILS = 0x01
    READ_DISCRETE_INPUTS = 0x02
    READ_HOLDING_REGISTERS = 0x03
    READ_INPUT_REGISTERS = 0x04
    WRITE_SINGLE_COIL = 0x05
    WRITE_SINGLE_REGISTER = 0x06
    WRITE_MULTIPLE_COILS = 0x0F
    WRITE_MULTIPLE_REGISTERS = 0x10


#: the function codes verld names (those it builds, and a few more it can describe)
FUNCTION_NAMES: dict[int, str] = {
    0x01: "read coils",
    0x02: "read discrete inputs",
    0x03: "read holding registers",
    0x04: "read input registers",
    0x05: "write single coil",
    0x06: "write single register",
    0x08: "diagnostics",
    0x0F: "write multiple coils",
    0x10: "write multiple registers",
    0x17: "read/write multiple registers",
    0x2B: "encapsulated interface",
}
READ_BITS = (0x01, 0x02)  #: reads of coils or discrete inputs
READ_REGISTERS = (0x03, 0x04)  #: reads of holding or input registers
SINGLE_WRITES = (0x05, 0x06)  #: a response echoes address and value
MULTIPLE_WRITES = (0x0F, 0x10)  #: a response echoes address and count
#: what one request of a ranged function code counts, and how many it may
_RANGED = {
    0x01: ("coils", MAX_READ_BITS),
    0x02: ("inputs", MAX_READ_BITS),
    0x03: ("registers", MAX_READ_REGISTERS),
    0x04: ("registers", MAX_READ_REGISTERS),
    0x0F: ("coils", MAX_WRITE_BITS),
    0x10: ("registers", MAX_WRITE_REGISTERS),
}


# --- errors --------------------------------------------------------------------------
class PduError(ValueError):
    """A PDU's data that does not fit its function code; the subclass says how."""


class WrongLength(PduError):
    """`have` bytes where `need` (`at_least`: or more) were expected."""

    def __init__(self, have: int, need: int, *, at_least: bool = False) -> None:
        more = "at least " if at_least else ""
        super().__init__(f"{have} bytes of data, {more}{need} expected")
        self.have, self.need, self.at_least = have, need, at_least


class CountMismatch(PduError):
    """A byte count `count` with `have` bytes after it."""

    def __init__(self, count: int, have: int) -> None:
        super().__init__(f"byte count {count}, {have} bytes after it")
        self.count, self.have = count, have


class OddLength(PduError):
    """`have` bytes, an odd number, where 16-bit registers were expected."""

    def __init__(self, have: int) -> None:
        super().__init__(f"odd byte count {have} for 16-bit registers")
        self.have = have


class CutObject(PduError):
    """A device identification that announces `announced` objects and ends inside one."""

    def __init__(self, announced: int) -> None:
        super().__init__(f"{announced} objects announced, the data ends inside one")
        self.announced = announced


class ExtraBytes(PduError):
    """`extra` bytes after the last of a device identification's objects."""

    def __init__(self, extra: int) -> None:
        super().__init__(f"{extra} bytes after the last object")
        self.extra = extra


class ZeroExceptionCode(PduError):
    """An exception response with exception code 0 (no exception)."""

    def __init__(self) -> None:
        super().__init__("exception code 0")


class DeviceException(Exception):
    """A request a device answers with an exception response of `code`."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# --- bits and registers --------------------------------------------------------------
def bit_bytes(count: int) -> int:
    """The bytes `count` packed bits take."""
    return (count + 7) // 8


def pack_bits(values: Iterable[object]) -> bytes:
    """Bits packed LSB first: the first value is bit 0 of the first byte; the rest is zero."""
    packed = bytearray()
    for i, value in enumerate(values):
        if i % 8 == 0:
            packed.append(0)
        if value:
            packed[i >> 3] |= 1 << (i & 7)
    return bytes(packed)


def bit(packed: bytes, index: int) -> bool:
    """Bit `index` of `packed` (LSB of the first byte first)."""
    return bool(packed[index >> 3] >> (index & 7) & 1)


def unpack_bits(packed: bytes, count: int) -> list[bool]:
    """The first `count` bits of `packed` (LSB of the first byte first)."""
    return [bool(packed[i >> 3] >> (i & 7) & 1) for i in range(count)]


def unpack_registers(data: bytes) -> list[int]:
    """The 16-bit big-endian registers `data` holds; OddLength for an odd length."""
    if len(data) % 2:
        raise OddLength(len(data))
    return list(struct.unpack(f">{len(data) // 2}H", data))


# --- host side: requests -------------------------------------------------------------
def number(what: str, value: SupportsIndex, low: int, high: int) -> int:
    """`value` as an int in low..high, else ValueError naming `what`."""
    got = operator.index(value)
    if not low <= got <= high:
        raise ValueError(f"modbus: {what} {got} is not in {low}..{high}")
    return got


def _ranged(fc: int, address: int, count: int) -> bytes:
    """fc + address + count, for `count` items from `address` (fc 1-4, 15, 16)."""
    kind, most = _RANGED[fc]
    address = number("address", address, 0, 0xFFFF)
    count = number(f"count of {kind}", count, 1, most)
    if address + count > 0x10000:
        raise ValueError(f"modbus: {count} {kind} from address {address} run past address 65535")
    return bytes((fc,)) + FIELDS.pack(address, count)


def read_request(fc: int, address: int, count: int) -> bytes:
    """fc 1-4: `count` coils, inputs or registers from `address`."""
    if fc not in READ_BITS and fc not in READ_REGISTERS:
        raise ValueError(f"modbus: function code {fc} is not a read (1..4)")
    return _ranged(fc, address, count)


def write_coil(address: int, value: bool) -> bytes:
    """fc 5: set one coil on (0xFF00) or off (0x0000)."""
    address = number("address", address, 0, 0xFFFF)
    return bytes((FunctionCode.WRITE_SINGLE_COIL,)) + FIELDS.pack(
        address, COIL_ON if value else COIL_OFF
    )


def write_register(address: int, value: int) -> bytes:
    """fc 6: write one holding register (0..65535)."""
    address = number("address", address, 0, 0xFFFF)
    value = number("register value", value, 0, 0xFFFF)
    return bytes((FunctionCode.WRITE_SINGLE_REGISTER,)) + FIELDS.pack(address, value)


def write_coils(address: int, values: Sequence[bool]) -> bytes:
    """fc 15: write 1..1968 coils from `address` (values[0] at `address`)."""
    head = _ranged(FunctionCode.WRITE_MULTIPLE_COILS, address, len(values))
    packed = pack_bits(values)
    return head + bytes((len(packed),)) + packed


def write_registers(address: int, values: Sequence[int]) -> bytes:
    """fc 16: write 1..123 holding registers (each 0..65535) from `address`."""
    head = _ranged(FunctionCode.WRITE_MULTIPLE_REGISTERS, address, len(values))
    words = [number(f"register value at index {i}", v, 0, 0xFFFF) for i, v in enumerate(values)]
    return head + bytes((2 * len(words),)) + struct.pack(f">{len(words)}H", *words)


# --- host side: responses ------------------------------------------------------------
def response_shape(pdu: bytes) -> tuple[int | None, bytes | None]:
    """What the normal response to the request `pdu` must hold: (its byte count, for
    reads of bits or registers; the echo of address and value or quantity, for
    writes). None where the function code does not fix it."""
    fc, data = pdu[0], pdu[1:]
    if len(data) < 4:
        return None, None
    if fc in READ_BITS:
        quantity = data[2] << 8 | data[3]
        return (bit_bytes(quantity), None) if quantity <= MAX_READ_BITS else (None, None)
    if fc in READ_REGISTERS:
        quantity = data[2] << 8 | data[3]
        return (2 * quantity, None) if quantity <= MAX_READ_REGISTERS else (None, None)
    if fc in SINGLE_WRITES or fc in MULTIPLE_WRITES:
        return None, bytes(data[:4])
    return None, None


def is_exception(fc: int) -> bool:
    """Whether a response's function code is an exception's (fc | 0x80)."""
    return bool(fc & EXCEPTION_BIT)


def exception_code(data: bytes) -> int:
    """The code of an exception response, from its data (the bytes after fc | 0x80):
    exactly one byte, not 0."""
    if len(data) != 1:
        raise WrongLength(len(data), 1)
    if data[0] == 0:
        raise ZeroExceptionCode
    return data[0]


def counted(data: bytes, header: int = 0) -> bytes:
    """The bytes after `header` bytes and a byte count, checked against that count
    (`data`: the PDU's bytes after the function code)."""
    if len(data) < header + 1:
        raise WrongLength(len(data), header + 1, at_least=True)
    count, rest = data[header], data[header + 1 :]
    if count != len(rest):
        raise CountMismatch(count, len(rest))
    return rest


def fields(data: bytes) -> tuple[int, int]:
    """Address and count (or value) from data of exactly 4 bytes (fc 1-6 requests,
    fc 5, 6, 15, 16 responses)."""
    if len(data) != FIELDS.size:
        raise WrongLength(len(data), FIELDS.size)
    address, field = FIELDS.unpack(data)
    return address, field


# --- function codes verld describes but does not build: 8, 23, 43 ---------------------
def sub_function(data: bytes) -> tuple[int, bytes]:
    """fc 8, request and response alike (a response echoes it): the sub-function and
    its data."""
    if len(data) < 2:
        raise WrongLength(len(data), 2, at_least=True)
    return data[0] << 8 | data[1], data[2:]


def device_identification_request(data: bytes) -> tuple[int, int]:
    """fc 43 / MEI 0x0E, the data after the MEI type: the read code and the object id."""
    if len(data) != 2:
        raise WrongLength(len(data), 2)
    return data[0], data[1]


@dataclass(frozen=True, slots=True)
class DeviceIdentification:
    """fc 43 / MEI 0x0E's response: the identification objects a device sent."""

    code: int  #: the read device id code of the request
    conformity: int  #: the conformity level
    more: bool  #: more objects follow: ask again from `next_object`
    next_object: int
    objects: tuple[tuple[int, bytes], ...]  #: (object id, value)


def device_identification(data: bytes) -> DeviceIdentification:
    """fc 43 / MEI 0x0E's response, the data after the MEI type: five bytes (code,
    conformity, more, next object, number of objects), then each object's id, length
    and value."""
    if len(data) < 5:
        raise WrongLength(len(data), 5, at_least=True)
    code, conformity, more, next_object, announced = data[:5]
    objects, pos = [], 5
    for _ in range(announced):
        if pos + 2 > len(data) or pos + 2 + data[pos + 1] > len(data):
            raise CutObject(announced)
        size = data[pos + 1]
        objects.append((data[pos], bytes(data[pos + 2 : pos + 2 + size])))
        pos += 2 + size
    if pos != len(data):
        raise ExtraBytes(len(data) - pos)
    return DeviceIdentification(code, conformity, bool(more), next_object, tuple(objects))


# --- device side: requests -----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReadRequest:
    """fc 1-4: `count` coils, inputs or registers from `address`."""

    fc: int
    address: int
    count: int


@dataclass(frozen=True, slots=True)
class WriteSingle:
    """fc 5, 6: one coil (value 0xFF00 or 0x0000) or one register at `address`."""

    fc: int
    address: int
    value: int


@dataclass(frozen=True, slots=True)
class WriteMultiple:
    """fc 15, 16: `values` (coils as 0/1, or registers) from `address`."""

    fc: int
    address: int
    values: tuple[int, ...]


def parse_request(pdu: bytes) -> ReadRequest | WriteSingle | WriteMultiple:
    """The request in `pdu` (at least its function code), or DeviceException with the
    code a device answers it with: 01 for a function code other than 1-6, 15, 16; 03
    for a quantity out of range, a coil value other than on/off, or data of the wrong
    length. Whether the addresses exist is the device's to say (02)."""
    fc, data = pdu[0], pdu[1:]
    if fc in READ_BITS or fc in READ_REGISTERS:
        if len(data) != FIELDS.size:
            raise DeviceException(ILLEGAL_DATA_VALUE)
        address, count = _address_count(fc, data)
        return ReadRequest(fc, address, count)
    if fc in SINGLE_WRITES:
        if len(data) != FIELDS.size:
            raise DeviceException(ILLEGAL_DATA_VALUE)
        address, value = FIELDS.unpack(data)
        if fc == FunctionCode.WRITE_SINGLE_COIL and value not in (COIL_ON, COIL_OFF):
            raise DeviceException(ILLEGAL_DATA_VALUE)
        return WriteSingle(fc, address, value)
    if fc in MULTIPLE_WRITES:
        address, count = _address_count(fc, data)
        size = bit_bytes(count) if fc == FunctionCode.WRITE_MULTIPLE_COILS else 2 * count
        if len(data) < 5 or data[4] != size or len(data) != 5 + size:
            raise DeviceException(ILLEGAL_DATA_VALUE)
        if fc == FunctionCode.WRITE_MULTIPLE_COILS:
            values = tuple(int(bit) for bit in unpack_bits(data[5:], count))
        else:
            values = struct.unpack_from(f">{count}H", data, 5)
        return WriteMultiple(fc, address, values)
    raise DeviceException(ILLEGAL_FUNCTION)


def _address_count(fc: int, data: bytes) -> tuple[int, int]:
    """Address and quantity at the start of a ranged request; 03 for a bad quantity."""
    if len(data) < FIELDS.size:
        raise DeviceException(ILLEGAL_DATA_VALUE)
    address, count = FIELDS.unpack_from(data)
    if not 1 <= count <= _RANGED[fc][1]:
        raise DeviceException(ILLEGAL_DATA_VALUE)
    return address, count


# --- device side: responses ----------------------------------------------------------
def read_bits_response(fc: int, bits: Iterable[object]) -> bytes:
    """fc 1, 2: the byte count and the bits, packed."""
    packed = pack_bits(bits)
    return bytes((fc, len(packed))) + packed


def read_registers_response(fc: int, registers: Sequence[int]) -> bytes:
    """fc 3, 4: the byte count and the registers."""
    return bytes((fc, 2 * len(registers))) + struct.pack(f">{len(registers)}H", *registers)


def write_response(request: WriteSingle | WriteMultiple) -> bytes:
    """fc 5, 6: the echo of address and value; fc 15, 16: of address and quantity."""
    field = request.value if isinstance(request, WriteSingle) else len(request.values)
    return bytes((request.fc,)) + FIELDS.pack(request.address, field)


def exception_response(fc: int, code: int) -> bytes:
    """The exception response to a request of `fc`: fc | 0x80, then `code`."""
    return bytes((fc | EXCEPTION_BIT, code))
