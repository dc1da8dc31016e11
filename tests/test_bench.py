"""The bench's smoke run: `tools/bench --quick` (every family side by side, tiny windows) and
`tools/bench-ab` once each, shared by every test here; invariants only, never speeds.

Checked: every call answered and right (and counted by verld), every family's paths,
figures and targets present, the checker's load in 2 processes, the port programs, the
Modbus offline unit, the network port's 8 connections and ser2net beside it, verld's
rfc2217:// and tcp:// links through ser2net, the fleet's per-device counts and its
entities phase (a bridge polling 10 entities per device). The fleet family needs
mosquitto and the network and links families' ser2net paths need ser2net (as
tests/mqttrig.py: without one its checks skip, and fail under CI=true, where .ci/run
installs both).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
HAVE_MOSQUITTO = bool(shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin"))
HAVE_SER2NET = bool(shutil.which("ser2net") or shutil.which("ser2net", path="/usr/sbin"))
SER2NET = ("ser2net", "ser2net-nd") if HAVE_SER2NET else ()  #: its paths (chardelay on, off)
LINKS = ("tcp", "rfc2217") if HAVE_SER2NET else ()  #: verld's links through ser2net
#: per family and path, figures that must be numbers (every path has every key)
NUMBERS = {
    "api": {
        "direct": ("lat32_p50_us", "lat1k_p99_us", "calls_inflight8", "paced_util_c8"),
        "socat": ("lat32_p50_us", "calls_inflight8", "cpu_us_c1", "cpu_us_pipelined"),
        "verld": (
            "calls_c16",
            "calls_c64",
            "calls_p16x8_w8",
            "calls_p16x8_w32",
            "calls_check",
            "cpu_us_check",
            "rss_mib_c64",
            "ready_s",
            "idle_cpu_percent",
            "paced_util_c1",
            "codecs_cpu_us_check",
        ),
        "frame-seq": ("codecs_p50_us", "codecs_cpu_us_c1", "codecs_cpu_us_check"),
        "frame-match": ("codecs_p50_us", "codecs_cpu_us_c1"),
        "length": ("codecs_p50_us", "codecs_cpu_us_c1"),
    },
    "ports": {
        "direct": ("lat32_p50_us", "lat32_p99_us", "calls_c1", "py_p50_us", "py_p99_us"),
        "port": (
            "lat32_p50_us",
            "py_p50_us",
            "cpu_us_c1",
            "ready_s",
            "paced_calls",
            "paced_util",
            "paced_util_counters",
            "paced_p99_ms",
            "paced_cpu_percent",
        ),
    },
    "modbus": {
        "direct": ("lock_p50_us", "lock_p99_us", "raw_p50_us", "lock_calls"),
        "verld": (
            "lock_p50_us",
            "raw_p50_us",
            "cpu_us_lock",
            "paced_calls",
            "paced_util",
            "off_p50_ms",
            "off_p99_ms",
            "off_calls",
            "off_silent_calls",
        ),
    },
    "network": {
        "direct": ("lat32_p50_us", "lat32_p99_us", "calls_c1", "sim_cpu_us_c1"),
        "network": (
            "lat32_p50_us",
            "calls_c1",
            "cpu_us_c1",
            "sim_cpu_us_c1",
            "ready_s",
            "paced_calls",
            "paced_util",
            "paced_util_counters",
            "paced_p99_ms",
            "paced_cpu_us",
            "paced_cpu_percent",
        ),
        **dict.fromkeys(SER2NET, ("lat32_p50_us", "lat32_p99_us", "calls_c1", "cpu_us_c1")),
    },
    "links": {
        "direct": ("lat32_p50_us", "lat32_p99_us", "calls_32", "sim_cpu_us_32"),
        **dict.fromkeys(
            LINKS,
            (
                "lat32_p50_us",
                "lat32_p99_us",
                "calls_32",
                "verld_cpu_us_32",
                "ser2net_cpu_us_32",
                "sim_cpu_us_32",
                "open_ms",
            ),
        ),
    },
    "fleet": {
        "direct": ("lock_p50_us", "lock_rate", "fleet_rate", "fleet_p50_us", "verld_us_fleet"),
        "mqtt": (
            "lock_p50_us",
            "fleet_rate",
            "server_us_lock",
            "server_us_fleet",
            "broker_us_fleet",
            "ent_cpu_pct",
            "ent_cpu_us",
            "ent_rss_mib",
        ),
        "echo": ("lock_p50_us", "fleet_rate", "server_us_fleet", "broker_pct_fleet"),
    },
}
#: targets that are n/a in the smoke run: a side is left out (mbusd; the API path of ports;
#: the links family's 1 KiB workload and pty link; ser2net where it is not installed)
NOT_HERE = (
    "mbusd",
    "verld API client",
    "1 KiB",
    "pty link",
    *(() if HAVE_SER2NET else ("ser2net",)),
)

pytestmark = pytest.mark.timeout(150)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not HAVE_MOSQUITTO and os.environ.get("CI") == "true":
        pytest.fail("mosquitto is not installed (apt: mosquitto)")
    if not HAVE_SER2NET and os.environ.get("CI") == "true":
        pytest.fail("ser2net is not installed (apt: ser2net)")
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    started = time.monotonic()
    quick = subprocess.Popen(
        [sys.executable, str(REPO / "tools/bench"), "--quick", "--no-mbusd", "--json", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    ab = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tools/bench-ab"),
            str(REPO),
            str(REPO),
            "--rounds",
            "1",
            "--warmup",
            "0.02",
            "--duration",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        quick_out, _ = quick.communicate(timeout=140)
        ab_out, _ = ab.communicate(timeout=60)
    finally:
        for proc in (quick, ab):
            if proc.poll() is None:
                proc.kill()
    return {
        "code": quick.returncode,
        "stdout": quick_out,
        "ab_code": ab.returncode,
        "ab_stdout": ab_out,
        "json": json.loads(out.read_text()) if out.exists() else None,
        "json_path": out,
        "seconds": time.monotonic() - started,
    }


def _families(smoke: dict[str, Any]) -> dict[str, Any]:
    families: dict[str, Any] = smoke["json"]["families"]
    return families


def _runs(section: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every workload's result of a family: (where, result)."""
    out = []
    for phase, rounds in section["phases"].items():
        for rnd in rounds:
            for path in rnd["order"]:
                for name, run in rnd[path].items():
                    if isinstance(run, dict) and "calls" in run:
                        out.append((f"{phase} {path} {name}", run))
                    elif isinstance(run, dict) and isinstance(run.get("load"), dict):
                        out.append((f"{phase} {path} {name}", run["load"]))
    return out


def test_quick_run_exits_zero_with_every_family(smoke: dict[str, Any]) -> None:
    """`tools/bench --quick` exits 0 with no wrong or missing reply, and runs every family."""
    assert smoke["code"] == 0, smoke["stdout"][-4000:]
    result = smoke["json"]
    assert result is not None and result["ok"] is True and result["errors"] == []
    expected = {"api", "ports", "modbus", "network", "links"} | (
        {"fleet"} if HAVE_MOSQUITTO else set()
    )
    assert set(result["families"]) == expected
    for name in expected:  # each family's table, named with the command that made it
        assert f"tools/bench --quick --no-mbusd --family {name}" in smoke["stdout"]
    assert "NO mbusd" in smoke["stdout"]


def test_every_path_has_every_figure(smoke: dict[str, Any]) -> None:
    """Every path of a family has every figure key; those it measures are numbers."""
    for name, section in _families(smoke).items():
        figures = section["summary"]["figures"]
        assert set(figures) == set(NUMBERS[name]), name
        keys = set(next(iter(figures.values())))
        for path, wanted in NUMBERS[name].items():
            assert set(figures[path]) == keys
            for key in wanted:
                assert isinstance(figures[path][key], int | float), (name, path, key)


def test_every_workload_answered_every_call(smoke: dict[str, Any]) -> None:
    """Each workload made calls and got each reply right, and verld counted the same."""
    least = {"network": 3 + len(SER2NET), "links": 1 + len(LINKS)}
    for name, section in _families(smoke).items():
        runs = _runs(section)
        assert len(runs) >= least.get(name, 5), name
        for where, run in runs:
            assert run["calls"] > 0 and run["errors"] == 0, (where, run.get("error_samples"))
            assert run.get("missing", 0) == 0 and run["answered"] == run["sent"], where
            if "verld_counters" in run:
                got = run["good"] if name == "modbus" else run["answered"]
                assert run["verld_counters"]["calls_ok"] == got, where


def test_targets_are_reported(smoke: dict[str, Any]) -> None:
    """Each target has its op, threshold and a verdict; n/a only where a side is left out."""
    for section in _families(smoke).values():
        targets = section["summary"]["targets"]
        assert targets
        for t in targets:
            assert t["op"] in ("<=", "<", ">=") and isinstance(t["target"], float)
            if any(word in t["name"] for word in NOT_HERE):
                assert t["pass"] is None
            else:
                assert isinstance(t["measured"], int | float) and isinstance(t["pass"], bool), t


def test_checkers_load_runs_in_two_processes(smoke: dict[str, Any]) -> None:
    """The checker's load: 16 API clients × 8 in flight in 2 processes, with verld's CPU."""
    api = _families(smoke)["api"]
    (rnd,) = api["phases"]["rounds"]
    run = rnd["verld"]["check16x8"]
    assert run["gens"] == 2 and run["clients"] == 16 and run["inflight"] == 8
    assert all(g["calls"] > 0 and g["errors"] == 0 for g in run["per_gen"])
    assert run["bridge_cpu_us_per_call_sched"] > 0
    names = {t["name"]: t for t in api["summary"]["targets"]}
    assert len(names["verld, the checker's load / direct 8 in flight, calls/s"]["per_round"]) == 1


def test_port_programs_each_on_its_port(smoke: dict[str, Any]) -> None:
    """8 paced programs on 8 ports all made calls; the two wire-busy figures agree."""
    (paced,) = _families(smoke)["ports"]["phases"]["paced"]
    run = paced["port"]["p8"]
    assert run["gens"] == 8 and len(run["verld_ports"]) == 8
    for port in run["verld_ports"]:
        assert port["ok"] > 0 and port["failed"] == {} and port["dropped"] == 0
    assert abs(run["utilisation_percent"] - run["utilisation_counters_percent"]) < 20


def test_modbus_offline_unit(smoke: dict[str, Any]) -> None:
    """The 4th master of the offline phase got only gateway exceptions; unit 5 went offline."""
    (rnd,) = _families(smoke)["modbus"]["phases"]["offline"]
    run = rnd["verld"]["offline"]
    assert run["gens"] == 3 and run["silent"]["calls"] > 0
    assert set(run["silent"]["exceptions"]) <= {"0x0a", "0x0b"}
    units = {u["unit"]: u for u in run["verld_units"]}
    assert units[5]["offline"] is True and units[1]["offline"] is False


def test_network_port_and_ser2net(smoke: dict[str, Any]) -> None:
    """The network family: lock-step on a shared raw port and on ser2net, 8 paced connections."""
    network = _families(smoke)["network"]
    assert network["paths"] == {"rounds": ["direct", "network", *SER2NET], "paced": ["network"]}
    figures = network["summary"]["figures"]
    for path in ("network", *SER2NET):
        assert figures[path]["lat32_p50_us"] > 0 and figures[path]["cpu_us_c1"] > 0, path
    (rnd,) = network["phases"]["rounds"]
    assert rnd["network"]["lat32"]["verld_network"]["ok"] == rnd["network"]["lat32"]["answered"]
    (paced,) = network["phases"]["paced"]
    run = paced["network"]["p8"]
    assert run["gens"] == 8 and run["verld_network"]["ok"] == run["answered"]
    assert run["verld_network"]["failed"] == {} and run["verld_network"]["dropped"] == 0
    assert abs(run["utilisation_percent"] - run["utilisation_counters_percent"]) < 20
    names = {t["name"]: t for t in network["summary"]["targets"]}
    lock = names["network p50 / ser2net p50, lock-step 32 B"]
    assert lock["kind"] == "target" and len(lock["per_round"]) == 1
    assert (lock["pass"] is None) is not HAVE_SER2NET  # n/a only when ser2net is left out
    assert isinstance(names["paced wire busy, 8 programs on 8 connections"]["pass"], bool)
    if not HAVE_SER2NET:
        assert any("ser2net is not installed" in w for w in smoke["json"]["warnings"])


def test_rfc2217_link_against_tcp(smoke: dict[str, Any]) -> None:
    """The links family: verld on rfc2217:// and tcp:// to ser2net, its figures and ratios."""
    links = _families(smoke)["links"]
    assert links["paths"] == {"rounds": ["direct", *LINKS]}  # (no pty-linked verld: --quick)
    if not HAVE_SER2NET:
        assert any("ser2net is not installed" in w for w in smoke["json"]["warnings"])
        return
    figures = links["summary"]["figures"]
    for path in LINKS:
        for key in ("lat32_p50_us", "lat32_p99_us", "calls_32", "verld_cpu_us_32"):
            assert figures[path][key] > 0, (path, key)
        assert figures[path]["ser2net_cpu_us_32"] > 0, path
    (rnd,) = links["phases"]["rounds"]
    assert rnd["rfc2217"]["lat32"]["link"]["port"].startswith("rfc2217://127.0.0.1:")
    assert rnd["tcp"]["lat32"]["link"]["port"].startswith("tcp://127.0.0.1:")
    assert set(rnd["rfc2217"]["lat32"]["link"]["modem"]) == {"cts", "dsr", "ri", "cd"}
    names = {t["name"]: t for t in links["summary"]["targets"]}
    for name in (
        "rfc2217 p50 / tcp p50 via ser2net, lock-step 32 B",
        "rfc2217 / tcp verld CPU per call via ser2net, lock-step 32 B",
        "rfc2217 / tcp ser2net CPU per call, lock-step 32 B",
    ):
        ratio = names[name]
        assert ratio["target"] == 1.1 and isinstance(ratio["measured"], float), ratio
        assert len(ratio["per_round"]) == 1 and isinstance(ratio["pass"], bool)


@pytest.mark.skipif(not HAVE_MOSQUITTO, reason="mosquitto is not installed")
def test_fleet_calls_reach_every_device_once(smoke: dict[str, Any]) -> None:
    """Fleet loads reach every device; each verld counted exactly the replies it gave."""
    fleet = _families(smoke)["fleet"]
    n = fleet["info"]["n"]
    for rnd in fleet["phases"]["rounds"]:
        assert sorted(rnd["order"]) == ["direct", "echo", "mqtt"]
        for path in ("direct", "mqtt", "echo"):
            run = rnd[path][f"fleet{n}"]
            assert set(run["per_device"]) == {f"d{i:02d}" for i in range(n)}
            assert run["duplicates"] == 0 and sum(run["per_device"].values()) == run["answered"]
        for path in ("direct", "mqtt"):
            assert all(w["verld_calls_ok"] == w["answered"] for w in rnd[path].values())
    (rss,) = fleet["phases"]["rss"]
    assert len(rss["mqtt"]["load"]["per_device"]) == fleet["info"]["rss_devices"]
    assert fleet["info"]["memory"]["after_calls_mib"] > 0


@pytest.mark.skipif(not HAVE_MOSQUITTO, reason="mosquitto is not installed")
def test_fleet_entities_poll_every_entity_of_every_device(smoke: dict[str, Any]) -> None:
    """The entities phase: each entity's values came in the window, with the bridge's CPU."""
    fleet = _families(smoke)["fleet"]
    (rnd,) = fleet["phases"]["entities"]
    polls = rnd["mqtt"]["polls"]
    assert polls["devices"] == fleet["info"]["rss_devices"] and polls["per_device"] == 10
    assert polls["fewest"] >= 1 and polls["values"] >= 0.5 * polls["expected"]
    assert polls["cpu_percent"] > 0 and polls["rss_mib"] > 0
    assert "entities (1 devices × 10 every 0.2 s)" in smoke["stdout"]


@pytest.mark.timeout(30)
def test_from_json_rerenders_and_knows_an_old_file(smoke: dict[str, Any]) -> None:
    """--from-json prints a saved run's tables again; an old file is from an older engine."""
    run = [sys.executable, str(REPO / "tools/bench"), "--from-json"]
    again = subprocess.run(
        [*run, str(smoke["json_path"])], capture_output=True, text=True, timeout=20, check=False
    )
    assert again.returncode == 0 and "verld's API against a direct pty" in again.stdout
    old = REPO / "docs/bench.json"
    if old.exists() and "engine" not in json.loads(old.read_text()):
        gone = subprocess.run(
            [*run, str(old)], capture_output=True, text=True, timeout=20, check=False
        )
        assert gone.returncode == 2 and "older engine" in gone.stderr


def test_ab_of_this_checkout_against_itself(smoke: dict[str, Any]) -> None:
    """tools/bench-ab runs a round of direct, A and B and prints both checkouts' medians."""
    out = smoke["ab_stdout"]
    assert smoke["ab_code"] == 0, out[-3000:]
    assert "rounds 1: direct → A → B" in out
    assert f"A = {REPO}, B = {REPO}" in out
    (lock,) = [line for line in out.splitlines() if "lock-step 32 B (<= 2 ×)" in line]
    assert len(lock.split("met")) == 3, out  # a verdict for A and for B


@pytest.mark.timeout(30)
def test_silent_bridge_ends_a_lockstep_run_with_an_error(tmp_path: Path) -> None:
    """A bridge that accepts and never answers: the blocking client reports one missing call."""
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
    now = time.monotonic_ns()
    try:
        spec = Spec("api", path, 1, 1, 32, drain=0.3)
        result = lockstep.run(spec, lambda: (now + 50_000_000, now + 150_000_000))
    finally:
        accepter.join(5)
        for conn in held:
            conn.close()
        server.close()
    assert result["errors"] == 1 and result["missing"] == 1 and result["calls"] == 0
    assert "no reply within 0.3 s" in result["error_samples"][0]


@pytest.mark.timeout(60)
def test_hotpath_counts_the_call_path_of_this_checkout() -> None:
    """tools/hotpath runs the API call path in one process and reports its cost per call."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "hotpath"), "--calls", "800", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    row = proc.stdout.strip().splitlines()[-1].split()
    us, bytecodes, py_calls = (float(x) for x in row[-4:-1])
    # (counted on either build: the rig's own transport stays interpreted when verld is
    # compiled, and a compiled path runs 44 bytecodes where the pure one runs ~1,200)
    assert us > 0 and bytecodes > 0 and py_calls > 0


@pytest.mark.timeout(60)
def test_hotpath_runs_the_codec_a_config_declares() -> None:
    """tools/hotpath --config configs/frame.yaml runs the call path on the frame codec."""
    command = [sys.executable, str(REPO / "tools" / "hotpath"), "--calls", "800", "--repeat", "1"]
    runs = [
        subprocess.run(
            command + extra, capture_output=True, text=True, timeout=50, check=False, cwd=REPO
        )
        for extra in ([], ["--config", "configs/frame.yaml"])
    ]
    assert all(proc.returncode == 0 for proc in runs), [proc.stderr for proc in runs]
    verl, frame = (proc.stdout.strip().splitlines()[-1].split() for proc in runs)
    assert (verl[-1], frame[-1]) == ("VerlCodec", "FrameCodec")  # (the codec the path ran)
    assert float(frame[-3]) > 0  # (bytecodes: the path's interpreted part, on either build)


def test_api_echo_checks_a_frame_header_but_for_verlds_seq() -> None:
    """An echo through a frame codec's API passes with any seq, fails with a wrong header byte."""
    import base64

    sys.path.insert(0, str(REPO / "tools"))
    try:
        from benchlib.meter import ApiEcho, Spec
    finally:
        sys.path.remove(str(REPO / "tools"))
    echo = ApiEcho(Spec("api", "", 1, 1, 4, head="00 00 01", reply_head="04 ?? 01"))
    assert echo.request == b"\x00\x00\x01\x01"
    expected = echo.expected(b"abcd")

    def body(data: bytes) -> bytes:
        return b'{"id":7,"ok":true,"status":0,"data":"%s"}' % base64.b64encode(data)

    for seq in (0x00, 0x5A, 0xFF):
        good = body(bytes((4, seq, 1)) + b"abcd")
        assert echo.ok_at(good, 8, expected)
        assert echo.reply_ok(json.loads(good), expected)
    for wrong in (b"\x05\x00\x01abcd", b"\x04\x00\x02abcd", b"\x04\x00\x01abce"):
        assert not echo.ok_at(body(wrong), 8, expected)
        assert not echo.reply_ok(json.loads(body(wrong)), expected)
