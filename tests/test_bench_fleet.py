"""tools/bench-fleet --quick: a smoke run of the fleet benchmark, checking invariants only.

It needs mosquitto (as tests/mqttrig.py: a skip without it, a failure under CI=true).
Nothing here asserts a speed: only that every path and workload ran, that every
call got exactly its own reply from the device it was sent to, and that every
figure and target the report promises is there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mqttrig import need

REPO = Path(__file__).resolve().parent.parent
PATHS = ("direct", "mqtt", "echo")
#: figures every path has as a number; the MQTT paths' own (server = bridge or echo)
COMMON = ("lock_p50_us", "lock_p99_us", "lock_rate", "fleet_rate", "fleet_p50_us")
MQTT_ONLY = ("server_us_lock", "server_us_fleet", "server_pct_fleet", "broker_us_fleet")

pytestmark = pytest.mark.timeout(150)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Any]:
    need("mosquitto")
    out = tmp_path_factory.mktemp("fleet") / "fleet.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "bench-fleet"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    return proc, json.loads(out.read_text()) if out.exists() else None


def test_exits_zero_with_every_reply_matched(fleet: Any) -> None:
    """The quick run exits 0, reports no broken invariant, and prints the targets."""
    proc, result = fleet
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result is not None and result["ok"] is True and result["errors"] == []
    assert "PASS" in proc.stdout or "FAIL" in proc.stdout


def test_every_call_got_its_one_reply(fleet: Any) -> None:
    """In every workload each request got exactly one right reply, counted by its device's verld."""
    # replies == requests, none wrong, missing or duplicated, and each device's verld counted
    # exactly the replies the generator got from it.
    _, result = fleet
    workloads = [w for r in result["rounds"] for p in PATHS for w in r[p].values()]
    workloads.append(result["rss"]["load"])
    assert len(workloads) >= 3 * len(result["rounds"])
    for w in workloads:
        assert w["sent"] > 0 and w["answered"] == w["sent"], w
        assert (w["errors"], w["missing"], w["duplicates"]) == (0, 0, 0), w
        assert sum(w["per_device"].values()) == w["answered"], w
    for r in result["rounds"]:
        for path in ("direct", "mqtt"):
            for w in r[path].values():
                assert w["verld_calls_ok"] == w["answered"], (path, w)


def test_rounds_rotate_and_spread_over_the_devices(fleet: Any) -> None:
    """Each round measures the three paths; the fleet workloads reach every device."""
    _, result = fleet
    n = result["meta"]["devices"]
    for r in result["rounds"]:
        assert sorted(r["order"]) == sorted(PATHS)
        for path in PATHS:
            assert set(r[path][f"fleet{n}"]["per_device"]) == {f"d{i:02d}" for i in range(n)}
    rss = result["rss"]
    assert rss["devices"] == result["meta"]["rss_devices"]
    assert len(rss["load"]["per_device"]) == rss["devices"]


def test_every_figure_and_target_is_there(fleet: Any) -> None:
    """The fleet bench reports every figure as a number and a verdict for both targets."""
    # Figures: latency, calls/s, CPU per call, scaling and RSS.
    _, result = fleet
    summary = result["summary"]
    figures = summary["figures"]
    for path in PATHS:
        for key in COMMON:
            assert isinstance(figures[path][key], int | float), (path, key)
    for path in ("mqtt", "echo"):
        for key in MQTT_ONLY:
            assert isinstance(figures[path][key], int | float), (path, key)
    assert figures["direct"]["server_us_fleet"] is None
    assert [s["devices"] for s in summary["scaling"]][-1] == result["rss"]["devices"]
    assert all(isinstance(s["rate"], int | float) for s in summary["scaling"])
    memory = summary["memory"]
    assert isinstance(memory["after_calls_mib"], float) and memory["after_calls_mib"] > 0
    targets = [t for t in summary["targets"] if t["kind"] == "target"]
    assert len(targets) == 2 and all(t["pass"] in (True, False) for t in targets)
