"""The Dynamixel plugin on every front: a real verld (the plugin installed on its
PYTHONPATH, as a user installs one) drives a simulated servo on a pty
(tests/dynamixel_servo.py) for an API client, for ROBOTIS's `dynamixel-sdk` on a
virtual port, and for the same SDK over a raw network connection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import serial
from codec_plugins import DYNAMIXEL, ODD, install
from dynamixel_sdk import COMM_SUCCESS, PacketHandler, PortHandler, port_handler
from dynamixel_servo import MODEL, PRESENT_POSITION, Servo
from support import free_port

from verld.testing import DaemonProc, write_config


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Dynamixel plugin, and unusable ones beside it (which must not get in its way)."""
    return install(tmp_path_factory.mktemp("plugins"), DYNAMIXEL, ODD)


class Rig:
    """A servo on a pty, and verld with `device.codec: dynamixel` serving it on the API,
    a virtual port `tmp/ttyDXL` and a raw network port."""

    def __init__(self, tmp: Path, plugin_dir: Path) -> None:
        self.servo = Servo(tmp)
        self.port_link = str(tmp / "ttyDXL")
        self.net_port = free_port()
        cfg: dict[str, Any] = {
            "device": {"codec": "dynamixel", "baudrate": 57600},
            "heartbeat": {"payload": "01 01"},  # PING servo 1
            "ports": [{"link": self.port_link}],
            "network": [{"listen": f"127.0.0.1:{self.net_port}", "name": "dxl"}],
        }
        try:
            path = write_config(tmp, self.servo.link, cfg)
            self.daemon = DaemonProc(path, env={"PYTHONPATH": str(plugin_dir)})
        except BaseException:
            self.servo.stop()
            raise

    def stop(self) -> None:
        self.daemon.stop()
        self.servo.stop()


@pytest.fixture
def rig(tmp_path: Path, plugin_dir: Path) -> Iterator[Rig]:
    r = Rig(tmp_path, plugin_dir)
    yield r
    r.stop()


@pytest.fixture
def patient_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK waits for a status packet 2 x its USB latency timer (16 ms) plus the bytes'
    time; here verld's round trip on a loaded test machine stands in for the adapter."""
    monkeypatch.setattr(port_handler, "LATENCY_TIMER", 1000)


@pytest.mark.timeout(60)
def test_api_calls_read_and_write_the_servo(rig: Rig) -> None:
    """A call is ID, instruction, parameters; the reply is the status's error byte and data."""
    with rig.daemon.client() as c:
        position = c.call(bytes((1, 0x02, PRESENT_POSITION, 0, 4, 0)))
        assert (position.status, position.data) == (0, (2048).to_bytes(4, "little"))
        assert c.call(bytes.fromhex("01 03 40 00 ff ff fd 07")).status == 0
        assert c.call(bytes.fromhex("01 77")).status == 0x02  # no such instruction
    assert rig.servo.table[0x40:0x44] == bytes.fromhex("ff ff fd 07")
    # the servo read `FF FF FD` stuffed on the wire, as the SDK's own code unstuffs it
    assert any(bytes.fromhex("fffffdfd07") in wire for wire in rig.servo.received)
    assert rig.daemon.status()["link"]["state"] == "up"


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("patient_sdk")
def test_the_dynamixel_sdk_on_a_virtual_port_drives_the_servo(rig: Rig) -> None:
    """ROBOTIS's SDK opens verld's virtual port as a servo bus: ping, read2Byte, write1Byte."""
    port, packets = PortHandler(rig.port_link), PacketHandler(2.0)
    assert port.openPort() and port.setBaudRate(57600)
    try:
        model, result, error = packets.ping(port, 1)
        assert (model, result, error) == (MODEL, COMM_SUCCESS, 0)
        value, result, error = packets.read2ByteTxRx(port, 1, PRESENT_POSITION)
        assert (value, result, error) == (2048, COMM_SUCCESS, 0)
        assert packets.write1ByteTxRx(port, 1, 64, 1) == (COMM_SUCCESS, 0)
    finally:
        port.closePort()
    assert rig.servo.table[64] == 1


class NetworkPort(PortHandler):  # type: ignore[misc]  # (the SDK is untyped)
    """The SDK's port handler on a raw TCP connection (pyserial's socket:// URL)."""

    def setupPort(self, cflag_baud: int) -> bool:
        self.ser = serial.serial_for_url(self.port_name, timeout=0)
        self.is_open = True
        self.tx_time_per_byte = (1000.0 / self.baudrate) * 10.0
        return True


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("patient_sdk")
def test_the_dynamixel_sdk_over_a_network_port_drives_the_servo(rig: Rig) -> None:
    """The same SDK over verld's raw network port: each connection a program of its own."""
    port, packets = NetworkPort(f"socket://127.0.0.1:{rig.net_port}"), PacketHandler(2.0)
    assert port.openPort()
    try:
        assert packets.write1ByteTxRx(port, 1, 65, 7) == (COMM_SUCCESS, 0)
        assert packets.read1ByteTxRx(port, 1, 65) == (7, COMM_SUCCESS, 0)
    finally:
        port.closePort()
    assert rig.servo.table[65] == 7


@pytest.mark.timeout(60)
def test_unusable_plugins_beside_it_are_only_logged(rig: Rig) -> None:
    """verld on the dynamixel plugin runs; the plugin named as a built-in is logged."""
    assert rig.daemon.status()["link"]["state"] == "up"
    assert "codec_plugin_unusable" in rig.daemon.log()
    assert "verld-odd-codecs" in rig.daemon.log()
