"""The `modbus-rtu` and `modbus-tcp` codecs: verld as a Modbus client (master), and
the device side of both (a slave's framing: virtual ports, the simulator).

A call's data is the unit id (1 byte) and the PDU (function code and data, at
most 253 bytes). A normal response is a reply with status 0x00 and data = unit +
PDU; an exception response (function code | 0x80, exception code 1..255) is a
reply whose status is the exception code and whose data is unit + fc|0x80 +
code. A reply whose unit or function code is not the request's is dropped and
counted in `bad_frames`; so is exception code 0. Modbus has no events.

Modules: `pdu` (the PDU, function code + data: requests and responses, both sides),
`wire` (CRC-16/MODBUS, frames, request and response lengths, checks),
`rtu` (the `modbus-rtu` host side and spec), `rtu_device` (its device side), `tcp`
(the `modbus-tcp` host side, the MBAP request splitter, its device side and spec).
"""

from __future__ import annotations

from verld.codec.modbus.pdu import EXCEPTION_NAMES, MAX_PDU
from verld.codec.modbus.rtu import MODBUS_RTU, ModbusRtuCodec
from verld.codec.modbus.rtu_device import ModbusRtuPortFraming, RtuRequestScanner
from verld.codec.modbus.tcp import MODBUS_TCP, MbapSplitter, ModbusTcpCodec, ModbusTcpPortFraming
from verld.codec.modbus.wire import (
    MAX_RTU_FRAME,
    MAX_RTU_UNIT,
    MIN_RTU_FRAME,
    check_request,
    crc16,
    mbap_frame,
    rtu_frame,
    rtu_misframed,
    rtu_request_length,
    rtu_response_length,
)

__all__ = [
    "EXCEPTION_NAMES",
    "MAX_PDU",
    "MAX_RTU_FRAME",
    "MAX_RTU_UNIT",
    "MIN_RTU_FRAME",
    "MODBUS_RTU",
    "MODBUS_TCP",
    "MbapSplitter",
    "ModbusRtuCodec",
    "ModbusRtuPortFraming",
    "ModbusTcpCodec",
    "ModbusTcpPortFraming",
    "RtuRequestScanner",
    "check_request",
    "crc16",
    "mbap_frame",
    "rtu_frame",
    "rtu_misframed",
    "rtu_request_length",
    "rtu_response_length",
]
