"""The simulated device's behaviour, without I/O.

Strategy: a `Device` takes bytes read from the link and the current time and
returns `Timed` chunks — bytes to write no earlier than `due`. A *personality*
(the protocol is `verld.sim.personality`) splits the input into requests with its
codec's device side, runs each command and encodes the reply and events the same
way; the `Device` applies the faults (hang, drop, latency/jitter, garbage,
corrupt) around that, so they behave the same on every codec. The I/O loop owns
the clock, the write buffer and baud pacing.

`make_personality` picks one by what the codec's requests are (its spec says):
unit + PDU on a Modbus bus (`bus`): a register map (`verld.sim.modbus`); lines
(`text`): the text command set (`LinePersonality`); binary commands: the binary
command set over the codec's own device framing (`CommandPersonality` over
`CodecSpec.commands`), so a new binary codec needs nothing here.

Replies that carry a seq (`verl`: the spec's `pipelined`) are scheduled each on
its own, so a delayed call does not hold back a fast one. Without a seq
(`length`, `line`) replies go out in request order (a reply is never due before
the previous one).

GPS mode (line): `NMEA n` answers `OK`, then n fixes as event lines (`verld.sim.nmea`);
with `--nmea HZ` the loop sends fixes on its own through `Device.unsolicited`.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from verld.codec.base import CommandFraming
from verld.codec.frame.declaration import FrameDeclaration
from verld.codec.line import LineSplitter
from verld.codec.registry import spec
from verld.config import Config, DeviceConfig
from verld.sim.faults import Counters, Faults
from verld.sim.modbus import ModbusRtuPersonality, ModbusSlave, ModbusTcpPersonality
from verld.sim.nmea import Fix, fix_sentences
from verld.sim.personality import (
    FAILED,
    IDENTITY,
    MAX_COUNT,
    MAX_FIXES,
    OK,
    REJECTED,
    Personality,
    Request,
    Response,
)


class Timed(NamedTuple):
    """Bytes to write once the clock reaches `due`."""

    due: float
    data: bytes


# --- the command set ---------------------------------------------------------


def event_payload(index: int) -> bytes:
    """The payload of event number `index` of an events command."""
    return b"evt" + struct.pack(">I", index)


def run_binary(payload: bytes) -> tuple[int, bytes, int, int]:
    """Run one verl/length command: (status, data, delay ms, number of events)."""
    if not payload:
        return OK, b"", 0, 0
    op, args = payload[0], payload[1:]
    if op == 0x01:
        return OK, args, 0, 0
    if op == 0x02:
        return OK, IDENTITY, 0, 0
    if op == 0x03 and len(args) >= 2:
        return OK, args[2:], int.from_bytes(args[:2], "big"), 0
    if op == 0x04:
        return FAILED, b"", 0, 0
    if op == 0x05 and args:
        return args[0], args[1:], 0, 0
    if op == 0x06 and len(args) >= 2:
        return OK, b"", 0, int.from_bytes(args[:2], "big")
    if op in (0x03, 0x05, 0x06):
        return REJECTED, b"bad arguments", 0, 0
    return REJECTED, b"unknown command", 0, 0


def run_line(line: str) -> tuple[list[str], int, int]:
    """Run one text command: (reply lines, delay ms, number of events or fixes)."""
    word, _, rest = line.partition(" ")
    word = word.upper()
    bare = not rest.strip()
    if word == "PING" and bare:
        return ["PONG"], 0, 0
    if word == "ECHO":
        return [rest], 0, 0
    if word == "*IDN?" and bare:
        return [IDENTITY.decode()], 0, 0
    if word == "FAIL" and bare:
        return ["ERROR failed"], 0, 0
    if word in ("DELAY", "EVENTS", "MULTI", "NMEA"):
        count_text, _, text = rest.partition(" ")
        count = _parse_count(count_text, MAX_FIXES if word == "NMEA" else MAX_COUNT)
        if count is None or (word != "DELAY" and text):
            return ["ERROR bad arguments"], 0, 0
        if word == "DELAY":
            return [text], count, 0
        if word in ("EVENTS", "NMEA"):
            return ["OK"], 0, count
        return [f"LINE {i}" for i in range(count)] + ["OK"], 0, 0
    return ["ERROR unknown command"], 0, 0


def _parse_count(text: str, most: int = MAX_COUNT) -> int | None:
    if not text.isdigit() or int(text) > most:
        return None
    return int(text)


def _flip(chunk: bytes, candidates: list[int], rng: random.Random) -> bytes:
    """Flip one byte at one of `candidates`, never turning it into 0x00."""
    if not candidates:
        return chunk
    index = rng.choice(candidates)
    old = chunk[index]
    new = rng.choice([v for v in range(1, 256) if v != old])
    return chunk[:index] + bytes([new]) + chunk[index + 1 :]


# --- the personalities -------------------------------------------------------


class CommandPersonality:
    """The binary command set (verl, length) over the codec's own device framing;
    a request above max_payload that the framing passes on gets status 0xFE."""

    def __init__(self, framing: CommandFraming, max_payload: int, pipelined: bool) -> None:
        self.framing = framing
        self.max_payload = max_payload
        self.pipelined = pipelined
        self._refused = 0  #: oversize requests answered 0xFE

    @property
    def bad_frames(self) -> int:
        return self.framing.bad_frames

    @property
    def oversize(self) -> int:
        return self.framing.oversize + self._refused

    def decode(self, data: bytes) -> list[Request]:
        return [Request(tag or 0, payload) for tag, payload in self.framing.feed(data)]

    def respond(self, request: Request) -> Response:
        if len(request.payload) > self.max_payload:
            self._refused += 1
            return Response(0, [self.framing.reply(request.seq, REJECTED, b"too large")], [])
        status, data, delay, count = run_binary(request.payload)
        reply = self.framing.reply(request.seq, status, data)
        events = [self.encode_event(event_payload(i)) for i in range(count)]
        return Response(delay, [reply], events)

    def encode_event(self, payload: bytes) -> bytes:
        return self.framing.event(payload)

    def corrupt(self, chunk: bytes, rng: random.Random) -> bytes:
        return _flip(chunk, self.framing.damageable(chunk), rng)

    def reset(self) -> None:
        self.framing.reset()


class LinePersonality:
    """Text lines (SCPI-like); replies end with `reply_terminator`. Also a GPS (NMEA)."""

    pipelined = False
    oversize = 0

    def __init__(self, max_payload: int, terminator: bytes, reply_terminator: bytes) -> None:
        self.bad_frames = 0
        self.fix = Fix()  #: where the GPS is: `NMEA n` and `--nmea` report it
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)  #: stamps the fixes
        self._terminator = reply_terminator
        self._splitter = LineSplitter(terminator, max_payload)

    def decode(self, data: bytes) -> list[Request]:
        # Blank lines are ignored, as SCPI instruments do.
        return [Request(0, line) for line in self._splitter.feed(data) if line.strip()]

    def respond(self, request: Request) -> Response:
        text = request.payload.decode("utf-8", errors="replace").lstrip()
        lines, delay, count = run_line(text)
        if text.partition(" ")[0].upper() == "NMEA":
            events = self.fix_events(count)
        else:
            events = [self._encode(f"EVENT {i}") for i in range(count)]
        return Response(delay, [self._encode(line) for line in lines], events)

    def fix_events(self, count: int = 1) -> list[bytes]:
        """`count` fixes a second apart from the clock's now: each sentence an event line."""
        start = self.clock()
        fixes = (start + timedelta(seconds=i) for i in range(count))
        return [self._encode(line) for when in fixes for line in fix_sentences(self.fix, when)]

    def _encode(self, line: str) -> bytes:
        return line.encode() + self._terminator

    def encode_event(self, payload: bytes) -> bytes:
        return payload + self._terminator

    def corrupt(self, chunk: bytes, rng: random.Random) -> bytes:
        # Not the terminator, so the reply is still one line, with wrong text.
        end = len(chunk) - len(self._terminator)
        return _flip(chunk, [i for i in range(end) if chunk[i] not in b"\r\n"], rng)

    def reset(self) -> None:
        self._splitter.reset()


# --- the device --------------------------------------------------------------


class Device:
    """Requests in, timed answers out, with the faults applied."""

    def __init__(
        self, personality: Personality, faults: Faults, counters: Counters, rng: random.Random
    ) -> None:
        self.personality = personality
        self.faults = faults
        self.counters = counters
        self.rng = rng
        self._last_due = 0.0

    def feed(self, data: bytes, now: float) -> list[Timed]:
        """Handle bytes read from the link; return what to write and when."""
        out = []
        for request in self.personality.decode(data):
            timed = self._answer(request, now)
            if timed is not None:
                out.append(timed)
        self.counters.oversize = self.personality.oversize
        return out

    def _answer(self, request: Request, now: float) -> Timed | None:
        self.counters.requests += 1
        if self.faults.hang:
            self.counters.ignored += 1
            return None
        response = self.personality.respond(request)
        if not response.reply and not response.events:
            return None  # nothing to say (a Modbus request to a unit not served)
        if self._chance(self.faults.drop):
            self.counters.dropped += 1
            return None
        due = now + response.delay_ms / 1000.0 + self.faults.reply_delay(self.rng)
        if not self.personality.pipelined:
            due = self._last_due = max(due, self._last_due)
        self.counters.replies += 1
        self.counters.events += len(response.events)
        return Timed(due, self._damage(response.reply) + b"".join(response.events))

    def _damage(self, chunks: list[bytes]) -> bytes:
        """`chunks` joined, maybe after a garbage burst, maybe with one byte flipped."""
        burst = self.garbage() if self._chance(self.faults.garbage) else b""
        chunks = list(chunks)
        if self._chance(self.faults.corrupt):
            at = self.rng.randrange(len(chunks))
            flipped = self.personality.corrupt(chunks[at], self.rng)
            self.counters.corrupted += flipped != chunks[at]
            chunks[at] = flipped
        return burst + b"".join(chunks)

    def event(self, payload: bytes) -> bytes:
        """Encode one event to send now (control socket `event HEX`)."""
        self.counters.events += 1
        return self.personality.encode_event(payload)

    def unsolicited(self, events: list[bytes]) -> bytes | None:
        """Events sent on its own (`--nmea`) with a reply's faults but delays; None: none."""
        if self.faults.hang or not events:
            return None
        if self._chance(self.faults.drop):
            self.counters.dropped += 1
            return None
        self.counters.events += len(events)
        return self._damage(events)

    def garbage(self, size: int = 0) -> bytes:
        """A burst of random bytes: `size` of them, or 1..64 when size is 0."""
        self.counters.garbage_bursts += 1
        return self.rng.randbytes(size or self.rng.randint(1, 64))

    def reset(self) -> None:
        """Forget partial input and reply ordering (after an unplug or a new connection)."""
        self.personality.reset()
        self._last_due = 0.0

    def status(self) -> dict[str, int]:
        """Counters, codec ones included."""
        return self.counters.as_dict() | {"bad_frames": self.personality.bad_frames}

    def _chance(self, probability: float) -> bool:
        return probability > 0 and self.rng.random() < probability


def make_personality(
    codec: str,
    max_payload: int,
    terminator: bytes = b"\n",
    crlf: bool = False,
    units: tuple[int, ...] = (1,),
    frame: FrameDeclaration | None = None,
) -> Personality:
    """The device for the codec called `codec`; `units`: the Modbus units served;
    `frame`: a declared framing (the frame codec's)."""
    found = spec(codec)
    if found.declared:  # its traits and framing come from the declaration
        device = DeviceConfig(codec=codec, max_payload=max_payload, frame=frame)
        found = found.settled(Config(device=device))
    if found.bus:  # unit + PDU: a register map; RTU's has a broadcast address
        slave = ModbusSlave(units, broadcast=found.rtu)
        return ModbusRtuPersonality(slave) if found.rtu else ModbusTcpPersonality(slave)
    if found.text:
        return LinePersonality(max_payload, terminator, b"\r\n" if crlf else terminator)
    if found.commands is None:
        raise ValueError(f"codec {codec}: its requests are neither lines nor binary commands")
    return CommandPersonality(found.commands(max_payload), max_payload, found.pipelined)
