"""How the Modbus TCP front's part of `status` (`modbus`) reads: verlctl's `modbus`
row and its one series, `verld_modbus_refused_total` (its calls are in
`verld_front_calls_total`). No I/O: verlctl imports it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from verld.fronts.protocol import FrontFigures, Rows
from verld.metrics import Family


class ModbusStatus(TypedDict):
    """`status.modbus` while the front listens (docs/protocol.md), in the reply's order."""

    listen: str
    connections: int
    calls: int
    #: exception responses by code, the code in decimal as JSON keys are strings
    exceptions: dict[str, int]
    closed_malformed: int
    #: connections refused at accept, by why (`allow`, `tls`, `limit`)
    refused: dict[str, int]


def metrics(st: Mapping[str, Any]) -> list[Family]:
    """Connections refused at the gateway, by why (none while it is off)."""
    front = st.get("modbus")
    if not isinstance(front, dict):
        return []
    refused = Family(
        "verld_modbus_refused_total",
        "counter",
        "Connections refused at the Modbus TCP gateway, by why.",
    )
    for why, n in sorted((front.get("refused") or {}).items()):
        refused.add(n, why=why)
    return [refused]


def _code(code: object) -> str:
    """An exception code as `status.modbus.exceptions` keys it ("11"), shown 0x0b."""
    text = str(code)
    return f"0x{int(text):02x}" if text.isdigit() else text


def rows(st: Mapping[str, Any]) -> Rows:
    """The Modbus TCP front's row, when it is on."""
    front = st.get("modbus")
    if not isinstance(front, dict):
        return []
    exceptions = front.get("exceptions") or {}
    shown = ", ".join(f"{_code(code)} x{n}" for code, n in exceptions.items()) or "none"
    refused = ", ".join(f"{k} x{n}" for k, n in (front.get("refused") or {}).items()) or "0"
    return [
        (
            "modbus",
            f"{front.get('listen')}  {front.get('connections')} connections  "
            f"calls {front.get('calls')}  exceptions {shown}  "
            f"malformed {front.get('closed_malformed')}  refused {refused}",
        )
    ]


FIGURES = FrontFigures("modbus", metrics, rows)
