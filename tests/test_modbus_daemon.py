"""verld on the Modbus codecs end to end, against verld-sim as the slave.

verld-sim's Modbus mode (docs/sim.md) serves units given by --units (holding
register i = i); verld is a real subprocess, the clients real sockets and `verlctl`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from verld.client import ClientError
from verld.client.modbus import Modbus
from verld.testing import DaemonProc, SimProc, wait_for, write_config

pytestmark = pytest.mark.timeout(60)

MODBUS = {
    "device": {"codec": "modbus-rtu", "timeout": 0.3, "retry": 0},
    "heartbeat": {"interval": 0},
    "modbus": {"offline_after": 2, "offline_backoff": 30},
}


@pytest.fixture
def rtu(tmp_path: Path) -> Iterator[DaemonProc]:
    sim = SimProc(tmp_path, "--units", "1,2", codec="modbus-rtu")
    daemon = DaemonProc(write_config(tmp_path, sim.link, MODBUS))
    try:
        yield daemon
    finally:
        daemon.stop()
        sim.stop()


def test_modbus_tcp_to_a_tcp_slave_pipelines_reads(tmp_path: Path) -> None:
    """modbus-tcp on tcp://: eight clients' reads are all answered, by transaction id."""
    sim = SimProc(tmp_path, "--units", "1", codec="modbus-tcp", tcp=True)
    overrides = {**MODBUS, "device": {"codec": "modbus-tcp", "timeout": 1.0, "window": 8}}
    daemon = DaemonProc(write_config(tmp_path, sim.address, overrides))
    try:
        buses = [Modbus(daemon.client()) for _ in range(8)]
        for i, bus in enumerate(buses):
            assert bus.read_holding_registers(1, i, 2) == [i, i + 1]
        assert daemon.status()["link"]["codec"] == "modbus-tcp"
    finally:
        daemon.stop()
        sim.stop()


def test_a_broadcast_applies_to_every_simulated_unit(rtu: DaemonProc) -> None:
    """Unit 0 on RTU: verld-sim applies the write on units 1 and 2 and stays silent."""
    client = rtu.client()
    assert client.call(bytes.fromhex("00060005abcd")).data == b""
    bus = Modbus(client)
    assert bus.read_holding_registers(1, 5, 1) == bus.read_holding_registers(2, 5, 1) == [0xABCD]


def test_status_and_metrics_show_the_units(rtu: DaemonProc) -> None:
    """status.units and the unit calls metric count reads, an exception and an offline unit."""
    # After reads, an exception, and a silent unit taken offline.
    client = rtu.client()
    Modbus(client).read_holding_registers(1, 0, 1)
    client.call(bytes.fromhex("010300c80001"))  # exception 02
    for _ in range(3):
        with pytest.raises(ClientError):
            client.call(bytes.fromhex("070300000001"))
    units = {u["unit"]: u for u in rtu.status()["units"]}
    assert units[1] == {
        "unit": 1,
        "calls": 2,
        "ok": 1,
        "exceptions": 1,
        "timeouts": 0,
        "offline": False,
        "errors": 0,
    }
    assert units[7]["offline"] is True and units[7]["timeouts"] == 3
    text = client.request("metrics")["text"]
    assert 'verld_modbus_unit_calls_total{unit="7",outcome="offline"} 1' in text
    assert 'verld_modbus_unit_offline{unit="7"} 1' in text


def test_verlctl_status_lists_the_units(rtu: DaemonProc) -> None:
    """`verlctl status` has a row per unit, OFFLINE marked."""
    client = rtu.client()
    Modbus(client).read_holding_registers(2, 0, 1)
    for _ in range(2):
        with pytest.raises(ClientError):
            client.call(bytes.fromhex("090300000001"))
    out = subprocess.run(
        [sys.executable, "-m", "verld.ctl", "--socket", rtu.socket, "status"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    assert "ok 1" in lines["unit 2"] and "OFFLINE" in lines["unit 9"]


def test_verlctl_monitor_decodes_modbus_frames(rtu: DaemonProc) -> None:
    """`verlctl monitor` shows the unit, the function and the exception by name."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "verld.ctl", "--socket", rtu.socket, "monitor"],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        client = rtu.client()

        def seen() -> bool:
            client.call(bytes.fromhex("010300c80001"))  # until the monitor has subscribed
            return any("exception 02 illegal data address" in line for line in lines)

        wait_for(seen, 10, lambda: f"a decoded exception in {lines}")
        assert any("unit 1 read holding registers (03) addr 200 count 1" in x for x in lines)
    finally:
        proc.terminate()
        proc.wait(10)
        reader.join(5)


def test_reload_applies_the_modbus_settings_live(rtu: DaemonProc) -> None:
    """`modbus.offline_after` from 2 to 4 by reload: the link stays, the new count rules."""
    config = rtu.config
    config.write_text(config.read_text().replace("offline_after: 2", "offline_after: 4"))
    client = rtu.client()
    assert client.request("reload")["changed"] == ["modbus.offline_after"]
    for _ in range(3):
        with pytest.raises(ClientError) as info:
            client.call(bytes.fromhex("090300000001"))
        assert info.value.message == "no answer within 0.3 s"
    units = {u["unit"]: u for u in rtu.status()["units"]}
    assert units[9]["offline"] is False and rtu.status()["link"]["generation"] == 1


def test_reload_to_another_codec_restarts_the_built_in_sim(tmp_path: Path) -> None:
    """A reload from modbus-rtu to modbus-tcp on `port: sim` starts a sim speaking modbus-tcp."""
    # The link comes up on it (generation 2) and reads work.
    config = write_config(tmp_path, "sim", MODBUS)
    daemon = DaemonProc(config)
    try:
        client = daemon.client()
        assert Modbus(client).read_holding_registers(1, 3, 1) == [3]
        config.write_text(config.read_text().replace("modbus-rtu", "modbus-tcp"))
        assert "device.codec" in client.request("reload")["changed"]
        daemon.wait_state("up", min_generation=2)
        assert Modbus(client).read_holding_registers(1, 4, 1) == [4]
        assert daemon.status()["link"]["codec"] == "modbus-tcp"
    finally:
        daemon.stop()


def test_sigterm_during_a_sim_restart_awaits_it(tmp_path: Path) -> None:
    """SIGTERM during a sim restart by reload: the restart is seen through, exit 0, no dir left."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    config = write_config(tmp_path, "sim", MODBUS)
    daemon = DaemonProc(config, env={"TMPDIR": str(tmp)})
    try:
        client = daemon.client()
        config.write_text(config.read_text().replace("modbus-rtu", "modbus-tcp"))
        assert "device.codec" in client.request("reload")["changed"]
    finally:
        code = daemon.stop()
    log = daemon.log_path.read_text()
    assert code == 0, log
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert [r.get("codec") for r in records if r["event"] == "sim_started"] == [None, "modbus-tcp"]
    assert os.listdir(tmp) == []
