"""Validation machinery: items with YAML marks, checkers, suggestions for unknown keys."""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import yaml

from verld.config.model import (
    _SUN_PATH_MAX,
    _URL_SCHEMES,
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
    ReconnectConfig,
    RoleList,
    RolesConfig,
    _host_port,
)
from verld.errors import ConfigError

# ---------------------------------------------------------------------------
# Validation machinery


class _Map(dict[Any, Any]):
    """A YAML mapping that remembers its nodes, and the keys it saw twice."""

    def __init__(self) -> None:
        super().__init__()
        self.key_nodes: dict[Any, yaml.Node] = {}
        self.value_nodes: dict[Any, yaml.Node] = {}
        self.duplicates: list[tuple[Any, int, int]] = []  # key, first line, repeated line


class _Seq(list[Any]):
    """A YAML sequence that remembers its item nodes."""

    def __init__(self, node: yaml.SequenceNode) -> None:
        super().__init__()
        self.nodes: list[yaml.Node] = list(node.value)


class _Bad(Exception):
    """One value is wrong; the message says what was expected and what was given."""


class _Context:
    """Collects errors, and where each key path was seen (for cross-field checks)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[tuple[int, str]] = []
        self.lines: dict[str, int] = {}
        self.bad: set[str] = set()

    def error(self, item: _Item, message: str) -> None:
        self.errors.append((item.line, f"{item.path}: {message}" if item.path else message))
        self.bad.add(item.path)

    def error_at(self, paths: tuple[str, ...], message: str) -> None:
        line = next((self.lines[p] for p in paths if p in self.lines), 0)
        self.errors.append((line, f"{paths[0]}: {message}"))

    def ok(self, *paths: str) -> bool:
        return not any(p in self.bad for p in paths)

    def raise_if_any(self) -> None:
        if self.errors:
            ordered = sorted(self.errors, key=lambda e: e[0])  # stable: file order per line
            raise ConfigError("\n".join(self._where(n) + m for n, m in ordered))

    def _where(self, line: int) -> str:
        return f"{self.source}:{line}: " if line else f"{self.source}: "


@dataclass(frozen=True, slots=True)
class _Item:
    """A value at a key path, with the YAML nodes it came from."""

    ctx: _Context
    path: str
    value: Any
    node: yaml.Node | None
    line: int

    @property
    def raw(self) -> str | None:
        """What was literally written, for scalars."""
        return self.node.value if isinstance(self.node, yaml.ScalarNode) else None

    @property
    def plain(self) -> bool:
        """True for an unquoted scalar (the kind YAML turns into numbers and booleans)."""
        return isinstance(self.node, yaml.ScalarNode) and self.node.style is None

    def children(self) -> Iterator[tuple[Any, _Item]]:
        """(key, item) for each entry of a mapping (null counts as empty); reports duplicates."""
        if self.value is None:
            return
        if not isinstance(self.value, _Map):
            raise _Bad(f"expected a mapping of keys, got {_given(self)}")
        data = self.value
        for key, first, line in data.duplicates:
            dup = replace(self._child(data, key), line=line)
            self.ctx.error(dup, f"duplicate key (first on line {first})")
        for key in data:
            child = self._child(data, key)
            self.ctx.lines.setdefault(child.path, child.line)
            yield key, child

    def _child(self, data: _Map, key: Any) -> _Item:
        key_node = data.key_nodes[key]
        name = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key)
        name = name or "''"
        path = f"{self.path}.{name}" if self.path else name
        line = key_node.start_mark.line + 1
        return _Item(self.ctx, path, data[key], data.value_nodes[key], line)

    def items(self) -> Iterator[_Item]:
        """The items of a list (null counts as empty)."""
        if self.value is None:
            return
        if not isinstance(self.value, _Seq):
            raise _Bad(f"expected a list, got {_given(self)}")
        for i, (value, node) in enumerate(zip(self.value, self.value.nodes, strict=True)):
            yield _Item(self.ctx, f"{self.path}[{i}]", value, node, node.start_mark.line + 1)


def _given(item: _Item) -> str:
    """How a value reads in a message, with what YAML made of it where that surprises."""
    value, raw = item.value, item.raw
    if value is None:
        return "null" if raw else "an empty value"
    if isinstance(value, bool):
        word = str(value).lower()
        return f"{raw} (YAML reads it as {word})" if raw and raw != word else word
    if isinstance(value, int | float):
        return f"{raw} (YAML reads it as {value})" if raw and raw != str(value) else str(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, _Map):
        return "a mapping"
    if isinstance(value, _Seq):
        return "a list"
    return f"{raw} (a {type(value).__name__})"


def _expected(item: _Item, expect: str) -> _Bad:
    hint = ""
    if isinstance(item.value, str) and _is_number(item.value):
        hint = " (a quoted string: remove the quotes)"
    return _Bad(f"expected {expect}, got {_given(item)}{hint}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


_Check = Callable[[_Item], Any]


@dataclass(frozen=True, slots=True)
class _Section:
    """A mapping of known keys, built into `cls`."""

    cls: Callable[..., Any]
    keys: Mapping[str, _Check | _Section]


def _build(item: _Item, section: _Section) -> Any:
    kwargs: dict[str, Any] = {}
    for key, child in item.children():
        check = section.keys.get(key) if isinstance(key, str) else None
        if check is None:
            item.ctx.error(child, _unknown(key, section.keys))
            continue
        try:
            kwargs[key] = _build(child, check) if isinstance(check, _Section) else check(child)
        except _Bad as exc:
            item.ctx.error(child, str(exc))
    return section.cls(**kwargs)


# ---------------------------------------------------------------------------
# Unknown keys: the closest valid name, or the real name of a known alias

_ALIASES: Mapping[str, tuple[str, ...]] = {
    "max_wait_time": ("timeout",), "wait": ("timeout",), "wait_time": ("timeout",),
    "timeout_s": ("timeout",), "timeout_sec": ("timeout",), "timeout_secs": ("timeout",),
    "timeout_seconds": ("timeout",), "read_timeout": ("timeout",),
    "retries": ("retry",), "max_retries": ("retry",), "retry_count": ("retry",),
    "baud": ("baudrate",), "baud_rate": ("baudrate",), "speed": ("baudrate",),
    "path": ("port", "socket"), "device": ("port",), "tty": ("port",), "serial": ("port",),
    "url": ("port",), "dev": ("port",), "socket_path": ("socket",), "sock": ("socket",),
    "loglevel": ("level", "log_level"), "log_level": ("level",), "level": ("log_level",),
    "verbosity": ("level", "log_level"), "adapter": ("codec",), "codec": ("adapter",),
    "protocol": ("codec", "adapter"), "framing": ("codec", "adapter"),
    "data_bits": ("bytesize",), "databits": ("bytesize",), "stop_bits": ("stopbits",),
    "flow_control": ("rtscts",), "rts_cts": ("rtscts",), "hardware_flow_control": ("rtscts",),
    "address": ("host", "listen"), "hostname": ("host",), "ip": ("host",),
    "bind": ("listen",), "permissions": ("mode",), "perms": ("mode",),
    "max_size": ("max_payload",), "keepalive": ("interval",), "ping_interval": ("interval",),
    "newline": ("terminator",), "eol": ("terminator",), "delimiter": ("terminator",),
}  # fmt: skip


def _suggest(key: str, valid: Iterable[str]) -> str | None:
    names = list(valid)
    norm = key.strip().lower().replace("-", "_").replace(" ", "_")
    if norm in names:
        return norm
    for target in _ALIASES.get(norm, ()):
        if target in names:
            return target
    close = difflib.get_close_matches(norm, names, n=1, cutoff=0.6)
    return close[0] if close else None


def _unknown(key: Any, valid: Mapping[str, Any]) -> str:
    if not isinstance(key, str):
        word = "null" if key is None else str(key).lower() if isinstance(key, bool) else repr(key)
        return f"keys must be strings, and YAML reads this one as {word}; quote it"
    best = _suggest(key, valid)
    if best is not None:
        return f"unknown key; did you mean '{best}'?"
    return f"unknown key; valid keys here: {', '.join(valid)}"


def _unknown_section(key: Any) -> str:
    """A top-level key of a sectioned file: a section name, or a key of some section."""
    if not isinstance(key, str):
        return _unknown(key, _CONFIG.keys)
    best = _suggest(key, _CONFIG.keys)
    for name, section in _SECTIONS.items():
        if best is None and (leaf := _suggest(key, section.keys)) is not None:
            best = f"{name}.{leaf}"
    if best is not None:
        return f"unknown key; did you mean '{best}'?"
    return f"unknown key; valid sections: {', '.join(_CONFIG.keys)}"


# ---------------------------------------------------------------------------
# Checkers: each takes an _Item and returns the value, or raises _Bad


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(lo: int, hi: int | None = None, what: str = "an integer") -> _Check:
    if hi is not None:
        expect = f"{what} {lo}..{hi}"
    else:
        expect = f"{what} > 0" if lo == 1 else f"{what} >= {lo}"

    def check(item: _Item) -> int:
        v = item.value
        if not _is_int(v) or v < lo or (hi is not None and v > hi):
            raise _expected(item, expect)
        return int(v)

    return check


def _seconds(*, zero_ok: bool) -> _Check:
    expect = "a number of seconds " + (">= 0" if zero_ok else "> 0")

    def check(item: _Item) -> float:
        v = item.value
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            raise _expected(item, expect)
        if v < 0 or (v == 0 and not zero_ok):
            raise _expected(item, expect)
        return float(v)

    return check


def _bool(item: _Item) -> bool:
    if not isinstance(item.value, bool):
        raise _expected(item, "true or false")
    return item.value


def _string(item: _Item, expect: str = "a string") -> str:
    v = item.value
    if isinstance(v, str):
        return v
    if item.plain and isinstance(v, bool | int | float) and item.raw:
        raise _Bad(f'expected {expect}, got {_given(item)}; quote it: "{item.raw}"')
    raise _expected(item, expect)


def _nonempty(item: _Item, expect: str) -> str:
    text = _string(item, expect)
    if not text.strip():
        raise _expected(item, expect)
    if text != text.strip():
        raise _Bad(f"{text!r} has spaces around it; remove them")
    return text


def _choice(options: tuple[str, ...], case: Callable[[str], str] = str.lower) -> _Check:
    expect = "one of " + ", ".join(options)

    def check(item: _Item) -> str:
        text = _string(item, expect)
        if case(text) in options:
            return case(text)
        close = difflib.get_close_matches(case(text), options, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise _Bad(f"expected {expect}, got {_given(item)}{hint}")

    return check


def _optional(check: _Check) -> _Check:
    def optional(item: _Item) -> Any:
        return None if item.value is None else check(item)

    return optional


def _port(item: _Item) -> str:
    port = _nonempty(item, "a serial device path, tcp://HOST:PORT, a pyserial URL or sim")
    scheme, sep, rest = port.partition("://")
    if not sep:
        return port
    if scheme == "tcp":
        try:
            _host_port(rest)
        except ValueError as exc:
            raise _Bad(f"expected tcp://HOST:PORT, got {port!r}: {exc}") from None
    elif scheme not in _URL_SCHEMES:
        close = difflib.get_close_matches(scheme, _URL_SCHEMES, n=1)
        hint = f"; did you mean '{close[0]}://'?" if close else ""
        raise _Bad(f"unknown URL scheme '{scheme}://' (known: {', '.join(_URL_SCHEMES)}){hint}")
    return port


def _stopbits(item: _Item) -> float:
    v = item.value
    if isinstance(v, bool) or v not in (1, 1.5, 2):
        raise _expected(item, "1, 1.5 or 2")
    return 1.5 if v == 1.5 else int(v)


def _actions(item: _Item) -> Mapping[str, int]:
    opcode = _int(0, 255, "an opcode")
    table: dict[str, int] = {}
    for name, child in item.children():
        if not isinstance(name, str) or not name.strip():
            item.ctx.error(child, f"action names must be non-empty strings, got {name!r}")
            continue
        try:
            table[name] = opcode(child)
        except _Bad as exc:
            item.ctx.error(child, str(exc))
    return MappingProxyType(table)


def _ids(kind: str) -> _Check:
    def check(item: _Item) -> tuple[int, ...]:
        if _is_int(item.value) or isinstance(item.value, str):
            raise _Bad(f"expected a list of {kind}s like [1000], got {_given(item)}")
        ids: list[int] = []
        for child in item.items():
            if _is_int(child.value) and child.value >= 0:
                ids.append(child.value)
            elif isinstance(child.value, str):
                tool = "id -u" if kind == "uid" else "getent group"
                item.ctx.error(
                    child,
                    f"expected a numeric {kind}, got {child.value!r}; "
                    f"names are not looked up (find the number with {tool})",
                )
            else:
                item.ctx.error(child, str(_expected(child, f"a {kind} (an integer >= 0)")))
        return tuple(ids)

    return check


def _terminator(item: _Item) -> str:
    text = _string(item, "a non-empty string")
    if not text:
        raise _expected(item, "a non-empty string")
    style = item.node.style if isinstance(item.node, yaml.ScalarNode) else None
    if "\\" in text and style != '"':
        raise _Bad(f'{text} outside double quotes is a literal backslash; write "{text}"')
    return text


def _encoding(item: _Item) -> str:
    name = _nonempty(item, "a text encoding such as utf-8 or ascii")
    try:
        "".encode(name)
    except LookupError as exc:
        raise _Bad(
            f"expected a text encoding such as utf-8 or ascii, got {name!r}: {exc}"
        ) from None
    return name


def _regex(item: _Item) -> str:
    pattern = _string(item, "a regular expression (a string)")
    if not pattern:
        raise _Bad("an empty pattern matches every line; use null to leave it unset")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise _Bad(f"{pattern!r} is not a valid regular expression: {exc}") from None
    return pattern


def _mode(item: _Item) -> int:
    v, expect = item.value, 'a file mode such as "0660"'
    if isinstance(v, str):
        digits = v.strip().lower().removeprefix("0o")
        if not digits or any(c not in "01234567" for c in digits):
            raise _Bad(f"expected {expect} (octal digits), got {v!r}")
        mode = int(digits, 8)
    elif _is_int(v):
        mode = v
    else:
        raise _expected(item, expect)
    if not 0 <= mode <= 0o777:
        raise _Bad(f"expected {expect} (at most 0o777), got {_mode_given(item, mode)}")
    return mode


def _mode_given(item: _Item, mode: int) -> str:
    """An unquoted 660 is the decimal number 660: say so, and how to write it."""
    raw = item.raw or str(item.value)
    if mode < 0:
        return raw
    decimal = _is_int(item.value) and item.plain and raw.isdigit() and not raw.startswith("0")
    if not decimal:
        return raw if raw.lower() == f"0o{mode:o}" else f"{raw} (0o{mode:o})"
    octal = set(raw) <= set("01234567") and int(raw, 8) <= 0o777
    fix = f'; quote it: mode: "0{raw}"' if octal else ""
    return f"{raw}, which YAML reads as the decimal number {mode} (0o{mode:o}){fix}"


def _group(item: _Item) -> str | int | None:
    v = item.value
    if v is None or (_is_int(v) and v >= 0):
        return v  # type: ignore[no-any-return]
    if isinstance(v, str) and v.strip():
        return v
    raise _expected(item, "a group name, a gid (an integer >= 0) or null")


def _socket_path(item: _Item) -> str:
    path = _nonempty(item, "a socket path")
    if "\0" in path:
        raise _Bad("a socket path cannot contain a NUL byte")
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        raise _Bad(f"Unix socket paths are limited to {_SUN_PATH_MAX} bytes; this one is longer")
    return path


def _listen(item: _Item) -> str:
    text = _string(item, 'HOST:PORT such as "127.0.0.1:9108"')
    try:
        _host_port(text)
    except ValueError as exc:
        raise _Bad(f'expected HOST:PORT such as "127.0.0.1:9108", got {text!r}: {exc}') from None
    return text


def _host(item: _Item) -> str:
    host = _nonempty(item, "a host name or address")
    if any(c.isspace() for c in host) or "/" in host:
        raise _expected(item, "a host name or address")
    return host


_POSITIVE = _int(1)
_LINE = _Section(
    LineConfig,
    {
        "terminator": _terminator,
        "encoding": _encoding,
        "end": _optional(_regex),
        "error": _optional(_regex),
        "event": _optional(_regex),
    },
)
_DEVICE = _Section(
    DeviceConfig,
    {
        "port": _port,
        "baudrate": _int(1, what="a baud rate"),
        "bytesize": _int(5, 8),
        "parity": _choice(PARITIES),
        "stopbits": _stopbits,
        "rtscts": _bool,
        "codec": _choice(CODECS),
        "timeout": _seconds(zero_ok=False),
        "guard": _seconds(zero_ok=True),
        "retry": _int(0),
        "window": _int(1, 32768),
        "max_payload": _int(1, 1048576),
        "actions": _actions,
        "line": _LINE,
    },
)
_HEARTBEAT = _Section(
    HeartbeatConfig,
    {
        "interval": _seconds(zero_ok=True),
        "misses": _POSITIVE,
        "timeout": _seconds(zero_ok=False),
        "payload": _string,
    },
)
_RECONNECT = _Section(
    ReconnectConfig, {"initial": _seconds(zero_ok=False), "max": _seconds(zero_ok=False)}
)
_ROLE = _Section(RoleList, {"uids": _ids("uid"), "gids": _ids("gid")})
_API = _Section(
    ApiConfig,
    {
        "socket": _socket_path,
        "mode": _mode,
        "group": _group,
        "max_clients": _POSITIVE,
        "max_message": _POSITIVE,
        "max_backlog": _POSITIVE,
        "queue_limit": _POSITIVE,
        "client_queue": _POSITIVE,
        "lease_max": _seconds(zero_ok=False),
        "drain": _seconds(zero_ok=True),
        "roles": _Section(RolesConfig, {"observer": _ROLE, "controller": _ROLE, "admin": _ROLE}),
    },
)
_SECTIONS = {
    "device": _DEVICE,
    "heartbeat": _HEARTBEAT,
    "reconnect": _RECONNECT,
    "api": _API,
    "metrics": _Section(MetricsConfig, {"listen": _optional(_listen)}),
    "log": _Section(
        LogConfig, {"level": _choice(LOG_LEVELS, str.upper), "format": _choice(LOG_FORMATS)}
    ),
}
_CONFIG = _Section(Config, _SECTIONS)
