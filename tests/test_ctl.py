"""verlctl and the daemon's command line, run as real subprocesses."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import DaemonProc, SimProc, write_config

from verld.client import AsyncClient

pytestmark = pytest.mark.timeout(60)


def verlctl(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verld.ctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class TestVerlctl:
    def test_status_table(self, daemon: DaemonProc) -> None:
        """`status` prints a readable table with the link state and generation."""
        r = verlctl("--socket", daemon.socket, "status")
        assert r.returncode == 0
        assert "link        up (connected)" in r.stdout
        assert "generation  1" in r.stdout

    def test_call_hex_echoes_with_hexdump(self, daemon: DaemonProc) -> None:
        """`call --hex 01aabb` shows status 0 and a hex dump of aa bb."""
        r = verlctl("--socket", daemon.socket, "call", "--hex", "01aabb")
        assert r.returncode == 0
        assert "status 0x00" in r.stdout
        assert "aa bb" in r.stdout

    def test_json_output(self, daemon: DaemonProc) -> None:
        """--json works before or after the command and prints one JSON object."""
        for args in (("--json", "call", "--hex", "01aabb"), ("call", "--hex", "01aabb", "--json")):
            r = verlctl("--socket", daemon.socket, *args)
            assert json.loads(r.stdout)["hex"] == "aabb"

    def test_device_error_exits_1(self, daemon: DaemonProc) -> None:
        """A non-zero device status exits 1 (0xFF included)."""
        assert verlctl("--socket", daemon.socket, "call", "--hex", "0507").returncode == 1
        assert verlctl("--socket", daemon.socket, "call", "--hex", "04").returncode == 1

    def test_unreachable_exits_3(self, tmp_path: Path) -> None:
        """No daemon at the socket: exit 3 with a one-line reason and no traceback."""
        r = verlctl("--socket", str(tmp_path / "none.sock"), "ping", "-c", "1")
        assert r.returncode == 3
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1

    def test_usage_errors_exit_2(self, daemon: DaemonProc) -> None:
        """Bad hex and a too-large request both exit 2."""
        assert verlctl("--socket", daemon.socket, "call", "--hex", "zz").returncode == 2
        big = "01" + "00" * 5000
        assert verlctl("--socket", daemon.socket, "call", "--hex", big).returncode == 2

    def test_timeout_exits_4(self, daemon: DaemonProc) -> None:
        """A call that times out exits 4."""
        r = verlctl("--socket", daemon.socket, "call", "--hex", "030bb8", "--timeout", "0.2",
                    "--retry", "0")  # fmt: skip
        assert r.returncode == 4

    def test_ping_count(self, daemon: DaemonProc) -> None:
        """`ping -c 5` prints five replies and a min/avg/max/mdev summary, exit 0."""
        r = verlctl("--socket", daemon.socket, "ping", "-c", "5", "-i", "0.05")
        assert r.returncode == 0
        assert r.stdout.count("reply seq=") == 5
        assert "5 sent, 5 received, 0% lost" in r.stdout
        assert "rtt min/avg/max/mdev" in r.stdout

    def test_metrics_parse_and_count_calls(self, daemon: DaemonProc) -> None:
        """`metrics` is valid Prometheus text and its ok-call counter equals the calls made."""
        c = daemon.client()
        for _ in range(7):
            c.call(b"\x01x")
        r = verlctl("--socket", daemon.socket, "metrics")
        families = {f.name: f for f in text_string_to_metric_families(r.stdout)}
        ok = [s.value for s in families["verld_calls"].samples if s.labels.get("outcome") == "ok"]
        assert ok == [7.0]
        assert "verld_call_latency_seconds" in families

    def test_logs_shows_lifecycle(self, daemon: DaemonProc) -> None:
        """`logs -n` prints recent records, link_up among them."""
        r = verlctl("--socket", daemon.socket, "logs", "-n", "50")
        assert r.returncode == 0
        assert "link_up" in r.stdout

    def test_reconnect_bumps_generation(self, daemon: DaemonProc) -> None:
        """`reconnect` (admin) drops and reopens the link: generation grows."""
        assert verlctl("--socket", daemon.socket, "reconnect").returncode == 0
        daemon.wait_state("up", min_generation=2)

    def test_events_streams_into_a_pipe(self, daemon: DaemonProc) -> None:
        """`events` writes each event line by line into a pipe and exits 0 on SIGTERM."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "verld.ctl", "--socket", daemon.socket, "events"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            import time

            time.sleep(0.5)
            daemon.client().call(b"\x06\x00\x02")
            first = proc.stdout.readline()
            assert "device" in first
        finally:
            proc.terminate()
            assert proc.wait(5) == 0
            if proc.stdout is not None:
                proc.stdout.close()


class TestDaemonCli:
    def test_check_config_ok(self) -> None:
        """--check-config on a valid file exits 0."""
        r = subprocess.run([sys.executable, "-m", "verld", "--check-config", "configs/verld.yaml"],
                           capture_output=True, text=True, check=False)  # fmt: skip
        assert r.returncode == 0

    def test_check_config_typo_suggests(self, tmp_path: Path) -> None:
        """A `timout:` typo exits 2 and suggests `timeout`, naming file and line."""
        bad = tmp_path / "bad.yaml"
        bad.write_text("device:\n  port: /dev/ttyUSB0\n  timout: 3\n")
        r = subprocess.run([sys.executable, "-m", "verld", "--check-config", str(bad)],
                           capture_output=True, text=True, check=False)  # fmt: skip
        assert r.returncode == 2
        assert f"{bad}:3" in r.stderr and "did you mean 'timeout'" in r.stderr
        assert "Traceback" not in r.stderr

    def test_bad_config_refuses_to_start(self, tmp_path: Path) -> None:
        """verld --config with an invalid file exits 2 without starting."""
        bad = tmp_path / "bad.yaml"
        bad.write_text("max_wait_time: 3\n")
        r = subprocess.run([sys.executable, "-m", "verld", "--config", str(bad)],
                           capture_output=True, text=True, check=False, timeout=20)  # fmt: skip
        assert r.returncode == 2
        assert "max_wait_time" in r.stderr and "timeout'?" in r.stderr


class TestHttpMetrics:
    def test_metrics_over_http(self, tmp_path: Path, sim: SimProc) -> None:
        """metrics.listen serves the Prometheus text on GET /metrics."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        d = DaemonProc(
            write_config(tmp_path, sim.link, {"metrics": {"listen": f"127.0.0.1:{port}"}})
        )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            assert "verld_link_up 1" in text
        finally:
            d.stop()


class TestAsyncClient:
    def test_concurrent_calls(self, daemon: DaemonProc) -> None:
        """The asyncio client runs many calls at once on one connection, each with its reply."""

        async def run() -> list[bytes]:
            async with AsyncClient(daemon.socket) as c:
                replies = await asyncio.gather(*(c.call(b"\x01" + bytes([i])) for i in range(50)))
                assert (await c.execute({"action": "echo", "params": "x"}))["data"] == b"x"
                return [r.data for r in replies]

        assert asyncio.run(run()) == [bytes([i]) for i in range(50)]
