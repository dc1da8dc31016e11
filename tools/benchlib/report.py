"""From rounds to figures: medians over rounds, per-round ratios, targets, table, markdown.

Every path gets every figure key (None where the path cannot do it: direct has
one link user, socat one client), so the JSON has a fixed shape. Ratios are taken
within a round — both sides measured minutes apart on the same noisy machine —
and then the median over rounds is compared with the target.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Rounds = list[dict[str, Any]]


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    digits: int


FIGURES = (
    Figure("lat32_p50_us", "lock-step 32 B echo, p50 (µs)", 1),
    Figure("lat32_p99_us", "lock-step 32 B echo, p99 (µs)", 1),
    Figure("lat1k_p50_us", "lock-step 1 KiB echo, p50 (µs)", 1),
    Figure("lat1k_p99_us", "lock-step 1 KiB echo, p99 (µs)", 1),
    Figure("calls_c1", "calls/s, 1 lock-step client", 0),
    Figure("calls_inflight8", "calls/s, 1 client with 8 in flight", 0),
    Figure("calls_c16", "calls/s, 16 lock-step clients", 0),
    Figure("calls_c64", "calls/s, 64 lock-step clients", 0),
    Figure("calls_p16x8_w8", "calls/s, 16 clients × 8 in flight, window 8", 0),
    Figure("calls_p16x8_w32", "calls/s, 16 clients × 8 in flight, window 32", 0),
    Figure("cpu_us_c1", "bridge CPU µs/call, 1 lock-step client", 1),
    Figure("cpu_us_pipelined", "bridge CPU µs/call, pipelined ¹", 1),
    Figure("rss_mib_c64", "bridge RSS with 64 clients (MiB)", 1),
    Figure("ready_s", "start → READY=1 (s)", 3),
    Figure("idle_cpu_percent", "idle CPU, % of a core (1 s heartbeat)", 4),
    Figure("paced_util_c1", "wire busy when paced, 1 lock-step client (%) ²", 1),
    Figure("paced_util_c8", "wire busy when paced, 8 clients (%) ²", 1),
)
FOOTNOTES = (
    "¹ verld: 16 clients × 8 in flight, window 8; socat: one client with 8 in flight.",
    "² device→host bytes incl. COBS framing per second / (baud/10); direct: 8 in flight.",
)


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _get(result: dict[str, Any] | None, *keys: str) -> Any:
    value: Any = result
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _series(rounds: Rounds, path: str, workload: str, *keys: str) -> list[Any]:
    return [_get(r.get(path), workload, *keys) for r in rounds]


def figures(
    rounds: Rounds, paced: dict[str, Any] | None, idle: dict[str, Any] | None, path: str
) -> dict[str, float | None]:
    """Every figure of one path: the median over rounds, None where it does not apply."""

    def med(workload: str, *keys: str) -> float | None:
        return median(_series(rounds, path, workload, *keys))

    out: dict[str, float | None] = dict.fromkeys(f.key for f in FIGURES)
    out["lat32_p50_us"] = med("lat32", "latency_us", "p50")
    out["lat32_p99_us"] = med("lat32", "latency_us", "p99")
    out["lat1k_p50_us"] = med("lat1k", "latency_us", "p50")
    out["lat1k_p99_us"] = med("lat1k", "latency_us", "p99")
    out["calls_c1"] = med("lat32", "rate")
    if path == "verld":
        out["calls_c16"] = med("c16", "rate")
        out["calls_c64"] = med("c64", "rate")
        out["calls_p16x8_w8"] = med("p16x8_w8", "rate")
        out["calls_p16x8_w32"] = med("p16x8_w32", "rate")
        out["cpu_us_pipelined"] = med("p16x8_w8", "bridge_cpu_us_per_call")
        rss = med("c64", "rss_kb")
        out["rss_mib_c64"] = rss / 1024 if rss is not None else None
        starts = [s for r in rounds for s in _get(r, "verld", "ready_s") or []]
        if idle is not None:
            starts.append(idle["ready_s"])
        out["ready_s"] = median(starts)
        out["idle_cpu_percent"] = idle["cpu_percent"] if idle is not None else None
    else:
        out["calls_inflight8"] = med("inflight8", "rate")
        out["cpu_us_pipelined"] = med("inflight8", "bridge_cpu_us_per_call")
    if path != "direct":
        out["cpu_us_c1"] = med("lat32", "bridge_cpu_us_per_call")
    if paced is not None and path in ("direct", "verld"):
        many = "c8" if path == "verld" else "inflight8"
        for key, workload in (("paced_util_c1", "lat32"), ("paced_util_c8", many)):
            name = f"{path}_{workload}"
            out[key] = median(_get(r, name, "utilisation_percent") for r in paced["rounds"])
    return out


def _ratio(a: Any, b: Any) -> float | None:
    if isinstance(a, int | float) and isinstance(b, int | float) and b:
        return a / b
    return None


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  #: target (must hold) | aim (reported for scale) | info
    op: str  #: <= or >=
    target: float
    unit: str
    measure: Callable[[Rounds, dict[str, Any]], tuple[float | None, list[float | None]]]


def _per_round(
    path_a: str, wl_a: str, path_b: str, wl_b: str, *keys: str
) -> Callable[[Rounds, dict[str, Any]], tuple[float | None, list[float | None]]]:
    def measure(rounds: Rounds, figs: dict[str, Any]) -> tuple[float | None, list[float | None]]:
        each = [_ratio(_get(r, path_a, wl_a, *keys), _get(r, path_b, wl_b, *keys)) for r in rounds]
        return median(each), each

    return measure


def _figure(
    path: str, key: str
) -> Callable[[Rounds, dict[str, Any]], tuple[float | None, list[float | None]]]:
    def measure(rounds: Rounds, figs: dict[str, Any]) -> tuple[float | None, list[float | None]]:
        return figs[path][key], []

    return measure


TARGETS = (
    Target(
        "verld p50 / direct p50, lock-step 32 B",
        "target", "<=", 2.0, "×",
        _per_round("verld", "lat32", "direct", "lat32", "latency_us", "p50"),
    ),
    Target(
        "verld 16×8 window 8 / direct 8 in flight, calls/s",
        "target", ">=", 0.7, "×",
        _per_round("verld", "p16x8_w8", "direct", "inflight8", "rate"),
    ),
    Target(
        "verld 16×8 window 32 / direct 8 in flight, calls/s",
        "info", ">=", 0.7, "×",
        _per_round("verld", "p16x8_w32", "direct", "inflight8", "rate"),
    ),
    Target(
        "socat p50 / direct p50, lock-step 32 B",
        "info", "<=", 2.0, "×",
        _per_round("socat", "lat32", "direct", "lat32", "latency_us", "p50"),
    ),
    Target("paced wire busy, 8 clients through verld", "target", ">=", 95.0, "%",
           _figure("verld", "paced_util_c8")),
    Target("idle CPU with a 1 s heartbeat", "target", "<=", 0.1, "% of a core",
           _figure("verld", "idle_cpu_percent")),
    Target("verld CPU per call, 16×8 window 8", "aim", "<=", 25.0, "µs",
           _figure("verld", "cpu_us_pipelined")),
    Target("verld RSS with 64 clients", "aim", "<=", 40.0, "MiB",
           _figure("verld", "rss_mib_c64")),
    Target("verld start → READY=1", "aim", "<=", 0.5, "s", _figure("verld", "ready_s")),
)  # fmt: skip


def summarise(
    rounds: Rounds, paced: dict[str, Any] | None, idle: dict[str, Any] | None, paths: list[str]
) -> dict[str, Any]:
    """figures per path, then each target with its per-round values and pass/fail."""
    figs = {path: figures(rounds, paced, idle, path) for path in paths}
    targets = []
    for t in TARGETS:
        if t.name.startswith("socat") and "socat" not in paths:
            continue
        measured, each = t.measure(rounds, figs)
        passed = None
        if measured is not None:
            passed = measured <= t.target if t.op == "<=" else measured >= t.target
        targets.append(
            {
                "name": t.name,
                "kind": t.kind,
                "measured": _round(measured, 4),
                "op": t.op,
                "target": t.target,
                "unit": t.unit,
                "per_round": [_round(v, 3) for v in each],
                "pass": passed,
            }
        )
    return {"figures": figs, "targets": targets}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _target_rows(summary: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for t in summary["targets"]:
        measured = t["measured"]
        digits = 4 if t["unit"] == "% of a core" else 2
        shown = _fmt(measured, digits)
        if t["per_round"]:
            shown += "  (rounds: " + " ".join(_fmt(v, 2) for v in t["per_round"]) + ")"
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        if t["kind"] != "target":
            verdict = f"{verdict} ({t['kind']})"
        goal = f"{t['op']} {t['target']:g} {t['unit']}"
        ratio = _fmt(measured / t["target"], 2) if measured is not None else "–"
        rows.append((t["name"], shown, goal, ratio, verdict))
    return rows


def table(summary: dict[str, Any], paths: list[str], baud: int | None) -> str:
    """The plain-text figures and targets tables."""
    labels = [_label(f, baud) for f in FIGURES]
    width = max(len(x) for x in labels) + 2
    lines = [f"{'figure':<{width}}" + "".join(f"{p:>12}" for p in paths)]
    for f, label in zip(FIGURES, labels, strict=True):
        cells = "".join(f"{_fmt(summary['figures'][p][f.key], f.digits):>12}" for p in paths)
        lines.append(f"{label:<{width}}{cells}")
    lines += ["", *FOOTNOTES, ""]
    rows = _target_rows(summary)
    w0 = max(len(r[0]) for r in rows) + 2
    w1 = max(len(r[1]) for r in rows) + 2
    w2 = max(len(r[2]) for r in rows) + 2
    lines.append(f"{'target':<{w0}}{'measured':<{w1}}{'target':<{w2}}{'m/t':>6}  result")
    lines += [f"{a:<{w0}}{b:<{w1}}{c:<{w2}}{d:>6}  {e}" for a, b, c, d, e in rows]
    return "\n".join(lines)


def _label(f: Figure, baud: int | None) -> str:
    if baud and f.key.startswith("paced"):
        return f.label.replace("when paced", f"at {baud} baud")
    return f.label


def markdown(summary: dict[str, Any], paths: list[str], meta: dict[str, Any]) -> str:
    """The generated section of docs/benchmarks.md."""
    m = meta
    out = [
        f"Run {m['date']} on {m['nproc']} CPUs ({m['cpu']}), Linux {m['kernel']}, "
        f"Python {m['python']}, verld {m['verld']} ({m['git']}), socat {m['socat']}; load average "
        f"{m['loadavg_start']} before, {m['loadavg_end']} after.",
        "",
        "```sh",
        m["command"],
        "```",
        "",
        "| figure | " + " | ".join(paths) + " |",
        "|---|" + "---:|" * len(paths),
    ]
    baud = m.get("baud") or None
    for f in FIGURES:
        cells = " | ".join(_fmt(summary["figures"][p][f.key], f.digits) for p in paths)
        out.append(f"| {_label(f, baud)} | {cells} |")
    out += ["", *[n + "  " for n in FOOTNOTES], ""]
    out += [
        "| target | measured (median; per round) | target | measured/target | result |",
        "|---|---|---|---:|---|",
    ]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in _target_rows(summary)]
    return "\n".join(out)
