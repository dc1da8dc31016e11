"""The config model: frozen dataclasses, defaults and small helpers on them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from types import MappingProxyType
from typing import Any

from verld.codec.frame.declaration import FrameDeclaration
from verld.codec.registry import CODECS as SPECS
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
    #: regex: requests matching it get no answer (written once, never retried)
    no_reply: str | None = None


def _no_actions() -> Mapping[str, int]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Rs485Config:
    """The kernel's RS-485 mode on a serial port (TIOCSRS485, pyserial `rs485_mode`)."""

    rts_level_for_tx: bool = True
    rts_level_for_rx: bool = False
    delay_before_tx: float = 0.0  #: seconds
    delay_before_rx: float = 0.0  #: seconds


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
    #: extra tries after a timeout; None: the codec's own default (`CodecSpec.retry`)
    retry: int | None = None
    window: int = 8
    max_payload: int = 4096
    actions: Mapping[str, int] = field(default_factory=_no_actions)  #: the user's entries only
    line: LineConfig = field(default_factory=LineConfig)
    #: the `frame` codec's declaration (None: no framing declared)
    frame: FrameDeclaration | None = None
    rs485: Rs485Config | None = None  #: serial ports only: the driver turns the transceiver


@dataclass(frozen=True, slots=True)
class HeartbeatConfig:
    interval: float = 2.0
    misses: int = 3
    timeout: float = 1.0
    payload: str = ""
    #: line: the regex a line must match to answer the ping (None: any line not an error)
    expect: str | None = None


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
    max_timeout: float = 600  #: the largest `timeout` a call may ask (s)
    max_retry: int = 10  #: the largest `retry` a call may ask
    drain: float = 5.0
    roles: RolesConfig = field(default_factory=RolesConfig)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    listen: str | None = None  #: "HOST:PORT" to serve Prometheus text over HTTP


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS on a network port or the Modbus TCP gateway: the server's certificate and
    key (PEM); with `ca`, clients must present a certificate it issued."""

    cert: str = ""
    key: str = ""
    ca: str | None = None


@dataclass(frozen=True, slots=True)
class ModbusConfig:
    """Modbus settings: the bus (codecs modbus-rtu/modbus-tcp) and the Modbus TCP front."""

    listen: str | None = None  #: "HOST:PORT" of the Modbus TCP server front (off: None)
    max_connections: int = 32
    read_only: bool = True
    idle_timeout: float = 60.0
    turnaround: float = 0.1  #: seconds a broadcast (unit 0 on modbus-rtu) holds the bus
    offline_after: int = 3  #: calls in a row whose every try timed out: the unit is offline
    offline_backoff: float = 5.0  #: seconds an offline unit's calls fail at once
    allow: tuple[str, ...] = ()  #: client networks (CIDR) that may connect; empty: anyone
    tls: TlsConfig | None = None  #: Modbus/TCP Security: `listen` speaks TLS only


@dataclass(frozen=True, slots=True)
class PortConfig:
    """One virtual serial port: a pty whose device end is reachable at `link`."""

    link: str = ""  #: the symlink programs open (required; its directory must exist)
    mode: int = 0o660  #: the pty node's permission bits
    group: str | int | None = None  #: the pty node's group (None: verld's own)
    write: bool = True  #: False: read-only, the program gets events only
    events: bool = True  #: device events are written to this port


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """One network port: a TCP listener serving the device (DESIGN "Network ports")."""

    listen: str = ""  #: "HOST:PORT" (required)
    name: str | None = None  #: label in status, metrics, logs and the fd name (None: the port)
    protocol: str = "raw"  #: raw | telnet | rfc2217
    mode: str = "shared"  #: shared | passthrough
    write: bool = True  #: shared: False makes it read-only (events only)
    events: bool = True  #: shared: device events to its connections
    max_connections: int = 8  #: shared (passthrough serves one connection at a time)
    allow: tuple[str, ...] = ()  #: client networks (CIDR) that may connect; empty: anyone
    idle_timeout: float | None = None  #: seconds of silence before a close; 0 never; None: mode's
    tls: TlsConfig | None = None

    @property
    def label(self) -> str:
        """Its name: `name`, else the port number of `listen`."""
        return self.name if self.name is not None else self.listen.rpartition(":")[2]

    @property
    def idle(self) -> float:
        """`idle_timeout` in effect: null is 0 (never) for shared, 600 for passthrough."""
        if self.idle_timeout is not None:
            return self.idle_timeout
        return 600.0 if self.mode == "passthrough" else 0.0


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
    ports: tuple[PortConfig, ...] = ()
    network: tuple[NetworkConfig, ...] = ()
    modbus: ModbusConfig = field(default_factory=ModbusConfig)
    log: LogConfig = field(default_factory=LogConfig)
    source: str | None = None  #: the file this config was read from


#: verld-sim's command set; `device.actions` adds to (or overrides) these.
DEFAULT_ACTIONS: Mapping[str, int] = MappingProxyType(
    {"echo": 1, "info": 2, "delay": 3, "fail": 4, "status": 5, "events": 6}
)

#: `device.codec`'s choices: the codec registry's names, in its order (a live view: a
#: codec registered later is a choice too)
CODECS = SPECS.keys()
#: the codecs of a Modbus bus (`CodecSpec.bus`): they take `MODBUS_DEVICE_DEFAULTS`
MODBUS_CODECS = tuple(codec.name for codec in SPECS.builtins() if codec.bus)
#: on the Modbus codecs `device.timeout` defaults to this (a key the file sets wins):
#: Modbus masters give up after 1-3 s (`device.retry`'s default is each codec's own)
MODBUS_DEVICE_DEFAULTS: Mapping[str, float | int] = MappingProxyType({"timeout": 0.5})
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("auto", "console", "json", "journal")
PARITIES = ("none", "even", "odd", "mark", "space")
NET_PROTOCOLS = ("raw", "telnet", "rfc2217")
NET_MODES = ("shared", "passthrough")


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
        return host_port(port.removeprefix("tcp://"))
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


def host_port(text: str) -> tuple[str, int]:
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
