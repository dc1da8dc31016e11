"""Modbus over a verld client: `Modbus` (blocking) and `AsyncModbus` (asyncio).

Each method builds the request (`request.Request`), makes the call with the
wrapper's options and decodes the reply (`reply`). The pairing of a request with
its decoder, and the reading of a reply's status, is written once (`_Exchange`,
`_Exchanges`) for both wrappers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from verld.client.messages import Reply
from verld.client.modbus.reply import (
    ModbusException,
    ModbusReplyError,
    check_head,
    check_write,
    decode_bits,
    decode_registers,
)
from verld.client.modbus.request import Request

__all__ = ["AsyncCaller", "AsyncModbus", "Caller", "Modbus"]

T = TypeVar("T")


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
            check_head(unit, fc, reply.data)
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
