"""The verdict (which invariants broke) and the printed report."""

from __future__ import annotations

from typing import Any

from soaklib.modbus import KINDS, OUTCOMES


def verdict(report: dict[str, Any], max_growth_mb: float | None) -> list[str]:
    """The broken invariants (empty: pass)."""
    broken = []
    if report["misrouted"]:
        broken.append(f"{report['misrouted']} misrouted replies")
    if report["lost"]:
        broken.append(
            f"{report['lost']} calls without exactly one reply "
            f"({report['no_reply']} none, {report['duplicates']} duplicates)"
        )
    if report["daemon_died"]:
        broken.append("the daemon died")
    elif report["daemon_exit"] != 0:
        broken.append(f"the daemon exited {report['daemon_exit']} on SIGTERM")
    if not report["final_call_ok"]:
        broken.append("no working call after the faults stopped")
    if "modbus" in report:
        broken += modbus_verdict(report["modbus"])
    growth = report["rss_kb"]["growth_after_warmup"]
    if max_growth_mb is not None and growth > max_growth_mb * 1024:
        broken.append(f"RSS grew {growth} KiB after warm-up (limit {max_growth_mb:g} MiB)")
    return broken


def modbus_verdict(mb: dict[str, Any]) -> list[str]:
    """The Modbus invariants broken: a wrong answer, a served unit never answering rightly,
    an answer verld took from the silent unit."""
    broken = []
    if mb["wrong"]:
        broken.append(f"{mb['wrong']} wrong Modbus answers")
    never = [u for u in mb["units"] if not mb["by_unit"].get(str(u), {}).get("ok")]
    if never:
        broken.append("no call to unit " + ", ".join(map(str, never)) + " ever succeeded")
    for row in mb["status_units"]:
        if row["unit"] == mb["silent_unit"] and (row["ok"] or row["exceptions"]):
            broken.append(
                f"verld counted {row['ok']} ok and {row['exceptions']} exception replies "
                f"from the silent unit {row['unit']}"
            )
    return broken


def render_modbus(report: dict[str, Any]) -> list[str]:
    mb = report["modbus"]
    lines = [
        f"modbus         {report['codec']}: units {','.join(map(str, mb['units']))} served, "
        f"unit {mb['silent_unit']} silent",
        "  " + "".join(f"{name:>10}" for name in ("kind", *OUTCOMES)),
    ]
    for kind in (*KINDS, "total"):
        row = mb if kind == "total" else mb["by_kind"][kind]
        lines.append("  " + f"{kind:>10}" + "".join(f"{row[o]:>10}" for o in OUTCOMES))
    lines.append(
        "  by unit      "
        + "  ".join(f"{u}: {c['ok']}/{c['calls']} ok" for u, c in mb["by_unit"].items())
    )
    lines += [
        f"status.units   unit {row['unit']}: calls {row['calls']} ok {row['ok']} "
        f"exceptions {row['exceptions']} timeouts {row['timeouts']}"
        + ("  OFFLINE" if row["offline"] else "")
        for row in mb["status_units"]
    ]
    lines += [f"left out       {name}: {why}" for name, why in report["faults_left_out"].items()]
    return lines


def render(report: dict[str, Any], broken: list[str]) -> str:
    o, rss, c = report["outcomes"], report["rss_kb"], report["counters"]
    other = f" {report['other_codes']}" if report["other_codes"] else ""
    codec = f"{report['codec']}, " if "codec" in report else ""
    lines = [
        f"verld soak: {codec}{report['clients']} clients x {report['seconds']:g} s "
        f"(depth {report['depth']}), faults {','.join(report['faults']) or 'none'}, "
        f"seed {report['seed']}",
        f"calls          {report['calls']}  ({report['calls_per_second']}/s)",
        f"  ok           {o['ok']}",
        f"  timeout      {o['timeout']}",
        f"  link_down    {o['link_down']}",
        f"  busy         {o['busy']}",
        f"  other        {o['other']}{other}",
        f"misrouted      {report['misrouted']}",
        f"lost           {report['lost']}  (no reply {report['no_reply']}, "
        f"duplicates {report['duplicates']})",
        f"abandoned      {report['abandoned']}  (sent by clients that hung up at once)",
        f"reconnects     {report['reconnects']}  (generation {report['generation']})",
        f"daemon         {'DIED' if report['daemon_died'] else 'alive'}; "
        f"exit {report['daemon_exit']} on SIGTERM",
        f"RSS KiB        start {rss['start']}  after warm-up {rss['after_warmup']}  "
        f"end {rss['end']}  max {rss['max']}  growth after warm-up {rss['growth_after_warmup']:+d}",
        "RSS timeline   " + " ".join(f"{t:g}s:{kb}" for t, kb in report["rss_timeline"]),
        f"fds            start {report['fds']['start']}  end {report['fds']['end']}",
        "fault episodes " + " ".join(f"{k}x{v}" for k, v in report["fault_episodes"].items()),
        f"daemon counts  retries {c.get('retries')}  timeouts {c.get('timeouts')}  "
        f"stale {c.get('stale')}  bad_frames {c.get('bad_frames')}  pings {c.get('pings')}",
    ]
    if "modbus" in report:
        lines += render_modbus(report)
    lines += [f"  e.g. {text}" for text in report["examples"]]
    lines.append("result         " + ("PASS" if not broken else "FAIL: " + "; ".join(broken)))
    return "\n".join(lines)
