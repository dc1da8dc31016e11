"""What a simulated device's personality is: the protocol every one follows and the
request, response and status values they share.

A personality is one codec's device: it splits the input into requests with its
codec's device side (`verld.codec.*`), runs each command and frames the answer the
same way. Only the command set is the simulator's own. `Device`
(`verld.sim.device`) applies the faults around whichever personality it drives.
"""

from __future__ import annotations

import random
from typing import NamedTuple, Protocol

__all__ = [
    "FAILED",
    "IDENTITY",
    "MAX_COUNT",
    "MAX_FIXES",
    "OK",
    "REJECTED",
    "Personality",
    "Request",
    "Response",
]

IDENTITY = b"verld-sim 0.1.0"
OK, FAILED, REJECTED = 0x00, 0xFF, 0xFE
MAX_COUNT = 65535  #: most events / lines one command may ask for (u16 on the binary codecs)
MAX_FIXES = 3600  #: most fixes one `NMEA n` may ask for (an hour at 1 Hz, about 750 KB)


class Request(NamedTuple):
    """One request as split from the input: its seq (verl) or transaction id
    (modbus-tcp), else 0, and its payload."""

    seq: int
    payload: bytes


class Response(NamedTuple):
    """What a command produces: wire chunks of the reply, then of its events."""

    delay_ms: int
    reply: list[bytes]
    events: list[bytes]


class Personality(Protocol):
    """How one codec frames requests, runs commands and encodes answers."""

    @property
    def pipelined(self) -> bool:
        """True when replies carry a seq and so may go out of request order."""
        ...

    @property
    def bad_frames(self) -> int:
        """Input dropped as noise."""
        ...

    @property
    def oversize(self) -> int:
        """Requests above max_payload."""
        ...

    def decode(self, data: bytes) -> list[Request]: ...
    def respond(self, request: Request) -> Response: ...
    def encode_event(self, payload: bytes) -> bytes: ...
    def corrupt(self, chunk: bytes, rng: random.Random) -> bytes: ...
    def reset(self) -> None: ...
