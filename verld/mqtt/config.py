"""verld-mqtt's config: YAML → frozen dataclasses, as strict as verld's own.

Strategy: the file goes through verld's config machinery (`verld.config.load.
parse_with`: marked YAML, duplicate keys, every error collected with its line), and
only the tables here are new. The top level mixes scalar keys (`base`, `qos`, ...)
with two sections (`broker`, `log`), so an unknown key is matched against both: a
`port:` at the top level is told it belongs under `broker:`. Rules between keys
(`cert` with `key`, TLS files without `tls: true`) run after the per-key checks and
only on keys that passed them. Files named here (password, CA, certificate, key) are
not opened: that happens at start (exit 1), so `--check-config` can run anywhere.
A `devices:` entry is a socket path, or a mapping of the socket and what Home
Assistant shows of the device (name, model, manufacturer, area): the sockets go to
`devices`, the rest to `device_info`, so code that needs only the sockets sees no change.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from verld.config import leaves
from verld.config.load import parse_with, read_text
from verld.config.model import LOG_FORMATS, LOG_LEVELS, LogConfig
from verld.config.suggest import unknown_section
from verld.config.validate import BadValue, Context, Item, MarkedMap, Section, build, given
from verld.mqtt.entityconfig import Entity, check_devices, entities
from verld.mqtt.valueconfig import Reported, fields

#: the accepted values of `broker.protocol`, as stored
PROTOCOLS = ("5", "3.1.1")
#: a device name: one topic level, safe in Home Assistant ids
DEVICE_NAME = re.compile(r"[A-Za-z0-9_-]+")
#: names a device may not take (a topic level of the bridge's own)
RESERVED = frozenset({"bridge"})


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    host: str = "localhost"
    port: int = 1883
    protocol: str = "5"  #: "5" or "3.1.1"
    tls: bool = False
    ca: str | None = None  #: None with tls: the system CAs
    cert: str | None = None
    key: str | None = None
    username: str | None = None
    password_file: str | None = None  #: the password is its first line, read at start
    client_id: str | None = None  #: None: verld-mqtt-<short host name>
    keepalive: int = 30

    @property
    def mqtt5(self) -> bool:
        return self.protocol == "5"


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What a `devices:` mapping says of its device for Home Assistant's device block
    (None: the default, `topics.device_block`)."""

    name: str | None = None
    model: str | None = None
    manufacturer: str | None = None
    area: str | None = None  #: Home Assistant's suggested_area


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    base: str | None = None  #: None: "verld/" + the short host name
    qos: int = 1
    devices: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: of the devices given as a mapping, what Home Assistant shows of them
    device_info: Mapping[str, DeviceInfo] = field(default_factory=lambda: MappingProxyType({}))
    calls: bool = True
    status_interval: float = 30.0  #: 0: status on link changes only
    homeassistant: bool = False
    entities: tuple[Entity, ...] = ()  #: device values polled and published (entityconfig)
    log: LogConfig = field(default_factory=LogConfig)
    source: str | None = None

    @property
    def topic_base(self) -> str:
        return self.base if self.base is not None else f"verld/{short_host()}"

    @property
    def client_id(self) -> str:
        return self.broker.client_id or f"verld-mqtt-{short_host()}"


@dataclass(frozen=True, slots=True)
class Secrets:
    """What is read from the files the config names, at start: password, TLS context."""

    password: str | None = None
    tls: ssl.SSLContext | None = None


def short_host() -> str:
    """This machine's host name up to the first dot."""
    return socket.gethostname().split(".")[0] or "localhost"


# ---------------------------------------------------------------------------
# Leaf checkers of this file's own values


def _protocol(item: Item) -> str:
    v = item.value
    if v == 5 and type(v) is int:
        return "5"
    if v == "3.1.1":
        return "3.1.1"
    hint = ""
    if v in (3, 3.1, 4, 311) and not isinstance(v, bool):
        hint = '; MQTT 3.1.1 is written 3.1.1 (unquoted, or quoted: "3.1.1")'
    elif v == 5 or (isinstance(v, str) and v.strip().lower() in ("5", "5.0", "v5", "mqttv5")):
        hint = "; write 5, a plain number"
    raise BadValue(f"expected 5 or 3.1.1, got {given(item)}{hint}")


def _path(item: Item) -> str:
    text = leaves.string(item, "a file path")
    if not text.strip() or "\0" in text:
        raise BadValue(f"expected a file path, got {given(item)}")
    return text


def _word(item: Item) -> str:
    text = leaves.string(item)
    if not text:
        raise BadValue("expected a non-empty string, got ''")
    return text


def _base(item: Item) -> str:
    text = leaves.string(item, 'a topic prefix such as "verld/site1"')
    if not text:
        raise BadValue(
            "expected a topic prefix such as \"verld/site1\", got ''; use null for verld/<host>"
        )
    if "+" in text or "#" in text:
        raise BadValue(f"{text!r} has an MQTT wildcard (+ or #); a base is a plain topic prefix")
    if text.endswith("/"):
        raise BadValue(f"{text!r} ends with '/'; write it without: {text.rstrip('/')!r}")
    if "" in text.split("/"):
        raise BadValue(f"{text!r} has an empty topic level (a leading '/' or '//')")
    if text.startswith("$") or "\0" in text:
        raise BadValue(f"{text!r}: topics starting with '$' belong to the broker")
    return text


def _devices(item: Item) -> tuple[Mapping[str, str], Mapping[str, DeviceInfo]]:
    """NAME → socket path, and NAME → DeviceInfo for the entries given as mappings; each
    bad entry is reported and skipped."""
    if isinstance(item.value, list):
        raise BadValue(
            "expected a mapping NAME: SOCKET (e.g. psu: /run/verld/psu/verld.sock), got a list"
        )
    table: dict[str, str] = {}
    info: dict[str, DeviceInfo] = {}
    first: dict[str, str] = {}
    for name, child in item.children():
        problem = _name_problem(name)
        if problem is not None:
            item.ctx.error(child, problem)
            continue
        try:
            if isinstance(child.value, MarkedMap):
                path, about = _device_entry(child)
                info[name] = about
            else:
                path = leaves.socket_path(child)
        except Reported:
            continue
        except BadValue as exc:
            item.ctx.error(child, str(exc))
            continue
        if path in first:
            item.ctx.error(child, f"the same socket as device {first[path]!r}")
            continue
        first[path] = name
        table[name] = path
    return MappingProxyType(table), MappingProxyType(info)


_DEVICE_ENTRY = {
    "socket": leaves.socket_path,
    "name": leaves.optional(_word),
    "model": leaves.optional(_word),
    "manufacturer": leaves.optional(_word),
    "area": leaves.optional(_word),
}


def _device_entry(item: Item) -> tuple[str, DeviceInfo]:
    """`{socket, name, model, manufacturer, area}`: the socket path and the rest."""
    got = fields(item, _DEVICE_ENTRY)
    if got is None:
        raise Reported
    if "socket" not in got:
        raise BadValue(
            "needs socket: the verld socket's path (name, model, manufacturer and area "
            "are what Home Assistant shows)"
        )
    path = got.pop("socket")
    return path, DeviceInfo(**got)


def _name_problem(name: Any) -> str | None:
    if not isinstance(name, str):
        word = "null" if name is None else str(name).lower()
        return f"a device name must be a string, and YAML reads this one as {word}; quote it"
    if not DEVICE_NAME.fullmatch(name):
        return f"device name {name!r}: use letters, digits, '_' and '-' only (it is a topic level)"
    if name in RESERVED:
        return f"device name {name!r} is reserved (<base>/{name}/state is the bridge's own)"
    return None


_BROKER = Section(
    BrokerConfig,
    {
        "host": leaves.host,
        "port": leaves.integer(1, 65535, "a TCP port"),
        "protocol": _protocol,
        "tls": leaves.boolean,
        "ca": leaves.optional(_path),
        "cert": leaves.optional(_path),
        "key": leaves.optional(_path),
        "username": leaves.optional(_word),
        "password_file": leaves.optional(_path),
        "client_id": leaves.optional(_word),
        "keepalive": leaves.integer(1, 65535, "a number of seconds"),
    },
)
_LOG = Section(
    LogConfig,
    {"level": leaves.choice(LOG_LEVELS, str.upper), "format": leaves.choice(LOG_FORMATS)},
)
_TOP: dict[str, Any] = {
    "broker": _BROKER,
    "base": leaves.optional(_base),
    "qos": leaves.integer(0, 2, "a QoS"),
    "devices": _devices,
    "calls": leaves.boolean,
    "status_interval": leaves.seconds(zero_ok=True),
    "homeassistant": leaves.boolean,
    "entities": entities,
    "log": _LOG,
}
_SECTIONS = {key: (value.keys if isinstance(value, Section) else ()) for key, value in _TOP.items()}


def _root(item: Item) -> BridgeConfig:
    if item.value is None:
        return BridgeConfig()
    if not isinstance(item.value, MarkedMap):
        item.ctx.error(
            item, f"the top level must be a mapping (broker:, devices:, ...), got {given(item)}"
        )
        return BridgeConfig()
    kwargs: dict[str, Any] = {}
    listed: Item | None = None  #: `entities:` as written
    for key, child in item.children():
        listed = child if key == "entities" else listed
        check = _TOP.get(key) if isinstance(key, str) else None
        if check is None:
            item.ctx.error(child, unknown_section(key, _SECTIONS))
            continue
        try:
            kwargs[key] = build(child, check) if isinstance(check, Section) else check(child)
        except BadValue as exc:
            item.ctx.error(child, str(exc))
    if "devices" in kwargs:
        kwargs["devices"], kwargs["device_info"] = kwargs["devices"]
    config = BridgeConfig(**kwargs)
    _cross_check(config.broker, item.ctx)
    if listed is not None:
        check_devices(listed, config.devices)
    return config


def _cross_check(broker: BrokerConfig, ctx: Context) -> None:
    if ctx.ok("broker.cert", "broker.key") and (broker.cert is None) != (broker.key is None):
        one, missing = ("cert", "key") if broker.key is None else ("key", "cert")
        ctx.error_at(
            (f"broker.{one}", f"broker.{missing}"),
            f"needs broker.{missing} too (a client certificate and its key go together)",
        )
    files = [k for k in ("ca", "cert", "key") if getattr(broker, k) is not None]
    if ctx.ok("broker.tls", *(f"broker.{k}" for k in files)) and files and not broker.tls:
        ctx.error_at(
            (f"broker.{files[0]}", "broker.tls"),
            "is set but broker.tls is false; set tls: true (or remove it)",
        )
    if ctx.ok("broker.password_file", "broker.username") and (
        broker.password_file is not None and broker.username is None
    ):
        ctx.error_at(
            ("broker.password_file", "broker.username"),
            "needs broker.username (MQTT sends a password with a user name)",
        )


def parse_bridge_config(text: str, source: str = "<string>") -> BridgeConfig:
    """Validate config text; ConfigError lists everything that is wrong."""
    return replace(parse_with(text, source, _root), source=source)


def load_bridge_config(path: str | os.PathLike[str]) -> BridgeConfig:
    """Read and validate a config file; ConfigError when it is unreadable or invalid."""
    source = os.fspath(path)
    return parse_bridge_config(read_text(source), source)
