"""The top level of a file: the sectioned format or the reference flat one; cross-field checks.

Strategy: a file is read as the reference engine's flat format (`host`, `port`,
`timeout`, ...) only when it has flat keys and no section names, and is then mapped
onto the sectioned config, so the rest of verld sees one shape. A file that mixes
the two is an error naming the sectioned spelling of each flat key, because
silently preferring one format would drop the other's settings. Rules between
fields (`reconnect.max >= reconnect.initial`; a heartbeat payload the codec can
send, which the codec's own `CodecSpec.check` judges) run after the per-key checks,
and only on fields that passed them, so one typo does not cause a second, confusing
message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from verld.codec.registry import spec
from verld.codec.spec import CHECKED
from verld.config import leaves
from verld.config.model import (
    LOG_LEVELS,
    MODBUS_CODECS,
    MODBUS_DEVICE_DEFAULTS,
    Config,
    DeviceConfig,
    LogConfig,
)
from verld.config.network import modbus_exposed
from verld.config.sections import CONFIG, SECTION_KEYS, codec
from verld.config.suggest import unknown_flat_key, unknown_section
from verld.config.validate import (
    BadValue,
    Context,
    Item,
    MarkedMap,
    Section,
    build,
    given,
    is_number,
)

# ---------------------------------------------------------------------------
# The top level: sections, or the reference engine's flat keys


@dataclass(frozen=True, slots=True)
class _Flat:
    host: str = "127.0.0.1"
    port: int = 8080
    timeout: float = 5.0
    retry: int = 3
    log_level: str = "INFO"
    adapter: str | None = None


_FLAT = Section(
    _Flat,
    {
        "host": leaves.host,
        "port": leaves.integer(1, 65535, "a TCP port"),
        "timeout": leaves.seconds(zero_ok=False),
        "retry": leaves.integer(0),
        "log_level": leaves.choice(LOG_LEVELS, str.upper),
        "adapter": leaves.optional(codec),
    },
    unknown=lambda key, flat: unknown_flat_key(key, flat, SECTION_KEYS),
)
#: where each flat key lives in the sectioned format (host: no key of its own)
_FLAT_PATH = {
    "timeout": "device.timeout",
    "retry": "device.retry",
    "log_level": "log.level",
    "adapter": "device.codec",
}
#: the same, as the mixed-format message says it
_FLAT_EQUIVALENT = {
    "host": "device.port: tcp://HOST:PORT",
    "port": "device.port: tcp://HOST:PORT",
    "timeout": "device.timeout",
    "retry": "device.retry",
    "log_level": "log.level",
    "adapter": "device.codec",
}


def root_config(item: Item) -> Config:
    """The config from the whole YAML tree; errors go to `item.ctx`."""
    if item.value is None:
        return Config()
    if not isinstance(item.value, MarkedMap):
        item.ctx.error(
            item, f"the top level must be a mapping (device:, api:, ...), got {given(item)}"
        )
        return Config()
    keys = [k for k in item.value if isinstance(k, str)]
    flat = [k for k in keys if k in _FLAT.keys]
    sections = [k for k in keys if k in CONFIG.keys]
    if flat and not sections and not _device_path(item.value.get("port")):
        return _codec_defaults(_from_flat(build(item, _FLAT)), set(flat))
    # sections, or a device path as the top-level port (`port: /dev/ttyUSB0`): keys
    # meant for sections, each named where it goes
    device = item.value.get("device")
    given_keys = (
        {k for k in device if isinstance(k, str)} if isinstance(device, MarkedMap) else set()
    )
    return _codec_defaults(_sectioned(item, flat, sections), given_keys)


def _codec_defaults(config: Config, given_keys: set[str]) -> Config:
    """The Modbus codecs' own `device.timeout`/`device.retry` defaults, where the
    file does not set them."""
    if not spec(config.device.codec).bus:
        return config
    defaults: dict[str, Any] = {
        k: v for k, v in MODBUS_DEVICE_DEFAULTS.items() if k not in given_keys
    }
    return replace(config, device=replace(config.device, **defaults)) if defaults else config


def _sectioned(item: Item, flat: list[str], sections: list[str]) -> Config:
    kwargs: dict[str, Any] = {}
    for key, child in item.children():
        section = CONFIG.keys.get(key) if isinstance(key, str) else None
        if key in flat:
            item.ctx.error(child, _misplaced(key, child, sections))
        elif section is None:
            item.ctx.error(child, unknown_section(key, SECTION_KEYS))
        elif not isinstance(section, Section):  # a list (ports): its own checker
            try:
                kwargs[key] = section(child)
            except BadValue as exc:
                item.ctx.error(child, str(exc))
        else:
            try:
                kwargs[key] = build(child, section)
            except BadValue as exc:
                item.ctx.error(child, str(exc))
    return Config(**kwargs)


def _device_path(value: Any) -> bool:
    """A top-level `port` that is not a TCP port number: a device meant for device.port."""
    return isinstance(value, str) and not is_number(value)


def _misplaced(key: str, child: Item, sections: list[str]) -> str:
    """A flat key in a file that is not in the flat format (sections, or a device path
    as its port)."""
    if key == "port" and _device_path(child.value):
        return (
            f"expected a TCP port 1..65535 (the reference flat format), got {given(child)}; "
            "did you mean 'device.port'?"
        )
    if sections:
        return _mixed(key, sections)
    if key in _FLAT_PATH:
        return f"unknown key; did you mean '{_FLAT_PATH[key]}'?"
    return "unknown key beside a device path as port; a TCP device is device.port: tcp://HOST:PORT"


def _mixed(key: str, sections: list[str]) -> str:
    return (
        f"reference flat-format key mixed with sections "
        f"({', '.join(sections)}); use one format: in sections write "
        f"{_FLAT_EQUIVALENT[key]}"
    )


def _from_flat(flat: _Flat) -> Config:
    host = f"[{flat.host}]" if ":" in flat.host else flat.host
    device = DeviceConfig(
        port=f"tcp://{host}:{flat.port}",
        codec=flat.adapter or "length",
        timeout=flat.timeout,
        retry=flat.retry,
    )
    return Config(device=device, log=LogConfig(level=flat.log_level))


# ---------------------------------------------------------------------------
# Checks across fields


def cross_check(config: Config, ctx: Context) -> None:
    """Rules between fields, for fields whose own checks passed."""
    reconnect, heartbeat, device = config.reconnect, config.heartbeat, config.device
    if ctx.ok("reconnect.initial", "reconnect.max") and reconnect.max < reconnect.initial:
        ctx.error_at(
            ("reconnect.max", "reconnect.initial"),
            f"must be >= reconnect.initial ({reconnect.initial:g}), got {reconnect.max:g}",
        )
    if ctx.ok(*CHECKED):
        for problem in spec(device.codec).check(config):
            ctx.error_at(problem.paths, problem.message)
    if ctx.ok("device.rs485", "device.port") and device.rs485 is not None:
        _check_rs485(device.port, ctx)
    if ctx.ok("modbus.listen", "device.codec") and config.modbus.listen is not None:
        _check_modbus_listen(device.codec, ctx)
    modbus = config.modbus
    if ctx.ok(*_MODBUS_ACCESS) and modbus.listen is not None:
        why = modbus_exposed(modbus, modbus.listen.rpartition(":")[0].strip("[]"))
        if why is not None:
            ctx.error_at(("modbus.read_only", "modbus.listen"), why)
    if ctx.ok("heartbeat.expect", "device.codec") and heartbeat.expect is not None:
        if not spec(device.codec).text:
            ctx.error_at(
                ("heartbeat.expect", "device.codec"),
                f"is for the line codec (a line that answers the ping); codec {device.codec} "
                "tells a ping's answer itself: remove heartbeat.expect",
            )
        elif not heartbeat.payload:
            ctx.error_at(
                ("heartbeat.expect", "heartbeat.payload"),
                'needs heartbeat.payload, the ping it answers (e.g. payload: "*IDN?", '
                'expect: "^ACME,")',
            )


def _check_rs485(port: str, ctx: Context) -> None:
    """RS-485 mode is the kernel's, on a serial port: not on a network link or the sim."""
    if port == "sim" or "://" in port:
        ctx.error_at(
            ("device.rs485", "device.port"),
            f"RS-485 mode is set on a serial port by its kernel driver; {port} is not one "
            "(a network server sets its own line mode); remove rs485 or set device.port to "
            "the serial device",
        )


#: the keys the Modbus gateway's access rule reads (`modbus_exposed`)
_MODBUS_ACCESS = ("modbus.listen", "modbus.read_only", "modbus.allow", "modbus.tls")


def _check_modbus_listen(codec: str, ctx: Context) -> None:
    if not spec(codec).bus:
        ctx.error_at(
            ("modbus.listen", "device.codec"),
            f"the Modbus TCP server needs device.codec {' or '.join(MODBUS_CODECS)} "
            f"(got {codec}); set modbus.listen: null",
        )
