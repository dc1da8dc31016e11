"""The api family: verld's API against a direct pty and a socat relay, on one verld-sim.

Paths: `direct` (the generator opens the pty and speaks verl frames), `socat` (a C
byte relay from a Unix socket to the pty; a fresh one per workload: it serves one
client, then exits) and `verld` (window 8; a second daemon with window 32 for
`p16x8_w32`). Phases: the interleaved `rounds`; `paced` (the sim's writes paced to
`--baud`: how busy the device→host line is with one lock-step client and with 8);
`idle` (a fresh verld, no client, a 1 s heartbeat, for `--idle-seconds`); `codecs`
(verld's API on other codecs, in rounds of their own, each path with a sim of its own,
started when first used, speaking its codec: `verld` on verl; `frame-seq`, codec `frame`
with configs/frame.yaml's declaration, pipelined by its seq field, window 8, against
`verld` on CPU per call under the checker's load; `frame-match`, codec `frame` with
tools/benchlib/frame-match.yaml's, no seq, a call at a time, replies known by their
match bytes, against `length`, the reference transport's codec, lock-step).

Workloads: `lat32`/`lat1k` (one lock-step client), `inflight8` (one link user with 8
in flight), `c16`/`c64` (lock-step clients), `p16x8_w8` (16 clients × 8 in flight in
one generator process) and `check16x8`, the checker's load: the same 16 × 8 spread
over 2 generator processes of 8 clients each (as two programs would), whose figure is
calls/s against direct's 8-in-flight ceiling and verld's CPU µs per call (schedstat,
every thread, over the common window). tools/bench-ab runs `ab_phase`: lat32 and the
checker's load, for verld from two checkouts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any

import yaml

from benchlib.engine import (
    Bridge,
    Echo,
    Family,
    Leg,
    Path,
    Phase,
    Result,
    Run,
    direct_then_alternate,
)
from benchlib.host import output
from benchlib.procs import CpuMark, Server, Sim, Verld, memory_kb, verl_config
from benchlib.report import Figure, Target, fig, ratio
from verld.codec.verl import encode_frame

MAX_PAYLOAD = 4096
LAT32, LAT1K = Echo("lat32", 1, 1, 32), Echo("lat1k", 1, 1, 1024)
INFLIGHT8, C8, C16, C64 = (
    Echo("inflight8", 1, 8),
    Echo("c8", 8, 1),
    Echo("c16", 16, 1),
    Echo("c64", 64, 1),
)
P16X8, CHECK = Echo("p16x8_w8", 16, 8), Echo("check16x8", 16, 8, procs=2)
REPLY_BYTES = len(encode_frame(0x12, 1, bytes(1 + LAT32.size)))  #: one 32-byte echo reply


@dataclass(frozen=True)
class Framed:
    """A `frame` path: the config file whose `device.frame` and `heartbeat.payload` it
    takes, its window, and the header around an API echo of N bytes (request, reply)."""

    name: str
    config: FsPath
    window: int
    heads: Callable[[int], tuple[str, str]]

    def declared(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(self.config.read_text())
        return loaded


#: configs/frame.yaml, "STX len seq cmd data CRC ETX": the call's header is len and seq
#: (verld writes both) and cmd 01; the reply's, the echo's length, verld's seq and cmd 01
FRAME_SEQ = Framed(
    "frame-seq",
    FsPath(__file__).resolve().parents[3] / "configs" / "frame.yaml",
    8,
    lambda size: ("00 00 01", f"{size:02x} ?? 01"),
)
#: "STX len addr cmd data CRC ETX", no seq: the reply carries the request's addr and cmd
FRAME_MATCH = Framed(
    "frame-match",
    FsPath(__file__).resolve().parents[1] / "frame-match.yaml",
    1,
    lambda size: ("00 07 01", f"{size:02x} 07 01"),
)

F = Figure
FIGURES = (
    F("lat32_p50_us", "lock-step 32 B echo, p50 (µs)", 1, "lat32.latency_us.p50"),
    F("lat32_p99_us", "lock-step 32 B echo, p99 (µs)", 1, "lat32.latency_us.p99"),
    F("lat1k_p50_us", "lock-step 1 KiB echo, p50 (µs)", 1, "lat1k.latency_us.p50"),
    F("lat1k_p99_us", "lock-step 1 KiB echo, p99 (µs)", 1, "lat1k.latency_us.p99"),
    F("calls_c1", "calls/s, 1 lock-step client", 0, "lat32.rate"),
    F("calls_inflight8", "calls/s, 1 client with 8 in flight", 0, "inflight8.rate"),
    F("calls_c16", "calls/s, 16 lock-step clients", 0, "c16.rate"),
    F("calls_c64", "calls/s, 64 lock-step clients", 0, "c64.rate"),
    F("calls_p16x8_w8", "calls/s, 16 clients × 8 in flight, window 8", 0, "p16x8_w8.rate"),
    F("calls_p16x8_w32", "calls/s, 16 clients × 8 in flight, window 32", 0, "p16x8_w32.rate"),
    F("calls_check", "calls/s, the checker's load ³", 0, "check16x8.rate"),
    F("cpu_us_c1", "bridge CPU µs/call, 1 lock-step client", 1, "lat32.bridge_cpu_us_per_call"),
    F(
        "cpu_us_pipelined",
        "bridge CPU µs/call, pipelined ¹",
        1,
        {"socat": "inflight8.bridge_cpu_us_per_call", "verld": "p16x8_w8.bridge_cpu_us_per_call"},
    ),
    F(
        "cpu_us_check",
        "verld CPU µs/call (schedstat), the checker's load ³",
        1,
        "check16x8.bridge_cpu_us_per_call_sched",
    ),
    F("rss_mib_c64", "bridge RSS with 64 clients (MiB)", 1, "c64.rss_kb", ("verld",), 1 / 1024),
    F("ready_s", "start → READY=1 (s)", 3, "ready_s", ("verld",)),
    F("idle_cpu_percent", "idle CPU, % of a core (1 s heartbeat)", 4, "idle:idle.cpu_percent"),
    F(
        "paced_util_c1",
        "wire busy when paced, 1 lock-step client (%) ²",
        1,
        "paced:lat32.utilisation_percent",
    ),
    F(
        "paced_util_c8",
        "wire busy when paced, 8 clients (%) ²",
        1,
        {"direct": "paced:inflight8.utilisation_percent", "verld": "paced:c8.utilisation_percent"},
    ),
    F("codecs_p50_us", "codecs ⁴: lock-step 32 B echo, p50 (µs)", 1, "codecs:lat32.latency_us.p50"),
    F(
        "codecs_cpu_us_c1",
        "codecs ⁴: verld CPU µs/call (schedstat), 1 lock-step client",
        1,
        "codecs:lat32.bridge_cpu_us_per_call_sched",
    ),
    F("codecs_calls_check", "codecs ⁴: calls/s, the checker's load ³", 0, "codecs:check16x8.rate"),
    F(
        "codecs_cpu_us_check",
        "codecs ⁴: verld CPU µs/call (schedstat), the checker's load ³",
        1,
        "codecs:check16x8.bridge_cpu_us_per_call_sched",
    ),
)
P50, RATE8 = "direct.lat32.latency_us.p50", "direct.inflight8.rate"
LOCK = Target(
    "verld p50 / direct p50, lock-step 32 B",
    "target",
    "<=",
    2.0,
    "×",
    ratio("verld.lat32.latency_us.p50", P50),
)
CHECK_RATIO = Target(
    "verld, the checker's load / direct 8 in flight, calls/s",
    "info",
    ">=",
    0.7,
    "×",
    ratio("verld.check16x8.rate", RATE8),
)
CHECK_CPU = Target(
    "verld CPU per call (schedstat), the checker's load",
    "aim",
    "<=",
    25.0,
    "µs",
    fig("verld", "cpu_us_check"),
)
FRAME_CPU = Target(
    "frame-seq / verld CPU per call (schedstat), the checker's load",
    "target",
    "<=",
    1.2,
    "×",
    ratio(
        "codecs:frame-seq.check16x8.bridge_cpu_us_per_call_sched",
        "codecs:verld.check16x8.bridge_cpu_us_per_call_sched",
    ),
)
FRAME_LOCK = Target(
    "frame-match / length CPU per call (schedstat), lock-step 32 B",
    "target",
    "<=",
    1.1,
    "×",
    ratio(
        "codecs:frame-match.lat32.bridge_cpu_us_per_call_sched",
        "codecs:length.lat32.bridge_cpu_us_per_call_sched",
    ),
)
TARGETS = (
    LOCK,
    Target(
        "verld 16×8 window 8 / direct 8 in flight, calls/s",
        "target",
        ">=",
        0.7,
        "×",
        ratio("verld.p16x8_w8.rate", RATE8),
    ),
    CHECK_RATIO,
    Target(
        "verld 16×8 window 32 / direct 8 in flight, calls/s",
        "info",
        ">=",
        0.7,
        "×",
        ratio("verld.p16x8_w32.rate", RATE8),
    ),
    Target(
        "socat p50 / direct p50, lock-step 32 B",
        "info",
        "<=",
        2.0,
        "×",
        ratio("socat.lat32.latency_us.p50", P50),
    ),
    Target(
        "paced wire busy, 8 clients through verld",
        "target",
        ">=",
        95.0,
        "%",
        fig("verld", "paced_util_c8"),
    ),
    Target(
        "idle CPU with a 1 s heartbeat",
        "target",
        "<=",
        0.1,
        "% of a core",
        fig("verld", "idle_cpu_percent"),
    ),
    Target(
        "verld CPU per call, 16×8 window 8",
        "aim",
        "<=",
        25.0,
        "µs",
        fig("verld", "cpu_us_pipelined"),
    ),
    CHECK_CPU,
    Target("verld RSS with 64 clients", "aim", "<=", 40.0, "MiB", fig("verld", "rss_mib_c64")),
    Target("verld start → READY=1", "aim", "<=", 0.5, "s", fig("verld", "ready_s")),
    FRAME_CPU,
    FRAME_LOCK,
    Target(
        "frame-seq / verld CPU per call (schedstat), lock-step 32 B",
        "info",
        "<=",
        1.2,
        "×",
        ratio(
            "codecs:frame-seq.lat32.bridge_cpu_us_per_call_sched",
            "codecs:verld.lat32.bridge_cpu_us_per_call_sched",
        ),
    ),
    Target(
        "frame-match p50 / length p50, lock-step 32 B",
        "info",
        "<=",
        1.1,
        "×",
        ratio("codecs:frame-match.lat32.latency_us.p50", "codecs:length.lat32.latency_us.p50"),
    ),
    Target(
        "frame-seq p50 / verld p50, lock-step 32 B (codecs ⁴)",
        "info",
        "<=",
        1.2,
        "×",
        ratio("codecs:frame-seq.lat32.latency_us.p50", "codecs:verld.lat32.latency_us.p50"),
    ),
)


class Api(Family):
    name, title = "api", "verld's API against a direct pty and socat"
    figures, targets = FIGURES, TARGETS
    ab_targets = (LOCK, CHECK_RATIO, CHECK_CPU)
    footnotes = (
        "¹ verld: 16 clients × 8 in flight, window 8; socat: one client with 8 in flight.",
        "² device→host bytes incl. COBS framing per second / (baud/10); direct: 8 in flight.",
        "³ the checker's load: 16 clients × 8 in flight in 2 generator processes of 8 "
        "clients, window 8; CPU from /proc/PID/task/*/schedstat over the common window.",
        "⁴ the codecs phase, rounds of their own: verld on verl (verld), on frame with a seq "
        "field (frame-seq: configs/frame.yaml, window 8) and without (frame-match: "
        "tools/benchlib/frame-match.yaml), and on length, each path with a sim speaking its "
        "codec.",
    )

    def setup(self, run: Run) -> None:
        self.sim = Sim(run.procs, run.tmp, max_payload=MAX_PAYLOAD)
        self.baud = getattr(run.options, "baud", 115200)
        self._codec_sims: dict[str, Sim] = {}

    def codec_sim(self, run: Run, name: str, codec: str, frame: dict[str, Any] | None) -> Sim:
        """The sim of path `name`, speaking `codec` (`frame`: the declaration, for its
        --frame file), started when first asked for."""
        if name not in self._codec_sims:
            extra: list[str] = []
            if frame is not None:
                file = run.tmp / f"{name}.frame.yaml"
                file.write_text(yaml.safe_dump(frame))
                extra = ["--frame", str(file)]
            self._codec_sims[name] = Sim(
                run.procs,
                run.tmp,
                max_payload=MAX_PAYLOAD,
                codec=codec,
                extra_args=extra,
                name=name,
            )
        return self._codec_sims[name]

    def socat(self, run: Run) -> Bridge:
        sock = str(run.dir("socat")) + ".sock"
        relay = Server(
            run.procs,
            ["socat", f"UNIX-LISTEN:{sock}", f"FILE:{FsPath(self.sim.link).resolve()},raw,echo=0"],
            run.tmp / "socat.log",
            sock=sock,
        )
        return Bridge("unix", sock, {"bridge": [relay.pid], "sim": [self.sim.pid]}, stop=relay.stop)

    def verld(self, window: int, checkout: FsPath | None = None) -> Any:
        def start(run: Run) -> Bridge:
            d = Verld(run.procs, run.dir("verld"), verl_config(self.sim.link, window), checkout)
            return Bridge(
                "api",
                d.socket,
                {"bridge": [d.pid], "sim": [self.sim.pid]},
                [d],
                stop=d.stop,
                ready_s=d.ready_s,
            )

        return start

    def framed(self, path: Framed) -> Callable[[Run], Bridge]:
        """verld on `path`'s frame declaration, with a sim speaking the same."""

        def start(run: Run) -> Bridge:
            declared = path.declared()
            frame = declared["device"]["frame"]
            sim = self.codec_sim(run, path.name, "frame", frame)
            config = verl_config(sim.link, path.window)
            config["device"].update(codec="frame", frame=frame)
            config["heartbeat"]["payload"] = declared["heartbeat"]["payload"]
            return self._bridge(run, sim, config, path.heads)

        return start

    def length(self, run: Run) -> Bridge:
        """verld on the `length` codec (a call at a time), with a sim speaking it."""
        sim = self.codec_sim(run, "length", "length", None)
        config = verl_config(sim.link, 1)
        config["device"]["codec"] = "length"
        return self._bridge(run, sim, config, None)

    def _bridge(
        self,
        run: Run,
        sim: Sim,
        config: dict[str, Any],
        heads: Callable[[int], tuple[str, str]] | None,
    ) -> Bridge:
        d = Verld(run.procs, run.dir("verld"), config)
        roles = {"bridge": [d.pid], "sim": [sim.pid]}
        return Bridge("api", d.socket, roles, [d], stop=d.stop, ready_s=d.ready_s, heads=heads)

    def phases(self, run: Run) -> list[Phase]:
        verld = Path(
            "verld",
            (
                Leg(self.verld(8), (LAT32, LAT1K, C16, C64, P16X8, CHECK)),
                Leg(self.verld(32), (Echo("p16x8", 16, 8),), suffix="_w32"),
            ),
        )
        out = [
            Phase(
                "rounds",
                (
                    Path("direct", (Leg(self.direct, (LAT32, LAT1K, INFLIGHT8)),)),
                    Path(
                        "socat", (Leg(self.socat, (LAT32, LAT1K, INFLIGHT8), fresh=True),), "socat"
                    ),
                    verld,
                ),
            )
        ]
        if self.baud:
            out.append(
                Phase(
                    "paced",
                    (
                        Path("direct", (Leg(self.direct, (LAT32, INFLIGHT8)),)),
                        Path("verld", (Leg(self.verld(8), (LAT32, C8)),)),
                    ),
                    timing="paced",
                    enter=self.pace,
                    leave=self.unpace,
                    after=self._wire,
                )
            )
        if getattr(run.options, "idle_seconds", 0):
            out.append(Phase("idle", (Path("verld", run=self.idle),), rounds=1))
        out.append(
            Phase(
                "codecs",
                (
                    Path("verld", (Leg(self.verld(8), (LAT32, CHECK)),)),
                    Path(FRAME_SEQ.name, (Leg(self.framed(FRAME_SEQ), (LAT32, CHECK)),)),
                    Path(FRAME_MATCH.name, (Leg(self.framed(FRAME_MATCH), (LAT32,)),)),
                    Path("length", (Leg(self.length, (LAT32,)),)),
                ),
            )
        )
        return out

    def ab_phase(self, checkouts: dict[str, FsPath]) -> Phase:
        """tools/bench-ab: direct, then verld from each checkout (alternating)."""
        paths = [
            Path(name, (Leg(self.verld(8, co), (LAT32, CHECK)),)) for name, co in checkouts.items()
        ]
        direct = Path("direct", (Leg(self.direct, (LAT32, INFLIGHT8)),))
        return Phase("rounds", (direct, *paths), order=direct_then_alternate)

    def _wire(self, res: Result) -> None:
        res["wire_bytes_per_s"] = round(res["rate"] * REPLY_BYTES, 1)
        res["utilisation_percent"] = round(res["rate"] * REPLY_BYTES * 1000 / self.baud, 2)

    def idle(self, run: Run) -> Result:
        """verld's CPU with no clients and a 1 s heartbeat, from per-thread schedstat."""
        seconds = float(run.options.idle_seconds)
        run.say(f"  idle: verld with no clients for {seconds:g} s (1 s heartbeat)")
        daemon = Verld(run.procs, run.dir("verld"), verl_config(self.sim.link, 8))
        try:
            before = daemon.status()["counters"]["pings"]
            time.sleep(0.1 if run.quick else 1.5)  # let the status client's disconnect settle
            start = CpuMark.take([daemon.pid])
            time.sleep(seconds)
            end = CpuMark.take([daemon.pid])
            memory = memory_kb(daemon.pid)
            pings = daemon.status()["counters"]["pings"] - before
        finally:
            run.stop(Bridge("", "", daemons=[daemon], stop=daemon.stop))
        used, wall = end.since(start, [daemon.pid]), end.t - start.t
        assert used is not None
        if pings < seconds / 2 - 1:
            run.errors.append(f"idle: only {pings} heartbeat pings in {seconds:g} s")
        return {
            "idle": {
                "seconds": round(wall, 3),
                "cpu_percent": round(used.sched * 100 / wall, 4),
                "cpu_percent_stat": round(used.stat * 100 / wall, 3),
                "pings": pings,
                "rss_kb": memory.get("VmRSS"),
                "ready_s": round(daemon.ready_s, 4),
            }
        }

    def info(self, run: Run) -> dict[str, Any]:
        socat = (output(["socat", "-V"], "socat version").split() + ["?"] * 3)[2]
        return {"baud": self.baud, "versions": f"socat {socat}"}


FAMILY = Api
