"""tools/bench --quick: a smoke run of the benchmark, checking invariants only (no speeds)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

#: figures every path reports (a number), and those only some paths can
COMMON = ("lat32_p50_us", "lat32_p99_us", "lat1k_p50_us", "lat1k_p99_us", "calls_c1")
ONLY = {
    "direct": ("calls_inflight8", "paced_util_c1", "paced_util_c8"),
    "socat": ("calls_inflight8", "cpu_us_c1", "cpu_us_pipelined"),
    "verld": (
        "calls_c16",
        "calls_c64",
        "calls_p16x8_w8",
        "calls_p16x8_w32",
        "cpu_us_c1",
        "cpu_us_pipelined",
        "rss_mib_c64",
        "ready_s",
        "idle_cpu_percent",
        "paced_util_c1",
        "paced_util_c8",
    ),
}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Any]:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "bench"),
            "--quick",
            "--rounds",
            "1",
            "--idle-seconds",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    result = json.loads(out.read_text()) if out.exists() else None
    return proc, result


@pytest.mark.timeout(120)
class TestQuickBench:
    def test_exits_zero_with_every_call_answered(self, bench: Any) -> None:
        """The quick run exits 0 and reports no wrong or missing reply."""
        proc, result = bench
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert result is not None and result["ok"] is True and result["errors"] == []

    def test_json_has_every_path_and_figure(self, bench: Any) -> None:
        """Every path has every figure key; the ones it can measure are numbers."""
        _, result = bench
        paths = ["direct", "socat", "verld"] if shutil.which("socat") else ["direct", "verld"]
        figures = result["summary"]["figures"]
        assert sorted(figures) == sorted(paths)
        keys = set(figures["verld"])
        for path in paths:
            assert set(figures[path]) == keys
            for key in (*COMMON, *ONLY[path]):
                assert isinstance(figures[path][key], int | float), (path, key)

    def test_every_workload_answered_every_call(self, bench: Any) -> None:
        """In every round and workload, the generator sent calls and each got its right reply."""
        _, result = bench
        runs = [
            w
            for r in result["rounds"]
            for p in ("direct", "socat", "verld")
            for w in (r.get(p) or {}).values()
            if isinstance(w, dict)
        ]
        runs += [w for r in result["paced"]["rounds"] for w in r.values()]
        assert runs
        for run in runs:
            assert run["calls"] > 0 and run["errors"] == 0 and run["missing"] == 0
            assert run["answered"] == run["sent"]

    def test_targets_are_reported(self, bench: Any) -> None:
        """Each target carries a measured value, the target and a pass/fail verdict."""
        _, result = bench
        targets = result["summary"]["targets"]
        assert len(targets) >= 8
        for t in targets:
            assert isinstance(t["measured"], int | float) and isinstance(t["pass"], bool)

    def test_port_path_joins_the_same_rounds(self, bench: Any) -> None:
        """A full run measures `port` in the verl rounds; its figures sit in `ports` alone."""
        _, result = bench
        (rnd,) = result["rounds"]
        assert "port" in rnd["order"] and "port" not in rnd
        assert "lat32_pyserial" not in rnd["direct"]  # moved to the ports section
        assert not any(k.startswith("port_") for r in result["paced"]["rounds"] for k in r)
        (prnd,) = result["ports"]["rounds"]
        assert prnd["order"] == rnd["order"] and prnd["direct"]["lat32"] == rnd["direct"]["lat32"]
        assert prnd["verld"]["lat32"] == rnd["verld"]["lat32"]  # the API client, same round
        names = {t["name"] for t in result["ports"]["summary"]["targets"]}
        assert "port p50 / verld API client p50, lock-step 32 B" in names


class TestLockstepClient:
    """The blocking lock-step client (no event loop) still cannot hang on a silent bridge."""

    @pytest.mark.timeout(30)
    def test_silent_bridge_ends_the_run_with_an_error(self, tmp_path: Path) -> None:
        """A bridge that accepts and never answers: START and END said, one missing call."""
        import socket
        import threading

        sys.path.insert(0, str(REPO / "tools"))
        try:
            from benchlib import lockstep
            from benchlib.meter import Spec
        finally:
            sys.path.remove(str(REPO / "tools"))

        path = str(tmp_path / "silent.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen(1)
        held: list[socket.socket] = []
        accepter = threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True)
        accepter.start()
        said: list[str] = []
        try:
            spec = Spec("api", path, 1, 1, 32, 0.1, 0.2, drain=0.5)
            result = lockstep.run(spec, said.append)
        finally:
            accepter.join(5)
            for conn in held:
                conn.close()
            server.close()
        assert said == ["START", "END"]
        assert result["errors"] == 1 and result["missing"] == 1 and result["calls"] == 0
        assert "no reply within 0.5 s" in result["error_samples"][0]


@pytest.mark.timeout(120)
class TestBenchAB:
    def test_ab_of_this_checkout_against_itself(self) -> None:
        """tools/bench-ab runs a round for A and B and prints both medians."""
        proc = subprocess.run(
            [
                *(sys.executable, str(REPO / "tools" / "bench-ab"), str(REPO), str(REPO)),
                *("--rounds", "1", "--warmup", "0.1", "--duration", "0.3"),
            ],
            capture_output=True,
            text=True,
            timeout=110,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "round 1:" in proc.stdout
        medians = [line for line in proc.stdout.splitlines() if "lock-step" in line and "×" in line]
        assert len(medians) == 2, proc.stdout


@pytest.fixture(scope="module")
def modbus_bench(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Any]:
    out = tmp_path_factory.mktemp("bench-modbus") / "bench.json"
    proc = subprocess.run(
        [
            *(sys.executable, str(REPO / "tools" / "bench"), "--modbus", "--quick"),
            *("--no-mbusd", "--json", str(out)),  # no mbusd: nothing to build
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    result = json.loads(out.read_text()) if out.exists() else None
    return proc, result


@pytest.mark.timeout(120)
class TestQuickModbusBench:
    def test_exits_zero_with_every_response_right(self, modbus_bench: Any) -> None:
        """`--modbus --quick --no-mbusd` exits 0: no wrong or missing response anywhere."""
        proc, result = modbus_bench
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert result is not None and result["ok"] is True and result["errors"] == []
        assert "rounds" not in result  # only the Modbus rounds ran
        assert "NO mbusd" in proc.stdout  # and it says the mbusd column is left out

    def test_json_has_the_verld_and_direct_figures(self, modbus_bench: Any) -> None:
        """direct and verld (no mbusd) have their lock-step, paced and offline figures."""
        _, result = modbus_bench
        mb = result["modbus"]
        assert mb["paths"] == ["direct", "verld"] and mb["mbusd"]["binary"] is None
        figures = mb["summary"]["figures"]
        assert sorted(figures) == ["direct", "verld"]
        for path in ("direct", "verld"):
            for key in ("lock_p50_us", "lock_p90_us", "lock_p99_us", "raw_p50_us", "lock_calls"):
                assert isinstance(figures[path][key], int | float) and figures[path][key] > 0
        for key in ("paced_calls", "paced_util", "off_p50_ms", "off_p99_ms", "off_calls"):
            assert isinstance(figures["verld"][key], int | float), key
        targets = {t["name"]: t for t in mb["summary"]["targets"]}
        assert targets["verld p50 / direct p50, lock-step (pymodbus clients)"]["measured"] > 0
        assert targets["verld p50 / mbusd p50, lock-step (pymodbus clients)"]["pass"] is None

    def test_every_workload_was_checked_and_right(self, modbus_bench: Any) -> None:
        """Each workload made calls, all checked right; verld's count matches the masters'."""
        _, result = modbus_bench
        (rnd,) = result["modbus"]["rounds"]
        runs = [*rnd["direct"].values(), *rnd["verld"].values()]
        assert len(runs) == 6  # lock_py + lock_raw on both; paced8 + offline on verld
        for run in runs:
            assert run["calls"] > 0 and run["errors"] == 0, run.get("error_samples")
        offline = rnd["verld"]["offline"]
        assert offline["masters"] == 3 and offline["silent"]["calls"] > 0
        assert set(offline["silent"]["exceptions"]) <= {"0x0a", "0x0b"}
        units = {u["unit"]: u for u in offline["verld_units"]}
        assert units[5]["offline"] is True and units[1]["offline"] is False
        assert (
            rnd["verld"]["paced8"]["verld_counters"]["calls_ok"] == rnd["verld"]["paced8"]["good"]
        )


@pytest.fixture(scope="module")
def ports_bench(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Any]:
    out = tmp_path_factory.mktemp("bench-ports") / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "bench"), "--ports", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    result = json.loads(out.read_text()) if out.exists() else None
    return proc, result


#: figures of the port rounds that each path reports (a number)
PORT_FIGURES = {
    "direct": ("lat32_p50_us", "lat32_p99_us", "calls_c1", "py_p50_us", "py_p99_us"),
    "port": (
        *("lat32_p50_us", "lat32_p99_us", "calls_c1", "py_p50_us", "py_p99_us", "cpu_us_c1"),
        *("ready_s", "paced_calls", "paced_util", "paced_util_counters", "paced_p50_ms"),
        *("paced_p99_ms", "paced_cpu_percent"),
    ),
}


@pytest.mark.timeout(120)
class TestQuickPortsBench:
    def test_exits_zero_with_only_the_port_rounds(self, ports_bench: Any) -> None:
        """`--ports --quick` exits 0 with no wrong or missing reply, and runs nothing else."""
        proc, result = ports_bench
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert result is not None and result["ok"] is True and result["errors"] == []
        assert "ports" in result and not {"rounds", "paced", "idle", "modbus"} & set(result)
        assert "port figure" in proc.stdout  # the table is printed

    def test_json_has_every_port_figure(self, ports_bench: Any) -> None:
        """direct and port have every figure key; the ones each measures are numbers > 0."""
        _, result = ports_bench
        ports = result["ports"]
        assert ports["paths"] == ["direct", "port"] and ports["programs"] == 8
        figures = ports["summary"]["figures"]
        assert set(figures["direct"]) == set(figures["port"])
        for path, keys in PORT_FIGURES.items():
            for key in keys:
                value = figures[path][key]
                assert isinstance(value, int | float) and value > 0, (path, key, value)

    def test_every_program_got_every_reply(self, ports_bench: Any) -> None:
        """Each workload made calls and got each reply right; verld's counts agree."""
        _, result = ports_bench
        (rnd,) = result["ports"]["rounds"]
        assert rnd["order"] in (["direct", "port"], ["port", "direct"])
        (paced,) = result["ports"]["paced"]["rounds"]
        runs = [*rnd["direct"].values(), rnd["port"]["lat32"], rnd["port"]["lat32_pyserial"]]
        for run in [*runs, paced["port_p8"]]:
            assert run["calls"] > 0 and run["errors"] == 0 and run["missing"] == 0, run
            assert run["answered"] == run["sent"]
        for run in (rnd["port"]["lat32"], rnd["port"]["lat32_pyserial"], paced["port_p8"]):
            assert run["verld_counters"]["calls_ok"] == run["answered"]
            assert sum(p["ok"] for p in run["verld_ports"]) == run["answered"]
            for port in run["verld_ports"]:
                assert port["failed"] == {} and port["dropped"] == 0 and port["bad_frames"] == 0

    def test_paced_programs_each_called_and_the_wire_figures_agree(self, ports_bench: Any) -> None:
        """Each of 8 paced programs on 8 ports made calls and the two wire-busy figures agree."""
        # Wire busy from their calls/s and from verld's bytes_rx counter are two counts of one
        # window
        # (a sanity check, not a speed).
        _, result = ports_bench
        (paced,) = result["ports"]["paced"]["rounds"]
        run = paced["port_p8"]
        assert run["programs"] == 8 and len({p["link"] for p in run["per_program"]}) == 8
        assert all(p["calls"] > 0 and p["errors"] == 0 for p in run["per_program"])
        assert 0 < run["utilisation_percent"] < 150
        assert abs(run["utilisation_percent"] - run["utilisation_counters_percent"]) < 20

    def test_targets_are_reported(self, ports_bench: Any) -> None:
        """The port targets carry a measured value and a verdict; none needs a verld API run."""
        _, result = ports_bench
        targets = {t["name"]: t for t in result["ports"]["summary"]["targets"]}
        assert set(targets) == {
            "port p50 / direct p50, lock-step 32 B",
            "port p50 / direct p50, lock-step 32 B, pyserial's API",
            "paced wire busy, 8 programs on 8 ports",
        }
        for t in targets.values():
            assert isinstance(t["measured"], int | float) and isinstance(t["pass"], bool)
        assert len(targets["port p50 / direct p50, lock-step 32 B"]["per_round"]) == 1
