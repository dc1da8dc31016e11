"""The ports family: a program on one of verld's virtual serial ports against the device's pty.

Paths: `direct` (the program on the sim's pty), `port` (verld, window 8, with
`ports:` links; the program opens a link with pyserial and speaks verl to it exactly
as to the device) and, outside --quick, `verld` (the API client, for the port's cost
against an API call). Each program is the bench's blocking lock-step client (`lat32`:
write(2), block in read(2); on a port after pyserial's open, VMIN 1) and again through
pyserial's own API (`lat32_pyserial`: `write`, then `read(in_waiting or 1)`).

The `paced` phase (the sim's writes paced to `--baud`): 8 programs on 8 ports, each
its own process and lock-step, over one common window; wire busy from their calls/s
and again from verld's own `bytes_rx` over the window. Every workload is checked
against verld: `calls_ok` and each port's `ok` (status.ports) must equal the replies
the programs got, with nothing failed, dropped or counted as a bad frame on a port.
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
from benchlib.procs import BenchError, Sim, Verld, verl_config
from benchlib.report import Figure, Target, fig, ratio

PROGRAMS = 8  #: programs (each on its own port, lock-step) in the paced phase
PYSERIAL = Echo("lat32_pyserial", 1, 1, kind="pyserial")
F = Figure
FIGURES = (
    F("lat32_p50_us", "lock-step 32 B echo, p50 (µs) ¹", 1, "lat32.latency_us.p50"),
    F("lat32_p99_us", "lock-step 32 B echo, p99 (µs) ¹", 1, "lat32.latency_us.p99"),
    F("calls_c1", "calls/s, 1 lock-step program ¹", 0, "lat32.rate"),
    F(
        "py_p50_us",
        "lock-step 32 B echo through pyserial's API, p50 (µs) ²",
        1,
        "lat32_pyserial.latency_us.p50",
    ),
    F(
        "py_p99_us",
        "lock-step 32 B echo through pyserial's API, p99 (µs) ²",
        1,
        "lat32_pyserial.latency_us.p99",
    ),
    F(
        "cpu_us_c1",
        "verld CPU µs/call, 1 lock-step program ¹",
        1,
        "lat32.bridge_cpu_us_per_call",
        ("port",),
    ),
    F("ready_s", "start → READY=1 (s), 1 port", 3, "ready_s", ("port",)),
    F("paced_calls", "calls/s when paced, 8 programs on 8 ports", 1, "paced:p8.rate"),
    F(
        "paced_util",
        "wire busy when paced, 8 programs on 8 ports (%) ³",
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
        "paced_cpu_percent",
        "verld CPU when paced, 8 programs (% of a core)",
        1,
        "paced:p8.bridge_cpu_percent",
    ),
)
LOCK = Target(
    "port p50 / direct p50, lock-step 32 B",
    "target",
    "<=",
    2.5,
    "×",
    ratio("port.lat32.latency_us.p50", "direct.lat32.latency_us.p50"),
)
TARGETS = (
    LOCK,
    Target(
        "port p50 / direct p50, lock-step 32 B, pyserial's API",
        "info",
        "<=",
        2.5,
        "×",
        ratio("port.lat32_pyserial.latency_us.p50", "direct.lat32_pyserial.latency_us.p50"),
    ),
    Target(
        "port p50 / verld API client p50, lock-step 32 B",
        "info",
        "<=",
        1.0,
        "×",
        ratio("port.lat32.latency_us.p50", "verld.lat32.latency_us.p50"),
    ),
    Target(
        "paced wire busy, 8 programs on 8 ports",
        "target",
        ">=",
        95.0,
        "%",
        fig("port", "paced_util"),
    ),
)


class Ports(Family):
    name, title = "ports", "a program on a verld virtual serial port against the device's pty"
    figures, targets, ab_targets = FIGURES, TARGETS, (LOCK,)
    footnotes = (
        "¹ the bench's blocking client: write(2) the request, block in read(2) until the reply "
        "is whole; port: the link opened with pyserial first.",
        "² pyserial's Serial.write, then Serial.read(in_waiting or 1) until the reply is whole "
        "(a select() and an ioctl more per read), on the device pty and on the port.",
        "³ device→host bytes incl. COBS framing per second / (baud/10), as for the verld "
        "clients; each program lock-step on its own port, verld window 8.",
    )

    def setup(self, run: Run) -> None:
        self.sim = Sim(run.procs, run.tmp, max_payload=4096, name="ports")
        self.baud = getattr(run.options, "baud", 115200)

    def api(self, run: Run) -> Bridge:
        d = Verld(run.procs, run.dir("verld"), verl_config(self.sim.link, 8))
        return Bridge("api", d.socket, {"bridge": [d.pid], "sim": [self.sim.pid]}, [d], stop=d.stop)

    def ports(self, count: int, checkout: Any = None) -> Callable[[Run], Bridge]:
        def start(run: Run) -> Bridge:
            where = run.dir("ports")
            links = [str(where / f"ttyV{n}") for n in range(count)]
            config = verl_config(self.sim.link, 8)
            config["ports"] = [{"link": link, "mode": "0600"} for link in links]
            d = Verld(run.procs, where, config, checkout)
            return Bridge(
                "serial",
                links[0],
                {"bridge": [d.pid], "sim": [self.sim.pid]},
                [d],
                window_status=True,
                stop=d.stop,
                ready_s=d.ready_s,
                extra={
                    "links": links,
                    "ready": lambda n: _await_open(d, n),
                    "check": lambda *a: _check(run, count, *a),
                },
            )

        return start

    def phases(self, run: Run) -> list[Phase]:
        paths = [
            Path("direct", (Leg(self.direct, (LAT32, PYSERIAL)),)),
            Path("port", (Leg(self.ports(1), (LAT32, PYSERIAL)),)),
        ]
        if not run.quick:
            paths.append(Path("verld", (Leg(self.api, (LAT32,)),)))
        out = [Phase("rounds", tuple(paths))]
        if self.baud:
            out.append(
                Phase(
                    "paced",
                    (Path("port", (Leg(self._paced, (Programs(PROGRAMS),)),)),),
                    timing="paced",
                    enter=self.pace,
                    leave=self.unpace,
                    after=self._wire,
                )
            )
        return out

    def ab_phase(self, checkouts: dict[str, Any]) -> Phase:
        paths = [Path(n, (Leg(self.ports(1, co), (LAT32,)),)) for n, co in checkouts.items()]
        direct = Path("direct", (Leg(self.direct, (LAT32,)),))
        return Phase("rounds", (direct, *paths), order=direct_then_alternate)

    def _paced(self, run: Run) -> Bridge:
        return self.ports(PROGRAMS)(run)

    def _wire(self, res: Result) -> None:
        res["utilisation_percent"] = round(res["rate"] * REPLY_BYTES * 1000 / self.baud, 2)
        window = res.get("verld_window") or {}
        if window.get("seconds"):
            res["verld_bytes_rx_per_s"] = round(window["bytes_rx"] / window["seconds"], 1)
            res["utilisation_counters_percent"] = round(
                window["bytes_rx"] * 1000 / (window["seconds"] * self.baud), 2
            )

    def info(self, run: Run) -> dict[str, Any]:
        return {"baud": self.baud, "programs": PROGRAMS}


class Programs(Echo):
    """8 lock-step programs, each on its own port (the bridge's `links`)."""

    def __init__(self, count: int) -> None:
        super().__init__(f"p{count}", count, 1, procs=count)

    def gens(self, run: Run, bridge: Bridge) -> list[tuple[str, str, str]]:
        mine = Echo(
            self.name, self.clients, 1, procs=self.procs, targets=tuple(bridge.extra["links"])
        )
        return mine.gens(run, bridge)


def _await_open(daemon: Verld, count: int) -> None:
    """verld sees a program's open when it next polls the port (no event tells): wait."""
    deadline = time.monotonic() + 10
    while sum(p["open"] for p in daemon.status()["ports"]) < count:
        if time.monotonic() > deadline:
            raise BenchError(f"verld did not see {count} ports opened within 10 s")
        time.sleep(0.02)


def _check(
    run: Run, ports: int, label: str, out: Result, before: list[Any], after: list[Any]
) -> None:
    """Each port's counts over the workload: every call ok, nothing failed, dropped or bad."""
    was = {p["link"]: p for p in before[0]["ports"]}
    per_port = []
    for now in after[0]["ports"][:ports]:
        old = was[now["link"]]
        entry = {k: now[k] - old[k] for k in ("calls", "ok", "dropped", "bad_frames")}
        failed = {k: n - old["failed"].get(k, 0) for k, n in now["failed"].items()}
        per_port.append(
            {"link": now["link"], **entry, "failed": {k: n for k, n in failed.items() if n}}
        )
    out["verld_ports"] = per_port
    if sum(p["ok"] for p in per_port) != out["answered"]:
        run.errors.append(
            f"{label}: the ports counted {sum(p['ok'] for p in per_port)} calls "
            f"ok, the programs got {out['answered']} replies"
        )
    lost = [p for p in per_port if p["failed"] or p["dropped"] or p["bad_frames"]]
    if lost:
        run.errors.append(f"{label}: calls failed, dropped or bad on a port: {lost}")


FAMILY = Ports
