"""The fleet family: N verlds behind one MQTT bridge (verld-mqtt), against verld's own socket
and a bare MQTT echo behind the same broker (`tools/bench-fleet`, `tools/bench --family fleet`).

mosquitto, N verld-sim + verld pairs (codec verl), one verld-mqtt over all of them (base
`verld/bench`) and the echo responder (`mqttecho`, base `echo/bench`) stay up for the
whole family. Paths: `direct` (verld's socket with the Python client), `mqtt` (the same
verlds through mosquitto and verld-mqtt), `echo` (the echo, the same MQTT callers), so
`mqtt − echo` is what the bridge itself adds. Loads (`mqttgen`): `lock` (one lock-step
caller, device d00) and `fleetN` (4 callers × 8 in flight over the N devices); `mqtt`
also `fleet1` and `fleet4`. Every verld's `calls_ok` must move by exactly the replies
the generator got from it (and the others' by nothing). The `rss` phase: the rounds'
bridge is stopped, the fleet grows to `--rss-devices`, a fresh bridge connects to all
of them, a fleet load goes through it, and its VmRSS is read. The `entities` phase: a
fresh bridge polls `ENT_PER` entities on each of those devices every second (`entities:`,
each a verl echo decoded as a uint32 and checked), with no calls through it, and its CPU
over a window and its VmRSS are read. The `groups` phase: the same entities on the same
devices, first each with a poll of its own (`apart`: one read per entity, as before
grouped reads), then `ENT_GROUP` at a time sharing one poll (`grouped`: each decodes its
own 4 bytes of the one reply); the verlds' calls per second over a window (their
`calls_ok` counters: the bus time the bridge takes) and the values published in it.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path as FsPath
from typing import Any

import yaml

from benchlib.engine import Bridge, Family, Leg, Load, Path, Phase, Result, Run, Timing
from benchlib.fleetprocs import Bridge as MqttBridge
from benchlib.fleetprocs import Device, Devices, Echo, Watcher, mosquitto
from benchlib.mqttgen import FleetSpec
from benchlib.procs import BenchError, CpuMark, memory_kb, verld_command
from benchlib.report import Figure, Target, fmt, get, median, ratio

BASE, ECHO_BASE, RSS_BASE, ENT_BASE = "verld/bench", "echo/bench", "verld/rss", "verld/ent"
MIN_CALLS_EACH = 3  #: calls each device must answer in the RSS window
ENT_PER = 10  #: entities per device in the entities phase
ENT_GROUP = 5  #: entities sharing one poll in the groups phase's `grouped` run
F = Figure
FIGURES = (
    F("lock_p50_us", "lock-step round trip, p50 (µs)", 1, "lock.latency_us.p50"),
    F("lock_p99_us", "lock-step round trip, p99 (µs)", 1, "lock.latency_us.p99"),
    F("lock_rate", "calls/s, 1 lock-step caller", 0, "lock.rate"),
    F("fleet_rate", "calls/s, 4 callers × 8 in flight over {n} devices", 0, "fleet{n}.rate"),
    F("fleet_p50_us", "  round trip under that load, p50 (µs)", 1, "fleet{n}.latency_us.p50"),
    F("fleet_p99_us", "  round trip under that load, p99 (µs)", 1, "fleet{n}.latency_us.p99"),
    F("server_us_lock", "server CPU µs/call, lock-step ¹", 1, "lock.server_cpu_us_per_call"),
    F("server_us_fleet", "server CPU µs/call, 4 × 8 ¹", 1, "fleet{n}.server_cpu_us_per_call"),
    F("server_pct_fleet", "server CPU, % of a core, 4 × 8 ¹", 1, "fleet{n}.server_cpu_percent"),
    F("broker_us_fleet", "mosquitto CPU µs/call, 4 × 8", 1, "fleet{n}.broker_cpu_us_per_call"),
    F("broker_pct_fleet", "mosquitto CPU, % of a core, 4 × 8", 1, "fleet{n}.broker_cpu_percent"),
    F(
        "verld_us_fleet",
        "verld CPU µs/call (all daemons), 4 × 8",
        1,
        "fleet{n}.verld_cpu_us_per_call",
        ("direct", "mqtt"),
    ),
    F("gen_us_fleet", "generator CPU µs/call, 4 × 8", 1, "fleet{n}.gen_cpu_us_per_call"),
    F(
        "ent_cpu_pct",
        "entities ({ent_devices} devices × {ent_per} every {ent_every:g} s): bridge "
        "CPU, % of a core",
        1,
        "entities:polls.cpu_percent",
        ("mqtt",),
    ),
    F("ent_cpu_us", "  bridge CPU µs per poll", 1, "entities:polls.cpu_us_per_poll", ("mqtt",)),
    F("ent_rate", "  values published per second", 0, "entities:polls.rate", ("mqtt",)),
    F("ent_rss_mib", "  bridge RSS (MiB)", 1, "entities:polls.rss_mib", ("mqtt",)),
    F(
        "grp_calls_apart",
        "  verld calls/s, a read per entity ({ent_devices} × {ent_per} every {ent_every:g} s)",
        0,
        "groups:apart.calls_per_s",
        ("mqtt",),
    ),
    F(
        "grp_calls_grouped",
        "  verld calls/s, {ent_group} entities per read",
        0,
        "groups:grouped.calls_per_s",
        ("mqtt",),
    ),
    F(
        "grp_values",
        "  values published per second, grouped",
        0,
        "groups:grouped.values_per_s",
        ("mqtt",),
    ),
    F(
        "grp_cpu_apart",
        "  bridge CPU, % of a core, a read each",
        1,
        "groups:apart.cpu_percent",
        ("mqtt",),
    ),
    F(
        "grp_cpu_grouped",
        "  bridge CPU, % of a core, grouped",
        1,
        "groups:grouped.cpu_percent",
        ("mqtt",),
    ),
)
P50 = "{path}.lock.latency_us.p50"
TARGETS = (
    Target(
        "(mqtt p50 − echo p50) / direct p50, lock-step",
        "target",
        "<=",
        1.5,
        "×",
        ratio(
            "mqtt.lock.latency_us.p50",
            "direct.lock.latency_us.p50",
            minus="echo.lock.latency_us.p50",
        ),
    ),
    Target(
        "bridge RSS with {rss_devices} devices",
        "target",
        "<",
        100.0,
        "MB",
        lambda section, figs: (get(section, "info", "memory", "after_calls_mb"), []),
    ),
    Target(
        "mqtt p50 / direct p50, lock-step",
        "info",
        "<=",
        2.5,
        "×",
        ratio("mqtt.lock.latency_us.p50", "direct.lock.latency_us.p50"),
    ),
    Target(
        "verld calls/s for the same entities: a read each / {ent_group} per read",
        "info",
        ">=",
        ENT_GROUP * 0.9,
        "×",
        ratio("groups:mqtt.apart.calls_per_s", "groups:mqtt.grouped.calls_per_s"),
    ),
    Target(
        "mqtt / echo calls/s, 4 × 8 over {n} devices",
        "info",
        ">=",
        0.5,
        "×",
        ratio("mqtt.fleet{n}.rate", "echo.fleet{n}.rate"),
    ),
    Target(
        "mqtt / direct calls/s, 4 × 8 over {n} devices",
        "info",
        ">=",
        0.5,
        "×",
        ratio("mqtt.fleet{n}.rate", "direct.fleet{n}.rate"),
    ),
)


@dataclass(frozen=True)
class Callers(Load):
    """`callers` × `inflight` calls outstanding, spread over the first `devices` devices."""

    name: str
    callers: int
    inflight: int
    devices: int

    def gens(self, run: Run, bridge: Bridge) -> list[tuple[str, str, str]]:
        tag = str(run.seed())
        spec = FleetSpec(
            bridge.kind,
            bridge.extra["targets"](self.devices),
            self.callers,
            self.inflight,
            port=bridge.extra.get("port", 0),
            reply_base=f"bench/reply/{tag}",
            tag=tag,
        )
        return [("mqtt", spec.to_json(), "")]


LOCK = Callers("lock", 1, 1, 1)


def fleet(devices: int) -> Callers:
    return Callers(f"fleet{devices}", 4, 8, devices)


class Fleet(Family):
    name, title = "fleet", "verld-mqtt against verld's socket and a bare MQTT echo"
    figures, targets = FIGURES, TARGETS
    footnotes = (
        "¹ the server: verld-mqtt (mqtt), the echo responder (echo); utime+stime from "
        "/proc/PID/stat over the window, per call answered in it (10 ms ticks: ± 10 ms / "
        "calls in the window).",
    )

    def setup(self, run: Run) -> None:
        o = run.options
        self.n = getattr(o, "devices", None) or (1 if run.quick else 16)
        self.rss_devices = max(self.n, getattr(o, "rss_devices", None) or (1 if run.quick else 64))
        self.checkout: FsPath | None = getattr(o, "bridge_checkout", None)
        self.broker, self.version = mosquitto(run.procs, run.tmp)
        self.devices = Devices(run.procs, run.tmp)
        run.say(f"fleet: starting {self.n} verld-sim + verld pairs")
        self.devices.grow(self.n)
        self.bridge = self._bridge(run, BASE, self.n)
        self.memory: dict[str, Any] = {"round_connected": memory_kb(self.bridge.pid)}
        self.echo = Echo(run.procs, run.tmp, self.broker.port, ECHO_BASE)
        self.scale = sorted({1, 4, self.n} & set(range(1, self.n + 1)))

    def _bridge(self, run: Run, base: str, devices: int) -> MqttBridge:
        bridge = MqttBridge(
            run.procs, run.tmp, self.broker.port, base, self.devices.first(devices), self.checkout
        )
        watcher = Watcher(self.broker.port, base)
        try:
            watcher.wait_up(self.devices.names(devices), 30 + devices, bridge)
        finally:
            watcher.close()
        return bridge

    def via(self, path: str, bridge: MqttBridge | None = None) -> Any:
        def start(run: Run) -> Bridge:
            sims, daemons = self.devices.pids()
            names = self.devices.names
            roles: dict[str, list[int]] = {"verld": daemons, "sim": sims}
            watched = [] if path == "echo" else list(self.devices.all.values())
            if path == "direct":
                targets = lambda k: [[n, self.devices.all[n].socket] for n in names(k)]  # noqa: E731
            else:
                base = ECHO_BASE if path == "echo" else (bridge or self.bridge).base
                server = self.echo.pid if path == "echo" else (bridge or self.bridge).pid
                roles.update(server=[server], broker=[self.broker.pid])
                targets = lambda k: [[n, f"{base}/{n}/call"] for n in names(k)]  # noqa: E731
            kind = {"direct": "direct", "mqtt": "bridge", "echo": "echo"}[path]
            check = lambda *a: self._check(run, *a)  # noqa: E731
            return Bridge(
                kind,
                "",
                roles,
                watched,
                extra={"targets": targets, "port": self.broker.port, "check": check},
            )

        return start

    def phases(self, run: Run) -> list[Phase]:
        mine, scaled = (LOCK, fleet(self.n)), (LOCK, *map(fleet, self.scale))
        return [
            Phase(
                "rounds",
                (
                    Path("direct", (Leg(self.via("direct"), mine),)),
                    Path("mqtt", (Leg(self.via("mqtt"), scaled),)),
                    Path("echo", (Leg(self.via("echo"), mine),)),
                ),
            ),
            Phase("rss", (Path("mqtt", run=self.rss),), rounds=1),
            Phase("entities", (Path("mqtt", run=self.entities),), rounds=1),
            Phase("groups", (Path("mqtt", run=self.groups),), rounds=1),
        ]

    def _check(
        self, run: Run, label: str, out: Result, before: list[Any], after: list[Any]
    ) -> None:
        """Each verld moved by exactly the replies the generator got from it."""
        counted, total = out.get("per_device", {}), 0
        for name, was, now in zip(self.devices.all, before, after, strict=False):
            moved = {
                k: now["counters"][k] - was["counters"][k] for k in ("calls_ok", "calls_failed")
            }
            total += moved["calls_ok"]
            if moved["calls_ok"] != counted.get(name, 0) or moved["calls_failed"]:
                run.errors.append(
                    f"{label}: verld {name} counted {moved}, the generator got "
                    f"{counted.get(name, 0)} replies from it"
                )
        out["verld_calls_ok"] = total

    def rss(self, run: Run) -> Result:
        """The bridge's memory: after the rounds (N devices), then with --rss-devices."""
        m = self.memory
        m["round_bridge"] = memory_kb(self.bridge.pid)
        self.bridge.stop()
        run.say(f"  rss: growing the fleet to {self.rss_devices} verld-sim + verld pairs")
        try:
            self.devices.grow(self.rss_devices, timeout=120)
        except BenchError as exc:
            m["note"] = f"only {len(self.devices.all)} of {self.rss_devices} devices started: {exc}"
            run.warn(m["note"])
        n = m["devices"] = len(self.devices.all)
        bridge = self._bridge(run, RSS_BASE, n)
        m["connected"] = memory_kb(bridge.pid)
        timing = Timing(
            0.1 if run.quick else 0.2, max(run.timings["lock"].duration, 0.3 if run.quick else 1.0)
        )
        load = run.measure(f"mqtt fleet{n} (rss)", fleet(n), self.via("mqtt", bridge)(run), timing)
        m["after_calls"] = memory_kb(bridge.pid)
        few = {k: v for k, v in load["per_device"].items() if v < MIN_CALLS_EACH}
        if len(load["per_device"]) < n or few:
            run.errors.append(f"rss: not every device answered {MIN_CALLS_EACH} calls: {few}")
        if bridge.stop() != 0:
            run.warn("verld-mqtt exited non-zero on SIGTERM (expected 0)")
        return {"load": load}

    def entities(self, run: Run) -> Result:
        """A bridge polling ENT_PER entities on each device: its CPU over a window, its RSS."""
        self.devices.grow(self.rss_devices, timeout=120)
        devices = list(self.devices.all.values())
        every, window = (0.2, 0.3) if run.quick else (1.0, 10.0)
        run.say(
            f"  entities: {len(devices)} devices × {ENT_PER} every {every:g} s, {window:g} s window"
        )
        values = Values(self.broker.port, ENT_BASE)
        bridge = EntityBridge(run, self.broker.port, devices, every, self.checkout)
        try:
            values.wait_all(len(devices) * ENT_PER, 30 + len(devices), bridge)
            time.sleep(0.05 if run.quick else 2.0)  # (the first polls at link up are behind)
            start = CpuMark.take([bridge.pid])
            time.sleep(window)
            end = CpuMark.take([bridge.pid])
            memory = memory_kb(bridge.pid)
            counts = values.counted(start.t, end.t)
        finally:
            values.close()
            code = bridge.stop()
        out = _polls(
            len(devices), every, end.t - start.t, counts, end.since(start, [bridge.pid]), memory
        )
        self._check_entities(run, out, values.wrong, code, bridge.log_path.read_text())
        return {"polls": out}

    def groups(self, run: Run) -> Result:
        """The same entities read apart, then ENT_GROUP per read: the verlds' calls/s."""
        self.devices.grow(self.rss_devices, timeout=120)
        devices = list(self.devices.all.values())
        every, window = (0.2, 0.5) if run.quick else (1.0, 5.0)
        out: Result = {}
        for layout, group in (("apart", 1), ("grouped", ENT_GROUP)):
            run.say(
                f"  groups: {len(devices)} devices × {ENT_PER} every {every:g} s, {group} per "
                f"read, {window:g} s window"
            )
            out[layout] = self._grouped(run, devices, every, window, group)
        return out

    def _grouped(
        self, run: Run, devices: list[Device], every: float, window: float, group: int
    ) -> Result:
        values = Values(self.broker.port, ENT_BASE)
        bridge = EntityBridge(run, self.broker.port, devices, every, self.checkout, group)
        names = [d.name for d in devices]
        try:
            values.wait_all(len(devices) * ENT_PER, 30 + len(devices), bridge)
            time.sleep(0.05 if run.quick else 1.0)  # (the first polls at link up are behind)
            before, t0 = self.devices.counters(names), time.monotonic()
            start = CpuMark.take([bridge.pid])
            time.sleep(window)
            end = CpuMark.take([bridge.pid])
            after, t1 = self.devices.counters(names), time.monotonic()
            memory = memory_kb(bridge.pid)
            counts = values.counted(start.t, end.t)
        finally:
            values.close()
            code = bridge.stop()
        calls = sum(after[n]["calls_ok"] - before[n]["calls_ok"] for n in names)
        failed = sum(after[n]["calls_failed"] - before[n]["calls_failed"] for n in names)
        used = end.since(start, [bridge.pid])
        out = _polls(len(devices), every, end.t - start.t, counts, used, memory)
        out.update(  # (verld_calls, not calls: this is no call workload's result)
            per_read=group,
            verld_calls=calls,
            calls_per_s=round(calls / (t1 - t0), 1),
            values_per_s=out["rate"],
        )
        if failed:
            run.errors.append(f"groups: {failed} device calls failed ({group} per read)")
        self._check_entities(run, out, values.wrong, code, bridge.log_path.read_text())
        return out

    def _check_entities(self, run: Run, out: Result, wrong: list[str], code: int, log: str) -> None:
        if wrong:
            run.errors.append(f"entities: {len(wrong)} wrong values ({'; '.join(wrong[:3])})")
        if out["fewest"] == 0:
            run.errors.append("entities: an entity published no value in the window")
        elif out["values"] < 0.9 * out["expected"]:
            run.warn(
                f"entities: {out['values']} values in the window, {out['expected']:.0f} "
                "expected (polls skipped on a busy machine?)"
            )
        failed = [line for line in log.splitlines() if '"entity_' in line and "error" in line]
        if failed:
            run.errors.append(f"entities: the bridge logged failed polls: {failed[0][:300]}")
        if code != 0:
            run.warn("verld-mqtt (entities) exited non-zero on SIGTERM (expected 0)")

    def info(self, run: Run) -> dict[str, Any]:
        memory = _memory(self.memory, self.n)
        return {
            "n": self.n,
            "rss_devices": self.rss_devices,
            "memory": memory,
            "ent_devices": self.rss_devices,
            "ent_per": ENT_PER,
            "ent_every": 0.2 if run.quick else 1.0,
            "ent_group": ENT_GROUP,
            "versions": f"mosquitto {self.version}, aiomqtt {metadata.version('aiomqtt')}, "
            f"paho-mqtt {metadata.version('paho-mqtt')}; {self.n} devices",
        }

    def notes(self, section: dict[str, Any], md: bool) -> list[str]:
        """mqtt calls/s by devices behind one bridge, and the bridge's memory."""
        rows, rounds = [], section["phases"].get("rounds", [])
        for n in sorted({int(k[5:]) for r in rounds for k in r.get("mqtt", {}) if k[5:].isdigit()}):
            w = [get(r, "mqtt", f"fleet{n}") for r in rounds]
            rows.append((n, w, len(rounds)))
        for r in section["phases"].get("rss", []):
            rows.append(
                (len(get(r, "mqtt", "load", "per_device") or {}), [get(r, "mqtt", "load")], 1)
            )
        head = (
            "devices",
            "calls/s",
            "p50 µs",
            "bridge µs/call",
            "bridge % core",
            "mosquitto % core",
            "rounds",
        )
        cells = [
            (
                str(n),
                *(
                    fmt(median(get(x, *k.split(".")) for x in w), d)
                    for k, d in (
                        ("rate", 0),
                        ("latency_us.p50", 1),
                        ("server_cpu_us_per_call", 1),
                        ("server_cpu_percent", 1),
                        ("broker_cpu_percent", 1),
                    )
                ),
                str(k),
            )
            for n, w, k in rows
        ]
        mem = _memory_lines(section["info"].get("memory") or {})
        if md:
            return [
                "",
                "| " + " | ".join(head) + " |",
                "|" + "---:|" * len(head),
                *["| " + " | ".join(c) + " |" for c in cells],
                "",
                *[f"- {x}" for x in mem],
            ]
        return [
            "",
            "mqtt (4 callers × 8 in flight) by devices behind one bridge:",
            "  ".join(f"{h:>8}" for h in head),
            *["  ".join(f"{c:>8}" for c in row) for row in cells],
            "",
            *mem,
        ]


class EntityBridge(MqttBridge):
    """verld-mqtt polling ENT_PER sensors on each device every `every` s, and nothing else:
    entity k of a device echoes k as 4 bytes (verl opcode 01), decoded as a uint32; with
    `group` > 1, `group` entities in a row share one poll echoing all their numbers, each
    reading its own 4 bytes of the reply."""

    def __init__(
        self,
        run: Run,
        port: int,
        devices: list[Device],
        every: float,
        checkout: FsPath | None,
        group: int = 1,
    ) -> None:
        self.procs, self.base = run.procs, ENT_BASE
        entities = [
            {
                "device": d.name,
                "name": f"v{k}",
                "kind": "sensor",
                "every": every,
                "poll": {"hex": _echoing(k - k % group, group)},
                "value": {"offset": 4 * (k % group), "type": "uint32"},
            }
            for d in devices
            for k in range(ENT_PER)
        ]
        self.config, self.log_path = run.tmp / "entities.yaml", run.tmp / "entities.log"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "broker": {"host": "127.0.0.1", "port": port, "client_id": "bench-entities"},
                    "base": ENT_BASE,
                    "devices": {d.name: d.socket for d in devices},
                    "entities": entities,
                    "log": {"level": "INFO", "format": "json"},
                }
            )
        )
        argv = [*verld_command(checkout, "verld.mqtt"), "--config", str(self.config)]
        with open(self.log_path, "ab") as out:
            self.proc = run.procs.spawn(argv, stdout=out, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid


def _echoing(first: int, group: int) -> str:
    """The poll of entities first.. first+group-1 (at most ENT_PER-1): a verl echo of their
    numbers, 4 bytes each."""
    return "01" + "".join(f"{k:08x}" for k in range(first, min(first + group, ENT_PER)))


class Values(Watcher):
    """`Watcher`'s client, also noting when each entity's value arrived and whether it was
    the value its poll echoes (entity vK: K)."""

    def __init__(self, port: int, base: str) -> None:
        self.seen: dict[str, list[float]] = {}
        self.wrong: list[str] = []
        super().__init__(port, base)
        deadline = time.monotonic() + 10
        while not self.client.is_connected() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.client.subscribe(f"{base}/+/value/+", qos=1)

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        if msg.topic.endswith("/state"):
            super()._on_message(client, userdata, msg)
            return
        at, name = time.monotonic(), msg.topic.rpartition("/")[2]
        value = json.loads(msg.payload).get("value")
        with self._lock:
            self.seen.setdefault(msg.topic, []).append(at)
            if value != int(name[1:]):
                self.wrong.append(f"{msg.topic}: {value!r}")

    def wait_all(self, n: int, timeout: float, bridge: EntityBridge) -> None:
        """Until `n` entities have published a value (the bridge is up, and so are all
        its devices)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if bridge.proc.poll() is not None:
                raise BenchError(
                    f"verld-mqtt exited {bridge.proc.returncode}:\n{bridge.log_tail()}"
                )
            with self._lock:
                if len(self.seen) >= n:
                    return
            time.sleep(0.01)
        raise BenchError(
            f"entities: values of {len(self.seen)} of {n} entities within "
            f"{timeout:g} s\n{bridge.log_tail()}"
        )

    def counted(self, t0: float, t1: float) -> dict[str, int]:
        """Values that arrived between `t0` and `t1` (monotonic), by topic."""
        with self._lock:
            return {topic: sum(t0 <= t < t1 for t in ts) for topic, ts in self.seen.items()}

    def close(self) -> None:
        self.client.disconnect()  # (first: the loop thread ends at once, not after its select)
        super().close()


def _polls(
    devices: int,
    every: float,
    window: float,
    counts: dict[str, int],
    used: Any,
    memory: dict[str, int],
) -> Result:
    """The entities phase's figures: values in the window, the bridge's CPU and memory."""
    n = sum(counts.values())
    return {
        "devices": devices,
        "per_device": ENT_PER,
        "every_s": every,
        "window_s": round(window, 3),
        "values": n,
        "expected": round(devices * ENT_PER * window / every, 1),
        "fewest": min(counts.values(), default=0),
        "rate": round(n / window, 1),
        "cpu_percent": round(used.sched * 100 / window, 2) if used else None,
        "cpu_us_per_poll": round(used.sched * 1e6 / max(1, n), 1) if used else None,
        "cpu_us_per_poll_stat": round(used.stat * 1e6 / max(1, n), 1) if used else None,
        "rss_mib": round(memory["VmRSS"] / 1024, 2),
        "hwm_mib": round(memory["VmHWM"] / 1024, 2),
    }


def _memory(m: dict[str, Any], round_n: int) -> dict[str, Any]:
    """RSS figures (MiB) and the per-device slope between the two bridges once connected."""
    if "after_calls" not in m:
        return {}
    n, mib = m["devices"], 1024.0
    after, connected = m["after_calls"]["VmRSS"], m["connected"]["VmRSS"]
    slope = (connected - m["round_connected"]["VmRSS"]) / (n - round_n) if n > round_n else None
    return {
        "devices": n,
        "round_devices": round_n,
        "round_connected_mib": round(m["round_connected"]["VmRSS"] / mib, 2),
        "round_mib": round(m["round_bridge"]["VmRSS"] / mib, 2),
        "connected_mib": round(connected / mib, 2),
        "after_calls_mib": round(after / mib, 2),
        "hwm_mib": round(m["after_calls"]["VmHWM"] / mib, 2),
        "after_calls_mb": round(after * 1024 / 1e6, 2),
        "per_device_kib": round(slope, 1) if slope is not None else None,
        "note": m.get("note"),
    }


def _memory_lines(m: dict[str, Any]) -> list[str]:
    if not m:
        return []
    lines = [
        f"bridge RSS with {m['round_devices']} devices (the rounds' bridge): "
        f"{m['round_connected_mib']:.1f} MiB once connected, {m['round_mib']:.1f} MiB after "
        "the rounds",
        f"bridge RSS with {m['devices']} devices: {m['connected_mib']:.1f} MiB once connected, "
        f"{m['after_calls_mib']:.1f} MiB ({m['after_calls_mb']:.1f} MB) after calls through them "
        f"(peak {m['hwm_mib']:.1f} MiB)",
    ]
    if m["per_device_kib"] is not None:
        lines.append(
            f"≈ {m['per_device_kib']:.0f} KiB more per device, once connected "
            f"({m['round_devices']} → {m['devices']} devices)"
        )
    return lines + ([f"NOTE: {m['note']}"] if m.get("note") else [])


FAMILY = Fleet
