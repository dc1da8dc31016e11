"""`verlctl ping` sends the device's own ping (hello's `device.ping`), on every codec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, write_config

pytestmark = pytest.mark.timeout(60)


def verlctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "verld.ctl", *args], capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip


def serve(tmp: Path, codec: str, **heartbeat: Any) -> tuple[SimProc, DaemonProc]:
    sim = SimProc(tmp, codec=codec)
    try:
        d = DaemonProc(write_config(tmp, sim.link, {"device": {"codec": codec},
                                                     "heartbeat": heartbeat}))  # fmt: skip
    except BaseException:
        sim.stop()
        raise
    return sim, d


@pytest.mark.parametrize(
    ("codec", "heartbeat", "ping"),
    [
        ("verl", {}, ""),
        ("length", {"interval": 0}, ""),
        ("line", {"payload": "PING"}, "50494e47"),
        ("line", {}, None),
        ("modbus-rtu", {"payload": "010300000001"}, "010300000001"),
        ("modbus-rtu", {}, None),
    ],
)
def test_hello_names_the_device_ping(
    tmp_path: Path, codec: str, heartbeat: dict[str, Any], ping: str | None
) -> None:
    """hello's device.ping is the ping's hex ("" the empty request), null when there is none."""
    sim, d = serve(tmp_path, codec, **heartbeat)
    try:
        assert d.client().hello()["device"]["ping"] == ping
    finally:
        d.stop()
        sim.stop()


def test_ping_on_a_line_device_sends_its_heartbeat_payload(tmp_path: Path) -> None:
    """On `line` with heartbeat.payload PING, every ping is answered (PONG)."""
    sim, d = serve(tmp_path, "line", payload="PING")
    try:
        r = verlctl("--socket", d.socket, "ping", "-c", "3", "-i", "0.05")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "3 sent, 3 received, 0% lost" in r.stdout
    finally:
        d.stop()
        sim.stop()


def test_ping_without_a_device_ping_is_a_usage_error(tmp_path: Path) -> None:
    """No heartbeat.payload on `line`: exit 2 naming the key, nothing sent, link untouched."""
    sim, d = serve(tmp_path, "line")
    try:
        before = sim.counters()["requests"]
        r = verlctl("--socket", d.socket, "ping", "-c", "2")
        assert r.returncode == 2
        assert "heartbeat.payload" in r.stderr and "Traceback" not in r.stderr
        assert sim.counters()["requests"] == before
        assert d.status()["link"]["generation"] == 1
    finally:
        d.stop()
        sim.stop()


def test_ping_on_modbus_sends_the_heartbeat_request(tmp_path: Path) -> None:
    """On Modbus the ping is heartbeat.payload's request, answered by the slave."""
    sim, d = serve(tmp_path, "modbus-rtu", payload="010300000001")
    try:
        r = verlctl("--socket", d.socket, "ping", "-c", "2", "-i", "0.05")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "2 sent, 2 received" in r.stdout
    finally:
        d.stop()
        sim.stop()
