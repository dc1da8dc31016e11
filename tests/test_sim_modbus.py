"""verld-sim as a Modbus slave: the slave logic in-process, then the real program via pymodbus."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from pymodbus import FramerType
from pymodbus.client import ModbusSerialClient, ModbusTcpClient
from pymodbus.exceptions import ModbusIOException

from verld.codec.modbus import crc16, mbap_frame, rtu_frame
from verld.sim.device import Device, make_personality
from verld.sim.faults import Counters, Faults
from verld.sim.modbus import (
    ModbusRtuPersonality,
    ModbusSlave,
    ModbusTcpPersonality,
    parse_units,
)
from verld.sim.personality import Request
from verld.testing import SimProc


def pdu(fc: int, *words: int, tail: bytes = b"") -> bytes:
    """A request PDU: function code, big-endian u16 words, then `tail`."""
    return bytes((fc,)) + struct.pack(f">{len(words)}H", *words) + tail


def ask(slave: ModbusSlave, unit: int, request_pdu: bytes) -> bytes | None:
    """The slave's response PDU (unit stripped) to one request, or None."""
    answer = slave.handle(bytes((unit,)) + request_pdu)
    if answer is None:
        return None
    assert answer[0] == unit
    return answer[1:]


@pytest.fixture
def slave() -> ModbusSlave:
    return ModbusSlave((1, 2))


# --- the slave logic ---------------------------------------------------------


@pytest.mark.timeout(5)
def test_read_coils(slave: ModbusSlave) -> None:
    """fc 1 packs coils LSB first; coil i starts as i % 2."""
    assert ask(slave, 1, pdu(0x01, 0, 10)) == bytes((0x01, 2, 0b10101010, 0b10))


@pytest.mark.timeout(5)
def test_read_discrete_inputs(slave: ModbusSlave) -> None:
    """fc 2 reads discrete inputs; input i starts as (i // 2) % 2."""
    assert ask(slave, 1, pdu(0x02, 0, 8)) == bytes((0x02, 1, 0b11001100))


@pytest.mark.timeout(5)
def test_read_holding_registers(slave: ModbusSlave) -> None:
    """fc 3 reads holding registers; register i starts as i."""
    assert ask(slave, 1, pdu(0x03, 97, 3)) == bytes((0x03, 6)) + struct.pack(">3H", 97, 98, 99)


@pytest.mark.timeout(5)
def test_read_input_registers(slave: ModbusSlave) -> None:
    """fc 4 reads input registers; register i is 1000 + i."""
    assert ask(slave, 2, pdu(0x04, 0, 2)) == bytes((0x04, 4)) + struct.pack(">2H", 1000, 1001)


@pytest.mark.timeout(5)
def test_write_single_coil(slave: ModbusSlave) -> None:
    """fc 5 echoes the request and sets the coil."""
    assert ask(slave, 1, pdu(0x05, 0, 0xFF00)) == pdu(0x05, 0, 0xFF00)
    assert ask(slave, 1, pdu(0x01, 0, 1)) == bytes((0x01, 1, 1))


@pytest.mark.timeout(5)
def test_write_single_coil_bad_value(slave: ModbusSlave) -> None:
    """fc 5 with a value other than 0x0000 / 0xFF00 is exception 03."""
    assert ask(slave, 1, pdu(0x05, 0, 0x1234)) == bytes((0x85, 0x03))


@pytest.mark.timeout(5)
def test_write_single_register(slave: ModbusSlave) -> None:
    """fc 6 echoes the request and sets the register."""
    assert ask(slave, 1, pdu(0x06, 5, 0xBEEF)) == pdu(0x06, 5, 0xBEEF)
    assert ask(slave, 1, pdu(0x03, 5, 1)) == bytes((0x03, 2, 0xBE, 0xEF))


@pytest.mark.timeout(5)
def test_write_multiple_coils(slave: ModbusSlave) -> None:
    """fc 15 answers address and quantity and sets the coils."""
    assert ask(slave, 1, pdu(0x0F, 10, 9, tail=bytes((2, 0xFF, 0x01)))) == pdu(0x0F, 10, 9)
    assert ask(slave, 1, pdu(0x01, 10, 10)) == bytes((0x01, 2, 0xFF, 0b11))


@pytest.mark.timeout(5)
def test_write_multiple_registers(slave: ModbusSlave) -> None:
    """fc 16 answers address and quantity and sets the registers."""
    values = struct.pack(">2H", 7, 8)
    assert ask(slave, 1, pdu(0x10, 20, 2, tail=bytes((4,)) + values)) == pdu(0x10, 20, 2)
    assert ask(slave, 1, pdu(0x03, 20, 2)) == bytes((0x03, 4)) + values


@pytest.mark.timeout(5)
def test_units_are_separate(slave: ModbusSlave) -> None:
    """A write to one unit leaves the other unit's registers alone."""
    ask(slave, 1, pdu(0x06, 0, 42))
    assert ask(slave, 2, pdu(0x03, 0, 1)) == bytes((0x03, 2, 0, 0))


@pytest.mark.timeout(5)
def test_illegal_function(slave: ModbusSlave) -> None:
    """A function code outside 1–6, 15, 16 is exception 01."""
    assert ask(slave, 1, pdu(0x2B, tail=b"\x0e\x01\x00")) == bytes((0xAB, 0x01))


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    "request_pdu",
    [pdu(0x03, 99, 2), pdu(0x01, 100, 1), pdu(0x06, 100, 0), pdu(0x05, 0xFFFF, 0)],
)
def test_illegal_address(slave: ModbusSlave, request_pdu: bytes) -> None:
    """An address range beyond the 100 entries is exception 02."""
    assert ask(slave, 1, request_pdu) == bytes((request_pdu[0] | 0x80, 0x02))


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    "request_pdu",
    [
        pdu(0x03, 0, 0),
        pdu(0x04, 0, 126),
        pdu(0x01, 0, 2001),
        pdu(0x03, 0),
        pdu(0x03, 0, 1, 0),
        pdu(0x10, 0, 2, tail=b"\x03\x00\x01\x00"),
        pdu(0x0F, 0, 9, tail=b"\x01\xff"),
    ],
)
def test_illegal_value(slave: ModbusSlave, request_pdu: bytes) -> None:
    """A bad quantity, a short request or a byte count mismatch is exception 03."""
    assert ask(slave, 1, request_pdu) == bytes((request_pdu[0] | 0x80, 0x03))


@pytest.mark.timeout(5)
def test_unit_not_served_is_silent(slave: ModbusSlave) -> None:
    """A unit the slave does not serve gets no answer at all."""
    assert ask(slave, 9, pdu(0x03, 0, 1)) is None


@pytest.mark.timeout(5)
def test_parse_units() -> None:
    """--units takes a comma list of distinct ids 0..255."""
    assert parse_units("1, 2,7") == (1, 2, 7)
    for bad in ("", "1,1", "256", "x"):
        with pytest.raises(ValueError):
            parse_units(bad)


# --- framing ------------------------------------------------------------------


@pytest.mark.timeout(5)
def test_rtu_decode_split_and_hunt() -> None:
    """RTU requests are found byte by byte, after noise that counts one bad frame."""
    personality = ModbusRtuPersonality(ModbusSlave())
    wire = b"\x07\x07\x07" + rtu_frame(b"\x01" + pdu(0x03, 0, 1))
    got: list[Request] = []
    for byte in wire:
        got += personality.decode(bytes((byte,)))
    assert got == [Request(0, b"\x01" + pdu(0x03, 0, 1))]
    assert personality.bad_frames == 1


@pytest.mark.timeout(5)
def test_rtu_unknown_function_ends_at_crc() -> None:
    """An RTU request with an unknown function code ends where its CRC matches."""
    personality = ModbusRtuPersonality(ModbusSlave())
    body = b"\x01\x2b\x0e\x01\x00"
    (request,) = personality.decode(rtu_frame(body))
    frame = personality.respond(request).reply[0]
    assert frame[:-2] == b"\x01\xab\x01"
    assert crc16(frame[:-2]) == frame[-2] | frame[-1] << 8


@pytest.mark.timeout(5)
def test_tcp_echoes_transaction_id() -> None:
    """modbus-tcp answers with the request's transaction id in the MBAP header."""
    personality = ModbusTcpPersonality(ModbusSlave())
    (request,) = personality.decode(mbap_frame(0x1234, b"\x01" + pdu(0x03, 0, 1)))
    assert personality.respond(request).reply == [mbap_frame(0x1234, b"\x01\x03\x02\x00\x00")]


@pytest.mark.timeout(5)
def test_tcp_bad_header_counts_bad_frame() -> None:
    """An MBAP protocol id other than 0 drops the buffer and counts a bad frame."""
    personality = ModbusTcpPersonality(ModbusSlave())
    assert personality.decode(b"\x00\x01\x00\x05\x00\x02\x01\x03") == []
    assert personality.bad_frames == 1


@pytest.mark.timeout(5)
def test_device_silent_unit_counts_no_reply() -> None:
    """Through the Device, a unit not served produces nothing and no reply is counted."""
    counters = Counters()
    device = Device(make_personality("modbus-rtu", 4096), Faults(), counters, random.Random(1))
    assert device.feed(rtu_frame(b"\x09" + pdu(0x03, 0, 1)), 0.0) == []
    assert (counters.requests, counters.replies) == (1, 0)


@pytest.mark.timeout(5)
def test_device_latency_applies() -> None:
    """The latency fault delays a Modbus reply like any other."""
    device = Device(
        make_personality("modbus-rtu", 4096), Faults(latency=50), Counters(), random.Random(1)
    )
    (timed,) = device.feed(rtu_frame(b"\x01" + pdu(0x03, 0, 1)), 10.0)
    assert timed.due == pytest.approx(10.05)


# --- the real program ---------------------------------------------------------


Client = ModbusSerialClient | ModbusTcpClient


def connect(client: Client) -> None:
    """Connect a pymodbus client (some of its methods are not annotated)."""
    assert client.connect()  # type: ignore[no-untyped-call, unused-ignore]


def close(client: Client) -> None:
    """Close a pymodbus client."""
    client.close()  # type: ignore[no-untyped-call, unused-ignore]


@pytest.fixture
def rtu(tmp_path: Path) -> Iterator[ModbusSerialClient]:
    sim = SimProc(tmp_path, "--units", "1,2", codec="modbus-rtu")
    client = ModbusSerialClient(
        port=sim.link, framer=FramerType.RTU, baudrate=115200, timeout=1, retries=0
    )
    try:
        connect(client)
        yield client
    finally:
        close(client)
        sim.stop()


@pytest.fixture
def tcp(tmp_path: Path) -> Iterator[ModbusTcpClient]:
    sim = SimProc(tmp_path, "--units", "1,2", "--tcp", "0", codec="modbus-tcp")
    host, port = sim.address.removeprefix("tcp://").split(":")
    client = ModbusTcpClient(host, port=int(port), timeout=1, retries=0)
    try:
        connect(client)
        yield client
    finally:
        close(client)
        sim.stop()


def check_read_holding(client: Client) -> None:
    result = client.read_holding_registers(0, count=3, device_id=1)
    assert not result.isError()
    assert result.registers == [0, 1, 2]


def check_write_registers(client: Client) -> None:
    assert not client.write_register(0, 500, device_id=2).isError()
    assert not client.write_registers(10, [7, 8, 9], device_id=2).isError()
    assert client.read_holding_registers(0, count=1, device_id=2).registers == [500]
    assert client.read_holding_registers(9, count=5, device_id=2).registers == [9, 7, 8, 9, 13]


def check_coils(client: Client) -> None:
    assert client.read_coils(0, count=4, device_id=1).bits[:4] == [False, True, False, True]
    assert not client.write_coil(0, True, device_id=1).isError()
    assert not client.write_coils(2, [True, True], device_id=1).isError()
    assert client.read_coils(0, count=4, device_id=1).bits[:4] == [True, True, True, True]


def check_out_of_range(client: Client) -> None:
    result = client.read_holding_registers(99, count=2, device_id=1)
    assert result.isError()
    assert result.exception_code == 2


def check_silent_unit(client: Client) -> None:
    with pytest.raises(ModbusIOException):
        client.read_holding_registers(0, count=1, device_id=9)
    assert client.read_holding_registers(0, count=1, device_id=1).registers == [0]


@pytest.mark.timeout(20)
def test_rtu_read_holding_registers(rtu: ModbusSerialClient) -> None:
    """Over the pty, pymodbus reads the initial holding registers."""
    check_read_holding(rtu)


@pytest.mark.timeout(20)
def test_rtu_write_registers(rtu: ModbusSerialClient) -> None:
    """Over the pty, single and multiple register writes read back."""
    check_write_registers(rtu)


@pytest.mark.timeout(20)
def test_rtu_coils(rtu: ModbusSerialClient) -> None:
    """Over the pty, coils read, write singly and in bulk, and read back."""
    check_coils(rtu)


@pytest.mark.timeout(20)
def test_rtu_out_of_range(rtu: ModbusSerialClient) -> None:
    """Over the pty, an address beyond the table is exception 02."""
    check_out_of_range(rtu)


@pytest.mark.timeout(20)
def test_rtu_silent_unit(rtu: ModbusSerialClient) -> None:
    """Over the pty, unit 9 never answers, and unit 1 still does afterwards."""
    check_silent_unit(rtu)


@pytest.mark.timeout(20)
def test_tcp_read_holding_registers(tcp: ModbusTcpClient) -> None:
    """Over TCP, pymodbus reads the initial holding registers."""
    check_read_holding(tcp)


@pytest.mark.timeout(20)
def test_tcp_write_registers(tcp: ModbusTcpClient) -> None:
    """Over TCP, single and multiple register writes read back."""
    check_write_registers(tcp)


@pytest.mark.timeout(20)
def test_tcp_coils(tcp: ModbusTcpClient) -> None:
    """Over TCP, coils read, write singly and in bulk, and read back."""
    check_coils(tcp)


@pytest.mark.timeout(20)
def test_tcp_out_of_range(tcp: ModbusTcpClient) -> None:
    """Over TCP, an address beyond the table is exception 02."""
    check_out_of_range(tcp)


@pytest.mark.timeout(20)
def test_tcp_silent_unit(tcp: ModbusTcpClient) -> None:
    """Over TCP, unit 9 never answers, and unit 1 still does afterwards."""
    check_silent_unit(tcp)


@pytest.mark.timeout(20)
def test_rtu_hang(tmp_path: Path) -> None:
    """With --hang, a served unit does not answer either."""
    sim = SimProc(tmp_path, "--hang", codec="modbus-rtu")
    client = ModbusSerialClient(
        port=sim.link, framer=FramerType.RTU, baudrate=115200, timeout=0.5, retries=0
    )
    try:
        connect(client)
        with pytest.raises(ModbusIOException):
            client.read_holding_registers(0, count=1, device_id=1)
        assert sim.counters()["ignored"] == 1
    finally:
        close(client)
        sim.stop()
