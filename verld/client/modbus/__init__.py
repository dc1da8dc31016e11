"""Modbus requests and replies for verld's `modbus-rtu` / `modbus-tcp` links.

With `device.codec: modbus-rtu` or `modbus-tcp`, a call's data is the unit id
(1 byte) and the Modbus PDU (function code + data); the reply's data is the
unit and the response PDU. An exception response (function code | 0x80, then
the exception code) comes back with `status` = the exception code and the
error `device_error` (code 0xFF included). The reply carries a status, so
`Client.call` returns it as a `Reply`; it raises `ClientError` only for API
errors (timeout, link_down, busy, bad_request, ...).

Three layers, one module each:

The PDU itself (function codes, field layouts, limits) is `verld.codec.modbus.pdu`'s;
this package adds the unit, the call and the errors a client raises.

- `Request` (`request`): sans-I/O builders, one static method per function code, each
  returning the call data (unit + PDU) as bytes, e.g.
  `Request.read_holding_registers(1, 0, 10) == bytes.fromhex("01030000000a")`.
  Out-of-range arguments raise ValueError.
- Decoders (`reply`: `decode_bits`, `decode_registers`, `check_write`, and `decode`,
  which picks one by the request's function code): the request and the reply
  data in, the values out (writes: the echo is checked, None out). An
  exception response raises `ModbusException`; a reply that does not fit the
  request (unit, function code, byte count, length, echo) raises
  `ModbusReplyError` (a ValueError).
- `Modbus` (`wrappers`) over a connected `Client`, `AsyncModbus` over an `AsyncClient`:
  the eight function codes as methods (coroutines on `AsyncModbus`) that build
  the request, call, and decode. A reply with a non-zero status carrying an
  exception frame raises `ModbusException`; the client's own errors
  (`ClientError`, `Unreachable`) pass through unchanged.

Usage::

    from verld.client import AsyncClient, Client
    from verld.client.modbus import AsyncModbus, Modbus

    with Client("/run/verld/verld.sock") as client:
        bus = Modbus(client)
        regs = bus.read_holding_registers(1, 0, 10)  # unit 1, registers 0..9
        bus.write_register(1, 5, 1234)

    async with AsyncClient() as client:
        coils = await AsyncModbus(client).read_coils(1, 0, 16)

Addresses are the PDU's 0-based addresses (holding register 40001 is address 0).
Units are 0..255; verld's `modbus-rtu` codec accepts units 0..247 only. There
unit 0 is the broadcast address: nobody answers, so verld ends such a call with
status 0 and no data; a write to unit 0 then returns None, a read raises
ModbusReplyError. On `modbus-tcp` unit 0 is an ordinary unit.
"""

from __future__ import annotations

from verld.client.modbus.reply import (
    ModbusException,
    ModbusReplyError,
    check_write,
    decode,
    decode_bits,
    decode_registers,
)
from verld.client.modbus.request import Request
from verld.client.modbus.wrappers import AsyncCaller, AsyncModbus, Caller, Modbus
from verld.codec.modbus import pdu
from verld.codec.modbus.pdu import EXCEPTION_NAMES, FunctionCode

__all__ = [
    "EXCEPTION_NAMES",
    "AsyncCaller",
    "AsyncModbus",
    "Caller",
    "FunctionCode",
    "Modbus",
    "ModbusException",
    "ModbusReplyError",
    "Request",
    "check_write",
    "decode",
    "decode_bits",
    "decode_registers",
]

# The PDU's request limits are importable from here too (not in __all__; docs/client.md).
MAX_READ_BITS, MAX_READ_REGISTERS = pdu.MAX_READ_BITS, pdu.MAX_READ_REGISTERS
MAX_WRITE_BITS, MAX_WRITE_REGISTERS = pdu.MAX_WRITE_BITS, pdu.MAX_WRITE_REGISTERS
