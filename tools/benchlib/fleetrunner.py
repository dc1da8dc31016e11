"""The fleet bench's run: one broker and fleet, interleaved rounds of three paths, then RSS.

Strategy: mosquitto, N verld-sim + verld pairs (codec verl), one verld-mqtt over all
of them (base `verld/bench`) and the echo responder (base `echo/bench`) stay up for
the whole run; each round measures every path in turn, the order rotating per
round, so drift does not favour a path and ratios are taken within a round:

- `direct`: verld's socket with the Python client;
- `mqtt`: the same verlds through mosquitto and verld-mqtt;
- `echo`: the bare aiomqtt echo behind the same mosquitto, the same MQTT client.

Each path runs `lock` (one lock-step caller, device d00) and `fleetN` (4 callers ×
8 in flight over the N devices); `mqtt` also runs `fleet1` and `fleet4` (how calls/s
scale with devices). Each workload is a generator process of its own; CPU is read
from /proc at its START and END. Every verld's `calls_ok` must move by exactly the
replies the generator counted for it (and the others' by none): a call answered
by the wrong device, lost or run twice fails the run. Last, `rss`: the round bridge
is stopped, the fleet grows to `--rss-devices`, a fresh bridge connects to all of
them, calls go through each, and its VmRSS is read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib.fleetprocs import FLEET, Bridge, Devices, Echo, Mosquitto, Watcher
from benchlib.fleetworker import FleetSpec
from benchlib.procs import BenchError, CpuMark, LineReader, Procs, memory_kb
from benchlib.runner import Timing

PATHS = ("direct", "mqtt", "echo")
BASE, ECHO_BASE, RSS_BASE = "verld/bench", "echo/bench", "verld/rss"
CALLERS, INFLIGHT = 4, 8
MIN_CALLS_EACH = 3  #: calls each device must answer in the RSS window


@dataclass(frozen=True)
class Load:
    """`callers` × `inflight` calls outstanding, spread over the first `devices` devices."""

    name: str
    callers: int
    inflight: int
    devices: int


LOCK = Load("lock", 1, 1, 1)


def fleet(devices: int) -> Load:
    return Load(f"fleet{devices}", CALLERS, INFLIGHT, devices)


class FleetRunner:
    """Every measurement of one run; `errors` collects broken invariants."""

    def __init__(
        self,
        procs: Procs,
        tmp: Path,
        *,
        devices: int,
        timing: Timing,
        say: Callable[[str], None],
        checkout: Path | None = None,
    ) -> None:
        self.procs, self.tmp, self.timing, self.say = procs, tmp, timing, say
        self.checkout = checkout
        self.n = devices
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self._serial = 0
        self.broker = Mosquitto(procs, tmp)
        self.devices = Devices(procs, tmp)
        say(f"fleet: starting {devices} verld-sim + verld pairs")
        self.devices.grow(devices)
        self.bridge = self._bridge(BASE, devices)
        self.bridge_connected = memory_kb(self.bridge.pid)  #: before any call
        self.echo = Echo(procs, tmp, self.broker.port, ECHO_BASE)
        self.scale = sorted({1, 4, devices} & set(range(1, devices + 1)))

    def _bridge(self, base: str, devices: int) -> Bridge:
        bridge = Bridge(
            self.procs, self.tmp, self.broker.port, base, self.devices.first(devices), self.checkout
        )
        watcher = Watcher(self.broker.port, base)
        try:
            watcher.wait_up(self.devices.names(devices), 30 + devices, bridge)
        finally:
            watcher.close()
        return bridge

    # --- one workload ------------------------------------------------------------------------

    def measure(
        self, path: str, load: Load, bridge: Bridge | None = None, timing: Timing | None = None
    ) -> dict[str, Any]:
        """One generator process; its RESULT, CPU of the processes around it, checked counters."""
        timing = timing or self.timing
        bridge = bridge or self.bridge
        self._serial += 1
        names = self.devices.names(load.devices)
        base = {"mqtt": bridge.base, "echo": ECHO_BASE}.get(path)
        targets = [
            [n, self.devices.all[n].socket if base is None else f"{base}/{n}/call"] for n in names
        ]
        spec = FleetSpec(
            {"direct": "direct", "mqtt": "bridge", "echo": "echo"}[path],
            targets,
            load.callers,
            load.inflight,
            timing.warmup,
            timing.duration,
            port=self.broker.port,
            reply_base=f"bench/reply/{self._serial}",
            tag=str(self._serial),
        )
        watched = list(self.devices.all) if path != "echo" else []
        before = self.devices.counters(watched)
        with open(self.tmp / "workers.log", "ab") as log:
            proc = self.procs.spawn(
                [sys.executable, FLEET, "--worker", spec.to_json()],
                stdout=subprocess.PIPE,
                stderr=log,
            )
        reader = LineReader(proc, f"load generator ({path} {load.name})")
        sims, daemons = self.devices.pids()
        server = {"mqtt": bridge.pid, "echo": self.echo.pid}.get(path)
        roles: dict[str, list[int]] = {"gen": [proc.pid], "verld": daemons, "sim": sims}
        if server is not None:
            roles.update(server=[server], broker=[self.broker.pid])
        pids = [pid for group in roles.values() for pid in group]
        try:
            _expect(reader, "START", timing.warmup + 60)
            start = CpuMark.take(pids)
            _expect(reader, "END", timing.duration + 60)
            end = CpuMark.take(pids)
            line = _expect(reader, "RESULT ", 60)
        except BenchError as exc:
            raise BenchError(f"{exc}\n{self._log('workers.log')}") from None
        result: dict[str, Any] = json.loads(line[len("RESULT ") :])
        self.procs.stop(proc)
        if path == "mqtt" and bridge.proc.poll() is not None:
            raise BenchError(f"verld-mqtt exited {bridge.proc.returncode}:\n{bridge.log_tail()}")
        if server is not None:
            result["server_rss_kb"] = memory_kb(server).get("VmRSS")
        self._cpu(result, roles, start, end)
        self._check(path, load, result, before, self.devices.counters(watched))
        lat = result["latency_us"]
        server_us = result.get("server_cpu_us_per_call")
        self.say(
            f"  {path:<6} {load.name:<8} {result['rate']:>8.0f} calls/s  "
            f"p50 {lat['p50'] or 0:>8.1f} us  p99 {lat['p99'] or 0:>8.1f} us"
            + (f"  server {server_us:.1f} us/call" if server_us is not None else "")
        )
        return result

    @staticmethod
    def _cpu(
        result: dict[str, Any], roles: dict[str, list[int]], start: CpuMark, end: CpuMark
    ) -> None:
        calls = max(1, result["calls"])
        wall = end.t - start.t
        for role, pids in roles.items():
            used = [u for u in (end.since(start, pid) for pid in pids) if u is not None]
            if not used:
                continue
            stat = sum(u.stat for u in used)
            sched = sum(u.sched for u in used)
            result[f"{role}_cpu_us_per_call"] = round(stat * 1e6 / calls, 2)
            result[f"{role}_cpu_us_per_call_sched"] = round(sched * 1e6 / calls, 2)
            result[f"{role}_cpu_percent"] = round(sched * 100 / wall, 1)
            if role == "server":
                result["server_user_us_per_call"] = round(used[0].user * 1e6 / calls, 2)
                result["server_system_us_per_call"] = round(used[0].system * 1e6 / calls, 2)

    def _check(
        self,
        path: str,
        load: Load,
        result: dict[str, Any],
        before: dict[str, dict[str, int]],
        after: dict[str, dict[str, int]],
    ) -> None:
        what = f"{path} {load.name}"
        if result["errors"]:
            self.errors.append(
                f"{what}: {result['errors']} wrong, duplicated or missing "
                f"replies ({'; '.join(result['error_samples'][:3])})"
            )
        if result["answered"] != result["sent"]:
            self.errors.append(f"{what}: {result['sent']} sent, {result['answered']} answered")
        counted = result["per_device"]
        for name, was in before.items():
            moved = {k: after[name][k] - v for k, v in was.items()}
            if moved["calls_ok"] != counted.get(name, 0) or moved["calls_failed"]:
                self.errors.append(
                    f"{what}: verld {name} counted {moved}, the generator got "
                    f"{counted.get(name, 0)} replies from it"
                )
        result["verld_calls_ok"] = sum(after[n]["calls_ok"] - before[n]["calls_ok"] for n in before)

    def _log(self, name: str, lines: int = 15) -> str:
        try:
            text = (self.tmp / name).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # --- the phases --------------------------------------------------------------------------

    def loads(self, path: str) -> list[Load]:
        if path == "mqtt":
            return [LOCK, *(fleet(n) for n in self.scale)]
        return [LOCK, fleet(self.n)]

    def round(self, number: int) -> dict[str, Any]:
        turn = number % len(PATHS)
        order = [*PATHS[turn:], *PATHS[:turn]]
        self.say(f"round {number + 1}: {' → '.join(order)}")
        out: dict[str, Any] = {"order": order}
        for path in order:
            out[path] = {load.name: self.measure(path, load) for load in self.loads(path)}
        return out

    def rss(self, wanted: int) -> dict[str, Any]:
        """The bridge's memory: after the rounds (N devices), then with `wanted` devices."""
        out: dict[str, Any] = {"wanted": wanted, "round_devices": self.n}
        out["round_connected"] = self.bridge_connected
        out["round_bridge"] = memory_kb(self.bridge.pid)
        self.bridge.stop()
        self.say(f"rss: growing the fleet to {wanted} verld-sim + verld pairs")
        try:
            self.devices.grow(wanted, timeout=120)
        except BenchError as exc:
            note = f"only {len(self.devices.all)} of {wanted} devices started: {exc}"
            self.warnings.append(note)
            out["note"] = note
        n = out["devices"] = len(self.devices.all)
        bridge = self._bridge(RSS_BASE, n)
        out["connected"] = memory_kb(bridge.pid)
        timing = Timing(0.2, max(self.timing.duration, 1.0))
        result = self.measure("mqtt", fleet(n), bridge, timing)
        out["after_calls"] = memory_kb(bridge.pid)
        out["load"] = result
        few = {k: v for k, v in result["per_device"].items() if v < MIN_CALLS_EACH}
        if len(result["per_device"]) < n or few:
            self.errors.append(f"rss: not every device answered {MIN_CALLS_EACH} calls: {few}")
        code = bridge.stop()
        if code != 0:
            self.warnings.append(f"verld-mqtt exited {code} on SIGTERM (expected 0)")
        rss = out["after_calls"]["VmRSS"]
        self.say(
            f"  bridge RSS with {n} devices: {rss / 1024:.1f} MiB after "
            f"{sum(result['per_device'].values())} calls "
            f"({out['connected']['VmRSS'] / 1024:.1f} MiB once connected)"
        )
        return out


def _expect(reader: LineReader, prefix: str, timeout: float) -> str:
    line = reader.line(timeout)
    if not line.startswith(prefix):
        raise BenchError(f"{reader.what}: expected {prefix.strip()}, got {line!r}")
    return line
