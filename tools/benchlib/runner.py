"""The bench run: one simulator, interleaved rounds over every path, then paced and idle.

Strategy: one verld-sim process serves the whole run. Each round measures every
path one after another (the order rotates per round, so drift does not favour a
path): `direct` (the generator owns the pty), `socat` (a fresh socat per workload,
since it serves one client and then exits) and `verld` (one daemon with window 8
for the lock-step and multi-client workloads, a second with window 32). Only one
of them holds the pty at a time. Each workload is its own generator process; the
bridge's CPU is read from /proc at the generator's START and END marks.
After the rounds the sim's writes are paced (`--baud`) for the link-utilisation
rounds, and last a fresh verld sits idle with a 1 s heartbeat for `--idle-seconds`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib.meter import Spec
from benchlib.procs import BenchError, CpuMark, LineReader, Procs, Sim, Socat, Verld, memory_kb
from verld.codec.verl import encode_frame

BENCH = str(Path(__file__).resolve().parent.parent / "bench")
MAX_PAYLOAD = 4096


@dataclass(frozen=True)
class Workload:
    """Clients × calls in flight each, echoing `size` data bytes."""

    name: str
    clients: int
    inflight: int
    size: int


LAT32 = Workload("lat32", 1, 1, 32)  #: one lock-step client, 32-byte echoes (also calls/s at 1)
LAT1K = Workload("lat1k", 1, 1, 1024)
INFLIGHT8 = Workload("inflight8", 1, 8, 32)  #: one link user keeping 8 requests outstanding
C8 = Workload("c8", 8, 1, 32)
C16 = Workload("c16", 16, 1, 32)
C64 = Workload("c64", 64, 1, 32)
P16X8 = Workload("p16x8", 16, 8, 32)  #: 16 clients each keeping 8 calls in flight


@dataclass(frozen=True)
class Timing:
    warmup: float
    duration: float


class Runner:
    """Runs every measurement of one bench invocation; `errors` collects broken invariants."""

    def __init__(
        self,
        procs: Procs,
        tmp: Path,
        *,
        timing: Timing,
        paced_timing: Timing,
        say: Callable[[str], None],
    ) -> None:
        self.procs, self.tmp, self.timing, self.paced_timing = procs, tmp, timing, paced_timing
        self.say = say
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.sim = Sim(procs, tmp, MAX_PAYLOAD)
        self.have_socat = shutil.which("socat") is not None
        if not self.have_socat:
            self.warnings.append("socat is not installed: the socat path is skipped")
        self._serial = 0
        self._seed = 0

    @property
    def paths(self) -> list[str]:
        """The paths of the verl figures table (`report`)."""
        return ["direct", "socat", "verld"] if self.have_socat else ["direct", "verld"]

    @property
    def round_paths(self) -> list[str]:
        """The paths each round measures (a subclass adds its own: `portbench`)."""
        return self.paths

    # --- one workload ------------------------------------------------------------------------

    def measure(
        self,
        label: str,
        kind: str,
        target: str,
        wl: Workload,
        bridge: int | None,
        timing: Timing | None = None,
    ) -> dict[str, Any]:
        """Run one generator process; its RESULT plus CPU and memory of the processes around it."""
        timing = timing or self.timing
        self._seed += 1
        spec = Spec(
            kind, target, wl.clients, wl.inflight, wl.size, timing.warmup, timing.duration,
            max_payload=MAX_PAYLOAD, seed=self._seed,
        )  # fmt: skip
        with open(self.tmp / "workers.log", "ab") as log:
            proc = self.procs.spawn(
                [sys.executable, BENCH, "--worker", spec.to_json()],
                stdout=subprocess.PIPE,
                stderr=log,
            )
        reader = LineReader(proc, f"load generator ({label} {wl.name})")
        pids = [p for p in (bridge, self.sim.pid, proc.pid) if p is not None]
        try:
            self._expect(reader, "START", timing.warmup + 60)
            start = CpuMark.take(pids)
            self._expect(reader, "END", timing.duration + 60)
            end = CpuMark.take(pids)
            memory = memory_kb(bridge) if bridge is not None else {}
            line = self._expect(reader, "RESULT ", 60)
        except BenchError as exc:
            raise BenchError(f"{exc}\n{self._workers_log()}") from None
        result: dict[str, Any] = json.loads(line[len("RESULT ") :])
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            self.warnings.append(f"{label} {wl.name}: the generator did not exit by itself")
        self.procs.stop(proc)
        if result["errors"]:
            self.errors.append(
                f"{label} {wl.name}: {result['errors']} wrong or missing replies "
                f"({'; '.join(result['error_samples'][:3])})"
            )
        calls = max(1, result["calls"])
        for role, pid in (("bridge", bridge), ("sim", self.sim.pid), ("gen", proc.pid)):
            used = end.since(start, pid) if pid is not None else None
            if used is None:
                continue
            result[f"{role}_cpu_us_per_call"] = round(used.stat * 1e6 / calls, 2)
            result[f"{role}_cpu_us_per_call_sched"] = round(used.sched * 1e6 / calls, 2)
            result[f"{role}_cpu_percent"] = round(used.sched * 100 / (end.t - start.t), 1)
            if role == "bridge":
                result["bridge_user_us_per_call"] = round(used.user * 1e6 / calls, 2)
                result["bridge_system_us_per_call"] = round(used.system * 1e6 / calls, 2)
        if memory:
            result["rss_kb"], result["hwm_kb"] = memory.get("VmRSS"), memory.get("VmHWM")
        lat = result["latency_us"]
        self.say(
            f"  {label:<9} {wl.name:<10} {result['rate']:>9.0f} calls/s  "
            f"p50 {lat['p50'] or 0:>8.1f} us  p99 {lat['p99'] or 0:>8.1f} us"
            + (f"  bridge {result['bridge_cpu_us_per_call']:.1f} us/call" if bridge else "")
        )
        return result

    @staticmethod
    def _expect(reader: LineReader, prefix: str, timeout: float) -> str:
        line = reader.line(timeout)
        if not line.startswith(prefix):
            raise BenchError(f"{reader.what}: expected {prefix.strip()}, got {line!r}")
        return line

    def _workers_log(self, lines: int = 15) -> str:
        try:
            text = (self.tmp / "workers.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # --- the paths ---------------------------------------------------------------------------

    def direct(
        self, workloads: tuple[Workload, ...], timing: Timing | None = None
    ) -> dict[str, Any]:
        link = self.sim.link
        return {wl.name: self.measure("direct", "pty", link, wl, None, timing) for wl in workloads}

    def socat(self, workloads: tuple[Workload, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for wl in workloads:
            relay = Socat(self.procs, self.tmp, self.sim.link)
            try:
                out[wl.name] = self.measure("socat", "unix", relay.socket, wl, relay.pid)
            finally:
                relay.stop()
        return out

    def start_verld(self, window: int) -> Verld:
        self._serial += 1
        return Verld(self.procs, self.tmp, self.sim.link, window, self._serial)

    def stop_verld(self, daemon: Verld) -> None:
        code = daemon.stop()
        if code != 0:
            self.warnings.append(f"verld exited {code} on SIGTERM (expected 0)")

    def verld_workloads(
        self,
        daemon: Verld,
        workloads: tuple[Workload, ...],
        timing: Timing | None = None,
        suffix: str = "",
    ) -> dict[str, Any]:
        """Each workload, with verld's own call counters checked against the generator's."""
        out: dict[str, Any] = {}
        for wl in workloads:
            before = daemon.status()["counters"]
            label = f"verld{suffix.replace('_', ' ')}"
            result = self.measure(label, "api", daemon.socket, wl, daemon.pid, timing)
            after = daemon.status()["counters"]
            result["verld_counters"] = {
                key: after[key] - before[key]
                for key in ("calls", "calls_ok", "calls_failed", "timeouts", "stale", "bad_frames")
            }
            counted = result["verld_counters"]["calls_ok"]
            if counted != result["answered"]:
                self.errors.append(
                    f"{label} {wl.name}: verld counted {counted} calls ok, "
                    f"the generator got {result['answered']} replies"
                )
            out[wl.name + suffix] = result
        return out

    def verld(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ready_s": []}
        daemon = self.start_verld(8)
        try:
            out["ready_s"].append(round(daemon.ready_s, 4))
            out.update(self.verld_workloads(daemon, (LAT32, LAT1K, C16, C64, P16X8), suffix=""))
            out["p16x8_w8"] = out.pop("p16x8")
        finally:
            self.stop_verld(daemon)
        daemon = self.start_verld(32)
        try:
            out["ready_s"].append(round(daemon.ready_s, 4))
            out.update(self.verld_workloads(daemon, (P16X8,), suffix="_w32"))
        finally:
            self.stop_verld(daemon)
        return out

    # --- the phases --------------------------------------------------------------------------

    def round(self, number: int) -> dict[str, Any]:
        paths = self.round_paths
        turn = number % len(paths)
        order = paths[turn:] + paths[:turn]
        self.say(f"round {number + 1}: {' → '.join(order)}")
        out: dict[str, Any] = {"order": order}
        for path in order:
            out[path] = self.run_path(path)
        return out

    def run_path(self, path: str) -> dict[str, Any]:
        """One path's workloads of a round."""
        if path == "direct":
            return self.direct((LAT32, LAT1K, INFLIGHT8))
        if path == "socat":
            return self.socat((LAT32, LAT1K, INFLIGHT8))
        return self.verld()

    def paced(self, baud: int, rounds: int) -> dict[str, Any]:
        """Link utilisation with the sim's writes paced to `baud`: 1 lock-step client vs 8."""
        frame = len(encode_frame(0x12, 1, bytes(1 + LAT32.size)))
        capacity = baud / 10
        out: dict[str, Any] = {"baud": baud, "reply_frame_bytes": frame, "rounds": []}
        self.sim.control(f"set baud {baud}")
        try:
            for number in range(rounds):
                self.say(f"paced round {number + 1} at {baud} baud")
                one = self.paced_round()
                for res in one.values():
                    res["wire_bytes_per_s"] = round(res["rate"] * frame, 1)
                    res["utilisation_percent"] = round(res["rate"] * frame * 100 / capacity, 2)
                out["rounds"].append(one)
        finally:
            self.sim.control("set baud 0")
        return out

    def paced_round(self) -> dict[str, Any]:
        """One paced round's workloads, each with its `rate` (the wire use is added after)."""
        one: dict[str, Any] = {}
        for name, res in self.direct((LAT32, INFLIGHT8), self.paced_timing).items():
            one["direct_" + name] = res
        daemon = self.start_verld(8)
        try:
            res_v = self.verld_workloads(daemon, (LAT32, C8), self.paced_timing)
        finally:
            self.stop_verld(daemon)
        one.update({"verld_" + name: res for name, res in res_v.items()})
        return one

    def idle(self, seconds: float) -> dict[str, Any]:
        """verld's CPU with no clients and a 1 s heartbeat, from per-thread schedstat."""
        self.say(f"idle: verld with no clients for {seconds:g} s (1 s heartbeat)")
        daemon = self.start_verld(8)
        try:
            before = daemon.status()["counters"]["pings"]
            time.sleep(1.5)  # let the status client's disconnect settle
            start = CpuMark.take([daemon.pid])
            time.sleep(seconds)
            end = CpuMark.take([daemon.pid])
            memory = memory_kb(daemon.pid)
            pings = daemon.status()["counters"]["pings"] - before
            used = end.since(start, daemon.pid)
            assert used is not None
            wall = end.t - start.t
        finally:
            self.stop_verld(daemon)
        if pings < seconds / 2:
            self.errors.append(f"idle: only {pings} heartbeat pings in {seconds:g} s")
        result = {
            "seconds": round(wall, 3),
            "cpu_percent": round(used.sched * 100 / wall, 4),
            "cpu_percent_stat": round(used.stat * 100 / wall, 3),
            "pings": pings,
            "rss_kb": memory.get("VmRSS"),
            "ready_s": round(daemon.ready_s, 4),
        }
        self.say(f"  idle CPU {result['cpu_percent']:.4f} % of a core, {pings} pings")
        return result
