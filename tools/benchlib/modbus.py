"""The Modbus rounds: verld's Modbus TCP gateway against a direct RTU master and mbusd.

Strategy: one verld-sim (`--codec modbus-rtu --units 1,2`: holding register i
holds i, other units silent) serves every Modbus round. Each round has three
phases, every path measured in each (the order rotates per round, as in the
verl rounds, so drift does not favour one path), and every call reads 10
holding registers of unit 1 (fc 3, address 0) and is checked:

1. lock-step, unpaced: one master — `direct` (an RTU master on the sim's pty),
   `verld` (a Modbus TCP master → verld's Modbus TCP front → `modbus-rtu` on the
   pty) and `mbusd` (the same master → mbusd → the pty) — once with pymodbus's
   blocking client and once with a raw one (`mbworker`): latency percentiles;
2. paced: the sim's line paced to `--modbus-baud` (19200; both directions, see
   docs/sim.md) and verld and mbusd set to it; 8 masters at once, each lock-step:
   calls/s, and for verld the wire use from its own byte counters: (bytes written
   + bytes read on the RTU line) × 10 bits / baud;
3. an offline unit, unpaced: 3 masters poll unit 1 while a 4th polls unit 5,
   which never answers, both gateways with a 0.2 s timeout and 1 retry: the 3
   masters' latency. verld takes unit 5 offline after `modbus.offline_after` calls
   and fails its calls at once (probing it again every `offline_backoff`); mbusd
   waits out every call's timeout and retry.

A path holds the pty alone: the pty is flushed before each one opens it, and a
gateway is started per phase (its timing is the phase's) and stopped after it.
Every master is its own process (`mbworker`): the orchestrator starts them,
waits until each is connected, then gives them one common window; it reads the
gateway's CPU from /proc (and verld's status counters) at the window's edges.

mbusd (https://github.com/3cky/mbusd) is built from its source (cmake + make,
into a temp folder, never into the checkout) when cmake, make and a C compiler
are there; without them or the source the rounds run without the mbusd column,
and the run says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib.mbworker import Master
from benchlib.meter import percentiles
from benchlib.procs import BenchError, CpuMark, LineReader, Procs, Sim, Verld, flush_pty, memory_kb
from benchlib.runner import Timing

BENCH = str(Path(__file__).resolve().parent.parent / "bench")
#: mbusd's source is not in this repository (BSD-3-Clause, never vendored): $MBUSD_SRC,
#: else a `shared/third_party/mbusd` folder beside the checkout, if there is one
MBUSD_SRC = os.environ.get(
    "MBUSD_SRC", str(Path(__file__).resolve().parents[3] / "shared" / "third_party" / "mbusd")
)
MBUSD_BUILD = "/tmp/mbusd-build"
UNIT, SILENT_UNIT, REGISTERS = 1, 5, 10
LOCK_BAUD = 115200  #: the line setting of the unpaced phases (the sim does not pace them)
TIMEOUT, RETRY = 0.5, 1  #: the Modbus codecs' defaults, on both gateways
OFFLINE_TIMEOUT, OFFLINE_RETRY = 0.2, 1
MASTERS = 8
OFFLINE_MASTERS = 3


# --- mbusd --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MbusdBuild:
    binary: str | None  #: None: no mbusd in this run
    version: str
    note: str  #: how it was obtained, or why not


def build_mbusd(src: str, build: str, log: Path) -> MbusdBuild:
    """cmake + make mbusd from `src` into `build`; why not, when it cannot be built."""
    source = Path(src)
    if not (source / "CMakeLists.txt").is_file():
        return MbusdBuild(None, "", f"no mbusd source at {src} (set MBUSD_SRC or --mbusd-src)")
    missing = [tool for tool in ("cmake", "make") if shutil.which(tool) is None]
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        missing.append("a C compiler (cc/gcc)")
    if missing:
        return MbusdBuild(None, "", f"cannot build mbusd: {', '.join(missing)} not installed")
    steps = (
        ["cmake", "-S", str(source), "-B", build, "-DCMAKE_BUILD_TYPE=Release"],
        ["make", "-C", build],
    )
    with open(log, "ab") as out:
        for step in steps:
            try:
                code = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT,
                                      timeout=600, check=False).returncode  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as exc:
                return MbusdBuild(None, "", f"mbusd build failed: {' '.join(step)}: {exc}")
            if code != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                return MbusdBuild(None, "", f"mbusd build failed ({step[0]} exited {code}): "
                                  + " / ".join(tail))  # fmt: skip
    return prebuilt_mbusd(str(Path(build) / "mbusd"), f"built from source into {build}")


def prebuilt_mbusd(binary: str, note: str) -> MbusdBuild:
    """An mbusd binary to use as it is (its version from `mbusd -h`)."""
    if not os.access(binary, os.X_OK):
        return MbusdBuild(None, "", f"{binary} is not an executable mbusd")
    try:
        out = subprocess.run([binary, "-h"], capture_output=True, text=True, timeout=10,
                             check=False).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return MbusdBuild(None, "", f"{binary} -h failed: {exc}")
    first = (out.split() or ["mbusd-?"])[0]
    version = first.partition("-")[2] or "?"
    return MbusdBuild(binary, version, note)


def wire_bytes(registers: int) -> int:
    """RTU bytes of one fc 3 call: request 8, response unit + fc + count + data + CRC."""
    return 8 + 5 + 2 * registers


def free_port() -> int:
    """A TCP port on loopback nobody listens on (yet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _await_listening(proc: subprocess.Popen[bytes], port: int, what: str, log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited {proc.returncode}:\n{_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.02)
    raise BenchError(f"{what} did not listen on 127.0.0.1:{port}:\n{_tail(log)}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Mbusd:
    """mbusd on the sim's pty, on loopback, with verld's timing (`-R 1 -W ms -N retries`)."""

    def __init__(
        self, procs: Procs, tmp: Path, binary: str, link: str, *,
        baud: int, timeout: float, retry: int, serial: int,
    ) -> None:  # fmt: skip
        self.procs = procs
        self.port = free_port()
        self.log_path = tmp / f"mbusd-{serial}.log"
        self.args = [
            binary, "-d", "-L", "-", "-v2", "-A", "127.0.0.1", "-P", str(self.port),
            "-p", os.path.realpath(link), "-s", str(baud), "-m", "8N1",
            "-R", "1", "-W", str(round(timeout * 1000)), "-N", str(retry),
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self.proc = procs.spawn(self.args, stdout=log, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        _await_listening(self.proc, self.port, "mbusd", self.log_path)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> int:
        return self.procs.stop(self.proc)


def verld_config(link: str, *, baud: int, timeout: float, retry: int, port: int) -> dict[str, Any]:
    """verld on the RTU line with its Modbus TCP front on loopback (read-only)."""
    return {
        "device": {
            "port": link, "codec": "modbus-rtu", "baudrate": baud, "parity": "none",
            "stopbits": 1, "timeout": timeout, "retry": retry,
        },
        "api": {"mode": "0600"},
        "modbus": {"listen": f"127.0.0.1:{port}", "read_only": True},
        "log": {"level": "INFO", "format": "json"},
    }  # fmt: skip


# --- the rounds -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModbusTiming:
    lock: Timing
    paced: Timing
    offline: Timing


@dataclass
class Bridge:
    """The gateway of one phase (None pid and address on `direct`)."""

    path: str
    pid: int | None
    address: str
    verld: Verld | None = None
    mbusd: Mbusd | None = None


class ModbusRunner:
    """Every Modbus measurement of one bench run; `errors` collects broken invariants."""

    def __init__(
        self,
        procs: Procs,
        tmp: Path,
        *,
        timing: ModbusTiming,
        baud: int,
        mbusd: MbusdBuild,
        say: Callable[[str], None],
        registers: int = REGISTERS,
    ) -> None:
        self.procs, self.tmp, self.timing, self.baud = procs, tmp, timing, baud
        self.registers = registers
        #: one call on the RTU line: the request (unit, fc, address, count, CRC) and the
        #: response (unit, fc, byte count, the registers, CRC)
        self.wire_bytes = wire_bytes(registers)
        self.mbusd, self.say = mbusd, say
        self.errors: list[str] = []
        self.warnings: list[str] = []
        if mbusd.binary is None:
            self.warnings.append(f"Modbus rounds without mbusd: {mbusd.note}")
        self.sim = Sim(procs, tmp, None, codec="modbus-rtu", extra_args=["--units", "1,2"],
                       name="mb")  # fmt: skip
        self._serial = 100

    @property
    def paths(self) -> list[str]:
        return ["direct", "verld", "mbusd"] if self.mbusd.binary else ["direct", "verld"]

    # --- gateways ---------------------------------------------------------------------------

    def start(self, path: str, *, baud: int, timeout: float, retry: int) -> Bridge:
        flush_pty(self.sim.link)
        self._serial += 1
        if path == "direct":
            return Bridge(path, None, self.sim.link)
        if path == "verld":
            port = free_port()
            config = verld_config(self.sim.link, baud=baud, timeout=timeout, retry=retry,
                                  port=port)  # fmt: skip
            daemon = Verld(self.procs, self.tmp, self.sim.link, 1, self._serial, config=config)
            _await_listening(daemon.proc, port, "verld's Modbus front", daemon.log_path)
            return Bridge(path, daemon.pid, f"127.0.0.1:{port}", verld=daemon)
        assert self.mbusd.binary is not None
        relay = Mbusd(self.procs, self.tmp, self.mbusd.binary, self.sim.link, baud=baud,
                      timeout=timeout, retry=retry, serial=self._serial)  # fmt: skip
        return Bridge(path, relay.pid, relay.address, mbusd=relay)

    def stop(self, bridge: Bridge) -> None:
        if bridge.verld is not None:
            code = bridge.verld.stop()
            if code != 0:
                self.warnings.append(f"verld exited {code} on SIGTERM (expected 0)")
        if bridge.mbusd is not None:
            bridge.mbusd.stop()

    # --- one workload -------------------------------------------------------------------------

    def measure(
        self,
        label: str,
        bridge: Bridge,
        masters: Sequence[Master],
        timing: Timing,
        baud: int | None = None,
    ) -> dict[str, Any]:
        """Start the masters, give them one window, and gather what each measured
        (`baud`: the line is paced at this rate: how busy it was, too)."""
        before = bridge.verld.status() if bridge.verld is not None else None
        workers, readers = [], []
        with open(self.tmp / "mb-workers.log", "ab") as log:
            for n, master in enumerate(masters):
                proc = self.procs.spawn(
                    [sys.executable, BENCH, "--modbus-worker", master.to_json()],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                )  # fmt: skip
                workers.append(proc)
                readers.append(LineReader(proc, f"Modbus master {n + 1} ({label})"))
        try:
            for reader in readers:
                self._expect(reader, "READY", 30)
            t0 = time.monotonic_ns() + int(timing.warmup * 1e9)
            t1 = t0 + int(timing.duration * 1e9)
            for proc in workers:
                assert proc.stdin is not None
                proc.stdin.write(f"GO {t0} {t1}\n".encode())
                proc.stdin.flush()
            pids = [p for p in (bridge.pid, self.sim.pid) if p is not None]
            start, at_start = self._mark(t0, pids, bridge)
            end, at_end = self._mark(t1, pids, bridge)
            memory = memory_kb(bridge.pid) if bridge.pid is not None else {}
            results = [json.loads(self._expect(r, "RESULT ", 60)[7:]) for r in readers]
        except BenchError as exc:
            raise BenchError(f"{exc}\n{_tail(self.tmp / 'mb-workers.log')}") from None
        for proc in workers:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                self.warnings.append(f"{label}: a Modbus master did not exit by itself")
            self.procs.stop(proc)
        out = _combine(masters, results)
        out["window_s"] = round((end.t - start.t), 4)
        if out["errors"]:
            self.errors.append(
                f"{label}: {out['errors']} wrong or missing responses "
                f"({'; '.join(out['error_samples'][:3])})"
            )
        calls = max(1, out["calls"] + out.get("silent", {}).get("calls", 0))
        for role, pid in (("bridge", bridge.pid), ("sim", self.sim.pid)):
            used = end.since(start, pid) if pid is not None else None
            if used is not None:
                out[f"{role}_cpu_us_per_call"] = round(used.stat * 1e6 / calls, 2)
                out[f"{role}_cpu_us_per_call_sched"] = round(used.sched * 1e6 / calls, 2)
                out[f"{role}_cpu_percent"] = round(used.sched * 100 / (end.t - start.t), 1)
        if memory:
            out["rss_kb"] = memory.get("VmRSS")
        out["wire_bytes_per_call"] = self.wire_bytes
        if baud:
            out["baud"] = baud
            out["wire_util_calls_percent"] = round(
                out["rate"] * self.wire_bytes * 10 * 100 / baud, 2
            )
        if bridge.verld is not None and before is not None:
            self._verld_figures(label, bridge.verld, before, (at_start, at_end), baud, out)
        lat = out["latency_us"]
        silent = out.get("silent")
        self.say(
            f"  {label:<22} {out['rate']:>8.1f} calls/s  p50 {lat['p50'] or 0:>9.1f} us  "
            f"p99 {lat['p99'] or 0:>9.1f} us"
            + (f"  ({silent['rate']:.1f}/s to unit {SILENT_UNIT})" if silent else "")
        )
        return out

    def _mark(
        self, at_ns: int, pids: list[int], bridge: Bridge
    ) -> tuple[CpuMark, dict[str, Any] | None]:
        """CPU counters (and verld's status, with when it was taken) at `at_ns`."""
        delay = (at_ns - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        mark = CpuMark.take(pids)
        status = None
        if bridge.verld is not None:
            t_a = time.monotonic()
            status = bridge.verld.status()
            status["_t"] = (t_a + time.monotonic()) / 2
        return mark, status

    def _verld_figures(
        self,
        label: str,
        daemon: Verld,
        before: dict[str, Any],
        window: tuple[dict[str, Any] | None, dict[str, Any] | None],
        baud: int | None,
        out: dict[str, Any],
    ) -> None:
        """verld's own counts: the calls it answered (checked against the masters'),
        the RTU line's bytes in the window, and its units table."""
        after = daemon.status()
        keys = ("calls", "calls_ok", "calls_failed", "timeouts", "retries", "frames_tx",
                "frames_rx", "bytes_tx", "bytes_rx")  # fmt: skip
        out["verld_counters"] = {k: after["counters"][k] - before["counters"][k] for k in keys}
        good = out["good"]
        if out["verld_counters"]["calls_ok"] != good:
            self.errors.append(
                f"{label}: verld counted {out['verld_counters']['calls_ok']} calls ok, "
                f"the masters got {good} right responses"
            )
        at_start, at_end = window
        if at_start is not None and at_end is not None:
            c0, c1 = at_start["counters"], at_end["counters"]
            wire = (c1["bytes_tx"] - c0["bytes_tx"]) + (c1["bytes_rx"] - c0["bytes_rx"])
            seconds = at_end["_t"] - at_start["_t"]
            out["wire_bytes_per_s"] = round(wire / seconds, 1)
            if baud:
                out["wire_util_percent"] = round(wire * 10 * 100 / (seconds * baud), 2)
        out["verld_units"] = after.get("units")
        out["verld_modbus"] = after.get("modbus")

    @staticmethod
    def _expect(reader: LineReader, prefix: str, timeout: float) -> str:
        line = reader.line(timeout)
        if not line.startswith(prefix):
            raise BenchError(f"{reader.what}: expected {prefix.strip()}, got {line[:300]!r}")
        return line

    # --- the phases ---------------------------------------------------------------------------

    def _rotated(self, paths: list[str], number: int) -> list[str]:
        turn = number % len(paths)
        return paths[turn:] + paths[:turn]

    def round(self, number: int) -> dict[str, Any]:
        order = self._rotated(self.paths, number)
        self.say(f"Modbus round {number + 1}: {' → '.join(order)}")
        out: dict[str, Any] = {"order": order}
        for path in order:
            out[path] = self.lockstep(path)
        gateways = [p for p in order if p != "direct"]
        if self.baud:
            self.sim.control(f"set baud {self.baud}")
            try:
                for path in gateways:
                    out[path]["paced8"] = self.paced(path)
            finally:
                self.sim.control("set baud 0")
        for path in gateways:
            out[path]["offline"] = self.offline(path)
        return out

    def _master(self, bridge: Bridge, client: str, **kw: Any) -> Master:
        transport = "rtu" if bridge.path == "direct" else "tcp"
        return Master(client, transport, bridge.address, unit=UNIT, count=self.registers, **kw)

    def lockstep(self, path: str) -> dict[str, Any]:
        bridge = self.start(path, baud=LOCK_BAUD, timeout=TIMEOUT, retry=RETRY)
        try:
            return {
                name: self.measure(
                    f"{path} {name}",
                    bridge,
                    [self._master(bridge, client, baud=LOCK_BAUD)],
                    self.timing.lock,
                )
                for name, client in (("lock_py", "pymodbus"), ("lock_raw", "raw"))
            }
        finally:
            self.stop(bridge)

    def paced(self, path: str) -> dict[str, Any]:
        bridge = self.start(path, baud=self.baud, timeout=TIMEOUT, retry=RETRY)
        try:
            masters = [self._master(bridge, "pymodbus") for _ in range(MASTERS)]
            label = f"{path} paced {MASTERS}"
            return self.measure(label, bridge, masters, self.timing.paced, self.baud)
        finally:
            self.stop(bridge)

    def offline(self, path: str) -> dict[str, Any]:
        bridge = self.start(path, baud=LOCK_BAUD, timeout=OFFLINE_TIMEOUT, retry=OFFLINE_RETRY)
        try:
            masters = [self._master(bridge, "pymodbus") for _ in range(OFFLINE_MASTERS)]
            silent = Master("pymodbus", "tcp", bridge.address, unit=SILENT_UNIT,
                            count=self.registers, expect="gateway-exception")  # fmt: skip
            return self.measure(f"{path} offline unit", bridge, [*masters, silent],
                                self.timing.offline)  # fmt: skip
        finally:
            self.stop(bridge)


def _combine(masters: Sequence[Master], results: list[dict[str, Any]]) -> dict[str, Any]:
    """One workload's figures from its masters': the masters reading values pooled
    (calls/s summed, latencies merged), a silent unit's master apart."""
    main = [r for m, r in zip(masters, results, strict=True) if m.expect == "values"]
    silent = [r for m, r in zip(masters, results, strict=True) if m.expect != "values"]
    errors = sum(r.get("errors", 1) for r in results)
    samples = [s for r in results for s in r.get("error_samples", [])]

    def pooled(group: list[dict[str, Any]]) -> dict[str, Any]:
        lat = sorted(x for r in group for x in r.get("latencies_ns", []))
        exceptions: dict[str, int] = {}
        for r in group:
            for code, n in r.get("exceptions", {}).items():
                exceptions[code] = exceptions.get(code, 0) + n
        return {
            "masters": len(group),
            "calls": len(lat),
            "rate": round(sum(r.get("rate", 0.0) for r in group), 2),
            "good": sum(r.get("good", 0) for r in group),
            "sent": sum(r.get("sent", 0) for r in group),
            "answered": sum(r.get("answered", 0) for r in group),
            "exceptions": exceptions,
            "latency_us": percentiles(lat),
            "per_master": [
                {k: r.get(k) for k in ("calls", "rate", "sent", "errors")}
                | {
                    "p50_us": r.get("latency_us", {}).get("p50"),
                    "p99_us": r.get("latency_us", {}).get("p99"),
                }
                for r in group
            ],
        }

    out = pooled(main)
    out["errors"] = errors
    out["error_samples"] = samples[:8]
    if silent:
        out["silent"] = pooled(silent)
        out["silent"]["unit"] = SILENT_UNIT
    return out
