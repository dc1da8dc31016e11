"""Modbus requests, sans-I/O: one builder per function code, for a unit.

Each `Request` builder returns a call's data for verld's Modbus codecs, the unit
(1 byte) and the PDU (built by `verld.codec.modbus.pdu`), e.g.
`Request.read_holding_registers(1, 0, 10) == bytes.fromhex("01030000000a")`; an
argument out of range raises ValueError before anything is built.
"""

from __future__ import annotations

from collections.abc import Sequence

from verld.codec.modbus import pdu
from verld.codec.modbus.pdu import FunctionCode

__all__ = ["Request"]


def _unit(unit: int) -> bytes:
    """The unit id's byte (0..255), else ValueError."""
    return bytes((pdu.number("unit", unit, 0, 255),))


class Request:
    """The request builders: each returns the call data, unit + PDU (a namespace)."""

    @staticmethod
    def read_coils(unit: int, address: int, count: int) -> bytes:
        """fc 1: `count` (1..2000) coils from `address`."""
        return _unit(unit) + pdu.read_request(FunctionCode.READ_COILS, address, count)

    @staticmethod
    def read_discrete_inputs(unit: int, address: int, count: int) -> bytes:
        """fc 2: `count` (1..2000) discrete inputs from `address`."""
        return _unit(unit) + pdu.read_request(FunctionCode.READ_DISCRETE_INPUTS, address, count)

    @staticmethod
    def read_holding_registers(unit: int, address: int, count: int) -> bytes:
        """fc 3: `count` (1..125) holding registers from `address`."""
        return _unit(unit) + pdu.read_request(FunctionCode.READ_HOLDING_REGISTERS, address, count)

    @staticmethod
    def read_input_registers(unit: int, address: int, count: int) -> bytes:
        """fc 4: `count` (1..125) input registers from `address`."""
        return _unit(unit) + pdu.read_request(FunctionCode.READ_INPUT_REGISTERS, address, count)

    @staticmethod
    def write_coil(unit: int, address: int, value: bool) -> bytes:
        """fc 5: set one coil on (0xFF00) or off (0x0000)."""
        return _unit(unit) + pdu.write_coil(address, value)

    @staticmethod
    def write_register(unit: int, address: int, value: int) -> bytes:
        """fc 6: write one holding register (0..65535)."""
        return _unit(unit) + pdu.write_register(address, value)

    @staticmethod
    def write_coils(unit: int, address: int, values: Sequence[bool]) -> bytes:
        """fc 15: write 1..1968 coils from `address` (values[0] at `address`)."""
        return _unit(unit) + pdu.write_coils(address, values)

    @staticmethod
    def write_registers(unit: int, address: int, values: Sequence[int]) -> bytes:
        """fc 16: write 1..123 holding registers (each 0..65535) from `address`."""
        return _unit(unit) + pdu.write_registers(address, values)
