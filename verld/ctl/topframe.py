"""`verlctl top`'s screen, as text: two samples in, lines out (no terminal here).

Strategy: a `Sample` is what one look at verld gives — its `status`, its `programs`
reply and the latency histogram's buckets from `metrics` — with the monotonic time it
was taken. Rates are the difference of two samples over the time between them:
calls/s, errors/s and events/s from the counters, bytes/s each way, p50/p99 of the
calls that ended in between from the histogram's bucket counts (linear inside a
bucket, as Prometheus's histogram_quantile), and each program's calls/s (bytes/s
for a passthrough holder) by its key, `front` and `who`. `frame` lays them out for
a screen of `width` × `height`: header, link, rates, one row per program (busiest
first, or by the chosen sort), the Modbus units on those codecs, the last link
changes, the keys. Every line fits the width; a long name is cut at a word with
"…". Each line carries a flag: True where it shows trouble (the link not up,
errors, failed calls, an offline unit), which the terminal shows in colour.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

#: the sort orders `s` cycles through
SORTS = ("calls/s", "failed", "waiting", "name")

Line = tuple[str, bool]  #: a line of the screen, and whether it shows trouble


@dataclass
class Sample:
    """One look at verld (see the module docstring)."""

    t: float
    status: dict[str, Any]
    programs: list[dict[str, Any]] = field(default_factory=list)
    link_changes: list[dict[str, Any]] = field(default_factory=list)
    buckets: list[tuple[float, float]] = field(default_factory=list)  #: (le, cumulative count)


Buckets = list[tuple[float, float]]


def quantile(prev: Buckets, cur: Buckets, q: float) -> float | None:
    """The q-quantile (seconds) of the calls counted between two bucket lists; None: none."""
    before = dict(prev)
    counts = [(le, n - before.get(le, 0.0)) for le, n in cur]
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for le, n in counts:
        if n >= rank:
            if le == float("inf"):
                return lower
            inside = n - below
            return lower + (le - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = le, n
    return lower


def _rate(cur: float, prev: float, dt: float) -> float:
    return max(0.0, cur - prev) / dt if dt > 0 else 0.0


def _bytes(rate: float) -> str:
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if rate >= size:
            return f"{rate / size:.1f} {unit}/s"
    return f"{rate:.0f} B/s"


def fit(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut at a word with "…" when it must be (a
    path keeps its last parts: "…/ports/ttyV0")."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    if " " not in text and "/" in text:  # a path: its end tells it apart
        parts = text.split("/")
        tail = parts[-1]
        for part in reversed(parts[:-1]):
            if len(part) + len(tail) + 3 > width:
                break
            tail = f"{part}/{tail}"
        if len(tail) + 2 <= width:
            return f"…/{tail}"
    cut = text[: width - 1]
    space = cut.rfind(" ")
    if space >= width // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class Row:
    """One program's row: its figures over the interval."""

    front: str
    who: str
    rate: float  #: calls/s, or bytes/s for a passthrough holder
    ok: int
    failed: int
    waiting: int
    passthrough: bool = False


def program_rows(prev: Sample | None, cur: Sample, sort: str) -> list[Row]:
    """Each program's row, sorted (busiest first by default)."""
    dt = cur.t - prev.t if prev is not None else 0.0
    before = {(p["front"], p["who"]): p for p in (prev.programs if prev else [])}
    rows = []
    for p in cur.programs:
        old = before.get((p["front"], p["who"]), {})
        held = bool(p.get("passthrough"))
        if held:
            moved = p.get("bytes_in", 0) + p.get("bytes_out", 0)
            rate = _rate(moved, old.get("bytes_in", 0) + old.get("bytes_out", 0), dt)
        else:
            rate = _rate(p.get("calls", 0), old.get("calls", 0), dt)
        rows.append(
            Row(
                p["front"],
                str(p["who"]),
                rate,
                int(p.get("ok", 0)),
                int(p.get("failed", 0)),
                int(p.get("waiting", 0)),
                held,
            )
        )
    keys = {
        "calls/s": lambda r: (-r.rate, -r.waiting, r.who),
        "failed": lambda r: (-r.failed, -r.rate, r.who),
        "waiting": lambda r: (-r.waiting, -r.rate, r.who),
        "name": lambda r: (r.front, r.who),
    }
    return sorted(rows, key=keys.get(sort, keys["calls/s"]))


def _head(source: str, interval: float, sort: str, note: str) -> list[Line]:
    """The title: time, interval, sort, a note (PAUSED, verld away), then the socket."""
    parts = [f"verld top  {_clock(time.time())}", f"every {interval:g} s", f"sort {sort}"]
    parts += [note] if note else []
    parts += [source] if source else []
    return [("  ".join(parts), bool(note) and note != "PAUSED")]


def _link(cur: Sample) -> list[Line]:
    link = cur.status["link"]
    since = link.get("since") or 0
    state = f"{link['state']} ({link['reason']})  gen {link['generation']}"
    when = f"since {_clock(since)} ({_ago(time.time() - since)})"
    port = f"{link['port']}  {link['codec']}  {link.get('settings', '')}".rstrip()
    lines: list[Line] = [(f"link    {state}  {when}", link["state"] != "up")]
    lines.append((f"port    {port}", False))
    modem = link.get("modem")
    if isinstance(modem, dict):
        shown = [f"{k} {'on' if modem.get(k) else 'off'}" for k in ("cts", "dsr", "ri", "cd")]
        lines.append(("modem   " + "  ".join(shown), False))
    return lines


def _now(prev: Sample | None, cur: Sample) -> list[Line]:
    c = cur.status["counters"]
    depth = f"queue {cur.status['queue']}  in flight {cur.status.get('inflight', 0)}"
    if prev is None:
        return [("now     (rates after the next sample)", False), (f"        {depth}", False)]
    p, dt = prev.status["counters"], cur.t - prev.t
    calls = _rate(c["calls"], p["calls"], dt)
    errors = _rate(c["calls_failed"], p["calls_failed"], dt)
    lat = "  ".join(
        _ms(name, quantile(prev.buckets, cur.buckets, q))
        for name, q in (("p50", 0.5), ("p99", 0.99))
    )
    events = _rate(c["events"], p["events"], dt)
    tx, rx = _rate(c["bytes_tx"], p["bytes_tx"], dt), _rate(c["bytes_rx"], p["bytes_rx"], dt)
    rates = f"{calls:.1f} calls/s  {errors:.1f} errors/s  {lat}  events {events:.1f}/s"
    return [
        (f"now     {rates}", errors > 0),
        (f"        tx {_bytes(tx)}  rx {_bytes(rx)}  {depth}", False),
    ]


def refusals(status: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Each listener's refused connections by why (the Modbus gateway's, each network
    port's), those with any."""
    out: dict[str, dict[str, int]] = {}
    modbus = status.get("modbus")
    if isinstance(modbus, dict) and modbus.get("refused"):
        out["modbus"] = modbus["refused"]
    for entry in status.get("network") or []:
        if entry.get("refused"):
            out[f"net {entry['name']}"] = entry["refused"]
    return out


def _refused(prev: Sample | None, cur: Sample) -> list[Line]:
    """One line of refused connections, if any; trouble while they grow."""
    now = refusals(cur.status)
    if not now:
        return []
    before = refusals(prev.status) if prev is not None else now
    shown = "  ".join(
        f"{where}: " + ", ".join(f"{why} {n}" for why, n in sorted(whys.items()))
        for where, whys in now.items()
    )
    return [(f"refused {shown}", now != before)]


def _ms(name: str, seconds: float | None) -> str:
    return f"{name} -" if seconds is None else f"{name} {seconds * 1000:.2f} ms"


def _program_lines(rows: list[Row], width: int, room: int) -> list[Line]:
    """The programs' table in `room` lines: the heading, the rows that fit, "… N more"."""
    name_w = max(12, width - 8 - 36)
    head = f"{'FRONT':<8}{'PROGRAM':<{name_w}}{'CALLS/S':>10}{'OK':>8}{'FAILED':>9}{'WAIT':>6}"
    lines: list[Line] = [(head, False)]
    if not rows:
        return [*lines, ("        (no program is connected)", False)]
    fits = room - 1 if len(rows) <= room - 1 else max(0, room - 2)
    for r in rows[:fits]:
        rate = f"{r.rate / 1000:.1f}kB/s" if r.passthrough else f"{r.rate:.1f}"
        ok, failed = ("-", "-") if r.passthrough else (str(r.ok), str(r.failed))
        who = fit(r.who, name_w - 1)
        lines.append(
            (
                f"{r.front:<8}{who:<{name_w}}{rate:>10}{ok:>8}{failed:>9}{r.waiting:>6}",
                r.failed > 0 and not r.passthrough,
            )
        )
    if fits < len(rows):
        lines.append((f"        … {len(rows) - fits} more", False))
    return lines


def _units(cur: Sample, room: int) -> list[Line]:
    units = cur.status.get("units")
    if not isinstance(units, list) or room < 3:
        return []
    head = f"{'UNIT':<6}{'CALLS':>9}{'OK':>9}{'EXC':>7}{'TIMEOUTS':>10}  STATE"
    lines: list[Line] = [("", False), (head, False)]
    for u in units[: room - 2]:
        off = bool(u.get("offline"))
        figures = f"{u['calls']:>9}{u['ok']:>9}{u['exceptions']:>7}{u['timeouts']:>10}"
        lines.append((f"{u['unit']:<6}{figures}  {'OFFLINE' if off else 'ok'}", off))
    return lines


def _changes(cur: Sample, room: int) -> list[Line]:
    if room < 3 or not cur.link_changes:
        return []
    lines: list[Line] = [("", False), ("RECENT LINK CHANGES", False)]
    for ch in list(reversed(cur.link_changes))[: room - 2]:
        text = f"{_clock(ch['t'])}  {ch['state']:<11}gen {ch['generation']:<4} {ch['reason']}"
        lines.append((text, ch["state"] != "up"))
    return lines


def frame(
    prev: Sample | None,
    cur: Sample,
    *,
    width: int = 80,
    height: int = 24,
    sort: str = "calls/s",
    source: str = "",
    interval: float = 1.0,
    note: str = "",
    keys: bool = True,
) -> list[Line]:
    """The screen for `cur` (rates against `prev`), at most `height` lines of `width`."""
    top = _head(source, interval, sort, note) + _link(cur) + _now(prev, cur)
    top += [*_refused(prev, cur), ("", False)]
    bottom_keys: list[Line] = [("q quit  p pause  s sort", False)] if keys else []
    rows = program_rows(prev, cur, sort)
    left = height - len(top) - len(bottom_keys)
    units_room = min(7, max(0, left - 4)) if cur.status.get("units") is not None else 0
    units = _units(cur, units_room)
    changes = _changes(cur, min(5, max(0, left - 3 - len(units))))
    room = max(2, left - len(units) - len(changes))
    body = _program_lines(rows, width, room) + units + changes
    lines = (top + body)[: max(0, height - len(bottom_keys))]
    if bottom_keys:  # (the keys on the last line)
        lines += [("", False)] * (height - len(bottom_keys) - len(lines)) + bottom_keys
    return [(fit(text, width), bad) for text, bad in lines]
