"""The rules a `frame` declaration must keep as a whole, worded for the config.

Each key of `device.frame` has passed its own check (type, range, a known name);
`problems` judges how they fit together — offsets and sizes inside the header, the
length and seq fields apart, a way to find a frame's start and its end, a window the
seq field can number twice over, a ping the framing can carry — and words each
problem with the config keys at fault, for the config to report with file:line.
"""

from __future__ import annotations

from verld.codec.frame.declaration import Field, FrameDeclaration, Length
from verld.codec.spec import Problem

__all__ = ["problems"]

_WHERE = "device.frame"


def problems(
    frame: FrameDeclaration, *, window: int, max_payload: int, ping: bytes | None
) -> list[Problem]:
    """What is wrong with `frame` as a whole (each key on its own has been checked);
    `window`, `max_payload` and `ping` (the heartbeat's data) are the settings it
    frames."""
    found: list[Problem] = []

    def bad(key: str, message: str, *others: str) -> None:
        found.append(Problem((f"{_WHERE}.{key}", *others), message))

    header = frame.header
    inside = f"inside the {header}-byte header (offsets 0..{header - 1})"
    if frame.length is not None and frame.length.offset + frame.length.size > header:
        bad("length.offset", f"a {frame.length.size}-byte length field must lie {inside}")
    if frame.seq is not None:
        seq = frame.seq
        if seq.offset + seq.size > header:
            bad("seq.offset", f"a {seq.size}-byte seq field must lie {inside}")
        elif frame.length is not None and _overlap(frame.length, seq):
            bad("seq.offset", "the seq field overlaps the length field", f"{_WHERE}.length.offset")
        numbers = 1 << (8 * seq.size)
        if 2 * window > numbers:
            bad(
                "seq.size",
                f"a {seq.size}-byte seq numbers {numbers} calls: device.window ({window}) "
                f"may be at most {numbers // 2}, so a number is not reused while a late "
                "reply may still carry it",
                "device.window",
            )
    for index, offset in enumerate(frame.match):
        if offset >= header:
            bad(f"match[{index}]", f"offset {offset} is not {inside}", f"{_WHERE}.match")
    if frame.event is not None and frame.event.offset >= header:
        bad("event.offset", f"offset {frame.event.offset} is not {inside}")
    if frame.status is not None and frame.status.offset >= header:
        bad("status.offset", f"offset {frame.status.offset} is not {inside}")
    stuffed = frame.stuffing != "none"
    if not frame.start and not stuffed:
        bad(
            "start",
            'frames need a way to be found: a start (e.g. start: "02") or stuffing '
            "(slip or cobs), or both",
            f"{_WHERE}.stuffing",
            _WHERE,
        )
    if frame.length is None and not frame.end and not stuffed:
        bad(
            "length",
            'frames need a way to end: a length field, an end (e.g. end: "03") or stuffing',
            f"{_WHERE}.end",
            _WHERE,
        )
    if header > max_payload:
        bad("header", f"is more than device.max_payload ({max_payload})", "device.max_payload")
    if ping is not None and len(ping) < header:
        found.append(
            Problem(
                ("heartbeat.payload", f"{_WHERE}.header"),
                f"the ping is a frame's data, header included: {len(ping)} bytes, "
                f"fewer than the {header}-byte header",
            )
        )
    return found


def _overlap(a: Length, b: Field) -> bool:
    return a.offset < b.offset + b.size and b.offset < a.offset + a.size
