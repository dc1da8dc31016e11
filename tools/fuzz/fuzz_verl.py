#!/usr/bin/env python3
"""Fuzz target: the `verl` link decoder (COBS + CRC frames) and COBS itself.

Invariants, for any bytes from the device (and, with the device's accept set,
from the daemon):
- `FrameDecoder.feed` / `VerlCodec.feed` never raise; every frame they return
  is one this side may receive, within max_payload, and re-encodes to a frame
  that decodes to itself;
- cutting the stream differently never changes the frames or `bad_frames`;
- the incomplete tail never exceeds the longest possible encoded frame;
- a good frame after any garbage and a zero byte is never lost (resync);
- `cobs.decode` returns bytes or raises ValueError; `cobs.encode` round-trips.

Run: `tools/fuzz/fuzz_verl.py -max_total_time=60` (or `tools/fuzz/run`).
"""

from __future__ import annotations

import _harness

from verld.codec import cobs
from verld.codec.base import Inbound, Kind
from verld.codec.verl import FrameDecoder, VerlCodec, VerlFrame, encode_frame

MAX = 64  #: max_payload: small, so overlong frames and tails are reachable
DAEMON = frozenset({0x12, 0x13})
DEVICE = frozenset({0x11})


def check(data: bytes) -> None:
    """Every invariant above."""
    control, stream = _harness.split(data)
    for accept in (DAEMON, DEVICE):
        frames, bad = _decode(accept, [stream])
        assert (frames, bad) == _decode(accept, _harness.cut(stream, control))
        for frame in frames:
            _check_frame(frame, accept)
        _check_resync(accept, stream)
    _check_codec(stream, frames_daemon=_decode(DAEMON, [stream]))
    _check_cobs(stream)


def _decode(accept: frozenset[int], chunks: list[bytes]) -> tuple[list[VerlFrame], int]:
    decoder = FrameDecoder(MAX, accept)
    frames: list[VerlFrame] = []
    for chunk in chunks:
        frames += decoder.feed(chunk)
        assert len(decoder._tail) <= decoder._max_chunk, len(decoder._tail)
    return frames, decoder.bad_frames


def _check_frame(frame: VerlFrame, accept: frozenset[int]) -> None:
    assert frame.kind in accept and 0 <= frame.seq <= 0xFFFF
    if frame.kind == Kind.REPLY:
        assert 1 <= len(frame.payload) <= MAX + 1
    else:
        assert len(frame.payload) <= MAX
    again = FrameDecoder(MAX, accept).feed(encode_frame(frame.kind, frame.seq, frame.payload))
    assert again == [frame], (again, frame)


def _check_resync(accept: frozenset[int], stream: bytes) -> None:
    kind = 0x11 if accept is DEVICE else 0x13
    good = VerlFrame(kind, 0x0102, b"\x00ok\x00")
    frames = FrameDecoder(MAX, accept).feed(stream + b"\x00" + encode_frame(*good))
    assert frames and frames[-1] == good, frames[-1:]


def _check_codec(stream: bytes, frames_daemon: tuple[list[VerlFrame], int]) -> None:
    codec = VerlCodec(MAX)
    messages = codec.feed(stream, True)
    frames, bad = frames_daemon
    expected = [
        Inbound(Kind.REPLY, f.seq, f.payload[0], f.payload[1:])
        if f.kind == Kind.REPLY
        else Inbound(Kind.EVENT, None, None, f.payload)
        for f in frames
    ]
    assert (messages, codec.bad_frames, codec.desync) == (expected, bad, None)


def _check_cobs(data: bytes) -> None:
    encoded = cobs.encode(data)
    assert 0 not in encoded and len(encoded) <= cobs.max_encoded_length(len(data))
    assert cobs.decode(encoded) == data
    try:
        decoded = cobs.decode(data)
    except ValueError:
        return
    assert cobs.decode(cobs.encode(decoded)) == decoded


def seeds() -> list[bytes]:
    """Good frames of every kind, COBS runs, and frames with damage."""
    frames = [
        encode_frame(0x12, 1, b"\x00hello"),
        encode_frame(0x13, 0, b"event"),
        encode_frame(0x12, 0xFFFF, b"\xff" + bytes(MAX)),
        encode_frame(0x11, 7, b"\x01req"),
        encode_frame(0x12, 2, b"\x00" + b"\xaa" * 60),
    ]
    stream = b"".join(frames)
    return [
        *frames,
        stream,
        b"\x03\x10\x80\xf0" + stream,
        stream[:-3] + b"\x00" + stream,
        cobs.encode(b"\x00" * 300),
        b"\x01" * 600,
    ]


if __name__ == "__main__":
    _harness.main(check, seeds(), "verl")
