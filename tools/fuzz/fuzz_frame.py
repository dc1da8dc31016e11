#!/usr/bin/env python3
"""Fuzz target: the `frame` codec's reader over random valid declarations.

The input's first `DECL` bytes declare a framing (`declaration`: header size, start,
length field, check kind among every one verld knows, end, stuffing, seq, match,
event); one that `rules.problems` refuses is skipped, as the config would refuse it.
The rest is a stream, cut as the harness cuts it.

Invariants, for any declaration the config accepts and any bytes:
- `FrameReader.feed` and `flush` never raise; every frame's data is a whole header
  and at most max_payload bytes; the buffer never holds more than the largest frame
  (stuffed: the largest stuffed frame);
- cutting the stream differently changes neither the frames, `bad_frames`, nor what
  a `flush` (the quiet guard) then finds;
- a good frame after any input and a quiet guard is read, whole (where the framing can
  carry its data: with a length field or stuffing, or no `end` bytes inside it);
- the device side (`FramePortFraming`) makes the same requests, tagged with their
  seq; a reply to one decodes to the reply's data with that seq; the daemon side
  (`FrameCodec`) reads the same frames as replies and events, never raising.

Run: `tools/fuzz/fuzz_frame.py -max_total_time=60` (or `tools/fuzz/run 60 frame`).
"""

from __future__ import annotations

import _harness

from verld.codec.frame.check import KINDS
from verld.codec.frame.declaration import (
    COUNTS,
    FIELD_SIZES,
    ORDERS,
    OVERS,
    STUFFINGS,
    Check,
    Event,
    Field,
    FrameDeclaration,
    Length,
)
from verld.codec.frame.device import FramePortFraming
from verld.codec.frame.frames import FrameFormat, FrameReader
from verld.codec.frame.host import FrameCodec
from verld.codec.frame.rules import problems

MAX = 48  #: max_payload: the most data bytes (header included) a frame carries
DECL = 18  #: input bytes that declare the framing


def declaration(d: bytes) -> FrameDeclaration | None:
    """The framing `d` (DECL bytes) declares, or None: one the config refuses."""
    d = d.ljust(DECL, b"\x00")
    header = d[0] % 9
    start = d[2:4][: d[1] % 3]
    length = None
    size = FIELD_SIZES[(d[4] >> 1) % 3]
    if d[4] & 1 and size <= header:
        length = Length(
            offset=d[5] % (header - size + 1),
            size=size,
            order=ORDERS[d[4] >> 3 & 1],
            counts=COUNTS[(d[4] >> 4) % 3],
            adjust=d[6] % 7 - 3,
        )
    check = None
    if d[7] % 4:  # (a check three times in four)
        kind = KINDS[d[8] % len(KINDS)]
        check = Check(kind, over=OVERS[d[7] >> 2 & 1], order=ORDERS[d[7] >> 3 & 1])
    end = d[10:12][: d[9] % 3]
    stuffing = STUFFINGS[d[12] % 3]
    seq = None
    seq_size = FIELD_SIZES[(d[13] >> 1) % 2]
    if d[13] & 1 and seq_size <= header:
        seq = Field(offset=d[14] % (header - seq_size + 1), size=seq_size)
    match = (d[15] % header,) if header and d[15] & 0x80 else ()
    event = Event(d[16] % header, (d[17],)) if header and d[16] & 0x80 else None
    frame = FrameDeclaration(
        header=header,
        start=start,
        length=length,
        check=check,
        end=end,
        stuffing=stuffing,
        match=match,
        seq=seq,
        event=event,
    )
    return None if problems(frame, window=1, max_payload=MAX, ping=None) else frame


def check(data: bytes) -> None:
    """Every invariant above."""
    frame = declaration(data[:DECL])
    if frame is None:
        return
    form = FrameFormat(frame, MAX)
    control, stream = _harness.split(data[DECL:])
    pieces = _harness.cut(stream, control)
    whole = _read(form, [stream])
    assert whole == _read(form, pieces)
    _port(frame, pieces, whole[0] + whole[2])
    _host(frame, pieces)
    _after_guard(form, stream)


def _read(form: FrameFormat, chunks: list[bytes]) -> tuple[list[bytes], int, list[bytes], int]:
    """The frames, bad frames, then what a flush finds and the bad frames after it."""
    reader = FrameReader(form)
    bound = form.max_frame if form.stuffing is None else form.stuffing.max_stuffed(form.max_frame)
    frames: list[bytes] = []
    for chunk in chunks:
        out = reader.feed(chunk)
        assert all(form.header <= len(data) <= MAX for data in out), out
        assert len(reader._buf) <= bound, (len(reader._buf), bound)
        frames += out
    bad = reader.bad_frames
    flushed = reader.flush()
    assert all(form.header <= len(data) <= MAX for data in flushed), flushed
    assert not reader.partial
    return frames, bad, flushed, reader.bad_frames


def _port(frame: FrameDeclaration, chunks: list[bytes], frames: list[bytes]) -> None:
    """A port reads the same frames as requests tagged with their seq; replies decode."""
    port = FramePortFraming(frame, MAX)
    requests = [request for chunk in chunks for request in port.feed(chunk)]
    requests += port.flush()
    assert [request.payload for request in requests] == frames
    form = port.form
    for request in requests:
        assert request.tag == form.seq_of(request.payload)
        reply = port.reply(request.tag, 0, request.payload, None)
        if reply and _carried(form, reply):
            expected = _fielded(form, request.payload, request.tag)
            assert FrameReader(form).feed(reply) == [expected], (reply, expected)


def _host(frame: FrameDeclaration, chunks: list[bytes]) -> None:
    """The daemon side never raises; its messages carry whole frames."""
    codec = FrameCodec(frame, MAX)
    for i, chunk in enumerate(chunks):
        for message in codec.feed(chunk, awaiting_reply=i % 2 == 0):
            assert frame.header <= len(message.data) <= MAX
    codec.flush()


def _after_guard(form: FrameFormat, stream: bytes) -> None:
    """After any input and a quiet guard, a good frame is read whole."""
    data = stream[: form.header + 5].ljust(form.header, b"\x00")
    if form.refuse(data) is not None:
        return
    encoded = form.encode(data, 1)
    if not _carried(form, encoded):
        return
    reader = FrameReader(form)
    reader.feed(stream)
    reader.flush()
    assert reader.feed(encoded) == [_fielded(form, data, 1)], encoded


def _fielded(form: FrameFormat, data: bytes, seq: int | None) -> bytes:
    """`data` as its frame carries it: the length field (and seq) written."""
    encoded = form.encode(data, seq)
    if form.stuffing is not None:
        encoded = form.stuffing.unstuff(encoded[:-1])
    first = len(form.start)
    return encoded[first : first + len(data)]


def _carried(form: FrameFormat, encoded: bytes) -> bool:
    """The frame's own bytes cannot end it early: a length field or stuffing, or no
    `end` before its last."""
    if form.frame.length is not None or form.stuffing is not None:
        return True
    first = len(form.start) + form.header + form.check_size
    return encoded.find(form.end, first) == len(encoded) - len(form.end)


def _seed(declared: bytes, frames: list[bytes]) -> bytes:
    return declared.ljust(DECL, b"\x00") + b"\x00" + b"".join(frames)


def seeds() -> list[bytes]:
    """STX/len/seq/CRC/ETX (configs/frame.yaml's shape), UBX-like, SLIP and COBS framings."""
    out = []
    # header 3, start 02, length 1 byte at 0, CRC, end 03, seq at 1
    for declared in (
        bytes((3, 1, 2, 0, 1, 0, 3, 1, 5, 1, 3, 0, 0, 1, 1, 0, 0x80 | 2, 0x80)),
        bytes((4, 2, 0xB5, 0x62, 3, 2, 3, 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
        bytes((2, 0, 0, 0, 0, 0, 0, 1, 9, 0, 0, 0, 1, 1, 0, 0, 0, 0)),
        bytes((2, 0, 0, 0, 1, 0, 3, 2, 4, 0, 0, 0, 2, 0, 0, 0x81, 0, 0)),
    ):
        frame = declaration(declared)
        assert frame is not None, declared
        form = FrameFormat(frame, MAX)
        good = [form.encode(bytes(frame.header) + payload, 7) for payload in (b"", b"hi", b"\x03")]
        out.append(_seed(declared, good))
        out.append(_seed(declared, [good[1][:3], b"\x02\x20junk", *good]))
    return out


if __name__ == "__main__":
    _harness.main(check, seeds(), "frame")
