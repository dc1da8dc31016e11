"""The network family: a program on a shared raw network port of verld against the pty and ser2net.

Paths: `direct` (the program on the sim's pty), `network` (verld, window 8, with one
`network:` entry on 127.0.0.1: raw, shared; the program connects over TCP and speaks
verl to it exactly as to the device, and gets only its own replies), `ser2net`
(ser2net 4 serving the same pty on a raw TCP accepter, one client, from
`benchlib.ser2net`: the byte relay in use today, configured as its man page's
example, so with its default `chardelay`:
after bytes from the port it waits 2 characters' time, at least 1 ms, for more
before sending them on) and `ser2net-nd` (the same with `chardelay: false`: each read
sent on at once, the relay's floor). verld and each ser2net hold the pty only for
their own leg (started for it, stopped after it), so they run in turn within a
round, in an order that rotates per round. Every program is the bench's
blocking lock-step client (`lat32`: write(2), block in read(2); on TCP with
TCP_NODELAY).

The `paced` phase (the sim's writes paced to `--baud`): 8 programs on 8 connections
to one shared port, each its own process and lock-step, over one common window; wire
busy from their calls/s and again from verld's own `bytes_rx` over the window. Every
verld workload is checked against verld: `calls_ok` and the entry's `ok`
(status.network) must equal the replies the programs got, with nothing failed or
dropped. The CPU of both bridges is read the engine's way (stat and schedstat of the
daemon's pid: verld's, ser2net's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

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
from benchlib.families.api import LAT32, REPLY_BYTES
from benchlib.procs import BenchError, Sim, Verld, free_port, verl_config
from benchlib.report import Figure, Target, fig, ratio
from benchlib.ser2net import ser2net_info, start_ser2net

PROGRAMS = 8  #: programs (each on its own connection, lock-step) in the paced phase
F = Figure
FIGURES = (
    F("lat32_p50_us", "lock-step 32 B echo, p50 (µs) ¹", 1, "lat32.latency_us.p50"),
    F("lat32_p90_us", "lock-step 32 B echo, p90 (µs) ¹", 1, "lat32.latency_us.p90"),
    F("lat32_p99_us", "lock-step 32 B echo, p99 (µs) ¹", 1, "lat32.latency_us.p99"),
    F("calls_c1", "calls/s, 1 lock-step program ¹", 0, "lat32.rate"),
    F(
        "cpu_us_c1",
        "bridge CPU µs/call, 1 lock-step program ²",
        1,
        "lat32.bridge_cpu_us_per_call_sched",
    ),
    F(
        "cpu_user_us_c1",
        "  of which user time (µs/call, stat) ²",
        1,
        "lat32.bridge_user_us_per_call",
    ),
    F(
        "cpu_system_us_c1",
        "  of which system time (µs/call, stat) ²",
        1,
        "lat32.bridge_system_us_per_call",
    ),
    F(
        "sim_cpu_us_c1",
        "sim CPU µs/call, 1 lock-step program ²",
        1,
        "lat32.sim_cpu_us_per_call_sched",
    ),
    F("rss_mib", "bridge RSS after the lock-step window (MiB)", 1, "lat32.rss_kb", scale=1 / 1024),
    F("ready_s", "start → READY=1 (s), 1 network port", 3, "ready_s", ("network",)),
    F("paced_calls", "calls/s when paced, 8 programs on 8 connections", 1, "paced:p8.rate"),
    F(
        "paced_util",
        "wire busy when paced, 8 programs on 8 connections (%) ³",
        1,
        "paced:p8.utilisation_percent",
    ),
    F(
        "paced_util_counters",
        "the same from verld's bytes_rx counter (%) ³",
        1,
        "paced:p8.utilisation_counters_percent",
    ),
    F(
        "paced_p50_ms",
        "latency when paced, 8 programs, p50 (ms)",
        2,
        "paced:p8.latency_us.p50",
        scale=1e-3,
    ),
    F(
        "paced_p99_ms",
        "latency when paced, 8 programs, p99 (ms)",
        2,
        "paced:p8.latency_us.p99",
        scale=1e-3,
    ),
    F(
        "paced_cpu_us",
        "verld CPU µs/call when paced, 8 programs ²",
        1,
        "paced:p8.bridge_cpu_us_per_call_sched",
    ),
    F(
        "paced_cpu_percent",
        "verld CPU when paced, 8 programs (% of a core) ²",
        1,
        "paced:p8.bridge_cpu_percent",
    ),
)
ND = "ser2net-nd"  #: ser2net with `chardelay: false`


def _p50(path: str) -> str:
    return f"{path}.lat32.latency_us.p50"


def _cpu(path: str) -> str:
    return f"{path}.lat32.bridge_cpu_us_per_call_sched"


LOCK = Target(
    "network p50 / direct p50, lock-step 32 B",
    "info",
    "<=",
    2.5,
    "×",
    ratio(_p50("network"), _p50("direct")),
)
TARGETS = (
    Target(
        "network p50 / ser2net p50, lock-step 32 B",
        "target",
        "<=",
        2.0,
        "×",
        ratio(_p50("network"), _p50("ser2net")),
    ),
    Target(
        "paced wire busy, 8 programs on 8 connections",
        "target",
        ">=",
        95.0,
        "%",
        fig("network", "paced_util"),
    ),
    Target(
        "network p50 / ser2net-nd p50 (chardelay off), lock-step 32 B",
        "info",
        "<=",
        2.0,
        "×",
        ratio(_p50("network"), _p50(ND)),
    ),
    LOCK,
    Target(
        "ser2net p50 / direct p50, lock-step 32 B",
        "info",
        "<=",
        2.0,
        "×",
        ratio(_p50("ser2net"), _p50("direct")),
    ),
    Target(
        "ser2net-nd p50 / direct p50, lock-step 32 B",
        "info",
        "<=",
        2.0,
        "×",
        ratio(_p50(ND), _p50("direct")),
    ),
    Target(
        "verld CPU / ser2net CPU per call, lock-step 32 B",
        "info",
        "<=",
        2.0,
        "×",
        ratio(_cpu("network"), _cpu("ser2net")),
    ),
    Target(
        "verld CPU / ser2net-nd CPU per call, lock-step 32 B",
        "info",
        "<=",
        2.0,
        "×",
        ratio(_cpu("network"), _cpu(ND)),
    ),
)


class Network(Family):
    name = "network"
    title = "a program on a shared raw network port of verld against the pty and ser2net"
    figures, targets, ab_targets = FIGURES, TARGETS, (LOCK,)
    footnotes = (
        "¹ the bench's blocking client: write(2) the request, block in read(2) until the reply "
        "is whole; network and ser2net: a TCP connection to 127.0.0.1 with TCP_NODELAY. "
        "ser2net as configured by default (chardelay: after the port's bytes it waits 2 "
        "characters' time, at least 1 ms, before sending them on); ser2net-nd with "
        "chardelay: false.",
        "² schedstat of every thread of the daemon (verld, ser2net) or the sim over the window, "
        "per call answered in it; the user/system split from /proc/PID/stat (10 ms ticks).",
        "³ device→host bytes incl. COBS framing per second / (baud/10), as for the verld "
        "clients; each program lock-step on its own connection to one shared port, verld "
        "window 8.",
    )

    def setup(self, run: Run) -> None:
        self.sim = Sim(run.procs, run.tmp, max_payload=4096, name="net")
        self.baud = getattr(run.options, "baud", 115200)

    def network(self, checkout: Any = None) -> Callable[[Run], Bridge]:
        def start(run: Run) -> Bridge:
            port = free_port()
            config = verl_config(self.sim.link, 8)
            config["network"] = [{"listen": f"127.0.0.1:{port}", "name": "bench"}]
            d = Verld(run.procs, run.dir("verld"), config, checkout)
            return Bridge(
                "tcp",
                f"127.0.0.1:{port}",
                {"bridge": [d.pid], "sim": [self.sim.pid]},
                [d],
                window_status=True,
                stop=d.stop,
                ready_s=d.ready_s,
                extra={
                    "ready": lambda n: _await_connected(d, n),
                    "check": lambda *a: _check(run, *a),
                },
            )

        return start

    def ser2net(self, chardelay: bool) -> Callable[[Run], Bridge]:
        def start(run: Run) -> Bridge:
            relay, port = start_ser2net(run, self.sim.link, chardelay=chardelay)
            return Bridge(
                "tcp",
                f"127.0.0.1:{port}",
                {"bridge": [relay.pid], "sim": [self.sim.pid]},
                stop=relay.stop,
            )

        return start

    def phases(self, run: Run) -> list[Phase]:
        out = [
            Phase(
                "rounds",
                (
                    Path("direct", (Leg(self.direct, (LAT32,)),)),
                    Path("network", (Leg(self.network(), (LAT32,)),)),
                    Path("ser2net", (Leg(self.ser2net(True), (LAT32,)),), "ser2net"),
                    Path(ND, (Leg(self.ser2net(False), (LAT32,)),), "ser2net"),
                ),
            )
        ]
        if self.baud:
            load = Echo(f"p{PROGRAMS}", PROGRAMS, 1, procs=PROGRAMS)
            out.append(
                Phase(
                    "paced",
                    (Path("network", (Leg(self.network(), (load,)),)),),
                    timing="paced",
                    enter=self.pace,
                    leave=self.unpace,
                    after=self._wire,
                )
            )
        return out

    def ab_phase(self, checkouts: dict[str, Any]) -> Phase:
        paths = [Path(n, (Leg(self.network(co), (LAT32,)),)) for n, co in checkouts.items()]
        direct = Path("direct", (Leg(self.direct, (LAT32,)),))
        return Phase("rounds", (direct, *paths), order=direct_then_alternate)

    def _wire(self, res: Result) -> None:
        res["utilisation_percent"] = round(res["rate"] * REPLY_BYTES * 1000 / self.baud, 2)
        window = res.get("verld_window") or {}
        if window.get("seconds"):
            res["verld_bytes_rx_per_s"] = round(window["bytes_rx"] / window["seconds"], 1)
            res["utilisation_counters_percent"] = round(
                window["bytes_rx"] * 1000 / (window["seconds"] * self.baud), 2
            )

    def info(self, run: Run) -> dict[str, Any]:
        return {"baud": self.baud, "programs": PROGRAMS, **ser2net_info()}


def _entry(daemon: Verld) -> dict[str, Any]:
    entries: list[dict[str, Any]] = daemon.status()["network"]
    return entries[0]


def _await_connected(daemon: Verld, count: int) -> None:
    """The programs are connected; verld has accepted them all (before the window)."""
    deadline = time.monotonic() + 10
    while _entry(daemon)["connections"] < count:
        if time.monotonic() > deadline:
            raise BenchError(f"verld did not accept {count} network connections within 10 s")
        time.sleep(0.01)


def _check(run: Run, label: str, out: Result, before: list[Any], after: list[Any]) -> None:
    """The entry's counts over the workload: every call ok, nothing failed, dropped or refused."""
    was, now = before[0]["network"][0], after[0]["network"][0]
    entry = {k: now[k] - was[k] for k in ("calls", "ok", "dropped", "ignored")}
    failed = {k: n - was["failed"].get(k, 0) for k, n in now["failed"].items()}
    entry["failed"] = {k: n for k, n in failed.items() if n}
    entry["refused"] = {k: n for k, n in now["refused"].items() if n}
    out["verld_network"] = entry
    if entry["ok"] != out["answered"]:
        run.errors.append(
            f"{label}: the network port counted {entry['ok']} calls ok, the "
            f"programs got {out['answered']} replies"
        )
    if entry["failed"] or entry["dropped"] or entry["refused"]:
        run.errors.append(f"{label}: calls failed or dropped, or connections refused: {entry}")


FAMILY = Network
