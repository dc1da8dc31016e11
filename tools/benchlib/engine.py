"""The bench engine: every family's paths, measured in interleaved rounds, one way for all.

A family (benchlib/families/) is a few declarations; the engine does the rest.

    class Ports(Family):
        name, title = "ports", "verld's virtual serial ports against the device's pty"
        figures = (Figure(...), ...)            # report.Figure: key, label, digits, source
        targets = (Target(...), ...)            # report.Target: op, threshold, kind, measure
        footnotes = ("¹ ...",)
        def setup(self, run): ...               # what lives for the whole family (a sim)
        def phases(self, run): return [Phase("rounds", (
            Path("direct", (Leg(direct, (Echo("lat32", 1, 1, 32), ...)),)),
            Path("port", (Leg(verld_with_ports, (...)),)),
        ))]

- a `Phase` is a set of interleaved rounds over its paths (`rounds`: the run's
  `--rounds` unless it says how many; `enter`/`leave` around it, e.g. pacing the sim);
- a `Path` is what a call goes through, as `Leg`s: a `Bridge` started by the leg's
  `start(run)` (verld, socat, mbusd, a broker and a bridge, ser2net and the verld
  linked to it; `direct`: none; its `ready_s` and `times`, one list per path), then each
  `Load` of the leg measured through it (`fresh`: a new bridge per load), then the
  bridge stopped; `needs` names a program without which the path is left out, with a
  warning; `run` replaces the legs for a measurement of its own (idle CPU);
- a `Load` makes the generator processes (`gen`) of one workload, given the bridge:
  `Echo` (verl frames or verld API calls: clients × in flight, in `procs` processes),
  a family's own (Modbus masters, MQTT callers).

Each round measures every path of the phase one after another, in an order that
rotates per round (`Phase.order` may say otherwise: tools/bench-ab alternates A and
B); `report` takes ratios within a round and medians over rounds. A workload is
`Run.measure`: its generator processes get one common window (`gen`'s READY / GO T0 T1
/ RESULT), the CPU of every process around it (the bridge, the sim, the generators)
is read at T0 and T1 (stat and schedstat, `procs.CpuMark`), and the verlds it watches
must count exactly the calls the generators got right. A network-port path, an
`rfc2217://` link or another load is one `Path`, `Leg` or `Load` more.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any, ClassVar

from benchlib.host import which
from benchlib.meter import Spec, combine
from benchlib.procs import BenchError, CpuMark, LineReader, Procs, memory_kb, tail

BENCH = str(FsPath(__file__).resolve().parent.parent / "bench")
Result = dict[str, Any]


@dataclass(frozen=True)
class Timing:
    warmup: float
    duration: float


@dataclass
class Bridge:
    """What sits between the generators and the device for one leg (nothing on `direct`)."""

    kind: str  #: how a generator reaches it: pty | unix | api | serial | rtu | tcp | ...
    target: str  #: the pty, socket, link or HOST:PORT
    roles: dict[str, list[int]] = field(default_factory=dict)  #: pids whose CPU is read
    daemons: list[Any] = field(default_factory=list)  #: verlds (`.status()`) checked
    window_status: bool = False  #: verld's status at T0 and T1 too (`verld_window`)
    stop: Callable[[], int] | None = None
    ready_s: float | None = None
    times: dict[str, float | None] = field(default_factory=dict)  #: kept as ready_s is
    extra: dict[str, Any] = field(default_factory=dict)
    #: verld on a `frame` codec: the frame's header around an API echo of N bytes, as
    #: (request header, reply header) for `meter.Spec`'s `head` and `reply_head`
    heads: Callable[[int], tuple[str, str]] | None = None


class Load:
    """One workload: its generator processes, given the bridge."""

    name: str
    ok_key = "answered"  #: the result's count verld's calls_ok must equal

    def gens(self, run: Run, bridge: Bridge) -> list[tuple[str, str, str]]:
        """(generator kind, spec JSON, group) per process; group "" is the workload's own."""
        raise NotImplementedError


@dataclass(frozen=True)
class Echo(Load):
    """Echoes of `size` bytes: `clients` × `inflight` calls, in `procs` processes."""

    name: str
    clients: int
    inflight: int
    size: int = 32
    procs: int = 1
    kind: str = ""  #: the client, if not the bridge's (`pyserial`: through pyserial's API)
    targets: tuple[str, ...] = ()  #: one per process, if not the bridge's (8 ports)

    def gens(self, run: Run, bridge: Bridge) -> list[tuple[str, str, str]]:
        each = self.clients // self.procs
        targets = self.targets or (bridge.target,) * self.procs
        head, reply_head = bridge.heads(self.size) if bridge.heads else ("", "")
        return [
            (
                "verl",
                Spec(
                    self.kind or bridge.kind,
                    target,
                    each,
                    self.inflight,
                    self.size,
                    seed=run.seed(),
                    client_base=n * each,
                    head=head,
                    reply_head=reply_head,
                ).to_json(),
                "",
            )
            for n, target in enumerate(targets)
        ]


@dataclass(frozen=True)
class Leg:
    start: Callable[[Run], Bridge]
    loads: tuple[Load, ...]
    fresh: bool = False  #: a new bridge per load (socat serves one client, then exits)
    suffix: str = ""  #: appended to each load's name in the results (`_w32`)


@dataclass(frozen=True)
class Path:
    name: str
    legs: tuple[Leg, ...] = ()
    needs: str | None = None  #: a program; without it the path is left out (a warning)
    run: Callable[[Run], Result] | None = None  #: a measurement of its own instead of legs


@dataclass(frozen=True)
class Phase:
    name: str
    paths: tuple[Path, ...]
    rounds: int | None = None  #: None: the run's --rounds
    timing: str | Timing = "lock"  #: its windows: one of the run's timings, or its own
    enter: Callable[[Run], None] | None = None
    leave: Callable[[Run], None] | None = None
    after: Callable[[Result], None] | None = None  #: adds figures to each workload's result
    order: Callable[[list[str], int], list[str]] | None = None


class Family:
    """A family's declarations (see the module docstring); `report` renders every family."""

    name: ClassVar[str]
    title: ClassVar[str]
    figures: ClassVar[tuple[Any, ...]] = ()
    targets: ClassVar[tuple[Any, ...]] = ()
    footnotes: ClassVar[tuple[str, ...]] = ()

    sim: Any = None  #: the family's verld-sim (started in `setup`), if it paces one
    baud = 0  #: the rate a paced phase paces the sim's writes to

    def setup(self, run: Run) -> None:
        """Start what lives for the whole family."""

    def direct(self, run: Run) -> Bridge:
        """The `direct` path's bridge: none, the generator on the sim's pty."""
        return Bridge("pty", self.sim.link, {"sim": [self.sim.pid]})

    def pace(self, run: Run) -> None:
        """A paced phase's `enter`: the sim writes at `baud`."""
        self.sim.control(f"set baud {self.baud}")

    def unpace(self, run: Run) -> None:
        """A paced phase's `leave`: the sim writes at full speed again."""
        self.sim.control("set baud 0")

    def phases(self, run: Run) -> list[Phase]:
        raise NotImplementedError

    def info(self, run: Run) -> dict[str, Any]:
        """Settings and versions for the section (`report` formats labels with them)."""
        return {}

    def notes(self, section: dict[str, Any], md: bool) -> list[str]:
        """Lines a family adds under its figures (the fleet's scaling and memory)."""
        return []


def rotate(paths: list[str], number: int) -> list[str]:
    """The default round order: the paths rotated by one each round."""
    turn = number % len(paths) if paths else 0
    return paths[turn:] + paths[:turn]


def direct_then_alternate(paths: list[str], number: int) -> list[str]:
    """`direct` first, then the others, their order reversed every other round (A/B)."""
    rest = [p for p in paths if p != "direct"]
    return ["direct", *(rest if number % 2 == 0 else rest[::-1])]


class Run:
    """One invocation: the processes, the timings, the errors found; `measure` one workload."""

    def __init__(
        self,
        procs: Procs,
        tmp: FsPath,
        *,
        rounds: int,
        timings: dict[str, Timing],
        say: Callable[[str], None],
        options: Any = None,
        quick: bool = False,
    ) -> None:
        self.procs, self.tmp, self.rounds, self.timings = procs, tmp, rounds, timings
        self.say, self.options, self.quick = say, options, quick
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self._seed = 0

    def seed(self) -> int:
        self._seed += 1
        return self._seed

    def dir(self, what: str) -> FsPath:
        """A fresh directory for one process's config, socket and log."""
        return self.tmp / f"{what}-{self.seed()}"

    # --- a family -----------------------------------------------------------------------------

    def family(self, fam: Family) -> dict[str, Any]:
        """Every phase of `fam`, in interleaved rounds; the section (summarised by `report`)."""
        from benchlib import report

        fam.setup(self)
        section: dict[str, Any] = {"family": fam.name, "paths": {}, "phases": {}}
        only = getattr(self.options, "phase", None)
        for phase in fam.phases(self):
            if only and phase.name not in only:
                continue
            paths = []
            for path in phase.paths:
                if path.needs and which(path.needs) is None:
                    self.warn(f"{path.needs} is not installed: the {path.name} path is left out")
                else:
                    paths.append(path)
            section["paths"][phase.name] = [p.name for p in paths]
            section["phases"][phase.name] = self.phase(phase, paths)
        section["info"] = fam.info(self)
        section["summary"] = report.summarise(fam, section)
        return section

    def phase(self, phase: Phase, paths: list[Path]) -> list[Result]:
        if phase.enter:
            phase.enter(self)
        rounds = []
        try:
            for number in range(phase.rounds or self.rounds):
                order = (phase.order or rotate)([p.name for p in paths], number)
                self.say(f"{phase.name} {number + 1}: {' → '.join(order)}")
                one: Result = {"order": order}
                for name in order:
                    one[name] = self.path(phase, next(p for p in paths if p.name == name))
                rounds.append(one)
        finally:
            if phase.leave:
                phase.leave(self)
        return rounds

    def path(self, phase: Phase, path: Path) -> Result:
        if path.run is not None:
            return path.run(self)
        out: Result = {}
        timing = phase.timing if isinstance(phase.timing, Timing) else self.timings[phase.timing]
        for leg in path.legs:
            for loads in [(load,) for load in leg.loads] if leg.fresh else [leg.loads]:
                bridge = leg.start(self)
                times = {"ready_s": bridge.ready_s, **bridge.times}
                for key, value in times.items():
                    if value is not None:
                        out.setdefault(key, []).append(round(value, 4))
                try:
                    for load in loads:
                        label = f"{path.name} {load.name}{leg.suffix}"
                        res = self.measure(label, load, bridge, timing)
                        if phase.after:
                            phase.after(res)
                        out[load.name + leg.suffix] = res
                finally:
                    self.stop(bridge)
        return out

    def stop(self, bridge: Bridge) -> None:
        code = bridge.stop() if bridge.stop else 0
        if code not in (0, None) and bridge.daemons:
            self.warn(f"verld exited {code} on SIGTERM (expected 0)")

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    # --- one workload -------------------------------------------------------------------------

    def measure(self, label: str, load: Load, bridge: Bridge, timing: Timing) -> Result:
        """The load's generators over one common window; their results with the CPU of
        every role around them and verld's counters, checked."""
        gens = load.gens(self, bridge)
        procs, readers = [], []
        with open(self.tmp / "gens.log", "ab") as log:
            for n, (kind, spec, _) in enumerate(gens):
                proc = self.procs.spawn(
                    [sys.executable, BENCH, "--gen", kind, spec],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                )
                procs.append(proc)
                readers.append(LineReader(proc, f"generator {n + 1} of {label}"))
        roles = {**bridge.roles, "gen": [p.pid for p in procs]}
        pids = [pid for group in roles.values() for pid in group]
        try:
            for reader in readers:
                reader.expect("READY", 30)
            if bridge.extra.get("ready"):
                bridge.extra["ready"](len(gens))
            before = [d.status() for d in bridge.daemons]
            t0 = time.monotonic_ns() + int(timing.warmup * 1e9)
            t1 = t0 + int(timing.duration * 1e9)
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(f"GO {t0} {t1}\n".encode())
                proc.stdin.flush()
            (start, at0), (end, at1) = (self._mark(t, pids, bridge) for t in (t0, t1))
            main = bridge.roles.get("bridge") or bridge.roles.get("server") or []
            memory = memory_kb(main[0]) if main else {}
            results = [json.loads(r.expect("RESULT ", 90)[7:]) for r in readers]
        except BenchError as exc:
            raise BenchError(f"{exc}\n{tail(self.tmp / 'gens.log')}") from None
        finally:
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.warn(f"{label}: a generator did not exit by itself")
                self.procs.stop(proc)
        out = combine(results, [g for _, _, g in gens])
        out["window_s"] = round(end.t - start.t, 4)
        calls = max(1, out["calls"] + sum(out[g]["calls"] for g in {g for _, _, g in gens if g}))
        for role, group in roles.items():
            used = end.since(start, group)
            if used is None:
                continue
            out[f"{role}_cpu_us_per_call"] = round(used.stat * 1e6 / calls, 2)
            out[f"{role}_cpu_us_per_call_sched"] = round(used.sched * 1e6 / calls, 2)
            out[f"{role}_cpu_percent"] = round(used.sched * 100 / (end.t - start.t), 1)
            if role in ("bridge", "server"):
                out[f"{role}_user_us_per_call"] = round(used.user * 1e6 / calls, 2)
                out[f"{role}_system_us_per_call"] = round(used.system * 1e6 / calls, 2)
        if memory:
            out["rss_kb"], out["hwm_kb"] = memory.get("VmRSS"), memory.get("VmHWM")
        after = [d.status() for d in bridge.daemons]
        self._counters(label, load, out, before, after, at0, at1)
        if bridge.extra.get("check"):
            bridge.extra["check"](label, out, before, after)
        if out["errors"]:
            samples = "; ".join(dict.fromkeys(out["error_samples"][:3]))
            self.errors.append(f"{label}: {out['errors']} wrong or missing replies ({samples})")
        lat, cpu = out["latency_us"], out.get("bridge_cpu_us_per_call_sched")
        self.say(
            f"  {label:<24} {out['rate']:>9.1f} calls/s  p50 {lat['p50'] or 0:>9.1f} us  "
            f"p99 {lat['p99'] or 0:>9.1f} us" + (f"  bridge {cpu:.1f} us/call" if cpu else "")
        )
        return out

    def _mark(self, at_ns: int, pids: list[int], bridge: Bridge) -> tuple[CpuMark, Result | None]:
        """CPU counters (and verld's status, with when it was taken) at `at_ns`."""
        time.sleep(max(0.0, (at_ns - time.monotonic_ns()) / 1e9))
        mark = CpuMark.take(pids)
        if not (bridge.window_status and bridge.daemons):
            return mark, None
        t_a = time.monotonic()
        status = bridge.daemons[0].status()
        return mark, {**status, "_t": (t_a + time.monotonic()) / 2}

    def _counters(
        self,
        label: str,
        load: Load,
        out: Result,
        before: list[Result],
        after: list[Result],
        at0: Result | None,
        at1: Result | None,
    ) -> None:
        """verld's counters over the workload (and the window), against the generators'."""
        if len(before) != 1:
            return
        (c0, c1) = before[0]["counters"], after[0]["counters"]
        out["verld_counters"] = {k: c1[k] - c0[k] for k in c1 if isinstance(c1[k], int | float)}
        counted, got = out["verld_counters"].get("calls_ok"), out.get(load.ok_key)
        if counted != got:
            self.errors.append(
                f"{label}: verld counted {counted} calls ok, the generators got {got} right replies"
            )
        if at0 is not None and at1 is not None:
            w0, w1 = at0["counters"], at1["counters"]
            window = {k: w1[k] - w0[k] for k in ("bytes_tx", "bytes_rx", "calls_ok") if k in w1}
            out["verld_window"] = {"seconds": round(at1["_t"] - at0["_t"], 4), **window}
