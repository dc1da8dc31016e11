"""What the session needs from a link codec.

A codec is sans-I/O: it turns a request into bytes and bytes from the device into
`Inbound` messages. It never touches a file descriptor, a clock or asyncio, so it
is tested by feeding bytes. Noise is counted in `bad_frames` and skipped; a
stream that is out of step beyond repair (the `length` codec's bad length) sets
`desync` and the session reconnects.
"""

from __future__ import annotations

import enum
from typing import NamedTuple, Protocol


class Kind(enum.IntEnum):
    """Message kinds; the values are the verl type byte (version 1 in the high nibble)."""

    REQUEST = 0x11  #: daemon → device
    REPLY = 0x12  #: device → daemon, answers one request
    EVENT = 0x13  #: device → daemon, unsolicited


class Inbound(NamedTuple):
    """One message decoded from the device."""

    kind: Kind  #: REPLY or EVENT
    seq: int | None  #: verl: the reply's seq; None for codecs without seqs and for events
    status: int | None  #: reply status byte; None for events
    data: bytes  #: reply data (after the status byte) or event payload
    text: str | None = None  #: line codec: the reply's / event's text


class LinkCodec(Protocol):
    """The daemon side of a link codec."""

    #: True when replies carry a seq (verl): several calls may be outstanding.
    pipelined: bool
    #: frames dropped as noise since creation (never reset: a monotonic counter)
    bad_frames: int
    #: set (to a reason) when the stream is out of step and the link must be reopened
    desync: str | None

    def encode_request(self, seq: int, payload: bytes) -> bytes:
        """Bytes to write for one request (seq is ignored by codecs without seqs)."""
        ...

    def feed(self, data: bytes, awaiting_reply: bool) -> list[Inbound]:
        """Decode bytes read from the link.

        `awaiting_reply` tells codecs without seqs (length, line) whether a call is
        outstanding: the first complete frame is then its reply, the rest are events.
        """
        ...

    def reset(self) -> None:
        """Forget partial input and any desync (after a reconnect or a guard period)."""
        ...
