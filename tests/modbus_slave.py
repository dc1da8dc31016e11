"""A real third-party Modbus RTU slave for tests: pymodbus's serial server on a tty.

Run as a subprocess (tests/modbusrig.py's `PymodbusSlave` does it for you):

    python tests/modbus_slave.py --port TTY [--units 1,2] [--silent 3]
                                 [--baudrate 115200] [--log-requests]

Every unit in `--units` serves four tables of 100 entries, addresses 0..99:

- holding registers: 100 * unit + address;
- input registers:   1000 + address;
- coils:             address % 2;
- discrete inputs:   (address // 2) % 2.

A read or write reaching past address 99 gets exception 2 (illegal data address).
A request to unit 0 is a broadcast: pymodbus runs it on every served unit and
sends no answer. A unit in `--silent` gets no answer at all (an offline slave on
the bus); any other unit gets pymodbus's own default, exception 4.

Once it serves it prints one line, `READY`, to stdout; nothing else goes there.
SIGTERM or SIGINT: exit 0. The tty hanging up (EIO, the pty's other end gone, a
USB adapter unplugged): one line on stderr, exit 3. The tty cannot be opened:
exit 2. pymodbus's own warnings and errors go to stderr, prefixed.

The pymodbus 3.16 facts this leans on (each checked by tests/test_modbusrig.py):

- `SimData(address=...)` is the protocol address, no offset (the deprecated
  `ModbusSequentialDataBlock(address, ...)` is `SimData(address - 1, ...)`);
- coils and discrete inputs are packed into 16-bit registers and their block is
  padded up to a multiple of 16, so coils 100..111 would read as 0:
  `BoundedCore` answers exception 2 past the tables' end instead;
- `ignore_missing_devices=True` does not silence anything with a `SimDevice`
  datastore (the lookup raises KeyError, not NoSuchIdException, and the server
  answers exception 4), so silent units are dropped in the `trace_pdu` hook;
- the server does not notice a hang-up beyond its `trace_connect(False)` hook:
  left alone it stays up, deaf, and never reopens the tty, so that hook ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import cast

from pymodbus import FramerType
from pymodbus.constants import ExcCodes
from pymodbus.pdu import ModbusPDU
from pymodbus.server import ModbusSerialServer
from pymodbus.simulator import DataType, SimData, SimDevice
from pymodbus.simulator.simcore import SimCore

TABLE_SIZE = 100  #: entries per table, addresses 0..TABLE_SIZE-1
EXIT_NO_PORT = 2  #: the tty could not be opened
EXIT_HANGUP = 3  #: the tty hung up while serving
PROG = "modbus_slave"


def unit_device(unit: int) -> SimDevice:
    """One served unit: coils, discrete inputs, holding and input registers (separate tables)."""
    addresses = range(TABLE_SIZE)
    return SimDevice(
        unit,
        simdata=(
            [SimData(0, values=[bool(a % 2) for a in addresses], datatype=DataType.BITS)],
            [SimData(0, values=[bool((a // 2) % 2) for a in addresses], datatype=DataType.BITS)],
            [SimData(0, values=[100 * unit + a for a in addresses], datatype=DataType.REGISTERS)],
            [SimData(0, values=[1000 + a for a in addresses], datatype=DataType.REGISTERS)],
        ),
    )


class BoundedCore(SimCore):
    """pymodbus's datastore, refusing entries past `size` of a served unit with exception 2.

    Needed for the bit tables only (pymodbus pads them to a multiple of 16), harmless
    for the registers. Units it does not serve are left to pymodbus.
    """

    def __init__(self, devices: list[SimDevice], size: int) -> None:
        super().__init__(devices)
        self.size = size

    def _beyond(self, device_id: int, address: int, count: int) -> bool:
        return device_id in self.devices and address + count > self.size

    async def async_getValues(
        self, device_id: int, func_code: int, address: int, count: int = 1
    ) -> list[int] | list[bool] | ExcCodes:
        if self._beyond(device_id, address, count):
            return ExcCodes.ILLEGAL_ADDRESS
        return await super().async_getValues(device_id, func_code, address, count)

    async def async_setValues(
        self, device_id: int, func_code: int, address: int, values: list[int] | list[bool]
    ) -> ExcCodes | None:
        if self._beyond(device_id, address, len(values)):
            return ExcCodes.ILLEGAL_ADDRESS
        return await super().async_setValues(device_id, func_code, address, values)


def describe(pdu: ModbusPDU) -> str:
    """One request, for --log-requests."""
    text = f"unit={pdu.dev_id} fc={pdu.function_code} address={pdu.address} count={pdu.count}"
    if pdu.registers:
        text += f" registers={list(pdu.registers)}"
    if pdu.bits:
        text += f" bits={[int(b) for b in pdu.bits]}"
    return text


def make_trace_pdu(
    silent: frozenset[int], log_requests: bool
) -> Callable[[bool, ModbusPDU], ModbusPDU]:
    """The server's `trace_pdu` hook: logs requests, drops those to silent units.

    A request the hook turns into None is never handled: the server's request handler
    only runs a truthy `last_pdu`. The hook's declared type says ModbusPDU, hence the cast.
    """

    def trace(sending: bool, pdu: ModbusPDU) -> ModbusPDU | None:
        if sending:
            return pdu
        drop = pdu.dev_id in silent
        if log_requests:
            note = " (silent unit: no answer)" if drop else " (broadcast)" if not pdu.dev_id else ""
            print(f"{PROG}: request {describe(pdu)}{note}", file=sys.stderr, flush=True)
        return None if drop else pdu

    return cast("Callable[[bool, ModbusPDU], ModbusPDU]", trace)


def unit_list(text: str) -> list[int]:
    """`1,2,5` → [1, 2, 5]; units are 1..247 (0 is the broadcast address)."""
    units: list[int] = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            unit = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a unit number: {part!r}") from None
        if not 1 <= unit <= 247:
            raise argparse.ArgumentTypeError(f"unit {unit} is not in 1..247")
        units.append(unit)
    return units


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.partition("\n")[0])
    parser.add_argument("--port", required=True, help="the tty to serve on")
    parser.add_argument("--units", type=unit_list, default=[1], help="served units: 1,2")
    parser.add_argument("--silent", type=unit_list, default=[], help="units never answered")
    parser.add_argument("--baudrate", type=int, default=115200)
    parser.add_argument(
        "--log-requests", action="store_true", help="print each request seen to stderr"
    )
    args = parser.parse_args(argv)
    if both := set(args.units) & set(args.silent):
        parser.error(f"units {sorted(both)} are both served and silent")
    return args


async def serve(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    devices = [unit_device(unit) for unit in dict.fromkeys(args.units)]
    stopping = False
    hung_up = False
    tasks: set[asyncio.Task[None]] = set()

    def stop() -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        task = loop.create_task(server.shutdown())  # type: ignore[no-untyped-call]
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def on_connect(connected: bool) -> None:
        # Called with False when the tty fails (pyserial's SerialException on read or
        # write), and also while we shut down (ignored then).
        nonlocal hung_up
        if not connected and not stopping:
            hung_up = True
            loop.call_soon(stop)

    server = ModbusSerialServer(
        devices,
        framer=FramerType.RTU,
        port=args.port,
        baudrate=args.baudrate,
        broadcast_enable=True,
        trace_pdu=make_trace_pdu(frozenset(args.silent), args.log_requests),
        trace_connect=on_connect,
    )
    server.context = BoundedCore(devices, TABLE_SIZE)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    try:
        await server.serve_forever(background=True)
    except RuntimeError:
        print(f"{PROG}: cannot open {args.port}", file=sys.stderr, flush=True)
        return EXIT_NO_PORT
    print("READY", flush=True)
    await server.serving
    if hung_up:
        print(f"{PROG}: {args.port} hung up (read or write failed): exiting", file=sys.stderr)
        return EXIT_HANGUP
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: pymodbus %(levelname)s: %(message)s"))
    pymodbus_log = logging.getLogger("pymodbus")
    pymodbus_log.addHandler(handler)
    pymodbus_log.setLevel(logging.WARNING)
    try:
        return asyncio.run(serve(args))
    except KeyboardInterrupt:  # a Ctrl-C before the loop's handler was installed
        return 0


if __name__ == "__main__":
    sys.exit(main())
