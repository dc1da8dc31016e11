"""The port rounds' figures, targets, table and markdown (the verl rounds' are `report`).

Same rules as `report`: every path gets every figure key (None where it does not
apply), absolute figures are medians over rounds, ratios are taken within a round
and their median is compared with the target.
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
    Figure("lat32_p50_us", "lock-step 32 B echo, p50 (µs) ¹", 1),
    Figure("lat32_p99_us", "lock-step 32 B echo, p99 (µs) ¹", 1),
    Figure("calls_c1", "calls/s, 1 lock-step program ¹", 0),
    Figure("py_p50_us", "lock-step 32 B echo through pyserial's API, p50 (µs) ²", 1),
    Figure("py_p99_us", "lock-step 32 B echo through pyserial's API, p99 (µs) ²", 1),
    Figure("cpu_us_c1", "verld CPU µs/call, 1 lock-step program ¹", 1),
    Figure("ready_s", "start → READY=1 (s), 1 port", 3),
    Figure("paced_calls", "calls/s when paced, 8 programs on 8 ports", 1),
    Figure("paced_util", "wire busy when paced, 8 programs on 8 ports (%) ³", 1),
    Figure("paced_util_counters", "the same from verld's bytes_rx counter (%) ³", 1),
    Figure("paced_p50_ms", "latency when paced, 8 programs, p50 (ms)", 2),
    Figure("paced_p99_ms", "latency when paced, 8 programs, p99 (ms)", 2),
    Figure("paced_cpu_percent", "verld CPU when paced, 8 programs (% of a core)", 1),
)
FOOTNOTES = (
    "¹ the bench's blocking client: write(2) the request, block in read(2) until the reply "
    "is whole; port: the link opened with pyserial first.",
    "² pyserial's Serial.write, then Serial.read(in_waiting or 1) until the reply is whole "
    "(a select() and an ioctl more per read), on the device pty and on the port.",
    "³ device→host bytes incl. COBS framing per second / (baud/10), as for the verld "
    "clients; each program lock-step on its own port, verld window 8.",
)

TARGETS = (
    Target(
        "port p50 / direct p50, lock-step 32 B",
        "target", "<=", 2.5, "×",
        _per_round("port", "lat32", "direct", "lat32", "latency_us", "p50"),
    ),
    Target(
        "port p50 / direct p50, lock-step 32 B, pyserial's API",
        "info", "<=", 2.5, "×",
        _per_round("port", "lat32_pyserial", "direct", "lat32_pyserial", "latency_us", "p50"),
    ),
    Target(
        "port p50 / verld API client p50, lock-step 32 B",
        "info", "<=", 1.0, "×",
        _per_round("port", "lat32", "verld", "lat32", "latency_us", "p50"),
    ),
    Target("paced wire busy, 8 programs on 8 ports", "target", ">=", 95.0, "%",
           _figure("port", "paced_util")),
)  # fmt: skip


def figures(
    rounds: Rounds, paced: dict[str, Any] | None, path: str, name: str
) -> dict[str, float | None]:
    """Every figure of one path: the median over rounds, None where it does not apply."""

    def med(workload: str, *keys: str, scale: float = 1.0) -> float | None:
        value = median(_get(r, path, workload, *keys) for r in rounds)
        return None if value is None else value * scale

    out: dict[str, float | None] = dict.fromkeys(f.key for f in FIGURES)
    out["lat32_p50_us"] = med("lat32", "latency_us", "p50")
    out["lat32_p99_us"] = med("lat32", "latency_us", "p99")
    out["calls_c1"] = med("lat32", "rate")
    out["py_p50_us"] = med("lat32_pyserial", "latency_us", "p50")
    out["py_p99_us"] = med("lat32_pyserial", "latency_us", "p99")
    if path != "port":
        return out
    out["cpu_us_c1"] = med("lat32", "bridge_cpu_us_per_call")
    out["ready_s"] = med("ready_s")
    if paced is not None:
        runs = [r.get(name) for r in paced["rounds"]]

        def pmed(*keys: str, scale: float = 1.0) -> float | None:
            value = median(_get(run, *keys) for run in runs)
            return None if value is None else value * scale

        out["paced_calls"] = pmed("rate")
        out["paced_util"] = pmed("utilisation_percent")
        out["paced_util_counters"] = pmed("utilisation_counters_percent")
        out["paced_p50_ms"] = pmed("latency_us", "p50", scale=1e-3)
        out["paced_p99_ms"] = pmed("latency_us", "p99", scale=1e-3)
        out["paced_cpu_percent"] = pmed("bridge_cpu_percent")
    return out


def summarise(ports: dict[str, Any]) -> dict[str, Any]:
    """Figures per path, then each target with its per-round values and pass/fail."""
    rounds, paced = ports["rounds"], ports.get("paced")
    name = f"port_p{ports.get('programs', 8)}"
    figs = {path: figures(rounds, paced, path, name) for path in ports["paths"]}
    with_verld = any(r.get("verld") for r in rounds)
    targets = []
    for t in TARGETS:
        if "verld API" in t.name and not with_verld:
            continue  # `--ports` alone: no verld API client in its rounds
        measured, each = t.measure(rounds, figs)
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


def _baud(ports: dict[str, Any]) -> int | None:
    paced = ports.get("paced")
    return paced.get("baud") if paced else None


def table(ports: dict[str, Any]) -> str:
    """The plain-text port figures and targets tables."""
    summary, paths, baud = ports["summary"], ports["paths"], _baud(ports)
    labels = [_label(f, baud) for f in FIGURES]
    width = max(len(x) for x in labels) + 2
    lines = [f"{'port figure':<{width}}" + "".join(f"{p:>12}" for p in paths)]
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


def markdown(ports: dict[str, Any], meta: dict[str, Any]) -> str:
    """The generated part of docs/benchmarks.md's virtual serial ports section."""
    summary, paths, baud = ports["summary"], ports["paths"], _baud(ports)
    m = meta
    out = [
        f"Run {m['date']} on {m['nproc']} CPUs ({m['cpu']}), Linux {m['kernel']}, "
        f"Python {m['python']}, verld {m['verld']} ({m['git']}); {len(ports['rounds'])} rounds, "
        f"windows {m['duration_s']:g} s after {m['warmup_s']:g} s (paced "
        f"{m['paced_duration_s']:g} s); load average {m['loadavg_start']} before, "
        f"{m['loadavg_end']} after.",
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
    return "\n".join(out)
