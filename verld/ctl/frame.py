"""A `frame` device's traffic read out by its declaration, for `verlctl monitor` (sans-I/O).

A call's or reply's data on `frame` is the frame's header and payload (docs/config.md,
"Binary framings"). `FrameReading` names what the declaration says of them: the header
as hex with its declared fields (the length and seq in decimal, the `match` bytes, the
`event` and `status` bytes), the payload as hex, and the check as the frame carries it
on the wire. A request is shown as verld writes it: the length field and (with a seq
field) the traffic line's seq written into the header, whatever the client put there;
a reply or event as it came, its check good (verld passes on no other). Data that
cannot be a frame (shorter than the header, too large for the length field) reads as
`not a frame: ...`; nothing here raises.

verld's `hello` names the codec, not the declaration: verlctl reads it from the config
it was given (`--config FILE`), as verld did.
"""

from __future__ import annotations

import functools
from typing import Literal

from verld.codec.frame.declaration import FrameDeclaration
from verld.codec.frame.frames import FrameFormat
from verld.ctl.render import Decoder

__all__ = ["FrameReading"]

MAX_PAYLOAD_SHOWN = 16  #: payload bytes shown as hex (the dump below has them all)


class FrameReading:
    """Reads traffic data by one declaration (`max_payload`: the daemon's)."""

    def __init__(self, frame: FrameDeclaration, max_payload: int) -> None:
        self.frame = frame
        self.form = FrameFormat(frame, max_payload)

    def at(self, seq: int | None) -> Decoder:
        """The reader of one traffic line, whose seq (verld's, on a request) is `seq`."""
        return functools.partial(self.describe, seq=seq)

    def describe(self, data: bytes, *, request: bool, seq: int | None = None) -> str:
        """One line: the header and its fields, the payload, the check."""
        form = self.form
        refused = form.refuse(data)
        if refused is not None:
            return f"not a frame: {refused}"
        wire = form.encode(data, seq if request else None)
        frame = wire if form.stuffing is None else form.stuffing.unstuff(wire[:-1])
        first = len(form.start)
        cut = first + len(data)
        written = frame[first:cut]  # (the length field, and a request's seq, written in)
        header, payload = written[: form.header], written[form.header :]
        parts = [f"header {_hex(header) or '(none)'}"]
        fields = self._fields(header)
        if fields:
            parts[0] += f" ({', '.join(fields)})"
        shown = _hex(payload[:MAX_PAYLOAD_SHOWN]) or "(none)"
        more = len(payload) - MAX_PAYLOAD_SHOWN
        parts.append(f"payload {shown}" + (f" ... (+{more} bytes)" if more > 0 else ""))
        if form.check_size:
            check = _hex(frame[cut : cut + form.check_size])
            parts.append(f"check {check}" + ("" if request else " ok"))
        return "  ".join(parts)

    def _fields(self, header: bytes) -> list[str]:
        """The declared fields of `header`, by name."""
        frame, fields = self.frame, []
        if frame.length is not None:
            length = frame.length
            value = header[length.offset : length.offset + length.size]
            fields.append(f"length {int.from_bytes(value, _order(length.order))}")
        if frame.seq is not None:
            seq = frame.seq
            value = header[seq.offset : seq.offset + seq.size]
            fields.append(f"seq {int.from_bytes(value, _order(seq.order))}")
        fields += [f"match@{offset} {header[offset]:02x}" for offset in frame.match]
        event = frame.event
        if event is not None and header[event.offset] in event.values:
            fields.append(f"event {header[event.offset]:02x}")
        status = frame.status
        if status is not None:
            byte = header[status.offset]
            fields.append(f"status {byte:02x} {'ok' if byte in status.ok else 'not ok'}")
        return fields


def _order(name: str) -> Literal["big", "little"]:
    return "little" if name == "little" else "big"


def _hex(data: bytes) -> str:
    return data.hex(" ")
