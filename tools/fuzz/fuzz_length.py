#!/usr/bin/env python3
"""Fuzz target: the `length` link decoder (4-byte big-endian length, then data).

Invariants, for any bytes from the device:
- `LengthDecoder.feed` / `LengthCodec.feed` never raise; frames are at most the
  limit; a length above it sets `desync`, after which nothing more is decoded;
- cutting the stream differently never changes the frames, the messages (with
  the session's rule: the first frame while a call is outstanding is its reply),
  `bad_frames` or `desync`;
- the buffer never holds more than one incomplete frame (limit + 3 bytes);
- `encode` round-trips.

Run: `tools/fuzz/fuzz_length.py -max_total_time=60` (or `tools/fuzz/run`).
"""

from __future__ import annotations

import _harness

from verld.codec.base import Inbound, Kind
from verld.codec.length import LengthCodec, LengthDecoder, encode

MAX = 64  #: max_payload: the decoder's limit is MAX + 1 (a reply's status byte)

Outcome = tuple[list[Inbound], int, str | None]


def check(data: bytes) -> None:
    """Every invariant above."""
    control, stream = _harness.split(data)
    pieces = _harness.cut(stream, control)
    frames, desync = _frames([stream])
    assert (frames, desync) == _frames(pieces)
    for awaiting in (False, True):
        assert _messages([stream], awaiting) == _messages(pieces, awaiting)
    if len(stream) <= MAX:
        assert LengthDecoder(MAX).feed(encode(stream)) == [stream]


def _frames(chunks: list[bytes]) -> tuple[list[bytes], str | None]:
    decoder = LengthDecoder(MAX)
    frames: list[bytes] = []
    for chunk in chunks:
        was = decoder.desync
        out = decoder.feed(chunk)
        assert not (was and out), "decoded after desync"
        assert all(len(frame) <= MAX for frame in out)
        assert len(decoder._buf) <= MAX + 3, len(decoder._buf)
        frames += out
    return frames, decoder.desync


def _messages(chunks: list[bytes], awaiting: bool) -> Outcome:
    """The codec's messages; `awaiting` ends with the first reply, as in the session."""
    codec = LengthCodec(MAX)
    messages: list[Inbound] = []
    for chunk in chunks:
        out = codec.feed(chunk, awaiting)
        for message in out:
            if message.kind is Kind.REPLY:
                assert awaiting and message.status is not None
                assert len(message.data) <= MAX
                awaiting = False
            else:
                assert len(message.data) <= MAX and message.status is None
        messages += out
    return messages, codec.bad_frames, codec.desync


def seeds() -> list[bytes]:
    """Frames of every size, an empty reply, a length just past the limit."""
    frames = [encode(b""), encode(b"\x00ok"), encode(bytes(MAX + 1)), encode(b"\x05ev")]
    return [
        *frames,
        b"".join(frames),
        b"\x02\x20\x90" + b"".join(frames),
        (MAX + 2).to_bytes(4, "big") + bytes(MAX + 2),
        b"\x00\x00\x00",
    ]


if __name__ == "__main__":
    _harness.main(check, seeds(), "length")
