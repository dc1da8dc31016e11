"""What the daemon needs from a link codec, and what a device needs from its other side.

A codec is sans-I/O: it turns a request into bytes and bytes from the device into
`Inbound` messages. It never touches a file descriptor, a clock or asyncio, so it
is tested by feeding bytes. Noise is counted in `bad_frames` and skipped; a
stream that is out of step beyond repair (the `length` codec's bad length) sets
`desync` and the session reconnects.

Each codec has two sides: the host side (`LinkCodec`: requests out, replies and
events in) is the daemon's; the device side (`PortFraming`: requests in, replies
and events out) is what verld plays on a virtual serial port.

Device side, answers: `reply` takes how the call ended. A status of None means
the device did not answer (the call timed out or never went out): nothing is
written, exactly as from a silent device, and the program's own timeout takes
over. On the Modbus codecs an empty `data` is treated the same way; Modbus has no
events, so `event` writes nothing there.

Device side, bounds: input that cannot become a request within
`device.max_payload` (an oversize length prefix, an impossible MBAP header, an
over-long line or verl frame, an RTU frame of unknown length longer than any RTU
frame) is discarded: its bytes are counted in `ignored`, `discarding` turns True
and every byte fed after is ignored too, until the front, having seen
`device.guard` seconds of quiet, calls `reset`. Whatever the program wrote in the
meantime is out of step and worthless; after a quiet spell it is starting afresh.

A device's own side (`CommandFraming`: the codecs whose requests are binary
commands, verl and length) is what a device that runs those commands reads and
writes, the simulator's: unlike a port's framing it never goes out of step, it
skips noise and reads on as a device does, and it says which bytes of an answer
may be damaged while keeping the framing (the simulator's corrupt fault).
"""

from __future__ import annotations

import enum
from typing import NamedTuple, Protocol

from verld.compiled import mypyc_attr


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


class PortRequest(NamedTuple):
    """One request a program wrote to its port."""

    #: what the front keeps for the answer: the program's seq (verl), its transaction
    #: id (modbus-tcp), or None (codecs without either)
    tag: int | None
    #: the call's payload as verld's API `call` takes it: the request payload (verl,
    #: length), unit + PDU (Modbus), the line's encoded text without terminator (line)
    payload: bytes


class PortFraming(Protocol):
    """The device side of one codec, for one port: requests in, answers out."""

    @property
    def bad_frames(self) -> int:
        """Requests dropped as malformed since creation (a monotonic counter)."""
        ...

    @property
    def ignored(self) -> int:
        """Bytes discarded since creation: past the bounds, and while `discarding`."""
        ...

    @property
    def discarding(self) -> bool:
        """Input overflowed: everything is ignored until `reset` (after a quiet guard)."""
        ...

    def feed(self, data: bytes) -> list[PortRequest]:
        """The requests completed by `data` (bytes the program wrote), in order."""
        ...

    def flush(self) -> list[PortRequest]:
        """The program fell quiet (3.5 character times on modbus-rtu; `device.guard`
        where the spec says `guard_flush`): requests that ends; the rest of a partial
        request is dropped (a no-op elsewhere)."""
        ...

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        """The bytes to write for the call of `tag` that ended with this status and
        data (line: text); b"" when there is nothing to write (status None)."""
        ...

    def event(self, data: bytes, text: str | None) -> bytes:
        """The bytes to write for one device event."""
        ...

    def reset(self) -> None:
        """Forget partial input and end `discarding` (the port was quiet for the guard)."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)
class Bounded:
    """The `bad_frames` / `ignored` / `discarding` bookkeeping every device side shares."""

    def __init__(self) -> None:
        self.bad_frames = 0
        self.ignored = 0
        self.discarding = False

    def _discard(self, count: int) -> None:
        """`count` bytes could not become a request: ignore them and all that follows."""
        self.ignored += count
        self.discarding = True

    def flush(self) -> list[PortRequest]:
        """Nothing: on a self-delimiting framing silence ends nothing."""
        return []


class CommandFraming(Protocol):
    """A device's own side of a codec whose requests are binary commands (payload in;
    status byte and data, or an event, out): the simulator's."""

    @property
    def bad_frames(self) -> int:
        """Input dropped as noise since creation."""
        ...

    @property
    def oversize(self) -> int:
        """Requests above max_payload dropped unanswered (a codec that reads them
        whole passes them on: the device answers them)."""
        ...

    def feed(self, data: bytes) -> list[PortRequest]:
        """The requests completed by `data`, in order; the tag is the request's seq."""
        ...

    def reply(self, tag: int | None, status: int, data: bytes) -> bytes:
        """The reply to the request of `tag`."""
        ...

    def event(self, data: bytes) -> bytes:
        """One event."""
        ...

    def damageable(self, chunk: bytes) -> list[int]:
        """Where in `chunk` (one reply or event) a byte may change, to anything but
        0x00, and the framing still hold: the receiver's check must catch it."""
        ...

    def reset(self) -> None:
        """Forget partial input."""
        ...
