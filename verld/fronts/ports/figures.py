"""How the virtual serial ports' part of `status` (`ports`) reads: the per-port metric
series, labelled by link, and verlctl's `vport` rows. No I/O: verlctl imports it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verld.fronts.protocol import FrontFigures, Rows, StreamFigures, entries_of
from verld.metrics import Family


class PortStatus(StreamFigures):
    """One `status.ports` entry (docs/protocol.md): the port's link, whether a program
    has it open, its program's figures (`StreamFigures`, between `open` and `write` in
    the reply), the entry's `write` and `events`."""

    link: str
    open: bool
    write: bool
    events: bool


#: (metric, type, help, the key of a `status.ports` entry it shows)
_SERIES = (
    ("verld_port_open", "gauge", "1 while a program has the virtual port open.", "open"),
    ("verld_port_calls_total", "counter", "Requests programs wrote to the port.", "calls"),
    ("verld_port_answered_total", "counter", "Port calls the device answered.", "ok"),
    (
        "verld_port_dropped_total",
        "counter",
        "Answers and events not delivered to the port (nobody there, backlog full).",
        "dropped",
    ),
    (
        "verld_port_ignored_bytes_total",
        "counter",
        "Bytes a program wrote that were ignored (read-only, out of step).",
        "ignored",
    ),
    ("verld_port_bad_frames_total", "counter", "Malformed requests dropped.", "bad_frames"),
)


def metrics(st: Mapping[str, Any]) -> list[Family]:
    """Per virtual serial port series, labelled by its link (none without ports)."""
    ports = entries_of(st, "ports")
    if not ports:
        return []
    out = []
    for name, kind, help_text, key in _SERIES:
        family = Family(name, kind, help_text)
        for port in ports:
            family.add(int(port.get(key, 0)), link=port["link"])
        out.append(family)
    failed = Family(
        "verld_port_failed_total", "counter", "Port calls that got no answer, by error code."
    )
    for port in ports:
        for code, n in sorted(port.get("failed", {}).items()):
            failed.add(n, link=port["link"], code=code)
    return [*out, failed]


def rows(st: Mapping[str, Any]) -> Rows:
    """One `vport` row per virtual serial port (none without `ports:`)."""
    out: Rows = []
    for p in entries_of(st, "ports"):
        failed = p.get("failed") or {}
        shown = ", ".join(f"{code} x{n}" for code, n in failed.items()) or "0"
        mode = "" if p.get("write", True) else "  read-only"
        out.append(
            (
                "vport",
                f"{p.get('link')}  {'open' if p.get('open') else 'closed'}{mode}  "
                f"calls {p.get('calls')}  ok {p.get('ok')}  failed {shown}  "
                f"dropped {p.get('dropped')}  ignored {p.get('ignored')}",
            )
        )
    return out


FIGURES = FrontFigures("port", metrics, rows)
