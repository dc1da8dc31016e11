"""The links family: verld's `rfc2217://` device link through ser2net against `tcp://`.

Paths: `direct` (the bench's client on the sim's pty, verl frames), `tcp` (verld,
window 8, `device.port: tcp://127.0.0.1:PORT`: ser2net serving the pty on a raw TCP
accepter), `rfc2217` (the same verld on `rfc2217://127.0.0.1:PORT`: ser2net's
`telnet(rfc2217)` accepter on the same pty; verld negotiates BINARY, COM-PORT-OPTION
and the line settings at open, then runs its codec over the telnet stream, 0xFF
doubled both ways) and, outside --quick, `verld` (verld on the pty itself: what the
hop through ser2net adds). Both ser2nets (`benchlib.ser2net`) with `chardelay: false`
(each read from the pty sent on at once: with its default every reply waits at least
1 ms, see the network family) and `tcp(nodelay)` (with Nagle on, a 1 KiB reply, sent
in two pieces, waits for verld's delayed ACK: 44 ms a call on either path). verld
and its ser2net are started for their own leg and stopped after it (verld first),
so the paths hold the pty in turn within a round, the order rotating per round.

Workloads: `lat32` (one lock-step client of verld's API, 32-byte echoes; `direct`:
the same client in verl frames) and, outside --quick, `lat1k` (1 KiB of random data:
nearly every reply holds 0xFF bytes, which ser2net doubles on rfc2217 and verld's
telnet codec undoes). CPU per call of verld (`bridge`), ser2net (`ser2net`) and the sim
the engine's way; `open_ms` from verld's own log, `starting` to `link_up` (the
negotiation included). Every workload is checked against verld (`calls_ok`), and its
link must not have dropped (`status.link.generation`). tools/bench-ab runs `ab_phase`:
`direct`, then the rfc2217 path of each checkout.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any

from benchlib.engine import Bridge, Family, Leg, Path, Phase, Result, Run, direct_then_alternate
from benchlib.families.api import LAT1K, LAT32
from benchlib.procs import Server, Sim, Verld, verl_config
from benchlib.report import Figure, Target, ratio
from benchlib.ser2net import ser2net_info, start_ser2net

LINKED = ("tcp", "rfc2217", "verld")  #: the paths through verld
#: each lock-step workload's figures: key ({n}: 32, 1k), label ({what}: 32 B, 1 KiB;
#: {note}: the footnote on its client), digits, source in the workload's result
EACH = (
    ("lat{n}_p50_us", "lock-step {what} call, p50 (µs) {note}", 1, "latency_us.p50"),
    ("lat{n}_p99_us", "lock-step {what} call, p99 (µs) {note}", 1, "latency_us.p99"),
    ("calls_{n}", "calls/s, lock-step {what} {note}", 0, "rate"),
    (
        "verld_cpu_us_{n}",
        "verld CPU µs/call, lock-step {what} ²",
        1,
        "bridge_cpu_us_per_call_sched",
    ),
    ("verld_user_us_{n}", "  of which user time (µs/call, stat) ²", 1, "bridge_user_us_per_call"),
    (
        "verld_system_us_{n}",
        "  of which system time (µs/call, stat) ²",
        1,
        "bridge_system_us_per_call",
    ),
    (
        "ser2net_cpu_us_{n}",
        "ser2net CPU µs/call, lock-step {what} ²",
        1,
        "ser2net_cpu_us_per_call_sched",
    ),
    ("sim_cpu_us_{n}", "sim CPU µs/call, lock-step {what} ²", 1, "sim_cpu_us_per_call_sched"),
)
FIGURES = (
    *(
        Figure(key.format(n=n), label.format(what=what, note=note), digits, f"lat{n}.{src}")
        for n, what, note in (("32", "32 B", "¹"), ("1k", "1 KiB", "¹ ³"))
        for key, label, digits, src in EACH
    ),
    Figure("open_ms", "verld start → link up (ms) ⁴", 1, "open_ms", LINKED),
)
P50, P99 = "latency_us.p50", "latency_us.p99"
#: rfc2217 / tcp, each within a round: (what, workload, value), at most 1.1 ×
AGAINST_TCP = (
    ("p50 / tcp p50 via ser2net", "lat32", P50),
    ("p99 / tcp p99 via ser2net", "lat32", P99),
    ("/ tcp verld CPU per call via ser2net", "lat32", "bridge_cpu_us_per_call_sched"),
    ("/ tcp ser2net CPU per call", "lat32", "ser2net_cpu_us_per_call_sched"),
    ("p50 / tcp p50 via ser2net", "lat1k", P50),
    ("/ tcp verld CPU per call via ser2net", "lat1k", "bridge_cpu_us_per_call_sched"),
)
SIZE = {"lat32": "32 B", "lat1k": "1 KiB"}
LOCK = Target(
    "rfc2217 p50 / direct p50 via ser2net, lock-step 32 B",
    "info",
    "<=",
    3.0,
    "×",
    ratio(f"rfc2217.lat32.{P50}", f"direct.lat32.{P50}"),
)
TARGETS = (
    *(
        Target(
            f"rfc2217 {what}, lock-step {SIZE[load]}",
            "info",
            "<=",
            1.1,
            "×",
            ratio(f"rfc2217.{load}.{key}", f"tcp.{load}.{key}"),
        )
        for what, load, key in AGAINST_TCP
    ),
    Target(
        "tcp p50 via ser2net / verld p50 on a pty link, lock-step 32 B",
        "info",
        "<=",
        1.5,
        "×",
        ratio(f"tcp.lat32.{P50}", f"verld.lat32.{P50}"),
    ),
    LOCK,
)

NOTES = (
    "¹ the bench's blocking lock-step client: write(2) the request, block in read(2) until "
    "the reply is whole; through verld an API call (its Unix socket), direct a verl frame "
    "on the pty. tcp and rfc2217: verld's device.port on ser2net serving the same pty "
    "(chardelay: false, tcp(nodelay)); verld: device.port the pty itself.",
    "² schedstat of every thread of verld, ser2net or the sim over the window, per call "
    "answered in it; the user/system split from /proc/PID/stat (10 ms ticks).",
    "³ 1 KiB of random data per call: nearly every reply holds 0xFF bytes, doubled by "
    "ser2net on rfc2217 and undone by verld; not in --quick.",
    "⁴ verld's own log, from its `starting` record to `link_up`: connect, ser2net opening "
    "the pty, on rfc2217 the negotiation, then verld's handshake.",
)


class Links(Family):
    name = "links"
    title = "verld's rfc2217:// device link through ser2net against tcp:// and the pty"
    figures, targets, ab_targets, footnotes = FIGURES, TARGETS, (LOCK,), NOTES

    def setup(self, run: Run) -> None:
        self.sim = Sim(run.procs, run.tmp, max_payload=4096, name="links")

    def verld(self, scheme: str = "", checkout: Any = None) -> Callable[[Run], Bridge]:
        """verld with device.port `scheme`://… on a ser2net of its own (tcp, rfc2217),
        or ("") the pty itself."""

        def start(run: Run) -> Bridge:
            relay: Server | None = None
            device = self.sim.link
            if scheme:
                relay, port = start_ser2net(
                    run, self.sim.link, chardelay=False, nodelay=True, rfc2217=scheme == "rfc2217"
                )
                device = f"{scheme}://127.0.0.1:{port}"
            d = Verld(run.procs, run.dir("verld"), verl_config(device, 8), checkout)
            roles = {"bridge": [d.pid], "sim": [self.sim.pid]}
            if relay is not None:
                roles["ser2net"] = [relay.pid]

            def stop() -> int:
                code = d.stop()
                if relay is not None:
                    relay.stop()
                return code

            return Bridge(
                "api",
                d.socket,
                roles,
                [d],
                stop=stop,
                ready_s=d.ready_s,
                times={"open_ms": _open_ms(d)},
                extra={"check": lambda *a: _check(run, *a)},
            )

        return start

    def phases(self, run: Run) -> list[Phase]:
        loads = (LAT32,) if run.quick else (LAT32, LAT1K)
        paths = [
            Path("direct", (Leg(self.direct, loads),)),
            Path("tcp", (Leg(self.verld("tcp"), loads),), "ser2net"),
            Path("rfc2217", (Leg(self.verld("rfc2217"), loads),), "ser2net"),
        ]
        if not run.quick:
            paths.append(Path("verld", (Leg(self.verld(), loads),)))
        return [Phase("rounds", tuple(paths))]

    def ab_phase(self, checkouts: dict[str, Any]) -> Phase:
        paths = [
            Path(n, (Leg(self.verld("rfc2217", co), (LAT32,)),), "ser2net")
            for n, co in checkouts.items()
        ]
        direct = Path("direct", (Leg(self.direct, (LAT32,)),))
        return Phase("rounds", (direct, *paths), order=direct_then_alternate)

    def info(self, run: Run) -> dict[str, Any]:
        return ser2net_info()


def _open_ms(daemon: Verld) -> float | None:
    """From verld's `starting` record to its `link_up` in its JSON log (ms)."""
    stamps: dict[str, datetime.datetime] = {}
    for line in daemon.log_path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") in ("starting", "link_up"):
            stamps.setdefault(record["event"], datetime.datetime.fromisoformat(record["timestamp"]))
    if len(stamps) < 2:
        return None
    return (stamps["link_up"] - stamps["starting"]).total_seconds() * 1000


def _check(run: Run, label: str, out: Result, before: list[Any], after: list[Any]) -> None:
    """The link stayed up through the workload (the same generation: no reconnect)."""
    was, now = before[0]["link"], after[0]["link"]
    out["link"] = {"port": now["port"], "generation": now["generation"], "modem": now["modem"]}
    if now["state"] != "up" or now["generation"] != was["generation"]:
        went = f"generation {was['generation']} → {now['generation']}"
        run.errors.append(f"{label}: the link went {now['state']} ({went}): {now['reason']}")


FAMILY = Links
