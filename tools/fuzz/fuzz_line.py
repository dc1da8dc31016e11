#!/usr/bin/env python3
"""Fuzz target: the `line` link decoder (text lines, multi-line replies, patterns).

The first control byte picks the terminator, the encoding and which of the
`end` / `error` / `event` patterns are set. Invariants, for any bytes:
- `LineSplitter.feed` / `LineCodec.feed` never raise; no line holds the
  terminator or exceeds max_payload; a message's `data` (the device's bytes) fits
  max_payload and decodes to its `text`; a reply's status is 0x00 or 0xFF;
- cutting the stream differently never changes lines, messages (with the
  session's rule: a call is outstanding until its reply) or `bad_frames`;
- the splitter's buffer stays within one line plus a partial terminator.

Run: `tools/fuzz/fuzz_line.py -max_total_time=60` (or `tools/fuzz/run`).
"""

from __future__ import annotations

from typing import NamedTuple

import _harness

from verld.codec.base import Inbound, Kind
from verld.codec.line import LineCodec, LineSplitter

MAX = 32  #: max_payload: small, so overlong lines and replies are reachable
TERMINATORS = ("\n", "\r\n", "\r", ";", "END")
ENCODINGS = ("utf-8", "latin-1")
END, ERROR, EVENT = r"^(OK|ERROR)$", r"^ERR", r"^\+"

Outcome = tuple[list[Inbound], int]


class Settings(NamedTuple):
    """LineCodec's settings after max_payload."""

    terminator: str
    encoding: str
    end: str | None
    error: str | None
    event: str | None


def config(selector: int) -> Settings:
    """LineCodec settings picked by one byte."""
    return Settings(
        TERMINATORS[selector % 5],
        ENCODINGS[selector // 5 % 2],
        END if selector & 0x10 else None,
        ERROR if selector & 0x20 else None,
        EVENT if selector & 0x40 else None,
    )


def check(data: bytes) -> None:
    """Every invariant above."""
    control, stream = _harness.split(data)
    settings = config(control[0] if control else 0)
    pieces = _harness.cut(stream, control[1:])
    term = settings.terminator.encode(settings.encoding)
    lines = _lines(term, [stream])
    assert lines == _lines(term, pieces)
    for awaiting in (False, True):
        assert _messages(settings, [stream], awaiting) == _messages(settings, pieces, awaiting)


def _lines(term: bytes, chunks: list[bytes]) -> tuple[list[bytes], int]:
    splitter = LineSplitter(term, MAX)
    lines: list[bytes] = []
    for chunk in chunks:
        out = splitter.feed(chunk)
        assert all(len(line) <= MAX and term not in line for line in out)
        assert len(splitter._buf) <= splitter._max_partial, len(splitter._buf)
        lines += out
    return lines, splitter.bad_frames


def _messages(settings: Settings, chunks: list[bytes], awaiting: bool) -> Outcome:
    codec = LineCodec(MAX, *settings)
    encoding = settings.encoding
    messages: list[Inbound] = []
    for chunk in chunks:
        out = codec.feed(chunk, awaiting)
        for message in out:
            # data: the device's bytes (lines joined by a newline); text: them decoded
            assert len(message.data) <= MAX, len(message.data)
            assert message.text == message.data.decode(encoding, "replace")
            if message.kind is Kind.REPLY:
                assert awaiting and message.status in (0x00, 0xFF)
                awaiting = False
            else:
                assert message.status is None
        messages += out
    return messages, codec.bad_frames


def seeds() -> list[bytes]:
    """Replies, multi-line replies, events, CRLF, overlong lines, under several configs."""
    text = b"+EV 1\r\nline one\r\nOK\nERROR\n" + b"x" * 40 + b"\nEND;PONG;"
    return [bytes([n]) + bytes([selector]) + text for n in (1, 3) for selector in range(0, 128, 9)]


if __name__ == "__main__":
    _harness.main(check, seeds(), "line")
