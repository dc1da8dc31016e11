"""What a codec plugin imports from verld: the public surface of a codec.

A codec plugin (docs/codecs.md, "Writing a codec") is a package whose entry point
in the group `verld.codecs` (`GROUP`), named as its codec, is a `CodecSpec`. It is
written against these names alone; everything else in verld may change between
releases. They live where the built-in codecs use them; this module is where a
plugin finds them, and what verld keeps stable.

- `CodecSpec`: the codec's traits and the factories of its sides; `Settings`, the
  part of the config the factories and `check` read; `Problem` and `no_problems`,
  what `check` returns.
- The host side, `LinkCodec` (requests out, `Inbound` replies and events in, of a
  `Kind`); the device side for a port or network connection, `PortFraming`
  (`PortRequest`s in, replies and events out, with the `Bounded` bookkeeping); a
  device's own side for the simulator, `CommandFraming`.
- `crc_function`: a CRC by its name in the CRC RevEng catalogue (as `device.frame`
  declares one), e.g. `crc_function("CRC-16/UMTS")`.
"""

from __future__ import annotations

from verld.codec.base import (
    Bounded,
    CommandFraming,
    Inbound,
    Kind,
    LinkCodec,
    PortFraming,
    PortRequest,
)
from verld.codec.frame.check import crc_function
from verld.codec.registry import GROUP
from verld.codec.spec import CodecSpec, Problem, Settings, no_problems

__all__ = [
    "GROUP",
    "Bounded",
    "CodecSpec",
    "CommandFraming",
    "Inbound",
    "Kind",
    "LinkCodec",
    "PortFraming",
    "PortRequest",
    "Problem",
    "Settings",
    "crc_function",
    "no_problems",
]
