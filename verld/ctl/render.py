"""verlctl's output: human text or one JSON object per line, and the decoders behind it.

`emit` picks the form (`--json`); the `render_*` functions turn a status reply,
an event, a log record or a `monitor` traffic event into text. Anything that came
from a device or a client goes through `safe` (control characters escaped).
`render_traffic` takes an optional `Decoder` that reads a frame's payload out as
text (`verld.ctl.modbus.describe` on the modbus codecs).
"""

from __future__ import annotations

import argparse
import base64
import json
import time
from collections.abc import Callable
from typing import Any, Protocol

from verld.client import Reply
from verld.fronts.figures import FIGURES

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), *range(127, 160))}  # C0, DEL, C1
_CONTROL.update({ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})

Rows = list[tuple[str, str]]

#: the columns of a `units` row of `status`, in order
UNIT_COLUMNS = ("calls", "ok", "exceptions", "timeouts")


class Decoder(Protocol):
    """Reads a traffic payload out as one line (`request`: sent to the device)."""

    def __call__(self, data: bytes, *, request: bool) -> str: ...


def safe(text: object) -> str:
    """Text from a device or a client, with control characters escaped (no terminal tricks)."""
    return str(text).translate(_CONTROL)


def hexdump(data: bytes, width: int = 16) -> str:
    """Classic offset / hex / ASCII dump."""
    if not data:
        return "(no data)"
    lines = []
    for off in range(0, len(data), width):
        chunk = data[off : off + width]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes:<{width * 3 - 1}}  |{text}|")
    return "\n".join(lines)


def emit(args: argparse.Namespace, human: str, obj: Any) -> None:
    """One result: `obj` as a JSON line with --json, else the human text."""
    if args.json:
        print(json.dumps(obj, sort_keys=True), flush=True)
    else:
        print(human, flush=True)


def reply_obj(r: Reply) -> dict[str, Any]:
    """A call's reply as --json prints it."""
    obj: dict[str, Any] = {
        "status": r.status,
        "hex": r.data.hex(),
        "ms": r.ms,
        "generation": r.generation,
    }
    if r.text is not None:
        obj["text"] = r.text
    if r.error is not None:
        obj["error"] = {"code": r.error, "message": r.message}
    if not r.reply:
        obj["reply"] = False
    return obj


def render_sent(r: Reply) -> str:
    """A call no answer was awaited for (`call --no-reply`, or `device.line.no_reply`)."""
    return f"sent, no reply awaited  {r.ms:.3f} ms  generation {r.generation}"


# --- status ----------------------------------------------------------------------
def _fmt_since(ts: float) -> str:
    if not ts:
        return "-"
    ago = max(0.0, time.time() - ts)
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(ts))} ({ago:.0f} s ago)"


def _link_rows(st: dict[str, Any]) -> Rows:
    link = st["link"]
    return [
        ("link", f"{link['state']} ({link['reason']})"),
        ("generation", str(link["generation"])),
        ("port", f"{link['port']}  codec {link['codec']}  {link.get('settings', '')}".rstrip()),
        *_modem_row(link.get("modem")),
        ("since", _fmt_since(link.get("since", 0))),
        ("uptime", f"{st['uptime']:.0f} s"),
        ("clients", str(st["clients"])),
        ("queue", str(st["queue"])),
    ]


def _modem_row(modem: object) -> Rows:
    """An rfc2217:// link's modem lines as the server last told (none on other links)."""
    if not isinstance(modem, dict):
        return []
    lines = "  ".join(
        f"{name} {'on' if modem.get(name) else 'off'}" for name in ("cts", "dsr", "ri", "cd")
    )
    return [("modem", lines)]


def _call_rows(c: dict[str, Any], lat: dict[str, Any]) -> Rows:
    calls = (
        f"{c['calls']} (ok {c['calls_ok']}, failed {c['calls_failed']}, "
        f"timeouts {c['timeouts']}, retries {c['retries']})"
    )
    latency = f"p50 {lat['p50']} ms  p90 {lat['p90']} ms  p99 {lat['p99']} ms  max {lat['max']} ms"
    frames = f"tx {c['frames_tx']}  rx {c['frames_rx']}  bad {c['bad_frames']}  stale {c['stale']}"
    return [
        ("calls", calls),
        ("latency", latency),
        ("frames", frames),
        ("bytes", f"tx {c['bytes_tx']}  rx {c['bytes_rx']}"),
    ]


def _inhibit_row(inhibit: dict[str, Any] | None) -> str:
    """Who holds the port and since when (verld has let go of it), or none."""
    if not inhibit:
        return "none"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(inhibit["since"]))
    if inhibit.get("pid") is None:  # a network port in passthrough
        return f"{safe(inhibit.get('client'))} since {since}"
    who = f"pid {inhibit['pid']} uid {inhibit['uid']}"
    name = f" ({safe(inhibit['client'])})" if inhibit.get("client") else ""
    return f"{who}{name} since {since}"


def _unit_rows(units: object) -> Rows:
    """Per-unit counters (modbus codecs): a `units` row, then one aligned row per unit.

    Absent or null (other codecs): no rows; an empty list: `units none yet`.
    """
    if not isinstance(units, list):
        return []
    entries = [u for u in units if isinstance(u, dict)]
    if not entries:
        return [("units", "none yet")]
    # errors (link down, busy, ... : calls that never got to the unit) only when some
    columns = (*UNIT_COLUMNS, "errors") if any(u.get("errors") for u in entries) else UNIT_COLUMNS
    cells = [[safe(u.get(k, "-")) for k in columns] for u in entries]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    offline = sum(1 for u in entries if u.get("offline"))
    rows = [("units", f"{len(entries)}" + (f" ({offline} offline)" if offline else ""))]
    for u, row in zip(entries, cells, strict=True):
        line = "  ".join(f"{k} {v:<{w}}" for k, v, w in zip(columns, row, widths, strict=True))
        if u.get("offline"):
            line += "  OFFLINE"
        rows.append((f"unit {safe(u.get('unit', '?'))}", line.rstrip()))
    return rows


def _escaped(value: Any) -> Any:
    """A reply with every string in it (keys too) through `safe`."""
    if isinstance(value, str):
        return safe(value)
    if isinstance(value, dict):
        return {safe(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def render_status(st: dict[str, Any]) -> str:
    """The `status` table: verld's rows, each front's (`FrontFigures.rows`, given the
    reply with every text escaped), per-unit rows when `units` is a list."""
    escaped = _escaped(st)
    c = st["counters"]
    rows = [
        *_link_rows(st),
        *_call_rows(c, st["latency_ms"]),
        ("events", str(c["events"])),
        ("pings", str(c["pings"])),
        ("reconnects", str(c["reconnects"])),
        ("lease", "none" if not st.get("lease") else json.dumps(st["lease"])),
        ("inhibit", _inhibit_row(st.get("inhibit"))),
        *(row for figures in FIGURES for row in figures.rows(escaped)),
        *_unit_rows(st.get("units")),
    ]
    return "\n".join(f"{k:<11} {v}" for k, v in rows)


# --- events and logs ---------------------------------------------------------------
def _device_event(ev: dict[str, Any]) -> str:
    data = base64.b64decode(ev.get("data", ""))
    shown = safe(ev["text"]) if ev.get("text") is not None else data.hex(" ")
    return f"device gen={ev.get('generation')} {shown}"


def _link_event(ev: dict[str, Any]) -> str:
    return f"link {ev['state']} gen={ev['generation']} ({ev.get('reason')})"


def _overflow_event(ev: dict[str, Any]) -> str:
    return f"overflow: {ev.get('dropped')} events dropped (this client was slow)"


def _log_event(ev: dict[str, Any]) -> str:
    rec = dict(ev.get("record", {}))
    return f"log {safe(rec.pop('level', ''))} {safe(rec.pop('msg', ''))} {safe(rec)}"


_EVENTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "device": _device_event,
    "link": _link_event,
    "overflow": _overflow_event,
    "log": _log_event,
}


def render_event(ev: dict[str, Any]) -> str:
    """One `events` line, stamped with the local time."""
    stamp = time.strftime("%H:%M:%S")
    kind = ev.get("event")
    render = _EVENTS.get(kind) if isinstance(kind, str) else None
    return f"{stamp} {render(ev) if render else json.dumps(ev)}"


def render_record(rec: dict[str, Any]) -> str:
    """One `logs` line: time, level, message, then the record's other fields."""
    rec = dict(rec)
    ts = rec.pop("ts", 0)
    level = str(rec.pop("level", "")).upper()
    msg = rec.pop("msg", "")
    when = time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int((ts % 1) * 1000):03d}"
    fields = " ".join(f"{safe(k)}={safe(v)}" for k, v in rec.items())
    return f"{when} {safe(level):<7} {safe(msg)} {fields}".rstrip()


# --- monitor -----------------------------------------------------------------------
def render_traffic(ev: dict[str, Any], *, decode: Decoder | None = None) -> str:
    """One protocol-analyser line (plus a hex/ASCII dump for payloads).

    With `decode`, a `traffic` line's head is followed by the payload's reading
    (what was sent as a request, what came back as a response); `wire` events and
    the dump are the same either way.
    """
    t = float(ev.get("t", 0.0))
    when = time.strftime("%H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1e6):06d}"
    arrow = "->" if ev.get("dir") == "tx" else "<-"
    data = bytes.fromhex(str(ev.get("hex", "")))
    if ev.get("event") == "wire":
        return f"{when} {arrow} raw {len(data)} bytes\n{hexdump(data)}"
    seq = "-" if ev.get("seq") is None else str(ev["seq"])
    status = "" if ev.get("status") is None else f" status=0x{ev['status']:02x}"
    head = f"{when} {arrow} {ev.get('kind', '?'):<7} seq={seq:<5} len={len(data)}{status}"
    if decode is not None:
        head = f"{head}  {safe(decode(data, request=ev.get('dir') == 'tx'))}"
    return f"{head}\n{hexdump(data)}" if data else head
