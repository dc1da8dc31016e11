"""The modbus family: verld's Modbus TCP gateway against a direct RTU master and mbusd.

One verld-sim (`--codec modbus-rtu --units 1,2`: holding register i holds i, other
units silent); every call reads `--modbus-registers` (10) holding registers of unit 1
(fc 3) and is checked value by value. Paths: `direct` (an RTU master on the pty),
`verld` (Modbus TCP → verld's Modbus front → modbus-rtu on the pty) and `mbusd` (the
same master → mbusd → the pty), each gateway started per leg (its timing is the
phase's) on a flushed pty. Phases, each in interleaved rounds:

1. `rounds` (lock-step, unpaced): one master, pymodbus's blocking client (`lock_py`)
   and a raw one (`lock_raw`: write(2), block in read(2), compare bytes);
2. `paced`: the sim's line paced at `--modbus-baud` (19200) and the gateways set to
   it; 8 masters at once, each lock-step: calls/s and how busy the RTU line was —
   verld from its own byte counters over the window, mbusd from calls × bytes;
3. `offline`: 3 masters poll unit 1 while a 4th polls unit 5, which never answers,
   both gateways with a 0.2 s timeout and 1 retry: the 3 masters' latency.

Every master is a generator process of its own (`mbclients`). mbusd
(github.com/3cky/mbusd, BSD-3-Clause, not in this repository) is built from its
source with cmake and make into a temp folder when they are there; else the family
runs without the mbusd path and says why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any

from benchlib.engine import (
    Bridge,
    Family,
    Leg,
    Load,
    Path,
    Phase,
    Result,
    Run,
    Timing,
    direct_then_alternate,
)
from benchlib.mbclients import Master
from benchlib.procs import (
    BenchError,
    Server,
    Sim,
    Verld,
    await_listening,
    flush_pty,
    free_port,
    tail,
)
from benchlib.report import Figure, Target, fig, ratio

#: mbusd's source: $MBUSD_SRC, else a `shared/third_party/mbusd` folder beside the checkout
MBUSD_SRC = os.environ.get(
    "MBUSD_SRC", str(FsPath(__file__).resolve().parents[4] / "shared" / "third_party" / "mbusd")
)
MBUSD_BUILD = "/tmp/mbusd-build"
UNIT, SILENT_UNIT, LOCK_BAUD = 1, 5, 115200
TIMEOUT, RETRY, OFFLINE_TIMEOUT, OFFLINE_RETRY = 0.5, 1, 0.2, 1
F = Figure
FIGURES = (
    *(
        F(f"lock_{q}_us", f"lock-step, pymodbus client, {q} (µs)", 1, f"lock_py.latency_us.{q}")
        for q in ("p50", "p90", "p99")
    ),
    F("lock_calls", "calls/s, 1 lock-step pymodbus client", 0, "lock_py.rate"),
    *(
        F(f"raw_{q}_us", f"lock-step, raw client, {q} (µs) ¹", 1, f"lock_raw.latency_us.{q}")
        for q in ("p50", "p90", "p99")
    ),
    F(
        "cpu_us_lock",
        "gateway CPU µs/call, lock-step raw client ⁴",
        1,
        "lock_raw.bridge_cpu_us_per_call_sched",
    ),
    F("paced_calls", "calls/s when paced, 8 masters", 1, "paced:paced8.rate"),
    F(
        "paced_util",
        "wire busy when paced, 8 masters (%) ²",
        1,
        {
            "verld": "paced:paced8.wire_util_percent",
            "mbusd": "paced:paced8.wire_util_calls_percent",
        },
    ),
    F(
        "paced_p50_ms",
        "latency when paced, 8 masters, p50 (ms)",
        1,
        "paced:paced8.latency_us.p50",
        scale=1e-3,
    ),
    F(
        "paced_p99_ms",
        "latency when paced, 8 masters, p99 (ms)",
        1,
        "paced:paced8.latency_us.p99",
        scale=1e-3,
    ),
    *(
        F(
            f"off_{q}_ms",
            f"offline unit: 3 masters of unit 1, {q} (ms) ³",
            2,
            f"offline:offline.latency_us.{q}",
            scale=1e-3,
        )
        for q in ("p50", "p99", "max")
    ),
    F("off_calls", "offline unit: calls/s of the 3 masters ³", 0, "offline:offline.rate"),
    F(
        "off_silent_calls",
        "offline unit: gateway exceptions/s to the 4th ³",
        1,
        "offline:offline.silent.rate",
    ),
    F(
        "off_cpu_percent",
        "offline unit: gateway CPU, % of a core ³ ⁴",
        1,
        "offline:offline.bridge_cpu_percent",
    ),
)


def _p50(path: str, load: str) -> str:
    return f"{path}.{load}.latency_us.p50"


LOCK = Target(
    "verld p50 / direct p50, lock-step (pymodbus clients)",
    "target",
    "<=",
    1.5,
    "×",
    ratio(_p50("verld", "lock_py"), _p50("direct", "lock_py")),
)
RAW = Target(
    "verld p50 / direct p50, lock-step (raw clients)",
    "info",
    "<=",
    1.5,
    "×",
    ratio(_p50("verld", "lock_raw"), _p50("direct", "lock_raw")),
)
TARGETS = (
    LOCK,
    Target(
        "verld p50 / mbusd p50, lock-step (pymodbus clients)",
        "target",
        "<=",
        1.0,
        "×",
        ratio(_p50("verld", "lock_py"), _p50("mbusd", "lock_py")),
    ),
    RAW,
    Target(
        "verld p50 / mbusd p50, lock-step (raw clients)",
        "info",
        "<=",
        1.0,
        "×",
        ratio(_p50("verld", "lock_raw"), _p50("mbusd", "lock_raw")),
    ),
    Target(
        "paced wire busy, 8 masters through verld",
        "target",
        ">=",
        90.0,
        "%",
        fig("verld", "paced_util"),
    ),
    Target(
        "verld / mbusd calls/s, paced, 8 masters",
        "target",
        ">=",
        1.0,
        "×",
        ratio("paced:verld.paced8.rate", "paced:mbusd.paced8.rate"),
    ),
    Target(
        "offline unit: verld p99 / mbusd p99, 3 masters",
        "info",
        "<=",
        1.0,
        "×",
        ratio("offline:verld.offline.latency_us.p99", "offline:mbusd.offline.latency_us.p99"),
    ),
)


@dataclass(frozen=True)
class Masters(Load):
    """`count` masters of unit 1 (`client`: pymodbus | raw), and `silent` more of unit 5."""

    name: str
    client: str
    count: int = 1
    silent: int = 0
    registers: int = 10
    ok_key = "good"

    def gens(self, run: Run, bridge: Bridge) -> list[tuple[str, str, str]]:
        transport = "rtu" if bridge.kind == "rtu" else "tcp"
        one = Master(
            self.client,
            transport,
            bridge.target,
            unit=UNIT,
            count=self.registers,
            baud=bridge.extra.get("baud", LOCK_BAUD),
        )
        mute = Master(
            self.client,
            "tcp",
            bridge.target,
            unit=SILENT_UNIT,
            count=self.registers,
            expect="gateway-exception",
        )
        return [("modbus", one.to_json(), "")] * self.count + [
            ("modbus", mute.to_json(), "silent")
        ] * self.silent


@dataclass(frozen=True)
class MbusdBuild:
    binary: str | None  #: None: no mbusd in this run
    version: str
    note: str  #: how it was obtained, or why not


def build_mbusd(src: str, build: str, log: FsPath) -> MbusdBuild:
    """cmake + make mbusd from `src` into `build`; why not, when it cannot be built."""
    if not (FsPath(src) / "CMakeLists.txt").is_file():
        return MbusdBuild(None, "", f"no mbusd source at {src} (set MBUSD_SRC or --mbusd-src)")
    missing = [tool for tool in ("cmake", "make") if shutil.which(tool) is None]
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        missing.append("a C compiler (cc/gcc)")
    if missing:
        return MbusdBuild(None, "", f"cannot build mbusd: {', '.join(missing)} not installed")
    with open(log, "ab") as out:
        for step in (
            ["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release"],
            ["make", "-C", build],
        ):
            try:
                code = subprocess.run(
                    step, stdout=out, stderr=subprocess.STDOUT, timeout=600, check=False
                ).returncode
            except (OSError, subprocess.TimeoutExpired) as exc:
                return MbusdBuild(None, "", f"mbusd build failed: {' '.join(step)}: {exc}")
            if code != 0:
                why = tail(log, 3).replace("\n", " / ")
                return MbusdBuild(None, "", f"mbusd build failed ({step[0]} exited {code}): {why}")
    return prebuilt_mbusd(str(FsPath(build) / "mbusd"), f"built from source into {build}")


def prebuilt_mbusd(binary: str, note: str) -> MbusdBuild:
    """An mbusd binary to use as it is (its version from `mbusd -h`)."""
    if not os.access(binary, os.X_OK):
        return MbusdBuild(None, "", f"{binary} is not an executable mbusd")
    try:
        out = subprocess.run(
            [binary, "-h"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return MbusdBuild(None, "", f"{binary} -h failed: {exc}")
    return MbusdBuild(binary, (out.split() or ["mbusd-?"])[0].partition("-")[2] or "?", note)


class Modbus(Family):
    name, title = "modbus", "verld's Modbus TCP gateway against a direct RTU master and mbusd"
    figures, targets, ab_targets = FIGURES, TARGETS, (LOCK, RAW)
    footnotes = (
        "¹ write(2) the request, block in read(2) until the response is whole, compare bytes: "
        "no client library on the path.",
        "² (request + response bytes on the RTU line per second) × 10 bits / baud; verld: its "
        "own byte counters; mbusd: calls × bytes per call.",
        "³ 3 masters poll unit 1 while a 4th polls unit 5, which never answers; both gateways "
        "with a 0.2 s timeout and 1 retry.",
        "⁴ from /proc/PID/task/*/schedstat over the window.",
    )

    def setup(self, run: Run) -> None:
        try:
            import pymodbus
        except ImportError:
            raise BenchError(
                "the modbus family needs pymodbus (pip install 'pymodbus>=3.11,"
                "<4'; it is in the test extra)"
            ) from None
        o = run.options
        self.pymodbus, self.baud = pymodbus.__version__, getattr(o, "modbus_baud", 19200)
        self.registers = getattr(o, "modbus_registers", 10)
        self.wire_bytes = 8 + 5 + 2 * self.registers  #: one fc 3 call on the RTU line
        if getattr(o, "no_mbusd", True):
            self.mbusd = MbusdBuild(None, "", "left out (--no-mbusd)")
        elif o.mbusd:
            self.mbusd = prebuilt_mbusd(o.mbusd, f"the binary {o.mbusd}")
        else:
            run.say(f"modbus: building mbusd from {o.mbusd_src} into {o.mbusd_build}")
            self.mbusd = build_mbusd(o.mbusd_src, o.mbusd_build, run.tmp / "mbusd-build.log")
        if self.mbusd.binary is None:
            run.say(f"modbus: NO mbusd: {self.mbusd.note}; the rounds run without the mbusd path")
            run.warn(f"Modbus rounds without mbusd: {self.mbusd.note}")
        self.sim = Sim(
            run.procs, run.tmp, codec="modbus-rtu", extra_args=["--units", "1,2"], name="mb"
        )

    def gateway(
        self, path: str, baud: int, timeout: float, retry: int, checkout: Any = None
    ) -> Any:
        def start(run: Run) -> Bridge:
            flush_pty(self.sim.link)
            roles, port = {"sim": [self.sim.pid]}, free_port()
            if path == "direct":
                return Bridge("rtu", self.sim.link, roles, extra={"baud": baud})
            if path == "mbusd":
                assert self.mbusd.binary is not None
                relay = Server(
                    run.procs,
                    [
                        self.mbusd.binary,
                        "-d",
                        "-L",
                        "-",
                        "-v2",
                        "-A",
                        "127.0.0.1",
                        "-P",
                        str(port),
                        "-p",
                        os.path.realpath(self.sim.link),
                        "-s",
                        str(baud),
                        "-m",
                        "8N1",
                        "-R",
                        "1",
                        "-W",
                        str(round(timeout * 1000)),
                        "-N",
                        str(retry),
                    ],
                    run.dir("mbusd").with_suffix(".log"),
                    port=port,
                )
                return Bridge(
                    "tcp", f"127.0.0.1:{port}", {"bridge": [relay.pid], **roles}, stop=relay.stop
                )
            modbus = {"listen": f"127.0.0.1:{port}", "read_only": True}
            if run.quick and timeout == OFFLINE_TIMEOUT:
                modbus["offline_after"] = 1  # (--quick: offline after one call, not 3)
            config = {
                "device": {
                    "port": self.sim.link,
                    "codec": "modbus-rtu",
                    "baudrate": baud,
                    "parity": "none",
                    "stopbits": 1,
                    "timeout": timeout,
                    "retry": retry,
                },
                "modbus": modbus,
                "log": {"level": "INFO", "format": "json"},
            }
            d = Verld(run.procs, run.dir("verld"), config, checkout)
            await_listening(d.proc, port, "verld's Modbus front", d.log_path)
            return Bridge(
                "tcp",
                f"127.0.0.1:{port}",
                {"bridge": [d.pid], **roles},
                [d],
                window_status=True,
                stop=d.stop,
                extra={"check": _units},
            )

        return start

    def _paths(self, names: list[str], loads: tuple[Load, ...], *gw: Any) -> tuple[Path, ...]:
        return tuple(Path(p, (Leg(self.gateway(p, *gw), loads),)) for p in names)

    def phases(self, run: Run) -> list[Phase]:
        lock = run.timings["lock"]
        gateways = ["verld", *(["mbusd"] if self.mbusd.binary else [])]
        # --quick: raw masters when paced and offline (pymodbus's import is most of a start)
        n, many = self.registers, "raw" if run.quick else "pymodbus"
        out = [
            Phase(
                "rounds",
                self._paths(
                    ["direct", *gateways],
                    (
                        Masters("lock_py", "pymodbus", registers=n),
                        Masters("lock_raw", "raw", registers=n),
                    ),
                    LOCK_BAUD,
                    TIMEOUT,
                    RETRY,
                ),
            )
        ]
        if self.baud:
            out.append(
                Phase(
                    "paced",
                    self._paths(
                        gateways,
                        (Masters("paced8", many, 8, registers=n),),
                        self.baud,
                        TIMEOUT,
                        RETRY,
                    ),
                    timing=Timing(max(lock.warmup, 0.3), lock.duration * 1.5),
                    enter=self.pace,
                    leave=self.unpace,
                    after=self._wire,
                )
            )
        settle = 0.7 if run.quick else 2.5  # verld takes unit 5 offline in the warm-up
        out.append(
            Phase(
                "offline",
                self._paths(
                    gateways,
                    (Masters("offline", many, 3, silent=1, registers=n),),
                    LOCK_BAUD,
                    OFFLINE_TIMEOUT,
                    OFFLINE_RETRY,
                ),
                timing=Timing(max(lock.warmup, settle), lock.duration * 3),
            )
        )
        return out

    def ab_phase(self, checkouts: dict[str, Any]) -> Phase:
        loads = (Masters("lock_py", "pymodbus"), Masters("lock_raw", "raw"))
        paths = [
            Path(name, (Leg(self.gateway("verld", LOCK_BAUD, TIMEOUT, RETRY, co), loads),))
            for name, co in checkouts.items()
        ]
        direct = Path("direct", (Leg(self.gateway("direct", LOCK_BAUD, TIMEOUT, RETRY), loads),))
        return Phase("rounds", (direct, *paths), order=direct_then_alternate)

    def _wire(self, res: Result) -> None:
        res["wire_bytes_per_call"], res["baud"] = self.wire_bytes, self.baud
        res["wire_util_calls_percent"] = round(res["rate"] * self.wire_bytes * 1000 / self.baud, 2)
        w = res.get("verld_window")
        if w and w["seconds"]:
            wire = w["bytes_tx"] + w["bytes_rx"]
            res["wire_bytes_per_s"] = round(wire / w["seconds"], 1)
            res["wire_util_percent"] = round(wire * 1000 / (w["seconds"] * self.baud), 2)

    def info(self, run: Run) -> dict[str, Any]:
        mb = self.mbusd
        line = f"mbusd {mb.version} ({mb.note})" if mb.binary else f"**no mbusd path**: {mb.note}"
        return {
            "baud": self.baud,
            "registers": self.registers,
            "wire_bytes_per_call": self.wire_bytes,
            "pymodbus": self.pymodbus,
            "mbusd": {"binary": mb.binary, "version": mb.version, "note": mb.note},
            "versions": f"pymodbus {self.pymodbus}, {line}; every call reads {self.registers} "
            "holding registers of unit 1 (fc 3)",
        }

    def notes(self, section: dict[str, Any], md: bool) -> list[str]:
        mb = section["info"]["mbusd"]
        return [] if mb["binary"] else [f"no mbusd path: {mb['note']}"]


def _units(label: str, out: Result, before: list[Any], after: list[Any]) -> None:
    out["verld_units"], out["verld_modbus"] = after[0].get("units"), after[0].get("modbus")


FAMILY = Modbus
