"""Sans-I/O codecs: `verl` (default), `length`, `line`, `modbus-rtu`, `modbus-tcp` and `frame`.

Each codec module holds both sides of its framing: the host side (`LinkCodec`:
requests out, replies and events in) and the device side (`PortFraming`: requests
in, replies and events out), and ends with its `CodecSpec`. `verld.codec.registry`
finds a codec by name; none does I/O, reads a clock or imports asyncio (see `base`).
"""

from __future__ import annotations

from verld.codec.base import Inbound, Kind, LinkCodec, PortFraming, PortRequest
from verld.codec.length import LengthCodec, LengthDecoder
from verld.codec.line import LineCodec, LineSplitter
from verld.codec.verl import FrameDecoder, VerlCodec, VerlFrame, encode_frame

__all__ = [
    "FrameDecoder",
    "Inbound",
    "Kind",
    "LengthCodec",
    "LengthDecoder",
    "LineCodec",
    "LineSplitter",
    "LinkCodec",
    "PortFraming",
    "PortRequest",
    "VerlCodec",
    "VerlFrame",
    "encode_frame",
]
