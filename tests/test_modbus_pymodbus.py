"""verld on `modbus-rtu` against a real third-party slave: pymodbus 3.16 on a pty pair.

The slave (tests/modbus_slave.py) serves units 1 and 2 (holding register a of unit
u = 100*u + a), stays silent for unit 3, applies broadcasts; verld opens the other
end of a socat pty pair. Clients are the real Python client, `verld.client.modbus`
and `verlctl`.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from modbusrig import PtyCable, PymodbusSlave

from verld.client import Client, ClientError
from verld.client.modbus import Modbus, ModbusException
from verld.testing import DaemonProc, wait_for, write_config

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 0.3  #: device.timeout: a silent unit costs this per try


class Bench:
    """A pty cable, a pymodbus slave on its device end, verld on its host end."""

    def __init__(self, tmp: Path, **modbus: object) -> None:
        self.cable = PtyCable(tmp)
        self.slave = PymodbusSlave(self.cable.device_path, units=(1, 2), silent=(3,))
        config = write_config(
            tmp,
            self.cable.host_path,
            {
                "device": {"codec": "modbus-rtu", "timeout": TIMEOUT, "retry": 1},
                "heartbeat": {
                    "interval": 0.5,
                    "misses": 2,
                    "timeout": 0.3,
                    "payload": "010300000001",
                },
                "modbus": {"offline_after": 3, "offline_backoff": 1.0, **modbus},
            },
        )
        self.daemon = DaemonProc(config)

    def close(self) -> None:
        self.daemon.stop()
        self.slave.stop()
        self.cable.close()


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    try:
        yield b
    finally:
        b.close()


def test_reads_come_back_from_each_unit(bench: Bench) -> None:
    """Holding registers of units 1 and 2 through verld: the slave's values."""
    bus = Modbus(bench.daemon.client())
    assert bus.read_holding_registers(1, 0, 3) == [100, 101, 102]
    assert bus.read_holding_registers(2, 10, 2) == [210, 211]
    assert bus.read_input_registers(1, 5, 1) == [1005]


def test_a_write_reads_back(bench: Bench) -> None:
    """fc 6 then fc 3: the slave kept the value; fc 15 then fc 1 for coils."""
    bus = Modbus(bench.daemon.client())
    bus.write_register(1, 7, 4242)
    bus.write_registers(1, 20, [1, 2, 3])
    assert bus.read_holding_registers(1, 7, 1) == [4242]
    assert bus.read_holding_registers(1, 20, 3) == [1, 2, 3]
    bus.write_coils(2, 0, [True, True, False])
    assert bus.read_coils(2, 0, 3) == [True, True, False]


def test_an_out_of_range_read_is_exception_2(bench: Bench) -> None:
    """The slave's exception 02 is the call's status, a device_error."""
    client = bench.daemon.client()
    reply = client.call(bytes.fromhex("010300c80001"))
    assert (reply.status, reply.data.hex()) == (2, "018302")
    with pytest.raises(ModbusException) as info:
        Modbus(client).read_holding_registers(1, 200, 1)
    assert info.value.code == 2


def test_a_broadcast_write_reaches_every_unit(bench: Bench) -> None:
    """Unit 0: ok with no data, nobody answers, and both units have the value."""
    client = bench.daemon.client()
    reply = client.call(bytes.fromhex("000600090309"))  # register 9 := 777
    assert (reply.status, reply.data) == (0, b"")
    bus = Modbus(client)
    assert bus.read_holding_registers(1, 9, 1) == [777]
    assert bus.read_holding_registers(2, 9, 1) == [777]


def test_a_bad_request_never_reaches_the_bus(bench: Bench) -> None:
    """Unit 248 on RTU: bad_request from verld; the slave sees nothing."""
    with pytest.raises(ClientError) as info:
        bench.daemon.client().call(bytes.fromhex("f80300000001"))
    assert info.value.code == "bad_request"
    assert (
        bench.daemon.status()["counters"]["frames_tx"] == bench.daemon.status()["counters"]["pings"]
    )


def test_an_offline_unit_is_isolated_and_comes_back(bench: Bench) -> None:
    """A silent unit goes offline without slowing unit 1 and comes back once it answers again."""
    # Unit 3 silent: three calls time out, then fail at once; unit 1 stays fast, the link stays
    # up; the slave serving unit 3 again clears it after the backoff.
    client = bench.daemon.client()
    for _ in range(3):
        with pytest.raises(ClientError) as info:
            client.call(bytes.fromhex("030300000001"))
        assert info.value.code == "timeout"
    t0 = time.monotonic()
    with pytest.raises(ClientError) as info:
        client.call(bytes.fromhex("030300000001"))
    assert "unit 3 offline" in str(info.value) and time.monotonic() - t0 < TIMEOUT
    assert Modbus(client).read_holding_registers(1, 0, 1) == [100]
    st = bench.daemon.status()
    assert st["link"]["state"] == "up" and st["link"]["generation"] == 1
    assert {u["unit"]: u["offline"] for u in st["units"]} == {1: False, 3: True}

    bench.slave.stop()
    bench.slave = PymodbusSlave(bench.cable.device_path, units=(1, 2, 3))
    time.sleep(1.0)  # the backoff

    def back() -> bool:
        try:
            return Modbus(client).read_holding_registers(3, 0, 1) == [300]
        except ClientError:
            return False

    wait_for(back, 10.0, "unit 3 to answer again")
    units = {u["unit"]: u for u in bench.daemon.status()["units"]}
    assert units[3]["offline"] is False and units[3]["ok"] >= 1


def test_other_units_stay_fast_while_masters_poll_a_silent_one(tmp_path: Path) -> None:
    """Polling unit 1 stays within one try of silent unit 3 while two clients hammer unit 3."""
    # Unit 3 is never taken offline here; every one of the third client's calls ends within one
    # try of unit 3 (plus its own), none fails.
    bench = Bench(tmp_path, offline_after=1000)
    try:
        _poll_beside_a_silent_unit(bench)
    finally:
        bench.close()


def _poll_beside_a_silent_unit(bench: Bench) -> None:
    stop = threading.Event()

    def hammer() -> None:
        with Client(bench.daemon.socket, timeout=10.0) as c:
            while not stop.is_set():
                try:
                    c.call(bytes.fromhex("030300000001"))
                except ClientError:
                    pass

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        bus = Modbus(bench.daemon.client())
        worst = 0.0
        for _ in range(20):
            t0 = time.monotonic()
            assert bus.read_holding_registers(1, 0, 1) == [100]
            worst = max(worst, time.monotonic() - t0)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert worst < TIMEOUT + 0.1 + 0.25  # one try of unit 3 + the guard + slack
    assert bench.daemon.status()["link"]["generation"] == 1


def test_unplug_and_replug_under_load(bench: Bench) -> None:
    """Calls fail link_down while the cable is gone and reads work again after verld reconnects."""
    # The cable goes away mid-polling; verld reconnects on its own when it comes back, and reads
    # work again in a new generation.
    errors: list[str] = []
    ok = 0
    stop = threading.Event()

    def poll() -> None:
        nonlocal ok
        with Client(bench.daemon.socket, timeout=10.0) as c:
            bus = Modbus(c)
            while not stop.is_set():
                try:
                    bus.read_holding_registers(1, 0, 2)
                    ok += 1
                except ClientError as exc:
                    errors.append(exc.code)
                    time.sleep(0.02)

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        wait_for(lambda: ok >= 20, 10.0, "polling to run")
        bench.cable.unplug()
        bench.daemon.wait_state("down")
        bench.slave.stop()
        bench.cable.replug()
        bench.slave.restart()
        bench.daemon.wait_state("up", min_generation=2)
        before = ok
        wait_for(lambda: ok >= before + 20, 10.0, "polling to resume")
    finally:
        stop.set()
        thread.join(10)
    assert errors and set(errors) <= {"link_down", "timeout"}


def test_verlctl_call_reads_a_register_by_hand(bench: Bench) -> None:
    """`verlctl call --hex 010300000001`: the reply's hex is unit, fc, count, value."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "verld.ctl",
            "--socket",
            bench.daemon.socket,
            "call",
            "--hex",
            "010300000002",
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "01 03 04 00 64 00 65" in out.stdout


def test_verlctl_call_exits_1_on_an_exception(bench: Bench) -> None:
    """An exception reply is a device error: exit 1, status 0x02 shown."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "verld.ctl",
            "--socket",
            bench.daemon.socket,
            "call",
            "--hex",
            "010300c80001",
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert out.returncode == 1
    assert "status 0x02" in out.stdout
    assert "device_error: modbus exception 0x02 (illegal data address)" in out.stdout
