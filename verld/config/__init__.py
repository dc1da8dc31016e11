"""YAML config → frozen dataclasses, validated strictly.

Strategy: the file is read by a SafeLoader subclass whose mappings and lists
remember the YAML nodes they came from (so every message can name a line and
quote what was literally written) and which records duplicate keys instead of
letting the last one win. The tree is then walked against a schema: each key maps
to a checker that returns the value or raises `BadValue` with a human message. The
walk never stops at the first problem: every bad key and value is collected and
one `ConfigError` lists them all, one `file:line: key.path: message` per line.

The reference engine's flat format (`host`, `port`, `timeout`, `retry`,
`log_level`, `adapter` at the top level) is read through the same machinery and
mapped onto the sectioned config.

Modules: `model` (the dataclasses and helpers on them), `load` (YAML with marks),
`validate` (the machinery: items, error collection, building a section),
`suggest` (closest names and aliases for unknown keys), `leaves` (checkers for
one value), `sections` (each section's keys and checkers), `schema` (the top
level, the flat format, checks across fields). Import the public names from
`verld.config`.
"""

from __future__ import annotations

from verld.config.load import load_config, parse_config
from verld.config.model import (
    CODECS,
    DEFAULT_ACTIONS,
    LOG_FORMATS,
    LOG_LEVELS,
    MODBUS_CODECS,
    PARITIES,
    ApiConfig,
    Config,
    DeviceConfig,
    HeartbeatConfig,
    LineConfig,
    LogConfig,
    MetricsConfig,
    ModbusConfig,
    NetworkConfig,
    PortConfig,
    ReconnectConfig,
    RoleList,
    RolesConfig,
    Rs485Config,
    TlsConfig,
    actions_table,
    changed_keys,
    default_config,
    tcp_target,
)

__all__ = [
    "CODECS",
    "DEFAULT_ACTIONS",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MODBUS_CODECS",
    "PARITIES",
    "ApiConfig",
    "Config",
    "DeviceConfig",
    "HeartbeatConfig",
    "LineConfig",
    "LogConfig",
    "MetricsConfig",
    "ModbusConfig",
    "NetworkConfig",
    "PortConfig",
    "ReconnectConfig",
    "RoleList",
    "RolesConfig",
    "Rs485Config",
    "TlsConfig",
    "actions_table",
    "changed_keys",
    "default_config",
    "load_config",
    "parse_config",
    "tcp_target",
]
