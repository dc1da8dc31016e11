"""The Modbus rounds' figures, targets, table and markdown (the verl rounds' are `report`).

Same rules as `report`: every path gets every figure key (None where it does not
apply: `direct` has one master and no gateway), absolute figures are medians over
rounds, ratios are taken within a round and their median is compared with the
target. Without mbusd its targets are n/a.
"""

from __future__ import annotations

from typing import Any

from benchlib.report import (
    Figure,
    Rounds,
    Target,
    _figure,
    _fmt,
    _get,
    _per_round,
    _round,
    _target_rows,
    median,
)

FIGURES = (
    Figure("lock_p50_us", "lock-step, pymodbus client, p50 (µs)", 1),
    Figure("lock_p90_us", "lock-step, pymodbus client, p90 (µs)", 1),
    Figure("lock_p99_us", "lock-step, pymodbus client, p99 (µs)", 1),
    Figure("lock_calls", "calls/s, 1 lock-step pymodbus client", 0),
    Figure("raw_p50_us", "lock-step, raw client, p50 (µs) ¹", 1),
    Figure("raw_p90_us", "lock-step, raw client, p90 (µs) ¹", 1),
    Figure("raw_p99_us", "lock-step, raw client, p99 (µs) ¹", 1),
    Figure("cpu_us_lock", "gateway CPU µs/call, lock-step raw client ⁴", 1),
    Figure("paced_calls", "calls/s when paced, 8 masters", 1),
    Figure("paced_util", "wire busy when paced, 8 masters (%) ²", 1),
    Figure("paced_p50_ms", "latency when paced, 8 masters, p50 (ms)", 1),
    Figure("paced_p99_ms", "latency when paced, 8 masters, p99 (ms)", 1),
    Figure("off_p50_ms", "offline unit: 3 masters of unit 1, p50 (ms) ³", 2),
    Figure("off_p99_ms", "offline unit: 3 masters of unit 1, p99 (ms) ³", 2),
    Figure("off_max_ms", "offline unit: 3 masters of unit 1, max (ms) ³", 1),
    Figure("off_calls", "offline unit: calls/s of the 3 masters ³", 0),
    Figure("off_silent_calls", "offline unit: gateway exceptions/s to the 4th ³", 1),
    Figure("off_cpu_percent", "offline unit: gateway CPU, % of a core ³ ⁴", 1),
)
FOOTNOTES = (
    "¹ write(2) the request, block in read(2) until the response is whole, compare bytes: "
    "no client library on the path.",
    "² (request + response bytes on the RTU line per second) × 10 bits / baud; verld: its "
    "own byte counters; mbusd: calls × bytes per call.",
    "³ 3 masters poll unit 1 while a 4th polls unit 5, which never answers; both gateways "
    "with a 0.2 s timeout and 1 retry.",
    "⁴ from /proc/PID/task/*/schedstat over the window.",
)

TARGETS = (
    Target(
        "verld p50 / direct p50, lock-step (pymodbus clients)",
        "target", "<=", 1.5, "×",
        _per_round("verld", "lock_py", "direct", "lock_py", "latency_us", "p50"),
    ),
    Target(
        "verld p50 / mbusd p50, lock-step (pymodbus clients)",
        "target", "<=", 1.0, "×",
        _per_round("verld", "lock_py", "mbusd", "lock_py", "latency_us", "p50"),
    ),
    Target(
        "verld p50 / direct p50, lock-step (raw clients)",
        "info", "<=", 1.5, "×",
        _per_round("verld", "lock_raw", "direct", "lock_raw", "latency_us", "p50"),
    ),
    Target(
        "verld p50 / mbusd p50, lock-step (raw clients)",
        "info", "<=", 1.0, "×",
        _per_round("verld", "lock_raw", "mbusd", "lock_raw", "latency_us", "p50"),
    ),
    Target("paced wire busy, 8 masters through verld", "target", ">=", 90.0, "%",
           _figure("verld", "paced_util")),
    Target(
        "verld / mbusd calls/s, paced, 8 masters",
        "target", ">=", 1.0, "×",
        _per_round("verld", "paced8", "mbusd", "paced8", "rate"),
    ),
    Target(
        "offline unit: verld p99 / mbusd p99, 3 masters",
        "info", "<=", 1.0, "×",
        _per_round("verld", "offline", "mbusd", "offline", "latency_us", "p99"),
    ),
)  # fmt: skip


def figures(rounds: Rounds, path: str) -> dict[str, float | None]:
    """Every figure of one path: the median over rounds, None where it does not apply."""

    def med(workload: str, *keys: str, scale: float = 1.0) -> float | None:
        value = median(_get(r, path, workload, *keys) for r in rounds)
        return None if value is None else value * scale

    out: dict[str, float | None] = dict.fromkeys(f.key for f in FIGURES)
    for q in ("p50", "p90", "p99"):
        out[f"lock_{q}_us"] = med("lock_py", "latency_us", q)
        out[f"raw_{q}_us"] = med("lock_raw", "latency_us", q)
    out["lock_calls"] = med("lock_py", "rate")
    if path == "direct":
        return out
    out["cpu_us_lock"] = med("lock_raw", "bridge_cpu_us_per_call_sched")
    out["paced_calls"] = med("paced8", "rate")
    util = "wire_util_percent" if path == "verld" else "wire_util_calls_percent"
    out["paced_util"] = med("paced8", util)
    out["paced_p50_ms"] = med("paced8", "latency_us", "p50", scale=1e-3)
    out["paced_p99_ms"] = med("paced8", "latency_us", "p99", scale=1e-3)
    out["off_p50_ms"] = med("offline", "latency_us", "p50", scale=1e-3)
    out["off_p99_ms"] = med("offline", "latency_us", "p99", scale=1e-3)
    out["off_max_ms"] = med("offline", "latency_us", "max", scale=1e-3)
    out["off_calls"] = med("offline", "rate")
    out["off_silent_calls"] = med("offline", "silent", "rate")
    out["off_cpu_percent"] = med("offline", "bridge_cpu_percent")
    return out


def summarise(rounds: Rounds, paths: list[str]) -> dict[str, Any]:
    """Figures per path, then each target with its per-round values and pass/fail."""
    figs = {path: figures(rounds, path) for path in paths}
    targets = []
    for t in TARGETS:
        measured, each = t.measure(rounds, figs)
        if "mbusd" in t.name and "mbusd" not in paths:
            measured, each = None, []
        passed = None
        if measured is not None:
            passed = measured <= t.target if t.op == "<=" else measured >= t.target
        targets.append({
            "name": t.name, "kind": t.kind, "measured": _round(measured, 4), "op": t.op,
            "target": t.target, "unit": t.unit, "per_round": [_round(v, 3) for v in each],
            "pass": passed,
        })  # fmt: skip
    return {"figures": figs, "targets": targets}


def _label(f: Figure, baud: int | None) -> str:
    if baud and "when paced" in f.label:
        return f.label.replace("when paced", f"at {baud} baud")
    return f.label


def _mbusd_line(modbus: dict[str, Any]) -> str:
    mb = modbus["mbusd"]
    if mb.get("binary"):
        return f"mbusd {mb['version']} ({mb['note']})"
    return f"**no mbusd column**: {mb['note']}"


def table(modbus: dict[str, Any]) -> str:
    """The plain-text Modbus figures and targets tables."""
    summary, paths, baud = modbus["summary"], modbus["paths"], modbus.get("baud")
    labels = [_label(f, baud) for f in FIGURES]
    width = max(len(x) for x in labels) + 2
    lines = [f"{'Modbus figure':<{width}}" + "".join(f"{p:>12}" for p in paths)]
    for f, label in zip(FIGURES, labels, strict=True):
        cells = "".join(f"{_fmt(summary['figures'][p][f.key], f.digits):>12}" for p in paths)
        lines.append(f"{label:<{width}}{cells}")
    lines += ["", *FOOTNOTES, _mbusd_line(modbus).replace("**", ""), ""]
    rows = _target_rows(summary)
    w0 = max(len(r[0]) for r in rows) + 2
    w1 = max(len(r[1]) for r in rows) + 2
    w2 = max(len(r[2]) for r in rows) + 2
    lines.append(f"{'target':<{w0}}{'measured':<{w1}}{'target':<{w2}}{'m/t':>6}  result")
    lines += [f"{a:<{w0}}{b:<{w1}}{c:<{w2}}{d:>6}  {e}" for a, b, c, d, e in rows]
    failed = failures(modbus)
    if failed:
        lines += ["", "wrong or missing responses:", *[f"  {line}" for line in failed]]
    return "\n".join(lines)


def failures(modbus: dict[str, Any]) -> list[str]:
    """The workloads that got wrong or missing responses, one line each."""
    out = []
    for number, rnd in enumerate(modbus["rounds"], 1):
        for path in rnd["order"]:
            for name, run in (rnd.get(path) or {}).items():
                if isinstance(run, dict) and run.get("errors"):
                    sample = "; ".join(dict.fromkeys(run.get("error_samples", [])))[:120]
                    out.append(f"round {number} {path} {name}: {run['errors']} ({sample})")
    return out


def _timing_line(modbus: dict[str, Any]) -> str:
    t = modbus.get("timing")
    if not t:
        return ""
    parts = [f"{name} {w['duration']:g} s after {w['warmup']:g} s" for name, w in t.items()]
    return "windows: " + ", ".join(parts) + "; "


def markdown(modbus: dict[str, Any], meta: dict[str, Any]) -> str:
    """The generated part of docs/benchmarks.md's Modbus section."""
    summary, paths, baud = modbus["summary"], modbus["paths"], modbus.get("baud")
    m = meta
    out = [
        f"Run {m['date']} on {m['nproc']} CPUs ({m['cpu']}), Linux {m['kernel']}, "
        f"Python {m['python']}, verld {m['verld']} ({m['git']}), pymodbus "
        f"{modbus.get('pymodbus', '?')}, {_mbusd_line(modbus)}; {modbus['rounds_n']} rounds, "
        f"every call reads {modbus.get('registers', 10)} holding registers of unit 1 (fc 3); "
        f"{_timing_line(modbus)}"
        f"load average {m['loadavg_start']} before, {m['loadavg_end']} after.",
        "",
        "```sh",
        m["command"],
        "```",
        "",
        "| figure | " + " | ".join(paths) + " |",
        "|---|" + "---:|" * len(paths),
    ]
    for f in FIGURES:
        cells = " | ".join(_fmt(summary["figures"][p][f.key], f.digits) for p in paths)
        out.append(f"| {_label(f, baud)} | {cells} |")
    out += ["", *[n + "  " for n in FOOTNOTES], ""]
    out += [
        "| target | measured (median; per round) | target | measured/target | result |",
        "|---|---|---|---:|---|",
    ]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in _target_rows(summary)]
    failed = failures(modbus)
    if failed:
        out += ["", f"**Wrong or missing responses (the run exits 1)** in {len(failed)} workloads:"]
        out += [f"- {line}" for line in failed]
    return "\n".join(out)
