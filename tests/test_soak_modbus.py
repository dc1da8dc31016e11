"""tools/soak on the Modbus codecs (`--codec modbus-rtu|modbus-tcp`), briefly.

Like `test_resilience.py::TestSoak`: the soak runs as tools/soak runs it
(`python -m soaklib` with tools/ on the path), real verld-sim and verld
processes, and the JSON report is checked. The long runs are by hand
(docs/reliability.md, "The soak").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def soak(*args: str, timeout: float = 50) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(REPO / "tools"), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "soaklib", *args],  # what tools/soak runs
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def check_report(report: dict[str, Any], codec: str) -> None:
    """The invariants of a passing Modbus soak, as the report states them."""
    mb = report["modbus"]
    assert report["codec"] == codec, report
    assert mb["ok"] > 0 and mb["wrong"] == 0, mb
    assert mb["by_kind"]["write"]["ok"] > 0 and mb["by_kind"]["read"]["ok"] > 0, mb
    assert all(mb["by_unit"][str(u)]["ok"] > 0 for u in mb["units"]), mb
    silent = mb["by_kind"]["silent"]
    assert silent["ok"] == silent["exception"] == silent["wrong"] == 0, mb
    assert report["misrouted"] == 0, report
    assert report["no_reply"] == 0 and report["duplicates"] == 0, report
    assert report["daemon_died"] is False and report["final_call_ok"] is True, report
    assert {row["unit"] for row in mb["status_units"]} >= set(mb["units"]), mb


class TestModbusSoak:
    @pytest.mark.timeout(60)
    def test_short_rtu_soak_with_drop_and_corrupt(self, tmp_path: Path) -> None:
        """4 clients × 4 s on modbus-rtu, drops and corrupted replies: no wrong value."""
        out = tmp_path / "soak.json"
        args = ["--codec", "modbus-rtu", "--clients", "4", "--seconds", "4"]
        proc = soak(*args, "--faults", "drop,corrupt", "--seed", "1", "--json", str(out))
        assert out.exists(), proc.stdout + proc.stderr
        report: dict[str, Any] = json.loads(out.read_text())
        check_report(report, "modbus-rtu")
        assert report["faults"] == ["drop", "corrupt"], report
        assert report["rss_kb"]["growth_after_warmup"] < 20 * 1024, report
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "result         PASS" in proc.stdout, proc.stdout

    @pytest.mark.timeout(60)
    def test_short_tcp_soak_leaves_corrupt_out(self, tmp_path: Path) -> None:
        """modbus-tcp with all faults: corrupt is left out (no checksum), said so; passes."""
        out = tmp_path / "soak.json"
        args = ["--codec", "modbus-tcp", "--clients", "4", "--seconds", "4", "--seed", "2"]
        proc = soak(*args, "--json", str(out))
        assert out.exists(), proc.stdout + proc.stderr
        report: dict[str, Any] = json.loads(out.read_text())
        check_report(report, "modbus-tcp")
        assert "corrupt" not in report["faults"] and "corrupt" in report["faults_left_out"]
        assert "fault corrupt left out on modbus-tcp" in proc.stderr, proc.stderr
        assert proc.returncode == 0, proc.stdout + proc.stderr

    @pytest.mark.timeout(30)
    def test_a_fault_the_codec_cannot_take_is_refused(self) -> None:
        """Naming corrupt on modbus-tcp is a usage error (exit 2), before anything starts."""
        proc = soak("--codec", "modbus-tcp", "--faults", "drop,corrupt", timeout=20)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "fault corrupt does not apply to modbus-tcp" in proc.stderr, proc.stderr

    @pytest.mark.timeout(30)
    def test_too_many_clients_for_the_registers_is_refused(self) -> None:
        """The Modbus soak refuses 97 clients (at most 96 fit the registers) with exit 2."""
        proc = soak("--codec", "modbus-rtu", "--clients", "97", timeout=20)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "at most 96 clients" in proc.stderr, proc.stderr
