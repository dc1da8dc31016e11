"""Sans-I/O link codecs: `verl` (default), `length` and `line`.

Each turns requests into bytes and bytes from the device into `Inbound` messages;
none does I/O, reads a clock or imports asyncio (see `base`).
"""

from __future__ import annotations

from verld.codec.base import Inbound, Kind, LinkCodec
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
    "VerlCodec",
    "VerlFrame",
    "encode_frame",
]
