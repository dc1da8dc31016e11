"""How the network ports' part of `status` (`network`) reads: the per-entry metric
series, labelled by name, and verlctl's `network` rows. No I/O: verlctl imports it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verld.fronts.protocol import FrontFigures, Rows, StreamFigures, entries_of
from verld.metrics import Family


class EntryStatus(StreamFigures):
    """One `status.network` entry (docs/protocol.md): its connections' figures
    (`StreamFigures`, after `connections` in the reply) and these."""

    name: str
    listen: str
    protocol: str
    mode: str
    connections: int
    refused: dict[str, int]
    holder: str | None
    bytes_in: int
    bytes_out: int


def metrics(st: Mapping[str, Any]) -> list[Family]:
    """Per network port series, labelled by its name (none without network ports)."""
    entries = entries_of(st, "network")
    if not entries:
        return []
    conns = Family("verld_network_connections", "gauge", "Connections open on the network port.")
    refused = Family(
        "verld_network_refused_total", "counter", "Connections refused at the network port, by why."
    )
    calls = Family(
        "verld_network_calls_total",
        "counter",
        "Calls from the network port's connections, by outcome.",
    )
    moved = Family(
        "verld_network_bytes_total",
        "counter",
        "Bytes through the network port, by direction (in: from its connections).",
    )
    for e in entries:
        conns.add(e["connections"], name=e["name"])
    for e in entries:
        for why, n in sorted(e["refused"].items()):
            refused.add(n, name=e["name"], why=why)
    for e in entries:
        for outcome, n in (("ok", e["ok"]), *sorted(e["failed"].items())):
            calls.add(n, name=e["name"], outcome=outcome)
    for e in entries:
        moved.add(e["bytes_in"], name=e["name"], dir="in")
        moved.add(e["bytes_out"], name=e["name"], dir="out")
    return [conns, refused, calls, moved]


def rows(st: Mapping[str, Any]) -> Rows:
    """One `network` row per network port (none without `network:`)."""
    out: Rows = []
    for e in entries_of(st, "network"):
        failed = ", ".join(f"{k} x{n}" for k, n in (e.get("failed") or {}).items()) or "0"
        refused = ", ".join(f"{k} x{n}" for k, n in (e.get("refused") or {}).items()) or "0"
        holder = f"  held by {e.get('holder')}" if e.get("holder") else ""
        out.append(
            (
                "network",
                f"{e.get('name')} {e.get('listen')} {e.get('protocol')} "
                f"{e.get('mode')}  {e.get('connections')} connections{holder}  "
                f"calls {e.get('calls')}  ok {e.get('ok')}  failed {failed}  refused {refused}  "
                f"dropped {e.get('dropped')}  ignored {e.get('ignored')}  "
                f"bad {e.get('bad_frames', 0)}  "
                f"bytes in {e.get('bytes_in')} out {e.get('bytes_out')}",
            )
        )
    return out


FIGURES = FrontFigures("network", metrics, rows)
