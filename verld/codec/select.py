"""The codec a config asks for, and what its handshake and heartbeat send."""

from __future__ import annotations

from verld.codec.base import LinkCodec
from verld.codec.length import LengthCodec
from verld.codec.line import LineCodec
from verld.codec.modbus import ModbusRtuCodec, ModbusTcpCodec
from verld.codec.verl import VerlCodec
from verld.config import Config


def make_codec(cfg: Config) -> LinkCodec:
    """The daemon-side codec of `device.codec`, with its settings."""
    dev = cfg.device
    if dev.codec == "verl":
        return VerlCodec(dev.max_payload)
    if dev.codec == "length":
        return LengthCodec(dev.max_payload)
    if dev.codec == "modbus-rtu":
        return ModbusRtuCodec(dev.max_payload)
    if dev.codec == "modbus-tcp":
        return ModbusTcpCodec(dev.max_payload)
    line = dev.line
    return LineCodec(
        dev.max_payload,
        terminator=line.terminator,
        encoding=line.encoding,
        end=line.end,
        error=line.error,
        event=line.event,
    )


def device_ping(cfg: Config) -> bytes | None:
    """The device's ping, whether or not the heartbeat is on (None: it has none).

    verl: the empty request; length: `heartbeat.payload` (hex; empty by default, a
    zero-length message); line: `heartbeat.payload` as text, the Modbus codecs as hex
    (unit + PDU), none when it is empty. `hello` reports it; `verlctl ping` sends it.
    """
    codec, payload = cfg.device.codec, cfg.heartbeat.payload
    if codec == "verl":
        return b""
    if codec == "length":
        return bytes.fromhex(payload)
    if not payload:
        return None
    if codec in ("modbus-rtu", "modbus-tcp"):
        return bytes.fromhex(payload)
    return payload.encode(cfg.device.line.encoding)


def ping_payload(cfg: Config) -> bytes | None:
    """What the handshake and heartbeat send (None: no handshake, heartbeat off).

    verl always pings with the empty request; length sends `heartbeat.payload` (hex)
    while the heartbeat is on; the Modbus codecs send it (a hex request, unit + PDU)
    and line sends it as text, both only when it is set.
    """
    codec, hb = cfg.device.codec, cfg.heartbeat
    if codec == "verl":
        return b""
    if codec == "length":
        return bytes.fromhex(hb.payload) if hb.interval > 0 else None
    if codec in ("modbus-rtu", "modbus-tcp"):
        return bytes.fromhex(hb.payload) if hb.payload and hb.interval > 0 else None
    if hb.payload and hb.interval > 0:
        return hb.payload.encode(cfg.device.line.encoding)
    return None
