"""The fleet bench's figures: medians over rounds, per-round targets, tables and markdown.

Every path gets every figure key (None where it does not apply: `direct` has no
MQTT server or broker), so the JSON has a fixed shape. As in `benchlib.report`,
ratios are taken within a round and their median is compared with the target.
"""

from __future__ import annotations

from typing import Any

from benchlib.report import median

Rounds = list[dict[str, Any]]
MB = 1e6  #: the RSS target is in MB (10^6 bytes); VmRSS is in KiB

#: key, label ({n}: the fleet's devices), digits, workload, result keys
FIGURES = (
    ("lock_p50_us", "lock-step round trip, p50 (µs)", 1, "lock", ("latency_us", "p50")),
    ("lock_p99_us", "lock-step round trip, p99 (µs)", 1, "lock", ("latency_us", "p99")),
    ("lock_rate", "calls/s, 1 lock-step caller", 0, "lock", ("rate",)),
    ("fleet_rate", "calls/s, 4 callers × 8 in flight over {n} devices", 0, "fleet", ("rate",)),
    ("fleet_p50_us", "  round trip under that load, p50 (µs)", 1, "fleet", ("latency_us", "p50")),
    ("fleet_p99_us", "  round trip under that load, p99 (µs)", 1, "fleet", ("latency_us", "p99")),
    ("server_us_lock", "server CPU µs/call, lock-step ¹", 1, "lock", ("server_cpu_us_per_call",)),
    ("server_us_fleet", "server CPU µs/call, 4 × 8 ¹", 1, "fleet", ("server_cpu_us_per_call",)),
    ("server_pct_fleet", "server CPU, % of a core, 4 × 8 ¹", 1, "fleet", ("server_cpu_percent",)),
    ("broker_us_fleet", "mosquitto CPU µs/call, 4 × 8", 1, "fleet", ("broker_cpu_us_per_call",)),
    ("broker_pct_fleet", "mosquitto CPU, % of a core, 4 × 8", 1, "fleet", ("broker_cpu_percent",)),
    (
        "verld_us_fleet",
        "verld CPU µs/call (all daemons), 4 × 8",
        1,
        "fleet",
        ("verld_cpu_us_per_call",),
    ),
    ("gen_us_fleet", "generator CPU µs/call, 4 × 8", 1, "fleet", ("gen_cpu_us_per_call",)),
)
FOOTNOTES = (
    "¹ the server: verld-mqtt (mqtt), the echo responder (echo); "
    "utime+stime from /proc/PID/stat over the window, per call answered in it (10 ms "
    "ticks: ± 10 ms / calls in the window).",
)


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _workload(name: str, n: int) -> str:
    return f"fleet{n}" if name == "fleet" else name


def figures(rounds: Rounds, path: str, n: int) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, _, _, workload, keys in FIGURES:
        out[key] = median(_get(r, path, _workload(workload, n), *keys) for r in rounds)
    if path == "direct":  # (no MQTT server, no broker)
        for key in ("server_us_lock", "server_us_fleet", "server_pct_fleet"):
            out[key] = None
    if path == "echo":  # (no verld)
        out["verld_us_fleet"] = None
    return out


def scaling(rounds: Rounds, scale: list[int], rss: dict[str, Any] | None) -> list[dict[str, Any]]:
    """mqtt calls/s (and the bridge's and broker's CPU) by devices; the RSS run's too."""
    rows = []
    for n in scale:

        def med(*keys: str, n: int = n) -> float | None:
            return median(_get(r, "mqtt", f"fleet{n}", *keys) for r in rounds)

        rows.append(
            {
                "devices": n,
                "rate": med("rate"),
                "p50_us": med("latency_us", "p50"),
                "bridge_us": med("server_cpu_us_per_call"),
                "bridge_pct": med("server_cpu_percent"),
                "broker_pct": med("broker_cpu_percent"),
                "rounds": len(rounds),
            }
        )
    load = _get(rss, "load")
    if isinstance(load, dict):
        rows.append(
            {
                "devices": rss["devices"] if rss else 0,
                "rate": load["rate"],
                "p50_us": load["latency_us"]["p50"],
                "bridge_us": load.get("server_cpu_us_per_call"),
                "bridge_pct": load.get("server_cpu_percent"),
                "broker_pct": load.get("broker_cpu_percent"),
                "rounds": 1,
            }
        )
    return rows


def memory(rss: dict[str, Any] | None) -> dict[str, Any]:
    """RSS figures (MiB), the per-device slope and, short of the devices wanted, an estimate."""
    if not rss:
        return {}
    mib = 1024.0
    n, base_n = rss["devices"], rss["round_devices"]
    after, base = rss["after_calls"]["VmRSS"], rss["round_bridge"]["VmRSS"]
    connected, base_connected = rss["connected"]["VmRSS"], rss["round_connected"]["VmRSS"]
    # per device: both bridges once connected, before any call (the calls' garbage differs)
    slope = (connected - base_connected) / (n - base_n) if n > base_n else None
    out: dict[str, Any] = {
        "devices": n,
        "wanted": rss["wanted"],
        "round_devices": base_n,
        "round_connected_mib": round(base_connected / mib, 2),
        "round_mib": round(base / mib, 2),
        "connected_mib": round(connected / mib, 2),
        "after_calls_mib": round(after / mib, 2),
        "hwm_mib": round(rss["after_calls"]["VmHWM"] / mib, 2),
        "after_calls_mb": round(after * 1024 / MB, 2),
        "per_device_kib": round(slope, 1) if slope is not None else None,
        "calls": sum(rss["load"]["per_device"].values()),
        "note": rss.get("note"),
    }
    if n < rss["wanted"] and slope is not None:
        out["estimate_mib_at_wanted"] = round((after + slope * (rss["wanted"] - n)) / mib, 2)
    return out


def _ratio_rounds(rounds: Rounds, fn: Any) -> tuple[float | None, list[float | None]]:
    each: list[float | None] = []
    for r in rounds:
        try:
            each.append(fn(r))
        except (TypeError, ZeroDivisionError):
            each.append(None)
    return median(each), each


def _p50(r: dict[str, Any], path: str) -> Any:
    return r[path]["lock"]["latency_us"]["p50"]


def targets(rounds: Rounds, n: int, mem: dict[str, Any]) -> list[dict[str, Any]]:
    fleet = f"fleet{n}"
    rows = [
        (
            "(mqtt p50 − echo p50) / direct p50, lock-step",
            "target",
            "<=",
            1.5,
            "×",
            _ratio_rounds(
                rounds, lambda r: (_p50(r, "mqtt") - _p50(r, "echo")) / _p50(r, "direct")
            ),
        ),
        (
            f"bridge RSS with {mem.get('devices', '?')} devices",
            "target",
            "<",
            100.0,
            "MB",
            (mem.get("after_calls_mb"), []),
        ),
        (
            "mqtt p50 / direct p50, lock-step",
            "info",
            "<=",
            2.5,
            "×",
            _ratio_rounds(rounds, lambda r: _p50(r, "mqtt") / _p50(r, "direct")),
        ),
        (
            f"mqtt / echo calls/s, 4 × 8 over {n} devices",
            "info",
            ">=",
            0.5,
            "×",
            _ratio_rounds(rounds, lambda r: r["mqtt"][fleet]["rate"] / r["echo"][fleet]["rate"]),
        ),
        (
            f"mqtt / direct calls/s, 4 × 8 over {n} devices",
            "info",
            ">=",
            0.5,
            "×",
            _ratio_rounds(rounds, lambda r: r["mqtt"][fleet]["rate"] / r["direct"][fleet]["rate"]),
        ),
    ]
    out = []
    for name, kind, op, goal, unit, (measured, each) in rows:
        passed = None
        if measured is not None:
            passed = {"<=": measured <= goal, "<": measured < goal, ">=": measured >= goal}[op]
        out.append(
            {
                "name": name,
                "kind": kind,
                "measured": _round(measured, 4),
                "op": op,
                "target": goal,
                "unit": unit,
                "per_round": [_round(v, 3) for v in each],
                "pass": passed,
            }
        )
    return out


def summarise(
    rounds: Rounds, n: int, scale: list[int], rss: dict[str, Any] | None
) -> dict[str, Any]:
    mem = memory(rss)
    return {
        "devices": n,
        "figures": {path: figures(rounds, path, n) for path in ("direct", "mqtt", "echo")},
        "scaling": scaling(rounds, scale, rss),
        "memory": mem,
        "targets": targets(rounds, n, mem),
    }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _fmt(value: Any, digits: int) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _target_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for t in summary["targets"]:
        shown = _fmt(t["measured"], 2)
        if t["per_round"]:
            shown += "  (rounds: " + " ".join(_fmt(v, 2) for v in t["per_round"]) + ")"
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        if t["kind"] != "target":
            verdict = f"{verdict} ({t['kind']})"
        ratio = _fmt(t["measured"] / t["target"], 2) if t["measured"] is not None else "–"
        rows.append(
            (str(t["name"]), shown, f"{t['op']} {t['target']:g} {t['unit']}", ratio, verdict)
        )
    return rows


def _scale_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (
            str(s["devices"]),
            _fmt(s["rate"], 0),
            _fmt(s["p50_us"], 1),
            _fmt(s["bridge_us"], 1),
            _fmt(s["bridge_pct"], 1),
            _fmt(s["broker_pct"], 1),
            str(s["rounds"]),
        )
        for s in summary["scaling"]
    ]


SCALE_HEAD = (
    "devices",
    "calls/s",
    "p50 µs",
    "bridge µs/call",
    "bridge % core",
    "mosquitto % core",
    "rounds",
)


def _memory_lines(m: dict[str, Any]) -> list[str]:
    if not m:
        return []
    lines = [
        f"bridge RSS with {m['round_devices']} devices (the rounds' bridge): "
        f"{m['round_connected_mib']:.1f} MiB once connected, {m['round_mib']:.1f} MiB after "
        "the rounds",
        f"bridge RSS with {m['devices']} devices: {m['connected_mib']:.1f} MiB once connected, "
        f"{m['after_calls_mib']:.1f} MiB ({m['after_calls_mb']:.1f} MB) after {m['calls']} calls "
        f"through them (peak {m['hwm_mib']:.1f} MiB)",
    ]
    if m["per_device_kib"] is not None:
        lines.append(
            f"≈ {m['per_device_kib']:.0f} KiB more per device, once connected "
            f"({m['round_devices']} → {m['devices']} devices)"
        )
    if m.get("note"):
        lines.append(f"NOTE: {m['note']}")
    if "estimate_mib_at_wanted" in m:
        lines.append(
            f"estimate at {m['wanted']} devices (linear, from that slope): "
            f"{m['estimate_mib_at_wanted']:.1f} MiB"
        )
    return lines


def table(summary: dict[str, Any]) -> str:
    n = summary["devices"]
    paths = list(summary["figures"])
    labels = [label.format(n=n) for _, label, _, _, _ in FIGURES]
    width = max(map(len, labels)) + 2
    lines = [f"{'figure':<{width}}" + "".join(f"{p:>10}" for p in paths)]
    for (key, _, digits, _, _), label in zip(FIGURES, labels, strict=True):
        cells = "".join(f"{_fmt(summary['figures'][p][key], digits):>10}" for p in paths)
        lines.append(f"{label:<{width}}{cells}")
    lines += ["", *FOOTNOTES, "", "mqtt (4 callers × 8 in flight) by devices behind one bridge:"]
    lines.append("  ".join(f"{h:>8}" for h in SCALE_HEAD))
    lines += ["  ".join(f"{c:>8}" for c in row) for row in _scale_rows(summary)]
    lines += ["", *_memory_lines(summary["memory"]), ""]
    rows = _target_rows(summary)
    w = [max(len(r[i]) for r in rows) + 2 for i in range(3)]
    lines.append(f"{'target':<{w[0]}}{'measured':<{w[1]}}{'target':<{w[2]}}{'m/t':>6}  result")
    lines += [f"{a:<{w[0]}}{b:<{w[1]}}{c:<{w[2]}}{d:>6}  {e}" for a, b, c, d, e in rows]
    return "\n".join(lines)


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    m, n = meta, summary["devices"]
    paths = list(summary["figures"])
    out = [
        f"Run {m['date']} on {m['nproc']} CPUs ({m['cpu']}), Linux {m['kernel']}, Python "
        f"{m['python']}, verld {m['verld']} ({m['git']}), mosquitto {m['mosquitto']}, aiomqtt "
        f"{m['aiomqtt']}, paho-mqtt {m['paho']}; {m['rounds']} rounds, windows "
        f"{m['duration_s']:g} s after {m['warmup_s']:g} s; load average {m['loadavg_start']} "
        f"before, {m['loadavg_end']} after.",
        "",
        "```sh",
        m["command"],
        "```",
        "",
        "| figure | " + " | ".join(paths) + " |",
        "|---|" + "---:|" * len(paths),
    ]
    for key, label, digits, _, _ in FIGURES:
        cells = " | ".join(_fmt(summary["figures"][p][key], digits) for p in paths)
        out.append(f"| {label.format(n=n).strip()} | {cells} |")
    out += ["", *[f + "  " for f in FOOTNOTES], ""]
    out += ["| " + " | ".join(SCALE_HEAD) + " |", "|" + "---:|" * len(SCALE_HEAD)]
    out += ["| " + " | ".join(row) + " |" for row in _scale_rows(summary)]
    out += ["", *[f"- {line}" for line in _memory_lines(summary["memory"])], ""]
    out += [
        "| target | measured (median; per round) | target | measured/target | result |",
        "|---|---|---|---:|---|",
    ]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in _target_rows(summary)]
    return "\n".join(out)
