#!/usr/bin/env python3
"""Fuzz target: the ports' device-side decoders (each codec's `PortFraming`, `verld.codec`).

A program writes requests into a virtual port; `PortFraming.feed` decodes them
as the device would. The first control byte picks the codec (verl, length,
line under 7 terminators × 2 encodings, modbus-rtu, modbus-tcp), the second
says after which pieces of the cut stream `flush` is called (the line falling
quiet), the rest cut the stream. max_payload is small, so every bound is
reachable. Invariants, for any bytes:
- `feed` / `flush` / `reply` / `event` / `reset` never raise;
- every request is one the device may receive: a payload within max_payload
  (verl, length; a line without its terminator), or for Modbus unit + PDU that
  passes `check_request` for its flavour (≤ 254 bytes); verl and modbus-tcp
  tags are u16, the others None;
- cutting the stream differently never changes the requests, `bad_frames`,
  `ignored` or `discarding`. Where `flush` falls is part of the input on
  modbus-rtu (silence ends frames there), so the reference feeds each stretch
  between flushes whole and flushes at the same places; elsewhere `flush` is a
  no-op (returns nothing, changes nothing) and the reference is the whole
  stream fed at once;
- bytes are ignored only by a discard; once `discarding`, every feed returns
  nothing and adds exactly its length to `ignored`, `flush` nothing, and nothing
  is buffered; `bad_frames` and `ignored` never decrease, `ignored` never exceeds
  the bytes fed;
- modbus-rtu: a `flush` leaves nothing buffered, and each run of dropped bytes
  (ended by an accepted request or a flush) is one bad frame;
- what is buffered stays within one frame (verl: the longest encoded request;
  length: max_payload + 3; line: max_payload + a partial terminator; modbus-rtu:
  the longest RTU frame; modbus-tcp: the longest MBAP frame less one byte), and
  the framings' own byte counts match their decoders' buffers;
- `reply` round-trips: the matching daemon-side codec of `verld.codec` decodes
  the answer to each request to the same status and data (verl: the same seq;
  modbus-tcp: the same transaction id; Modbus: a normal response of the shape
  the request asks for, and an exception response; line: the same lines, as one
  reply and as a multi-line reply, from data and from text, with status 0: a
  line carries no status, no `error` pattern is set); status None (and, on
  Modbus, empty data) writes nothing; `event` decodes there as an event;
- after `reset`, nothing is buffered, `discarding` is off, and a valid request
  fed alone decodes to exactly that request, with no new bad frame or ignored
  byte; noise right after a reset is one new bad frame;
- resync (verl, line, modbus-rtu): a valid request after any input and a
  delimiter (a zero, the terminator, a flush) is decoded unless discarding (on
  a terminator such as `\\r\\n\\r\\n`, whose head is also its tail, the rest of
  a terminator that ended early may lead the line).

Run: `tools/fuzz/fuzz_port.py -max_total_time=60` (or `tools/fuzz/run`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar

import _harness

from verld.codec import cobs
from verld.codec.base import Inbound, Kind, PortFraming, PortRequest
from verld.codec.length import LengthCodec, LengthPortFraming
from verld.codec.length import encode as length_encode
from verld.codec.line import LineCodec, LinePortFraming
from verld.codec.modbus import (
    MAX_PDU,
    MAX_RTU_FRAME,
    MAX_RTU_UNIT,
    ModbusRtuCodec,
    ModbusRtuPortFraming,
    ModbusTcpCodec,
    ModbusTcpPortFraming,
    check_request,
    mbap_frame,
    rtu_frame,
)
from verld.codec.modbus.pdu import response_shape
from verld.codec.verl import VerlCodec, VerlPortFraming, encode_frame

MAX = 32  #: max_payload: small, so overlong frames, lines and lengths are reachable
#: the link fuzzer's five, a blank line (its last byte occurs earlier in it) and a
#: character that is two bytes in UTF-8
TERMINATORS = ("\n", "\r\n", "\r", ";", "END", "\r\n\r\n", "§")
ENCODINGS = ("utf-8", "latin-1")
CODECS = ("verl", "length", "line", "modbus-rtu", "modbus-tcp")
MAX_UNIT_PDU = 1 + MAX_PDU  #: a Modbus call's data: unit + PDU
#: response function codes whose RTU length is 3 + byte count + 2 (`rtu_response_length`)
COUNTED = frozenset({0x01, 0x02, 0x03, 0x04, 0x0C, 0x11, 0x14, 0x15, 0x17})

F = TypeVar("F", bound=PortFraming)
Steps = list[tuple[bytes, bool]]  #: (bytes to feed, flush after them)


class Outcome(NamedTuple):
    """All a run of the framing tells the front."""

    requests: list[PortRequest]
    bad_frames: int
    ignored: int
    discarding: bool


class Case(Generic[F]):
    """One codec's device side: how to make it, judge it and talk to it."""

    rtu = False  #: `flush` ends frames (modbus-rtu); elsewhere it is a no-op
    #: what ends any partial input, so that a request after it is decoded (with the
    #: `flush` after it, on modbus-rtu); None: no resync (length, modbus-tcp)
    delimiter: bytes | None = None
    #: bytes that are one bad frame before a request (None: the codec counts none)
    noise: bytes | None = None

    def make(self) -> F:
        raise NotImplementedError

    def borders(self) -> set[bytes]:
        """What may be left of the delimiter when it ends early (see `_check_resync`)."""
        return set()

    def check_request(self, request: PortRequest) -> None:
        """Raise unless `request` is one this device may receive."""
        raise NotImplementedError

    def buffered(self, framing: F) -> int:
        """The bytes `framing` holds, checked against its bound."""
        raise NotImplementedError

    def round_trip(self, framing: F, request: PortRequest, filler: bytes) -> None:
        """Answer `request` (with bytes from `filler`) and decode it daemon-side."""
        raise NotImplementedError

    def fresh(self, material: bytes) -> tuple[bytes, PortRequest]:
        """A valid request made from `material`: its wire bytes and what they decode to."""
        raise NotImplementedError


class VerlCase(Case[VerlPortFraming]):
    delimiter = b""  # a request frame starts with its own zero
    noise = b"\x01"  # a chunk too short to be a frame
    #: the longest zero-free run a request frame has: COBS of type, seq, payload, CRC
    BOUND = cobs.max_encoded_length(MAX + 8) + 1

    def make(self) -> VerlPortFraming:
        return VerlPortFraming(MAX)

    def check_request(self, request: PortRequest) -> None:
        assert request.tag is not None and 0 <= request.tag <= 0xFFFF, request
        assert len(request.payload) <= MAX, request

    def buffered(self, framing: VerlPortFraming) -> int:
        tail = len(framing._requests._frames._tail)
        assert tail == framing._run <= self.BOUND, (tail, framing._run)
        assert not framing._requests._frames._skipping  # the framing discards first
        return tail

    def round_trip(self, framing: VerlPortFraming, request: PortRequest, filler: bytes) -> None:
        status, data = (filler or b"\x00")[0], filler[1 : 1 + MAX]
        wire = framing.reply(request.tag, status, data, None)
        got = VerlCodec(MAX).feed(wire, True)
        assert got == [Inbound(Kind.REPLY, request.tag, status, data)], got
        assert framing.reply(request.tag, None, data, None) == b""
        got = VerlCodec(MAX).feed(framing.event(data, None), False)
        assert got == [Inbound(Kind.EVENT, None, None, data)], got

    def fresh(self, material: bytes) -> tuple[bytes, PortRequest]:
        seq, payload = int.from_bytes(material[:2], "big"), material[2 : 2 + MAX]
        return VerlCodec(MAX).encode_request(seq, payload), PortRequest(seq, payload)


class LengthCase(Case[LengthPortFraming]):
    def make(self) -> LengthPortFraming:
        return LengthPortFraming(MAX)

    def check_request(self, request: PortRequest) -> None:
        assert request.tag is None and len(request.payload) <= MAX, request

    def buffered(self, framing: LengthPortFraming) -> int:
        held = len(framing._decoder._buf)
        assert held == framing._buffered <= MAX + 3, (held, framing._buffered)
        assert framing._decoder.desync is None  # the framing resets it on the spot
        return held

    def round_trip(self, framing: LengthPortFraming, request: PortRequest, filler: bytes) -> None:
        status, data = (filler or b"\x00")[0], filler[1 : 1 + MAX]
        got = LengthCodec(MAX).feed(framing.reply(None, status, data, None), True)
        assert got == [Inbound(Kind.REPLY, None, status, data)], got
        assert framing.reply(None, None, data, None) == b""
        got = LengthCodec(MAX).feed(framing.event(data, None), False)
        assert got == [Inbound(Kind.EVENT, None, None, data)], got

    def fresh(self, material: bytes) -> tuple[bytes, PortRequest]:
        payload = material[:MAX]
        return LengthCodec(MAX).encode_request(0, payload), PortRequest(None, payload)


class LineCase(Case[LinePortFraming]):
    def __init__(self, terminator: str, encoding: str) -> None:
        self.terminator, self.encoding = terminator, encoding
        self.term = self.delimiter = terminator.encode(encoding)

    def make(self) -> LinePortFraming:
        return LinePortFraming(MAX, self.terminator, self.encoding)

    def borders(self) -> set[bytes]:
        term = self.term  # its tail past each head that is also its tail (a border)
        return {term[len(term) - n :] for n in range(1, len(term)) if term.startswith(term[n:])}

    def check_request(self, request: PortRequest) -> None:
        line = request.payload  # a program's line ends at CR, LF and the terminator
        assert request.tag is None and 0 < len(line) <= MAX and self.term not in line, request
        assert b"\r" not in line and b"\n" not in line, request

    def buffered(self, framing: LinePortFraming) -> int:
        held = len(framing._buf)  # (a program's line: no end yet, within one line's size)
        assert held <= MAX + len(self.term), held
        return held

    def round_trip(self, framing: LinePortFraming, request: PortRequest, filler: bytes) -> None:
        # A line device's answer is lines of text; the request's own line holds no
        # terminator, so it makes an answer the daemon can split back faithfully.
        data, enc = request.payload, self.encoding
        wire = framing.reply(None, 0, data, None)
        assert framing.reply(None, 0xFF, data, None) == wire  # a line carries no status
        assert framing.event(data, None) == wire
        assert framing.reply(None, None, data, None) == b""
        lines = self._back(data.split(b"\n"))
        texts = [line.decode(enc, "replace") for line in lines]
        got = LineCodec(MAX, self.terminator, enc).feed(wire, True)
        events = [Inbound(Kind.EVENT, None, None, *line) for line in zip(lines, texts, strict=True)]
        assert got == [Inbound(Kind.REPLY, None, 0, lines[0], texts[0]), *events[1:]], got
        if b"OK" in lines:
            return
        # All of it as one multi-line reply, ended by an `OK` line; then the same as text.
        daemon = LineCodec(3 * MAX + 3, self.terminator, enc, end=r"^OK$")
        got = daemon.feed(framing.reply(None, 0, data + b"\nOK", None), True)
        assert got == [
            Inbound(Kind.REPLY, None, 0, b"\n".join([*lines, b"OK"]), "\n".join([*texts, "OK"]))
        ], got
        text = data.decode(enc, "replace") + "\nOK"
        got = daemon.feed(framing.reply(None, 0, b"", text), True)
        raw = b"\n".join(self._back([line.encode(enc) for line in text.split("\n")]))
        assert got == [Inbound(Kind.REPLY, None, 0, raw, raw.decode(enc))], got

    def _back(self, lines: list[bytes]) -> list[bytes]:
        """The lines as the daemon's splitter gives them back (with `\\n`: one CR stripped)."""
        if self.term != b"\n":
            return lines
        return [line[:-1] if line.endswith(b"\r") else line for line in lines]

    def fresh(self, material: bytes) -> tuple[bytes, PortRequest]:
        unsafe = set(self.term) | {0x0A, 0x0D}
        line = bytes(b for b in material if b not in unsafe)[:MAX] or b"x"  # (empty: ignored)
        wire = LineCodec(MAX, self.terminator, self.encoding).encode_request(0, line)
        return wire, PortRequest(None, line)


def _fill(filler: bytes, size: int) -> bytes:
    """`size` bytes taken from `filler` (zero-padded)."""
    return filler[:size].ljust(size, b"\x00")


def _response(request: bytes, filler: bytes) -> bytes:
    """A normal response (unit + PDU) to `request` that its shape allows."""
    unit_fc, fc = request[:2], request[1]
    count, echo = response_shape(request[1:])
    size = (filler or b"\x00")[0] % 251
    if fc in COUNTED:
        count = size if count is None else count
        return unit_fc + bytes((count,)) + _fill(filler[1:], count)
    if fc in (0x05, 0x06, 0x0F, 0x10):
        return unit_fc + (echo if echo is not None else _fill(filler, 4))
    if fc == 0x16:
        return unit_fc + _fill(filler, 6)
    if fc == 0x18:
        return unit_fc + struct.pack(">H", size % 250) + _fill(filler[1:], size % 250)
    return unit_fc + filler[: MAX_PDU - 1]  # its length is unknown: silence ends it


def _exception(request: bytes, filler: bytes) -> tuple[bytes, int]:
    """An exception response to `request`, and its code (1..255)."""
    code = (filler or b"\x01")[0] or 1
    return bytes((request[0], request[1] | 0x80, code)), code


class ModbusRtuCase(Case[ModbusRtuPortFraming]):
    rtu = True
    delimiter = b""  # silence (the flush) is the delimiter
    noise = b"\xff\xff"  # a reserved unit and no function code

    def make(self) -> ModbusRtuPortFraming:
        return ModbusRtuPortFraming()

    def check_request(self, request: PortRequest) -> None:
        assert request.tag is None, request
        assert check_request(request.payload, rtu=True) is None, request
        assert len(request.payload) <= MAX_UNIT_PDU, request

    def buffered(self, framing: ModbusRtuPortFraming) -> int:
        held = len(framing._buf)
        assert held <= MAX_RTU_FRAME, held
        return held

    def round_trip(
        self, framing: ModbusRtuPortFraming, request: PortRequest, filler: bytes
    ) -> None:
        answer = _response(request.payload, filler)
        exception, code = _exception(request.payload, filler)
        for data, status in ((answer, 0), (exception, code)):
            wire = framing.reply(request.tag, status, data, None)
            assert wire == rtu_frame(data)
            master = ModbusRtuCodec(MAX_UNIT_PDU)
            master.encode_request(0, request.payload)
            got = master.feed(wire, True)
            if not got and master.partial:  # a response of unknown length: silence ends it
                got = master.flush()
            assert got == [Inbound(Kind.REPLY, None, status, data)], (got, data)
            assert framing.reply(request.tag, None, data, None) == b""
        assert framing.reply(request.tag, 0, b"", None) == b""
        assert framing.event(answer, None) == b""

    def fresh(self, material: bytes) -> tuple[bytes, PortRequest]:
        m = material.ljust(6, b"\x00")
        unit = m[0] % (MAX_RTU_UNIT + 1)
        if m[1] & 1:  # a function code of unknown length: ended by the `flush` after it
            payload = bytes((unit, 0x41)) + m[2:40]
        else:
            payload = struct.pack(">BBHH", unit, 3, m[2] << 8 | m[3], m[4] % 125 + 1)
        return ModbusRtuCodec(MAX_UNIT_PDU).encode_request(0, payload), PortRequest(None, payload)


class ModbusTcpCase(Case[ModbusTcpPortFraming]):
    noise = mbap_frame(0, b"\x01\x83\x02")  # a response, not a request

    def make(self) -> ModbusTcpPortFraming:
        return ModbusTcpPortFraming()

    def check_request(self, request: PortRequest) -> None:
        assert request.tag is not None and 0 <= request.tag <= 0xFFFF, request
        assert check_request(request.payload, rtu=False) is None, request
        assert len(request.payload) <= MAX_UNIT_PDU, request

    def buffered(self, framing: ModbusTcpPortFraming) -> int:
        held = len(framing._splitter._buf)
        assert held == framing._buffered <= 6 + MAX_UNIT_PDU - 1, (held, framing._buffered)
        return held

    def round_trip(
        self, framing: ModbusTcpPortFraming, request: PortRequest, filler: bytes
    ) -> None:
        tid = request.tag
        assert tid is not None
        answer = _response(request.payload, filler)
        exception, code = _exception(request.payload, filler)
        for data, status in ((answer, 0), (exception, code)):
            wire = framing.reply(tid, status, data, None)
            assert wire == mbap_frame(tid, data)
            master = ModbusTcpCodec(MAX_UNIT_PDU)
            master.encode_request(tid, request.payload)
            got = master.feed(wire, True)
            assert got == [Inbound(Kind.REPLY, tid, status, data)], (got, data)
            assert framing.reply(tid, None, data, None) == b""
        assert framing.reply(tid, 0, b"", None) == b""
        assert framing.event(answer, None) == b""

    def fresh(self, material: bytes) -> tuple[bytes, PortRequest]:
        m = material.ljust(4, b"\x00")
        tid = m[0] << 8 | m[1]
        payload = bytes((m[2], m[3] % 0x7F + 1)) + m[4 : 4 + 40]
        return ModbusTcpCodec(MAX_UNIT_PDU).encode_request(tid, payload), PortRequest(tid, payload)


def case_for(selector: int) -> Case[Any]:
    """The codec picked by one byte (line: its terminator and encoding too)."""
    codec = CODECS[selector % 5]
    if codec == "verl":
        return VerlCase()
    if codec == "length":
        return LengthCase()
    if codec == "line":
        line = selector // 5
        return LineCase(TERMINATORS[line % 7], ENCODINGS[line // 7 % 2])
    if codec == "modbus-rtu":
        return ModbusRtuCase()
    return ModbusTcpCase()


def check(data: bytes) -> None:
    """Every invariant above."""
    control, stream = _harness.split(data)
    case = case_for(control[0] if control else 0)
    mask = control[1] if len(control) > 1 else 0
    pieces = _harness.cut(stream, control[2:])
    steps = [(piece, bool(mask >> i & 1)) for i, piece in enumerate(pieces)]
    framing = case.make()
    outcome = _run(case, framing, steps)
    reference = _run(case, case.make(), _reference(case, steps))
    assert outcome == reference, (outcome, reference)
    for i, request in enumerate(outcome.requests[:8]):
        case.round_trip(framing, request, stream[i:])
    _check_reset(case, framing, stream)
    _check_resync(case, stream)


def _reference(case: Case[Any], steps: Steps) -> Steps:
    """The same input, fed as few times as its meaning allows."""
    if not case.rtu:
        return [(b"".join(piece for piece, _ in steps), False)]
    stretches: Steps = []
    held: list[bytes] = []
    for piece, flush in steps:  # the stretches between flushes, each fed whole
        held.append(piece)
        if flush:
            stretches.append((b"".join(held), True))
            held = []
    return [*stretches, (b"".join(held), False)] if held else stretches


def _run(case: Case[Any], framing: PortFraming, steps: Steps) -> Outcome:
    requests: list[PortRequest] = []
    fed = 0
    noise = _NoiseRuns(case, framing) if case.rtu else None
    for piece, flush in steps:
        actions: list[tuple[Callable[[], list[PortRequest]], int, bool]] = [
            (partial(framing.feed, piece), len(piece), False)
        ]
        if flush:
            actions.append((framing.flush, 0, True))
        for action, size, quiet in actions:
            before = (framing.bad_frames, framing.ignored, framing.discarding)
            held = case.buffered(framing)
            out = _step(case, framing, action, size)
            after = (framing.bad_frames, framing.ignored, framing.discarding)
            if noise is not None:
                noise.step(held, size, out, before[0], quiet)
            if quiet and case.rtu:  # silence ends every candidate: nothing is left
                assert case.buffered(framing) == 0
            elif quiet:  # self-delimiting: silence ends nothing
                assert out == [] and before == after, (out, before, after)
            requests += out
        fed += len(piece)
        assert framing.ignored <= fed, (framing.ignored, fed)
    return Outcome(requests, framing.bad_frames, framing.ignored, framing.discarding)


class _NoiseRuns:
    """modbus-rtu counts each run of dropped bytes as one bad frame, a run ended by an
    accepted request or by silence (`flush`): checked wherever a step's drops tell it."""

    def __init__(self, case: Case[Any], framing: PortFraming) -> None:
        self.case, self.framing = case, framing
        self.new: bool | None = True  #: the next byte dropped starts a run (None: unknown)

    def step(self, held: int, size: int, out: list[PortRequest], bad: int, quiet: bool) -> None:
        """After a feed of `size` bytes (or a flush: `quiet`) that found `held` buffered."""
        framing = self.framing
        if framing.discarding:
            return
        used = sum(len(request.payload) + 2 for request in out)  # each with its CRC
        dropped = held + size - self.case.buffered(framing) - used
        grew = framing.bad_frames - bad
        assert dropped >= 0 and grew <= min(dropped, len(out) + 1), (dropped, grew)
        if out:  # bytes dropped after the last request started a run, or none did
            self.new = None
        elif dropped:  # all in one run: a new one is one more bad frame, an old one none
            assert self.new is None or grew == int(self.new), (grew, self.new)
            self.new = False
        if quiet:
            self.new = True


def _step(
    case: Case[Any], framing: PortFraming, action: Callable[[], list[PortRequest]], size: int
) -> list[PortRequest]:
    """One feed (of `size` bytes) or flush, and the invariants around it."""
    bad, ignored, discarding = framing.bad_frames, framing.ignored, framing.discarding
    out = action()
    if discarding:  # everything is ignored until `reset`
        after = (out, framing.bad_frames, framing.ignored, framing.discarding)
        assert after == ([], bad, ignored + size, True), after
    assert framing.bad_frames >= bad and framing.ignored >= ignored
    assert framing.ignored == ignored or framing.discarding  # only a discard ignores bytes
    for request in out:
        case.check_request(request)
    held = case.buffered(framing)
    assert not (framing.discarding and held), held  # nothing is kept while discarding
    return out


def _check_reset(case: Case[Any], framing: PortFraming, stream: bytes) -> None:
    bad, ignored = framing.bad_frames, framing.ignored
    wire, request = case.fresh(stream)
    if case.noise is not None:  # a reset starts afresh: noise right after it is counted
        framing.reset()
        got = framing.feed(case.noise + wire) + framing.flush()
        assert got == [request] and framing.bad_frames == bad + 1, (got, framing.bad_frames)
        bad += 1
    framing.reset()
    assert not framing.discarding and case.buffered(framing) == 0
    got = framing.feed(wire) + framing.flush()
    assert got == [request], (got, request)
    assert (framing.bad_frames, framing.ignored, framing.discarding) == (bad, ignored, False)


def _check_resync(case: Case[Any], stream: bytes) -> None:
    """A valid request after any input and a delimiter is decoded, unless discarding."""
    if case.delimiter is None:
        return
    framing = case.make()
    wire, request = case.fresh(stream)
    got = framing.feed(stream + case.delimiter) + framing.flush() + framing.feed(wire)
    got += framing.flush()
    if framing.discarding:
        return
    assert got and got[-1].tag == request.tag, (got[-1:], request)
    # A terminator whose head is also its tail (`\r\n\r\n`) may end early, in input
    # plus its own head: what is left of it then leads the next line.
    lead, payload = got[-1].payload, request.payload
    assert lead.endswith(payload), (got[-1], request)
    lead = lead[: len(lead) - len(payload)]
    assert not lead or lead in case.borders(), (got[-1], request)


# --- seeds ------------------------------------------------------------------------------------
READ = bytes.fromhex("01030000000a")  #: unit 1 reads 10 holding registers
WRITE = bytes.fromhex("01100001000204000a0102")  #: unit 1 writes 2 registers (fc 16)
CUSTOM = bytes.fromhex("0141deadbeef")  #: fc 0x41: length unknown, ended by silence


def _seed(selector: int, mask: int, stream: bytes) -> bytes:
    cuts = bytes((0x30, 0x60, 0x90, 0xC0))
    return bytes((2 + len(cuts), selector, mask)) + cuts + stream


def _streams(selector: int) -> list[bytes]:
    codec = CODECS[selector % 5]
    if codec == "verl":
        program = VerlCodec(MAX)
        good = program.encode_request(1, b"\x01hi") + program.encode_request(0xFFFF, bytes(MAX))
        bad = bytearray(program.encode_request(2, b"xy"))
        bad[-3] ^= 1
        reply = encode_frame(Kind.REPLY, 3, b"\x00")
        over = VerlCodec(MAX + 1).encode_request(4, bytes(MAX + 1))
        longest = program.encode_request(5, b"\xff" * MAX)
        return [
            good + b"\x07noise" + bytes(bad) + reply + over + longest,
            good + b"\x01" * (VerlCase.BOUND + 1) + b"\x00" + good,
        ]
    if codec == "length":
        good = length_encode(b"\x01abc") + length_encode(b"") + length_encode(bytes(MAX))
        return [good, good + struct.pack(">I", MAX + 1) + b"zz" + good, b"\x00\x00\x01"]
    if codec == "line":
        lines = (
            "*IDN?\nMEAS:VOLT?\r\n\nOK;x;ENDyEN\r\r\na§b\r\n\r\nc\r\n".encode() + b"z" * MAX + b"\n"
        )
        return [lines, lines + b"y" * (MAX + 4) + b"\n" + lines, "é\xff\n".encode()]
    if codec == "modbus-rtu":
        frames = rtu_frame(READ) + rtu_frame(WRITE) + rtu_frame(CUSTOM)
        bad = bytearray(rtu_frame(READ))
        bad[-1] ^= 0xFF
        junk = b"\x55\xaa\x01" + bytes(bad) + rtu_frame(b"\xf8" + READ[1:])
        return [frames, junk + frames, b"\x01\x41" + bytes(300) + rtu_frame(READ)]
    frames = mbap_frame(1, READ) + mbap_frame(0xBEEF, b"\x07\x04\x00\x00")
    dropped = mbap_frame(2, b"\x01\x83\x02")
    return [
        frames + dropped + frames,
        frames + b"\x00\x04\x00\x00\x01\x00" + b"\x01" * 8 + frames,
        b"\x00\x01\x00\x07\x00\x06" + READ,
    ]


def seeds() -> list[bytes]:
    """Valid frames of every codec, with garbage between them, and oversize input."""
    selectors = [0, 1, *(2 + 5 * line for line in range(14)), 3, 4]
    return [
        _seed(selector, mask, stream)
        for selector in selectors
        for stream in _streams(selector)
        for mask in (0x00, 0x05, 0xFF)
    ]


if __name__ == "__main__":
    _harness.main(check, seeds(), "port")
