"""Section tables: the keys of each section of the sectioned format, and their checkers.

Strategy: the schema is data, not code. Each `Section` pairs a dataclass from
`model` with a table of key → checker (or nested `Section`), so adding a setting
is one field in `model` and one line here; `validate.build` does the walking and
the error reporting for every section alike. Key order in a table is the order
"valid keys here: ..." lists them in.

`SECTION_KEYS` lets the top level suggest where a misplaced key belongs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType

from verld.codec.registry import PluginError, spec
from verld.config import leaves
from verld.config.frame import frame as _frame
from verld.config.model import (
    CODECS,
    LOG_FORMATS,
    LOG_LEVELS,
    PARITIES,
    ApiConfig,
    Config,
    DeviceConfig,
    HeartbeatConfig,
    LineConfig,
    LogConfig,
    MetricsConfig,
    ModbusConfig,
    PortConfig,
    ReconnectConfig,
    RoleList,
    RolesConfig,
    Rs485Config,
)
from verld.config.network import ENTRY as _NETWORK_ENTRY
from verld.config.network import allow_list, tls_settings
from verld.config.network import network as _network
from verld.config.validate import BadValue, Check, Item, Section, build, entries

_POSITIVE = leaves.integer(1)
_LINE = Section(
    LineConfig,
    {
        "terminator": leaves.terminator,
        "encoding": leaves.encoding,
        "end": leaves.optional(leaves.regex),
        "error": leaves.optional(leaves.regex),
        "event": leaves.optional(leaves.regex),
        "no_reply": leaves.optional(leaves.regex),
    },
)
_RS485 = Section(
    Rs485Config,
    {
        "rts_level_for_tx": leaves.boolean,
        "rts_level_for_rx": leaves.boolean,
        "delay_before_tx": leaves.seconds(zero_ok=True),
        "delay_before_rx": leaves.seconds(zero_ok=True),
    },
)


_CODEC_NAME = leaves.choice(CODECS)


def codec(item: Item) -> str:
    """One of the codecs (a built-in, or an installed plugin's: imported here, so one
    that cannot be used is this key's error, naming its package)."""
    name: str = _CODEC_NAME(item)
    try:
        spec(name)
    except PluginError as exc:
        raise BadValue(str(exc)) from None
    return name


def _rs485(item: Item) -> Rs485Config:
    rs485: Rs485Config = build(item, _RS485)
    return rs485


_DEVICE = Section(
    DeviceConfig,
    {
        "port": leaves.port,
        "baudrate": leaves.integer(1, what="a baud rate"),
        "bytesize": leaves.integer(5, 8),
        "parity": leaves.choice(PARITIES),
        "stopbits": leaves.stopbits,
        "rtscts": leaves.boolean,
        "codec": codec,
        "timeout": leaves.seconds(zero_ok=False),
        "guard": leaves.seconds(zero_ok=True),
        "retry": leaves.optional(leaves.integer(0)),
        "window": leaves.integer(1, 32768),
        "max_payload": leaves.integer(1, 1048576),
        "actions": leaves.actions,
        "line": _LINE,
        "frame": leaves.optional(_frame),
        "rs485": leaves.optional(_rs485),
    },
)
_HEARTBEAT = Section(
    HeartbeatConfig,
    {
        "interval": leaves.seconds(zero_ok=True),
        "misses": _POSITIVE,
        "timeout": leaves.seconds(zero_ok=False),
        "payload": leaves.string,
        "expect": leaves.optional(leaves.regex),
    },
)
_RECONNECT = Section(
    ReconnectConfig,
    {"initial": leaves.seconds(zero_ok=False), "max": leaves.seconds(zero_ok=False)},
)
_ROLE = Section(RoleList, {"uids": leaves.ids("uid"), "gids": leaves.ids("gid")})
_API = Section(
    ApiConfig,
    {
        "socket": leaves.socket_path,
        "mode": leaves.mode,
        "group": leaves.group,
        "max_clients": _POSITIVE,
        "max_message": _POSITIVE,
        "max_backlog": _POSITIVE,
        "queue_limit": _POSITIVE,
        "client_queue": _POSITIVE,
        "lease_max": leaves.seconds(zero_ok=False),
        "max_timeout": leaves.seconds(zero_ok=False),
        "max_retry": leaves.integer(0),
        "drain": leaves.seconds(zero_ok=True),
        "roles": Section(RolesConfig, {"observer": _ROLE, "controller": _ROLE, "admin": _ROLE}),
    },
)
_MODBUS = Section(
    ModbusConfig,
    {
        "listen": leaves.optional(leaves.listener("127.0.0.1:1502")),
        "max_connections": _POSITIVE,
        "read_only": leaves.boolean,
        "idle_timeout": leaves.seconds(zero_ok=True),
        "turnaround": leaves.seconds(zero_ok=True),
        "offline_after": _POSITIVE,
        "offline_backoff": leaves.seconds(zero_ok=True),
        "allow": allow_list,
        "tls": leaves.optional(tls_settings),
    },
)
_PORT = Section(
    PortConfig,
    {
        "link": leaves.link_path,
        "mode": leaves.mode,
        "group": leaves.group,
        "write": leaves.boolean,
        "events": leaves.boolean,
    },
)


def _ports(item: Item) -> tuple[PortConfig, ...]:
    """The `ports` list: each entry a `_PORT` mapping with a `link`, no link twice."""
    ports: list[PortConfig] = []
    first: dict[str, int] = {}
    needs = "a port needs a link: the path programs open, e.g. link: /run/verld/ttyV0"
    for child, port in entries(
        item, _PORT, noun="port", key="link", example="/run/verld/ttyV0", needs=needs
    ):
        if port.link in first:
            item.ctx.error(
                child,
                f"link {port.link} is already the link of the port on line {first[port.link]}",
            )
            continue
        first[port.link] = child.line
        ports.append(port)
    return tuple(ports)


_LOG = Section(
    LogConfig,
    {"level": leaves.choice(LOG_LEVELS, str.upper), "format": leaves.choice(LOG_FORMATS)},
)


def _entry_keys(section: Section | Check) -> Collection[str]:
    if isinstance(section, Section):
        return section.keys
    return _NETWORK_ENTRY.keys if section is _network else _PORT.keys


_SECTIONS: dict[str, Section | Check] = {
    "device": _DEVICE,
    "heartbeat": _HEARTBEAT,
    "reconnect": _RECONNECT,
    "api": _API,
    "metrics": Section(MetricsConfig, {"listen": leaves.optional(leaves.listen)}),
    "ports": _ports,
    "network": _network,
    "modbus": _MODBUS,
    "log": _LOG,
}

#: the whole sectioned file: section name → section (or, for a list, its checker)
CONFIG = Section(Config, _SECTIONS)
#: section name → the keys valid inside it (a list's: those of its entries)
SECTION_KEYS: Mapping[str, Collection[str]] = MappingProxyType(
    {name: _entry_keys(section) for name, section in _SECTIONS.items()}
)
