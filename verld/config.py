"""YAML config → frozen dataclasses, validated strictly.

Strategy: the file is read by a SafeLoader subclass whose mappings and lists
remember the YAML nodes they came from (so every message can name a line and
quote what was literally written) and which records duplicate keys instead of
letting the last one win. The tree is then walked against a schema: each key maps
to a checker that returns the value or raises `_Bad` with a human message. The
walk never stops at the first problem: every bad key and value is collected and
one `ConfigError` lists them all, one `file:line: key.path: message` per line.

The reference engine's flat format (`host`, `port`, `timeout`, `retry`,
`log_level`, `adapter` at the top level) is read through the same machinery and
mapped onto the sectioned config.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from types import MappingProxyType
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from verld.errors import ConfigError

# ---------------------------------------------------------------------------
# The config model


@dataclass(frozen=True, slots=True)
class LineConfig:
    """Settings of the `line` codec."""

    terminator: str = "\n"
    encoding: str = "utf-8"
    end: str | None = None  #: regex: a reply runs up to the first line matching it
    error: str | None = None  #: regex: a reply with a line matching it gets status 0xFF
    event: str | None = None  #: regex: lines matching it are events


def _no_actions() -> Mapping[str, int]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """The link to the device and how messages are framed on it."""

    port: str = "/dev/ttyUSB0"
    baudrate: int = 115200
    bytesize: int = 8
    parity: str = "none"
    stopbits: float = 1
    rtscts: bool = False
    codec: str = "verl"
    timeout: float = 5.0
    guard: float = 0.1
    retry: int = 3
    window: int = 8
    max_payload: int = 4096
    actions: Mapping[str, int] = field(default_factory=_no_actions)  #: the user's entries only
    line: LineConfig = field(default_factory=LineConfig)


@dataclass(frozen=True, slots=True)
class HeartbeatConfig:
    interval: float = 2.0
    misses: int = 3
    timeout: float = 1.0
    payload: str = ""


@dataclass(frozen=True, slots=True)
class ReconnectConfig:
    initial: float = 0.1
    max: float = 5.0


@dataclass(frozen=True, slots=True)
class RoleList:
    uids: tuple[int, ...] = ()
    gids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RolesConfig:
    observer: RoleList = field(default_factory=RoleList)
    controller: RoleList = field(default_factory=RoleList)
    admin: RoleList = field(default_factory=RoleList)


@dataclass(frozen=True, slots=True)
class ApiConfig:
    socket: str = "/run/verld/verld.sock"
    mode: int = 0o660
    group: str | int | None = None
    max_clients: int = 1024
    max_message: int = 1048576
    max_backlog: int = 4194304
    queue_limit: int = 1024
    client_queue: int = 256
    lease_max: float = 60
    drain: float = 5.0
    roles: RolesConfig = field(default_factory=RolesConfig)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    listen: str | None = None  #: "HOST:PORT" to serve Prometheus text over HTTP


@dataclass(frozen=True, slots=True)
class LogConfig:
    level: str = "INFO"
    format: str = "auto"


@dataclass(frozen=True, slots=True)
class Config:
    device: DeviceConfig = field(default_factory=DeviceConfig)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    reconnect: ReconnectConfig = field(default_factory=ReconnectConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    source: str | None = None  #: the file this config was read from


#: verld-sim's command set; `device.actions` adds to (or overrides) these.
DEFAULT_ACTIONS: Mapping[str, int] = MappingProxyType(
    {"echo": 1, "info": 2, "delay": 3, "fail": 4, "status": 5, "events": 6}
)

CODECS = ("verl", "length", "line")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("auto", "console", "json", "journal")
PARITIES = ("none", "even", "odd", "mark", "space")
# pyserial's serial_for_url schemes (tcp:// is verld's own TCP link)
_URL_SCHEMES = ("tcp", "rfc2217", "socket", "loop", "hwgrep", "spy", "alt", "cp2110")
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the final NUL


def default_config() -> Config:
    """The config used when a file sets nothing."""
    return Config()


def actions_table(device: DeviceConfig) -> dict[str, int]:
    """Action name → opcode: the defaults merged with the user's `device.actions`."""
    return {**DEFAULT_ACTIONS, **device.actions}


def tcp_target(port: str) -> tuple[str, int] | None:
    """`tcp://HOST:PORT` → (HOST, PORT); None when `port` is not a TCP target."""
    if not port.startswith("tcp://"):
        return None
    try:
        return _host_port(port.removeprefix("tcp://"))
    except ValueError as exc:
        raise ConfigError(f"device.port: {port!r}: {exc}") from None


def changed_keys(old: Config, new: Config) -> list[str]:
    """Dotted key paths whose values differ between two configs (`source` excluded)."""
    return list(_diff(old, new, ""))


def _diff(old: Any, new: Any, prefix: str) -> Iterator[str]:
    for f in fields(old):
        if f.name == "source" and not prefix:
            continue
        path = f"{prefix}{f.name}"
        a, b = getattr(old, f.name), getattr(new, f.name)
        if is_dataclass(a):
            yield from _diff(a, b, path + ".")
        elif a != b:
            yield path


def _host_port(text: str) -> tuple[str, int]:
    """Split "HOST:PORT" ("[v6addr]:PORT" for IPv6); ValueError says what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError("expected HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError("write an IPv6 address in brackets: [::1]:PORT")
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"bad host {host!r}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"the port must be a number 1..65535, got {port!r}")
    return host, int(port)


# ---------------------------------------------------------------------------
# Loading: YAML with line numbers and duplicate keys kept


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


class _Loader(yaml.SafeLoader):
    """SafeLoader building `_Map`/`_Seq` so validation can point at lines."""

    def fill_map(self, data: _Map, node: yaml.MappingNode) -> None:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self._key(node, key_node)
            line = key_node.start_mark.line + 1
            if key in first:
                data.duplicates.append((key, first[key], line))
            first.setdefault(key, line)
        self.flatten_mapping(node)  # `<<: *anchor` merges; explicit keys override
        for key_node, value_node in node.value:
            key = self._key(node, key_node)
            data[key] = self.construct_object(value_node, deep=False)
            data.key_nodes[key] = key_node
            data.value_nodes[key] = value_node

    def _key(self, node: yaml.Node, key_node: yaml.Node) -> Any:
        key = self.construct_object(key_node, deep=True)
        if isinstance(key, list | dict):
            where = node.start_mark
            raise ConstructorError(
                "while reading a mapping", where, "found an unhashable key", key_node.start_mark
            )
        return key


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> Iterator[_Map]:
    data = _Map()
    yield data
    loader.fill_map(data, node)


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> Iterator[_Seq]:
    data = _Seq(node)
    yield data
    data.extend(loader.construct_object(child, deep=False) for child in node.value)


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file; ConfigError says everything that is wrong."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text (bad byte at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the config: {exc.strerror or exc}") from None
    return parse_config(text, source)


def parse_config(text: str, source: str = "<string>") -> Config:
    """Validate config text; `source` names it in messages and in `Config.source`."""
    try:
        tree = yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader: no object tags
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error(source, exc)) from None
    except RecursionError:
        raise ConfigError(f"{source}: YAML error: nested too deeply") from None
    ctx = _Context(source)
    root = _Item(ctx, "", tree, None, 1)
    config = _root(root)
    _cross_check(config, ctx)
    ctx.raise_if_any()
    return replace(config, source=source)


def _yaml_error(source: str, exc: yaml.YAMLError) -> str:
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return f"{source}: YAML error: {exc}"
    mark = exc.problem_mark
    problem = exc.problem or "error"
    if "'\\t'" in problem:
        problem += " (YAML indents with spaces, not tabs)"
    if exc.context and exc.context_mark and exc.context_mark.line != mark.line:
        problem += f" ({exc.context} on line {exc.context_mark.line + 1})"
    kind = "YAML error" if isinstance(exc, ConstructorError) else "YAML syntax error"
    return f"{source}:{mark.line + 1}: {kind} (column {mark.column + 1}): {problem}"


# ---------------------------------------------------------------------------
# Validation machinery


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
