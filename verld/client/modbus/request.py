"""Modbus requests, sans-I/O: the function codes and one builder per function code.

Each `Request` builder returns a call's data for verld's Modbus codecs, the unit
(1 byte) and the PDU, e.g. `Request.read_holding_registers(1, 0, 10) ==
bytes.fromhex("01030000000a")`; an argument out of range raises ValueError before
anything is built.
"""

from __future__ import annotations

import enum
import operator
import struct
from collections.abc import Sequence
from typing import SupportsIndex

__all__ = [
    "HEAD",
    "MAX_READ_BITS",
    "MAX_READ_REGISTERS",
    "MAX_WRITE_BITS",
    "MAX_WRITE_REGISTERS",
    "FunctionCode",
    "Request",
]

MAX_READ_BITS = 2000  #: coils / discrete inputs one read may ask for
MAX_READ_REGISTERS = 125
MAX_WRITE_BITS = 1968  #: coils one fc 15 may write
MAX_WRITE_REGISTERS = 123
HEAD = struct.Struct(">BBHH")  #: unit, function code, address, count (or value)
_COIL_ON, _COIL_OFF = 0xFF00, 0x0000


class FunctionCode(enum.IntEnum):
    """The function codes this package builds and decodes."""

    READ_COILS = 0x01
    READ_DISCRETE_INPUTS = 0x02
    READ_HOLDING_REGISTERS = 0x03
    READ_INPUT_REGISTERS = 0x04
    WRITE_SINGLE_COIL = 0x05
    WRITE_SINGLE_REGISTER = 0x06
    WRITE_MULTIPLE_COILS = 0x0F
    WRITE_MULTIPLE_REGISTERS = 0x10


def _number(what: str, value: SupportsIndex, low: int, high: int) -> int:
    """`value` as an int in low..high, else ValueError naming `what`."""
    number = operator.index(value)
    if not low <= number <= high:
        raise ValueError(f"modbus: {what} {number} is not in {low}..{high}")
    return number


def _head(unit: int, fc: int, address: int, count: int, most: int, kind: str) -> bytes:
    """unit + fc + address + count, for `count` items (of `kind`) from `address`."""
    unit = _number("unit", unit, 0, 255)
    address = _number("address", address, 0, 0xFFFF)
    count = _number(f"count of {kind}", count, 1, most)
    if address + count > 0x10000:
        raise ValueError(f"modbus: {count} {kind} from address {address} run past address 65535")
    return HEAD.pack(unit, fc, address, count)


def _pack_bits(values: Sequence[bool]) -> bytes:
    """Bits packed LSB first: values[0] is bit 0 of the first byte; the rest is zero."""
    packed = bytearray((len(values) + 7) // 8)
    for i, value in enumerate(values):
        if value:
            packed[i >> 3] |= 1 << (i & 7)
    return bytes(packed)


class Request:
    """The request builders: each returns the call data, unit + PDU (a namespace)."""

    @staticmethod
    def read_coils(unit: int, address: int, count: int) -> bytes:
        """fc 1: `count` (1..2000) coils from `address`."""
        return _head(unit, FunctionCode.READ_COILS, address, count, MAX_READ_BITS, "coils")

    @staticmethod
    def read_discrete_inputs(unit: int, address: int, count: int) -> bytes:
        """fc 2: `count` (1..2000) discrete inputs from `address`."""
        return _head(
            unit, FunctionCode.READ_DISCRETE_INPUTS, address, count, MAX_READ_BITS, "inputs"
        )

    @staticmethod
    def read_holding_registers(unit: int, address: int, count: int) -> bytes:
        """fc 3: `count` (1..125) holding registers from `address`."""
        return _head(
            unit,
            FunctionCode.READ_HOLDING_REGISTERS,
            address,
            count,
            MAX_READ_REGISTERS,
            "registers",
        )

    @staticmethod
    def read_input_registers(unit: int, address: int, count: int) -> bytes:
        """fc 4: `count` (1..125) input registers from `address`."""
        return _head(
            unit, FunctionCode.READ_INPUT_REGISTERS, address, count, MAX_READ_REGISTERS, "registers"
        )

    @staticmethod
    def write_coil(unit: int, address: int, value: bool) -> bytes:
        """fc 5: set one coil on (0xFF00) or off (0x0000)."""
        unit = _number("unit", unit, 0, 255)
        address = _number("address", address, 0, 0xFFFF)
        return HEAD.pack(
            unit, FunctionCode.WRITE_SINGLE_COIL, address, _COIL_ON if value else _COIL_OFF
        )

    @staticmethod
    def write_register(unit: int, address: int, value: int) -> bytes:
        """fc 6: write one holding register (0..65535)."""
        unit = _number("unit", unit, 0, 255)
        address = _number("address", address, 0, 0xFFFF)
        value = _number("register value", value, 0, 0xFFFF)
        return HEAD.pack(unit, FunctionCode.WRITE_SINGLE_REGISTER, address, value)

    @staticmethod
    def write_coils(unit: int, address: int, values: Sequence[bool]) -> bytes:
        """fc 15: write 1..1968 coils from `address` (values[0] at `address`)."""
        head = _head(
            unit,
            FunctionCode.WRITE_MULTIPLE_COILS,
            address,
            len(values),
            MAX_WRITE_BITS,
            "coils",
        )
        packed = _pack_bits(values)
        return head + bytes((len(packed),)) + packed

    @staticmethod
    def write_registers(unit: int, address: int, values: Sequence[int]) -> bytes:
        """fc 16: write 1..123 holding registers (each 0..65535) from `address`."""
        head = _head(
            unit,
            FunctionCode.WRITE_MULTIPLE_REGISTERS,
            address,
            len(values),
            MAX_WRITE_REGISTERS,
            "registers",
        )
        words = [
            _number(f"register value at index {i}", v, 0, 0xFFFF) for i, v in enumerate(values)
        ]
        return head + bytes((2 * len(words),)) + struct.pack(f">{len(words)}H", *words)
