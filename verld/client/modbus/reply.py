"""Modbus replies, sans-I/O: the decoders and the two errors a reply can raise.

A decoder takes the request and the reply data (unit + response PDU) and returns
the values (writes: checks the echo, returns None). An exception response raises
`ModbusException`; a reply that does not fit its request (unit, function code,
byte count, length, echo) raises `ModbusReplyError` (a ValueError). The PDU is read
by `verld.codec.modbus.pdu`; what it finds wrong is said here, in the client's words.
"""

from __future__ import annotations

from verld.codec.modbus import pdu
from verld.codec.modbus.pdu import EXCEPTION_NAMES, FunctionCode

__all__ = [
    "ModbusException",
    "ModbusReplyError",
    "check_head",
    "check_write",
    "decode",
    "decode_bits",
    "decode_registers",
]

_BROADCAST = 0  #: the serial line's broadcast unit (writes only; nobody answers)

_HEAD = 2 + pdu.FIELDS.size  #: unit, function code, address and count (or value)
_BITS = frozenset(map(FunctionCode, pdu.READ_BITS))
_REGISTERS = frozenset(map(FunctionCode, pdu.READ_REGISTERS))
_WRITES = frozenset(map(FunctionCode, pdu.SINGLE_WRITES + pdu.MULTIPLE_WRITES))


class ModbusException(Exception):
    """A Modbus exception response: unit `unit` refused function `function` with `code`.

    `function` is the request's function code (without the 0x80 bit); `name` is
    the standard exception's name, or "exception N" for a code the standard
    does not name.
    """

    def __init__(self, code: int, unit: int, function: int) -> None:
        super().__init__(code, unit, function)
        self.code = code
        self.unit = unit
        self.function = function

    @property
    def name(self) -> str:
        return EXCEPTION_NAMES.get(self.code, f"exception {self.code}")

    def __str__(self) -> str:
        try:
            what = FunctionCode(self.function).name.lower().replace("_", " ")
        except ValueError:
            what = "function"
        return (
            f"modbus exception {self.code} ({self.name}) from unit {self.unit}"
            f" to {what} (function code {self.function})"
        )


class ModbusReplyError(ValueError):
    """A reply that is not a valid answer to its request (unit, function code, length, echo)."""


def _request(
    request: bytes, allowed: frozenset[FunctionCode], caller: str
) -> tuple[int, int, int, int]:
    """The request's unit, function code, address and count (or value); ValueError if
    it is not a request `caller` decodes."""
    if len(request) < _HEAD or request[1] not in allowed:
        wanted = ", ".join(str(int(fc)) for fc in sorted(allowed))
        raise ValueError(
            f"{caller}: {request.hex(' ')!r} is not a request with function code {wanted}"
        )
    address, field = pdu.FIELDS.unpack_from(request, 2)
    return request[0], request[1], address, field


def _exception(unit: int, fc: int, reply: bytes) -> ModbusException:
    """The exception in `reply` (unit + fc | 0x80 + code, checked by the caller)."""
    try:
        code = pdu.exception_code(reply[2:])
    except pdu.WrongLength:
        raise ModbusReplyError(
            f"modbus: exception response of {len(reply)} bytes, expected 3"
        ) from None
    except pdu.ZeroExceptionCode:
        raise ModbusReplyError("modbus: exception response with exception code 0") from None
    return ModbusException(code, unit, fc)


def check_head(unit: int, fc: int, reply: bytes) -> None:
    """The reply is from `unit` and answers `fc`; ModbusException if it is an exception."""
    if not reply and unit == _BROADCAST:
        raise ModbusReplyError("modbus: no reply to unit 0 (broadcast): nothing to read")
    if len(reply) < 2:
        raise ModbusReplyError(
            f"modbus: reply of {len(reply)} bytes, needs a unit and a function code"
        )
    if reply[0] != unit:
        raise ModbusReplyError(f"modbus: reply from unit {reply[0]}, the request was to {unit}")
    if reply[1] == fc | pdu.EXCEPTION_BIT:
        raise _exception(unit, fc, reply)
    if reply[1] != fc:
        raise ModbusReplyError(f"modbus: reply has function code {reply[1]}, the request had {fc}")


def _counted(reply: bytes, expected: int, what: str) -> bytes:
    """The data of a counted read response, its byte count and length checked."""
    try:
        data = pdu.counted(reply[2:])
    except pdu.WrongLength:
        raise ModbusReplyError(f"modbus: reply of {len(reply)} bytes has no byte count") from None
    except pdu.CountMismatch as exc:
        if exc.count != expected:
            raise _byte_count(exc.count, expected, what) from None
        raise ModbusReplyError(
            f"modbus: reply of {len(reply)} bytes, its byte count {expected} makes {3 + expected}"
        ) from None
    if len(data) != expected:
        raise _byte_count(len(data), expected, what)
    return data


def _byte_count(count: int, expected: int, what: str) -> ModbusReplyError:
    return ModbusReplyError(f"modbus: byte count {count} for {what}, expected {expected}")


def decode_bits(request: bytes, reply: bytes) -> list[bool]:
    """The coils or discrete inputs a fc 1 / fc 2 `reply` carries, `count` of them."""
    unit, fc, _, count = _request(request, _BITS, "decode_bits")
    check_head(unit, fc, reply)
    data = _counted(reply, pdu.bit_bytes(count), f"{count} bits")
    return pdu.unpack_bits(data, count)


def decode_registers(request: bytes, reply: bytes) -> list[int]:
    """The registers a fc 3 / fc 4 `reply` carries, `count` of them."""
    unit, fc, _, count = _request(request, _REGISTERS, "decode_registers")
    check_head(unit, fc, reply)
    data = _counted(reply, 2 * count, f"{count} registers")
    return pdu.unpack_registers(data)


def check_write(request: bytes, reply: bytes) -> None:
    """Check that a fc 5 / 6 / 15 / 16 `reply` echoes the request's address and value
    (fc 5, 6) or count (fc 15, 16). An empty reply to unit 0 passes: verld ends a
    modbus-rtu broadcast with status 0 and no data."""
    unit, fc, address, field = _request(request, _WRITES, "check_write")
    if not reply and unit == _BROADCAST:
        return  # modbus-rtu broadcast: verld sends it and nobody answers
    check_head(unit, fc, reply)
    try:
        echo_address, echo_field = pdu.fields(reply[2:])
    except pdu.WrongLength:
        raise ModbusReplyError(
            f"modbus: write reply of {len(reply)} bytes, expected {_HEAD}"
        ) from None
    if echo_address != address:
        raise ModbusReplyError(
            f"modbus: reply echoes address {echo_address}, the request wrote at {address}"
        )
    if echo_field != field:
        what = "value" if fc in pdu.SINGLE_WRITES else "count"
        raise ModbusReplyError(
            f"modbus: reply echoes {what} 0x{echo_field:04x}, the request wrote 0x{field:04x}"
        )


def decode(request: bytes, reply: bytes) -> list[bool] | list[int] | None:
    """`decode_bits`, `decode_registers` or `check_write`, by the request's function code."""
    fc = request[1] if len(request) >= 2 else -1
    if fc in _BITS:
        return decode_bits(request, reply)
    if fc in _REGISTERS:
        return decode_registers(request, reply)
    if fc in _WRITES:
        check_write(request, reply)
        return None
    raise ValueError(f"decode: {request.hex(' ')!r} is not a request this module decodes")
