"""The schema: sections and their checkers, the reference flat format, cross-field checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verld.config.checks import (
    _CONFIG,
    _Bad,
    _build,
    _choice,
    _Context,
    _given,
    _host,
    _int,
    _is_number,
    _Item,
    _Map,
    _optional,
    _seconds,
    _Section,
    _unknown_section,
)
from verld.config.model import (
    CODECS,
    LOG_LEVELS,
    Config,
    DeviceConfig,
    LogConfig,
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


def _flat_port(item: _Item) -> int:
    if isinstance(item.value, str) and not _is_number(item.value):
        raise _Bad(
            f"expected a TCP port 1..65535, got {item.value!r} (in the reference flat "
            "format; a serial device goes under device: port: in the sectioned format)"
        )
    return int(_int(1, 65535, "a TCP port")(item))


_FLAT = _Section(
    _Flat,
    {
        "host": _host,
        "port": _flat_port,
        "timeout": _seconds(zero_ok=False),
        "retry": _int(0),
        "log_level": _choice(LOG_LEVELS, str.upper),
        "adapter": _optional(_choice(CODECS)),
    },
)
#: where each flat key lives in the sectioned format
_FLAT_EQUIVALENT = {
    "host": "device.port: tcp://HOST:PORT",
    "port": "device.port: tcp://HOST:PORT",
    "timeout": "device.timeout",
    "retry": "device.retry",
    "log_level": "log.level",
    "adapter": "device.codec",
}


def _root(item: _Item) -> Config:
    if item.value is None:
        return Config()
    if not isinstance(item.value, _Map):
        item.ctx.error(
            item, f"the top level must be a mapping (device:, api:, ...), got {_given(item)}"
        )
        return Config()
    keys = [k for k in item.value if isinstance(k, str)]
    flat = [k for k in keys if k in _FLAT.keys]
    sections = [k for k in keys if k in _CONFIG.keys]
    if flat and not sections:
        return _from_flat(_build(item, _FLAT))
    return _sectioned(item, flat, sections)


def _sectioned(item: _Item, flat: list[str], sections: list[str]) -> Config:
    kwargs: dict[str, Any] = {}
    for key, child in item.children():
        section = _CONFIG.keys.get(key) if isinstance(key, str) else None
        if key in flat:
            item.ctx.error(
                child,
                f"reference flat-format key mixed with sections "
                f"({', '.join(sections)}); use one format: in sections write "
                f"{_FLAT_EQUIVALENT[key]}",
            )
        elif not isinstance(section, _Section):
            item.ctx.error(child, _unknown_section(key))
        else:
            try:
                kwargs[key] = _build(child, section)
            except _Bad as exc:
                item.ctx.error(child, str(exc))
    return Config(**kwargs)


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


def _cross_check(config: Config, ctx: _Context) -> None:
    reconnect, heartbeat, device = config.reconnect, config.heartbeat, config.device
    if ctx.ok("reconnect.initial", "reconnect.max") and reconnect.max < reconnect.initial:
        ctx.error_at(
            ("reconnect.max", "reconnect.initial"),
            f"must be >= reconnect.initial ({reconnect.initial:g}), got {reconnect.max:g}",
        )
    payload = ("heartbeat.payload", "device.codec", "device.max_payload")
    if ctx.ok(*payload) and device.codec == "length":
        _check_hex_payload(heartbeat.payload, device.max_payload, ctx)
    text = ("device.line.encoding", "device.line.terminator", "heartbeat.payload")
    if ctx.ok(*text) and device.codec == "line":
        for path, value in zip(text[1:], (device.line.terminator, heartbeat.payload), strict=True):
            try:
                value.encode(device.line.encoding)
            except UnicodeEncodeError as exc:
                ctx.error_at(
                    (path, "device.line.encoding"),
                    f"cannot be encoded in {device.line.encoding}: {exc.reason}",
                )


def _check_hex_payload(payload: str, max_payload: int, ctx: _Context) -> None:
    where = ("heartbeat.payload", "device.codec")
    try:
        size = len(bytes.fromhex(payload))
    except ValueError as exc:
        ctx.error_at(
            where,
            f'codec length sends the payload as hex bytes (e.g. "00" or '
            f'"de ad"), got {payload!r}: {exc}',
        )
        return
    if size > max_payload:
        ctx.error_at(where, f"{size} bytes, more than device.max_payload ({max_payload})")
