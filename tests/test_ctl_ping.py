"""`verlctl ping` sends the device's own ping (hello's `device.ping`), on every codec."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, write_config

pytestmark = pytest.mark.timeout(60)


def verlctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verld.ctl", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@contextlib.contextmanager
def serve(tmp: Path, codec: str, **heartbeat: Any) -> Iterator[tuple[SimProc, DaemonProc]]:
    """A verld-sim speaking `codec` and a verld on it, both stopped at the end."""
    sim = SimProc(tmp, codec=codec)
    try:
        d = DaemonProc(
            write_config(tmp, sim.link, {"device": {"codec": codec}, "heartbeat": heartbeat})
        )
        try:
            yield sim, d
        finally:
            d.stop()
    finally:
        sim.stop()


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
    with serve(tmp_path, codec, **heartbeat) as (_sim, d):
        assert d.client().hello()["device"]["ping"] == ping


def test_ping_on_a_line_device_sends_its_heartbeat_payload(tmp_path: Path) -> None:
    """On `line` with heartbeat.payload PING, every ping is answered (PONG)."""
    with serve(tmp_path, "line", payload="PING") as (_sim, d):
        r = verlctl("--socket", d.socket, "ping", "-c", "3", "-i", "0.05")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "3 sent, 3 received, 0% lost" in r.stdout


def test_ping_without_a_device_ping_is_a_usage_error(tmp_path: Path) -> None:
    """No heartbeat.payload on `line`: exit 2 naming the key, nothing sent, link untouched."""
    with serve(tmp_path, "line") as (sim, d):
        before = sim.counters()["requests"]
        r = verlctl("--socket", d.socket, "ping", "-c", "2")
        assert r.returncode == 2
        assert "heartbeat.payload" in r.stderr and "Traceback" not in r.stderr
        assert sim.counters()["requests"] == before
        assert d.status()["link"]["generation"] == 1


def test_ping_on_modbus_sends_the_heartbeat_request(tmp_path: Path) -> None:
    """On Modbus the ping is heartbeat.payload's request, answered by the slave."""
    with serve(tmp_path, "modbus-rtu", payload="010300000001") as (_sim, d):
        r = verlctl("--socket", d.socket, "ping", "-c", "2", "-i", "0.05")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "2 sent, 2 received" in r.stdout
