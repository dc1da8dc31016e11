"""Every codec verld speaks, by name: its traits and both sides of its framing.

Strategy: one `CodecSpec` per codec, looked up by the config's `device.codec`.
Nothing outside this registry and the config schema compares codec names: code
that must behave differently per codec asks the spec for a trait (`pipelined`,
`bus`, `rtu`, `text`, `events`) or a factory (`host`, `device`, `ping`,
`device_ping`). Adding a codec is one module and one line in `_SPECS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from verld.codec.base import LinkCodec
from verld.config import Config

if TYPE_CHECKING:
    from verld.fronts.ports.framing import PortFraming


@dataclass(frozen=True, slots=True)
class CodecSpec:
    """One codec: what it is like, and how to make each side of it."""

    name: str
    #: replies carry a seq: several calls may be on the link at once (else one)
    pipelined: bool
    #: a Modbus bus: units, offline units, broadcast, exception replies
    bus: bool
    #: silence ends frames (3.5 character times): modbus-rtu
    rtu: bool
    #: replies and events carry text (line)
    text: bool
    #: the device may send events
    events: bool
    #: the daemon side (requests out, replies and events in)
    host: Callable[[Config], LinkCodec]
    #: the device side (requests in, replies and events out): virtual ports, the sim
    device: Callable[[Config], PortFraming]
    #: what the handshake and heartbeat send (None: no handshake, heartbeat off)
    ping: Callable[[Config], bytes | None]
    #: the device's ping whether or not the heartbeat is on (None: it has none)
    device_ping: Callable[[Config], bytes | None]


def _device(cfg: Config) -> PortFraming:
    from verld.fronts.ports.framing import make_port_framing  # (moves into the codecs)

    return make_port_framing(cfg)


def _host(cfg: Config) -> LinkCodec:
    from verld.codec.select import make_codec

    return make_codec(cfg)


def _ping(cfg: Config) -> bytes | None:
    from verld.codec.select import ping_payload

    return ping_payload(cfg)


def _device_ping(cfg: Config) -> bytes | None:
    from verld.codec.select import device_ping

    return device_ping(cfg)


def _spec(name: str, **traits: bool) -> CodecSpec:
    return CodecSpec(name, host=_host, device=_device, ping=_ping, device_ping=_device_ping,
                     **traits)  # fmt: skip


_SPECS = (
    _spec("verl", pipelined=True, bus=False, rtu=False, text=False, events=True),
    _spec("length", pipelined=False, bus=False, rtu=False, text=False, events=True),
    _spec("line", pipelined=False, bus=False, rtu=False, text=True, events=True),
    _spec("modbus-rtu", pipelined=False, bus=True, rtu=True, text=False, events=False),
    _spec("modbus-tcp", pipelined=False, bus=True, rtu=False, text=False, events=False),
)
CODECS: dict[str, CodecSpec] = {spec.name: spec for spec in _SPECS}


def spec(name: str) -> CodecSpec:
    """The codec called `name` (the config schema has checked it is one)."""
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}") from None


def spec_of(cfg: Config) -> CodecSpec:
    """The codec `cfg.device.codec` names."""
    return spec(cfg.device.codec)
