"""The Modbus RTU rig (tests/modbusrig.py, tests/modbus_slave.py) proven with pymodbus's client.

pymodbus's own master on the cable's host end talks to pymodbus's server on the
device end; raw pyserial is used where the point is that no byte comes back.
"""

from __future__ import annotations

import os
import signal
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import serial
from modbusrig import SLAVE_EXIT_HANGUP, PtyCable, PymodbusSlave
from pymodbus import FramerType
from pymodbus.client import ModbusSerialClient
from pymodbus.exceptions import ConnectionException, ModbusIOException
from pymodbus.pdu import ExceptionResponse, ModbusPDU

from verld.codec.modbus import rtu_frame
from verld.testing import HarnessError, wait_for

SERVED = (1, 2)
SILENT = 3
UNLISTED = 4  # neither served nor silent: pymodbus's default answer
QUIET = 0.3  # seconds of silence that count as "no answer" (answers take ~1 ms)


@contextmanager
def master(path: str) -> Iterator[ModbusSerialClient]:
    """pymodbus's RTU master on `path`, connected; no retries (a miss fails at once)."""
    client = ModbusSerialClient(
        port=path, framer=FramerType.RTU, baudrate=115200, timeout=0.5, retries=0
    )
    try:
        assert client.connect(), f"pymodbus could not open {path}"
        yield client
    finally:
        client.close()  # type: ignore[no-untyped-call, unused-ignore]


def raw_port(path: str) -> serial.Serial:
    return serial.Serial(path, 115200, timeout=QUIET)


def exception_code(response: ModbusPDU) -> int | None:
    return response.exception_code if isinstance(response, ExceptionResponse) else None


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PtyCable, PymodbusSlave]]:
    """One cable and slave (units 1 and 2, unit 3 silent) for the tests that only read."""
    with (
        PtyCable(tmp_path_factory.mktemp("rig")) as cable,
        PymodbusSlave(cable.device_path, units=SERVED, silent=(SILENT,)) as slave,
    ):
        yield cable, slave


@pytest.fixture
def client(shared: tuple[PtyCable, PymodbusSlave]) -> Iterator[ModbusSerialClient]:
    with master(shared[0].host_path) as c:
        yield c


@pytest.fixture
def cable(tmp_path: Path) -> Iterator[PtyCable]:
    """A cable of this test's own (for tests that write, unplug or stop the slave)."""
    with PtyCable(tmp_path) as c:
        yield c


# --- the tables ----------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("unit", SERVED)
def test_holding_registers_read_100_times_unit_plus_address(
    client: ModbusSerialClient, unit: int
) -> None:
    """Address 0 is the first entry (no off-by-one), 99 the last."""
    assert client.read_holding_registers(0, count=5, device_id=unit).registers == [
        100 * unit + a for a in range(5)
    ]
    assert client.read_holding_registers(90, count=10, device_id=unit).registers == [
        100 * unit + a for a in range(90, 100)
    ]


@pytest.mark.timeout(30)
def test_input_registers_read_1000_plus_address(client: ModbusSerialClient) -> None:
    """Every served unit's input register at address a reads 1000 + a."""
    for unit in SERVED:
        assert client.read_input_registers(0, count=3, device_id=unit).registers == [
            1000,
            1001,
            1002,
        ]
        assert client.read_input_registers(99, device_id=unit).registers == [1099]


@pytest.mark.timeout(30)
def test_coils_read_address_mod_2(client: ModbusSerialClient) -> None:
    """Coil a reads a mod 2 on every unit, address 99 included."""
    bits = client.read_coils(0, count=100, device_id=1).bits
    assert bits[:100] == [bool(a % 2) for a in range(100)]
    assert client.read_coils(99, device_id=2).bits[0] is True


@pytest.mark.timeout(30)
def test_discrete_inputs_read_half_address_mod_2(client: ModbusSerialClient) -> None:
    """Discrete input a reads (a // 2) mod 2."""
    bits = client.read_discrete_inputs(0, count=100, device_id=2).bits
    assert bits[:100] == [bool((a // 2) % 2) for a in range(100)]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("table", "address", "count"),
    [
        ("holding", 100, 1),
        ("holding", 98, 3),
        ("input", 100, 1),
        ("coils", 100, 1),
        ("coils", 111, 1),  # inside pymodbus's 16-bit padding of the bit table
        ("coils", 95, 10),
        ("discrete", 100, 1),
        ("discrete", 112, 1),
    ],
)
def test_reads_past_address_99_get_exception_2(
    client: ModbusSerialClient, table: str, address: int, count: int
) -> None:
    """A read of any table reaching past address 99 gets exception 2 (illegal data address)."""
    read = {
        "holding": client.read_holding_registers,
        "input": client.read_input_registers,
        "coils": client.read_coils,
        "discrete": client.read_discrete_inputs,
    }[table]
    assert exception_code(read(address, count=count, device_id=1)) == 2


@pytest.mark.timeout(30)
def test_writes_past_address_99_get_exception_2(client: ModbusSerialClient) -> None:
    """A register or coil write reaching past address 99 gets exception 2."""
    assert exception_code(client.write_register(100, 7, device_id=1)) == 2
    assert exception_code(client.write_registers(98, [7, 7, 7], device_id=1)) == 2
    assert exception_code(client.write_coil(100, True, device_id=1)) == 2
    assert exception_code(client.write_coils(96, [True] * 5, device_id=1)) == 2


@pytest.mark.timeout(30)
def test_writes_are_read_back_on_their_unit_only(cable: PtyCable) -> None:
    """Register and coil writes read back on the unit written and leave the other unit unchanged."""
    with PymodbusSlave(cable.device_path, units=SERVED), master(cable.host_path) as client:
        assert not client.write_registers(10, [7, 8], device_id=1).isError()
        assert not client.write_coil(0, True, device_id=1).isError()
        assert client.read_holding_registers(10, count=2, device_id=1).registers == [7, 8]
        assert client.read_holding_registers(10, count=2, device_id=2).registers == [210, 211]
        assert client.read_coils(0, device_id=1).bits[0] is True
        assert client.read_coils(0, device_id=2).bits[0] is False


# --- units that do not answer, broadcast -----------------------------------------------------


@pytest.mark.timeout(30)
def test_silent_unit_sends_back_no_bytes_at_all(shared: tuple[PtyCable, PymodbusSlave]) -> None:
    """A request to the silent unit gets no byte back; the next one, to a served unit, does."""
    with raw_port(shared[0].host_path) as port:
        port.write(rtu_frame(bytes((SILENT, 0x03, 0, 0, 0, 1))))
        assert port.read(256) == b""
        # ...while the bus works: the next request, to a served unit, is answered
        port.write(rtu_frame(bytes((1, 0x03, 0, 0, 0, 1))))
        assert port.read(7) == rtu_frame(bytes((1, 0x03, 2)) + struct.pack(">H", 100))


@pytest.mark.timeout(30)
def test_silent_unit_times_out_in_pymodbus_client(client: ModbusSerialClient) -> None:
    """pymodbus's client reading the silent unit raises ModbusIOException (a timeout)."""
    with pytest.raises(ModbusIOException):
        client.read_holding_registers(0, device_id=SILENT)


@pytest.mark.timeout(30)
def test_unlisted_unit_gets_pymodbus_default_exception_4(client: ModbusSerialClient) -> None:
    """A unit the slave does not list gets pymodbus's default exception 4."""
    assert exception_code(client.read_holding_registers(0, device_id=UNLISTED)) == 4


@pytest.mark.timeout(30)
def test_broadcast_write_applies_to_every_served_unit_without_reply(cable: PtyCable) -> None:
    """A broadcast register and coil write gets no reply and is applied on every served unit."""
    with PymodbusSlave(cable.device_path, units=SERVED), raw_port(cable.host_path) as port:
        port.write(rtu_frame(bytes((0, 0x06, 0, 5)) + struct.pack(">H", 4242)))
        assert port.read(256) == b""
        port.write(rtu_frame(bytes((0, 0x0F, 0, 0, 0, 3, 1, 0b111))))  # coils 0..2 on
        assert port.read(256) == b""
        with master(cable.host_path) as client:
            for unit in SERVED:
                assert client.read_holding_registers(5, device_id=unit).registers == [4242]
                assert client.read_coils(0, count=3, device_id=unit).bits[:3] == [True] * 3


# --- unplug, replug; the slave's own life ------------------------------------------------------


@pytest.mark.timeout(30)
def test_unplug_hangs_up_the_host_side(cable: PtyCable) -> None:
    """Unplugging the cable removes both links and the host side's reads and writes then fail."""
    with PymodbusSlave(cable.device_path), raw_port(cable.host_path) as port:
        cable.unplug()
        assert not os.path.lexists(cable.host_path)
        assert not os.path.lexists(cable.device_path)
        with pytest.raises(serial.SerialException):
            port.write(rtu_frame(bytes((1, 0x03, 0, 0, 0, 1))))
        with pytest.raises(serial.SerialException):
            port.read(1)


@pytest.mark.timeout(30)
def test_unplug_ends_the_slave_with_exit_3_and_one_line(cable: PtyCable) -> None:
    """Unplugged, the slave exits 3 with one line saying its tty hung up."""
    with PymodbusSlave(cable.device_path) as slave:
        cable.unplug()
        assert slave.wait(5) == SLAVE_EXIT_HANGUP
        assert slave.log().strip().splitlines() == [
            f"modbus_slave: {cable.device_path} hung up (read or write failed): exiting"
        ]


@pytest.mark.timeout(30)
def test_replug_and_restart_serve_again(cable: PtyCable) -> None:
    """After an unplug (client EIO, slave exit 3), replug and restart serve the same reads again."""
    with PymodbusSlave(cable.device_path, units=(2,)) as slave:
        with master(cable.host_path) as client:
            assert client.read_holding_registers(1, device_id=2).registers == [201]
            cable.unplug()
            with pytest.raises(ConnectionException):  # pymodbus's write hit EIO
                client.read_holding_registers(1, device_id=2)
        assert slave.wait(5) == SLAVE_EXIT_HANGUP
        cable.replug()
        slave.restart()
        with master(cable.host_path) as client:
            assert client.read_holding_registers(1, device_id=2).registers == [201]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_slave_exits_0_on_signal_without_traceback(cable: PtyCable, sig: int) -> None:
    """SIGTERM or SIGINT stops the slave with exit 0 and no traceback."""
    slave = PymodbusSlave(cable.device_path)
    assert slave.stop(sig) == 0
    assert "Traceback" not in slave.log()


@pytest.mark.timeout(30)
def test_slave_on_a_missing_tty_raises_with_its_stderr(tmp_path: Path) -> None:
    """A slave started on a missing tty raises HarnessError with its exit 2 and stderr."""
    with pytest.raises(HarnessError, match=r"exited 2 before READY(.|\n)*cannot open"):
        PymodbusSlave(str(tmp_path / "no-such.tty"))


@pytest.mark.timeout(30)
def test_log_requests_prints_each_request(cable: PtyCable) -> None:
    """With log_requests the slave logs each request, a silent unit's marked as unanswered."""
    with PymodbusSlave(cable.device_path, silent=(SILENT,), log_requests=True) as slave:
        with master(cable.host_path) as client:
            client.read_input_registers(7, count=2, device_id=1)
            with pytest.raises(ModbusIOException):
                client.read_coils(0, device_id=SILENT)
        wait_for(lambda: "unit=3" in slave.log(), 5, "the silent request in the log")
        assert "modbus_slave: request unit=1 fc=4 address=7 count=2\n" in slave.log()
        assert "unit=3 fc=1 address=0 count=1 (silent unit: no answer)" in slave.log()


@pytest.mark.timeout(30)
def test_close_stops_everything_it_started(tmp_path: Path) -> None:
    """Stopping the slave and closing the cable ends their processes and removes both links."""
    cable = PtyCable(tmp_path)
    slave = PymodbusSlave(cable.device_path)
    pids = [slave.pid, cable.proc.pid if cable.proc else -1]
    slave.stop()
    cable.close()
    assert not slave.running
    assert not cable.plugged
    assert not os.path.lexists(cable.host_path)
    assert not os.path.lexists(cable.device_path)
    deadline = time.monotonic() + 5
    for pid in pids:
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not os.path.exists(f"/proc/{pid}"), f"pid {pid} still there"
