"""Modbus requests and replies for verld's `modbus-rtu` / `modbus-tcp` links.

With `device.codec: modbus-rtu` or `modbus-tcp`, a call's data is the unit id
(1 byte) and the Modbus PDU (function code + data); the reply's data is the
unit and the response PDU. An exception response (function code | 0x80, then
the exception code) comes back with `status` = the exception code and the
error `device_error` (code 0xFF included). The reply carries a status, so
`Client.call` returns it as a `Reply`; it raises `ClientError` only for API
errors (timeout, link_down, busy, bad_request, ...).

Three layers:

- `Request`: sans-I/O builders, one static method per function code, each
  returning the call data (unit + PDU) as bytes, e.g.
  `Request.read_holding_registers(1, 0, 10) == bytes.fromhex("01030000000a")`.
  Out-of-range arguments raise ValueError.
- Decoders (`decode_bits`, `decode_registers`, `check_write`, and `decode`,
  which picks one by the request's function code): the request and the reply
  data in, the values out (writes: the echo is checked, None out). An
  exception response raises `ModbusException`; a reply that does not fit the
  request (unit, function code, byte count, length, echo) raises
  `ModbusReplyError` (a ValueError).
- `Modbus` over a connected `Client`, `AsyncModbus` over an `AsyncClient`:
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

import enum
import operator
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, SupportsIndex, TypeVar

from verld.client.messages import Reply
from verld.codec.modbus import EXCEPTION_NAMES

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

MAX_READ_BITS = 2000  #: coils / discrete inputs one read may ask for
MAX_READ_REGISTERS = 125
MAX_WRITE_BITS = 1968  #: coils one fc 15 may write
MAX_WRITE_REGISTERS = 123
_COIL_ON, _COIL_OFF = 0xFF00, 0x0000
_BROADCAST = 0  #: the serial line's broadcast unit (writes only; nobody answers)
_HEAD = struct.Struct(">BBHH")  #: unit, function code, address, count (or value)

T = TypeVar("T")


class FunctionCode(enum.IntEnum):
    """The function codes this module builds and decodes."""

    READ_COILS = 0x01
    READ_DISCRETE_INPUTS = 0x02
    READ_HOLDING_REGISTERS = 0x03
    READ_INPUT_REGISTERS = 0x04
    WRITE_SINGLE_COIL = 0x05
    WRITE_SINGLE_REGISTER = 0x06
    WRITE_MULTIPLE_COILS = 0x0F
    WRITE_MULTIPLE_REGISTERS = 0x10


_BITS = frozenset({FunctionCode.READ_COILS, FunctionCode.READ_DISCRETE_INPUTS})
_REGISTERS = frozenset({FunctionCode.READ_HOLDING_REGISTERS, FunctionCode.READ_INPUT_REGISTERS})
_WRITES = frozenset(
    {
        FunctionCode.WRITE_SINGLE_COIL,
        FunctionCode.WRITE_SINGLE_REGISTER,
        FunctionCode.WRITE_MULTIPLE_COILS,
        FunctionCode.WRITE_MULTIPLE_REGISTERS,
    }
)


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


# --- building requests --------------------------------------------------------------------
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
    return _HEAD.pack(unit, fc, address, count)


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
        return _HEAD.pack(
            unit, FunctionCode.WRITE_SINGLE_COIL, address, _COIL_ON if value else _COIL_OFF
        )

    @staticmethod
    def write_register(unit: int, address: int, value: int) -> bytes:
        """fc 6: write one holding register (0..65535)."""
        unit = _number("unit", unit, 0, 255)
        address = _number("address", address, 0, 0xFFFF)
        value = _number("register value", value, 0, 0xFFFF)
        return _HEAD.pack(unit, FunctionCode.WRITE_SINGLE_REGISTER, address, value)

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


# --- decoding replies ---------------------------------------------------------------------
def _request(
    request: bytes, allowed: frozenset[FunctionCode], caller: str
) -> tuple[int, int, int, int]:
    """The request's unit, function code, address and count (or value); ValueError if
    it is not a request `caller` decodes."""
    if len(request) < _HEAD.size or request[1] not in allowed:
        wanted = ", ".join(str(int(fc)) for fc in sorted(allowed))
        raise ValueError(
            f"{caller}: {request.hex(' ')!r} is not a request with function code {wanted}"
        )
    unit, fc, address, field = _HEAD.unpack_from(request)
    return unit, fc, address, field


def _exception(unit: int, fc: int, reply: bytes) -> ModbusException:
    """The exception in `reply` (unit + fc | 0x80 + code, checked by the caller)."""
    if len(reply) != 3:
        raise ModbusReplyError(f"modbus: exception response of {len(reply)} bytes, expected 3")
    if reply[2] == 0:
        raise ModbusReplyError("modbus: exception response with exception code 0")
    return ModbusException(reply[2], unit, fc)


def _check_head(unit: int, fc: int, reply: bytes) -> None:
    """The reply is from `unit` and answers `fc`; ModbusException if it is an exception."""
    if not reply and unit == _BROADCAST:
        raise ModbusReplyError("modbus: no reply to unit 0 (broadcast): nothing to read")
    if len(reply) < 2:
        raise ModbusReplyError(
            f"modbus: reply of {len(reply)} bytes, needs a unit and a function code"
        )
    if reply[0] != unit:
        raise ModbusReplyError(f"modbus: reply from unit {reply[0]}, the request was to {unit}")
    if reply[1] == fc | 0x80:
        raise _exception(unit, fc, reply)
    if reply[1] != fc:
        raise ModbusReplyError(f"modbus: reply has function code {reply[1]}, the request had {fc}")


def _counted(reply: bytes, expected: int, what: str) -> bytes:
    """The data of a counted read response, its byte count and length checked."""
    if len(reply) < 3:
        raise ModbusReplyError(f"modbus: reply of {len(reply)} bytes has no byte count")
    if reply[2] != expected:
        raise ModbusReplyError(f"modbus: byte count {reply[2]} for {what}, expected {expected}")
    if len(reply) != 3 + expected:
        raise ModbusReplyError(
            f"modbus: reply of {len(reply)} bytes, its byte count {expected} makes {3 + expected}"
        )
    return reply[3:]


def decode_bits(request: bytes, reply: bytes) -> list[bool]:
    """The coils or discrete inputs a fc 1 / fc 2 `reply` carries, `count` of them."""
    unit, fc, _, count = _request(request, _BITS, "decode_bits")
    _check_head(unit, fc, reply)
    data = _counted(reply, (count + 7) // 8, f"{count} bits")
    return [bool(data[i >> 3] >> (i & 7) & 1) for i in range(count)]


def decode_registers(request: bytes, reply: bytes) -> list[int]:
    """The registers a fc 3 / fc 4 `reply` carries, `count` of them."""
    unit, fc, _, count = _request(request, _REGISTERS, "decode_registers")
    _check_head(unit, fc, reply)
    data = _counted(reply, 2 * count, f"{count} registers")
    return list(struct.unpack(f">{count}H", data))


def check_write(request: bytes, reply: bytes) -> None:
    """Check that a fc 5 / 6 / 15 / 16 `reply` echoes the request's address and value
    (fc 5, 6) or count (fc 15, 16). An empty reply to unit 0 passes: verld ends a
    modbus-rtu broadcast with status 0 and no data."""
    unit, fc, address, field = _request(request, _WRITES, "check_write")
    if not reply and unit == _BROADCAST:
        return  # modbus-rtu broadcast: verld sends it and nobody answers
    _check_head(unit, fc, reply)
    if len(reply) != _HEAD.size:
        raise ModbusReplyError(f"modbus: write reply of {len(reply)} bytes, expected {_HEAD.size}")
    _, _, echo_address, echo_field = _HEAD.unpack(reply)
    if echo_address != address:
        raise ModbusReplyError(
            f"modbus: reply echoes address {echo_address}, the request wrote at {address}"
        )
    if echo_field != field:
        what = (
            "value"
            if fc in (FunctionCode.WRITE_SINGLE_COIL, FunctionCode.WRITE_SINGLE_REGISTER)
            else "count"
        )
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


# --- over a client ------------------------------------------------------------------------
class Caller(Protocol):
    """What `Modbus` needs of a client: `Client.call` (`Client` is one)."""

    def call(
        self,
        data: bytes,
        *,
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool = False,
    ) -> Reply: ...


class AsyncCaller(Protocol):
    """What `AsyncModbus` needs of a client: `AsyncClient.call` (`AsyncClient` is one)."""

    async def call(
        self,
        data: bytes,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the daemon's per-try timeout, sent)
        retry: int | None = None,
        wait: bool = False,
    ) -> Reply: ...


@dataclass(frozen=True, slots=True)
class _Exchange(Generic[T]):
    """One request and how to read its reply: the logic both wrappers share."""

    request: bytes
    decoder: Callable[[bytes, bytes], T]

    def result(self, reply: Reply) -> T:
        """The decoded reply; ModbusException for an exception response."""
        if reply.status == 0:
            return self.decoder(self.request, reply.data)
        unit, fc = self.request[0], self.request[1]
        try:
            _check_head(unit, fc, reply.data)
        except ModbusException as exc:
            if exc.code != reply.status:
                raise ModbusReplyError(
                    f"modbus: device status {reply.status} with exception code {exc.code}"
                ) from None
            raise
        raise ModbusReplyError(
            f"modbus: device status {reply.status} with a normal function {fc} response"
        )


class _Exchanges:
    """Each function code's request paired with its decoder (once, for both wrappers)."""

    @staticmethod
    def read_coils(unit: int, address: int, count: int) -> _Exchange[list[bool]]:
        return _Exchange(Request.read_coils(unit, address, count), decode_bits)

    @staticmethod
    def read_discrete_inputs(unit: int, address: int, count: int) -> _Exchange[list[bool]]:
        return _Exchange(Request.read_discrete_inputs(unit, address, count), decode_bits)

    @staticmethod
    def read_holding_registers(unit: int, address: int, count: int) -> _Exchange[list[int]]:
        return _Exchange(Request.read_holding_registers(unit, address, count), decode_registers)

    @staticmethod
    def read_input_registers(unit: int, address: int, count: int) -> _Exchange[list[int]]:
        return _Exchange(Request.read_input_registers(unit, address, count), decode_registers)

    @staticmethod
    def write_coil(unit: int, address: int, value: bool) -> _Exchange[None]:
        return _Exchange(Request.write_coil(unit, address, value), check_write)

    @staticmethod
    def write_register(unit: int, address: int, value: int) -> _Exchange[None]:
        return _Exchange(Request.write_register(unit, address, value), check_write)

    @staticmethod
    def write_coils(unit: int, address: int, values: Sequence[bool]) -> _Exchange[None]:
        return _Exchange(Request.write_coils(unit, address, values), check_write)

    @staticmethod
    def write_registers(unit: int, address: int, values: Sequence[int]) -> _Exchange[None]:
        return _Exchange(Request.write_registers(unit, address, values), check_write)


class _Options:
    """The call options every request of a wrapper is sent with."""

    def __init__(self, timeout: float | None, retry: int | None, wait: bool) -> None:
        self.timeout = timeout  #: seconds per try (None: the daemon's device.timeout)
        self.retry = retry  #: extra tries after a timeout (None: device.retry)
        self.wait = wait  #: wait for a link that is down or leased instead of failing


class Modbus(_Options):
    """The eight function codes over a blocking `Client` (connected, or connecting on use).

    `timeout`, `retry` and `wait` go with every call (see `Client.call`). Each
    method raises ModbusException for an exception response, ModbusReplyError
    for a reply that does not fit, ValueError for bad arguments (before
    anything is sent) and the client's ClientError for API errors.
    """

    def __init__(
        self,
        client: Caller,
        *,
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool = False,
    ) -> None:
        super().__init__(timeout, retry, wait)
        self.client = client

    def _run(self, exchange: _Exchange[T]) -> T:
        reply = self.client.call(
            exchange.request, timeout=self.timeout, retry=self.retry, wait=self.wait
        )
        return exchange.result(reply)

    def read_coils(self, unit: int, address: int, count: int) -> list[bool]:
        return self._run(_Exchanges.read_coils(unit, address, count))

    def read_discrete_inputs(self, unit: int, address: int, count: int) -> list[bool]:
        return self._run(_Exchanges.read_discrete_inputs(unit, address, count))

    def read_holding_registers(self, unit: int, address: int, count: int) -> list[int]:
        return self._run(_Exchanges.read_holding_registers(unit, address, count))

    def read_input_registers(self, unit: int, address: int, count: int) -> list[int]:
        return self._run(_Exchanges.read_input_registers(unit, address, count))

    def write_coil(self, unit: int, address: int, value: bool) -> None:
        self._run(_Exchanges.write_coil(unit, address, value))

    def write_register(self, unit: int, address: int, value: int) -> None:
        self._run(_Exchanges.write_register(unit, address, value))

    def write_coils(self, unit: int, address: int, values: Sequence[bool]) -> None:
        self._run(_Exchanges.write_coils(unit, address, values))

    def write_registers(self, unit: int, address: int, values: Sequence[int]) -> None:
        self._run(_Exchanges.write_registers(unit, address, values))


class AsyncModbus(_Options):
    """`Modbus` over an `AsyncClient`: the same methods, as coroutines."""

    def __init__(
        self,
        client: AsyncCaller,
        *,
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool = False,
    ) -> None:
        super().__init__(timeout, retry, wait)
        self.client = client

    async def _run(self, exchange: _Exchange[T]) -> T:
        reply = await self.client.call(
            exchange.request, timeout=self.timeout, retry=self.retry, wait=self.wait
        )
        return exchange.result(reply)

    async def read_coils(self, unit: int, address: int, count: int) -> list[bool]:
        return await self._run(_Exchanges.read_coils(unit, address, count))

    async def read_discrete_inputs(self, unit: int, address: int, count: int) -> list[bool]:
        return await self._run(_Exchanges.read_discrete_inputs(unit, address, count))

    async def read_holding_registers(self, unit: int, address: int, count: int) -> list[int]:
        return await self._run(_Exchanges.read_holding_registers(unit, address, count))

    async def read_input_registers(self, unit: int, address: int, count: int) -> list[int]:
        return await self._run(_Exchanges.read_input_registers(unit, address, count))

    async def write_coil(self, unit: int, address: int, value: bool) -> None:
        await self._run(_Exchanges.write_coil(unit, address, value))

    async def write_register(self, unit: int, address: int, value: int) -> None:
        await self._run(_Exchanges.write_register(unit, address, value))

    async def write_coils(self, unit: int, address: int, values: Sequence[bool]) -> None:
        await self._run(_Exchanges.write_coils(unit, address, values))

    async def write_registers(self, unit: int, address: int, values: Sequence[int]) -> None:
        await self._run(_Exchanges.write_registers(unit, address, values))
