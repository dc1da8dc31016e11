"""A `frame` declaration: how a device frames its messages, as the config states it.

The dataclasses hold `device.frame` once each key has passed its own check (the
config's section tables build them: hex strings are bytes here, names as
`check.canonical` spells them); `rules` judges the declaration as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COUNTS",
    "FIELD_SIZES",
    "MAX_HEADER",
    "ORDERS",
    "OVERS",
    "STUFFINGS",
    "Check",
    "Event",
    "Field",
    "FrameDeclaration",
    "Length",
    "Status",
]

MAX_HEADER = 64  #: the most bytes a header may have
FIELD_SIZES = (1, 2, 4)  #: a length or seq field's bytes
ORDERS = ("big", "little")
COUNTS = ("payload", "header+payload", "frame")
OVERS = ("header+payload", "start+header+payload")
STUFFINGS = ("none", "slip", "cobs")


@dataclass(frozen=True, slots=True)
class Length:
    """Where the frame's size is written, and what it counts."""

    offset: int  #: in the header
    size: int  #: 1, 2 or 4 bytes
    order: str = "big"
    counts: str = "payload"  #: payload | header+payload | frame (start to end, all included)
    adjust: int = 0  #: added to the field's value before use, subtracted when writing it


@dataclass(frozen=True, slots=True)
class Check:
    """The check after the payload."""

    kind: str  #: a sum, or a CRC's catalogue name (as `check.canonical` spells it)
    over: str = "header+payload"  #: header+payload | start+header+payload
    order: str = "big"  #: of a check wider than one byte (fletcher8: always A, B)


@dataclass(frozen=True, slots=True)
class Field:
    """A number in the header: the seq."""

    offset: int
    size: int  #: 1, 2 or 4 bytes
    order: str = "big"


@dataclass(frozen=True, slots=True)
class Event:
    """Frames with one of `values` at header byte `offset` are events."""

    offset: int
    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Status:
    """A reply whose header byte at `offset` is not in `ok` gets status 0xFF."""

    offset: int
    ok: tuple[int, ...] = (0,)


@dataclass(frozen=True, slots=True)
class FrameDeclaration:
    """`device.frame`: a start, a header, the payload, a check, an end, maybe stuffed."""

    header: int  #: bytes after `start` and before the payload (0..64)
    start: bytes = b""
    length: Length | None = None  #: None: stuffing or `end` ends frames
    check: Check | None = None
    end: bytes = b""
    stuffing: str = "none"
    match: tuple[int, ...] = ()  #: header offsets a reply shares with its request
    seq: Field | None = None
    event: Event | None = None
    status: Status | None = None
