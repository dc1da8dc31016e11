"""Every codec verld speaks, by name: its traits and both sides of its framing.

Strategy: one `CodecSpec` per codec, declared at the end of its own module and
looked up here by the config's `device.codec`. `_SPECS` is the only list of codecs
(the config's choices, `verld --codec`'s help and `verld-sim --codec` read it), and
nothing outside this registry and the codec modules' own specs compares codec
names: code that must behave differently per codec asks the spec for a trait
(`pipelined`, `bus`, `rtu`, `text`, `events`), a factory (`host`, `device`,
`commands`, `device_ping`) or its settings check (`check`). Adding a codec is one module and
one line in `_SPECS`.
"""

from __future__ import annotations

from verld.codec.frame import FRAME
from verld.codec.length import LENGTH
from verld.codec.line import LINE
from verld.codec.modbus.rtu import MODBUS_RTU
from verld.codec.modbus.tcp import MODBUS_TCP
from verld.codec.spec import CodecSpec, Settings
from verld.codec.verl import VERL

__all__ = ["CODECS", "CodecSpec", "Settings", "retry_of", "spec", "spec_of"]

#: the one list of codecs (the config's `device.codec` choices are these names, in
#: this order): the default comes first
_SPECS = (VERL, LENGTH, LINE, MODBUS_RTU, MODBUS_TCP, FRAME)
CODECS: dict[str, CodecSpec] = {codec.name: codec for codec in _SPECS}


def spec(name: str) -> CodecSpec:
    """The codec called `name` (the config schema has checked it is one)."""
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}") from None


def spec_of(cfg: Settings) -> CodecSpec:
    """The codec `cfg.device.codec` names, as `cfg` sets it up (`CodecSpec.settled`)."""
    return spec(cfg.device.codec).settled(cfg)


def retry_of(cfg: Settings) -> int:
    """`device.retry`, or where it is null the codec's own default."""
    retry = cfg.device.retry
    return spec_of(cfg).retry if retry is None else retry
