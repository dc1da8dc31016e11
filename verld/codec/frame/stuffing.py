"""Byte stuffing that delimits frames: SLIP (RFC 1055) and COBS.

Each stuffing turns a whole frame into bytes free of its delimiter and ends it with
one: SLIP escapes END (C0) as DB DC and ESC (DB) as DB DD, and ends the frame with
C0; COBS (`verld.codec.cobs`) leaves no zero byte, and 00 ends the frame. A receiver
cuts the stream at the delimiter, skips empty pieces, and `unstuff`s each; a bad
escape (SLIP: DB followed by anything but DC or DD, or at the end) or a bad COBS
code raises ValueError: a bad frame.
"""

from __future__ import annotations

from verld.codec import cobs

__all__ = ["Stuffing", "stuffing"]

_END, _ESC, _ESC_END, _ESC_ESC = 0xC0, 0xDB, 0xDC, 0xDD


class Stuffing:
    """One stuffing: its delimiter, how a frame is stuffed and unstuffed, and the most
    bytes a frame of n bytes may take stuffed."""

    def __init__(self, name: str, delimiter: int) -> None:
        self.name = name
        self.delimiter = delimiter

    def stuff(self, frame: bytes) -> bytes:
        """The frame's wire bytes, delimiter included."""
        raise NotImplementedError

    def unstuff(self, chunk: bytes) -> bytes:
        """The frame in one non-empty piece between delimiters; ValueError if bad."""
        raise NotImplementedError

    def max_stuffed(self, size: int) -> int:
        """The most bytes a frame of `size` bytes takes stuffed, delimiter excluded."""
        raise NotImplementedError


class Slip(Stuffing):
    """RFC 1055: C0 ends every frame; C0 and DB inside it are escaped."""

    def __init__(self) -> None:
        super().__init__("slip", _END)

    def stuff(self, frame: bytes) -> bytes:
        return frame.replace(b"\xdb", b"\xdb\xdd").replace(b"\xc0", b"\xdb\xdc") + b"\xc0"

    def unstuff(self, chunk: bytes) -> bytes:
        if _ESC not in chunk:
            return chunk
        pieces = chunk.split(b"\xdb")
        out = [pieces[0]]
        for piece in pieces[1:]:
            if not piece:
                raise ValueError("SLIP: ESC (DB) at the end or before another ESC")
            code = piece[0]
            if code == _ESC_END:
                out.append(b"\xc0")
            elif code == _ESC_ESC:
                out.append(b"\xdb")
            else:
                raise ValueError(f"SLIP: ESC (DB) before {code:02x}, not DC or DD")
            out.append(piece[1:])
        return b"".join(out)

    def max_stuffed(self, size: int) -> int:
        return 2 * size


class Cobs(Stuffing):
    """COBS: no zero byte inside a frame; 00 ends every frame."""

    def __init__(self) -> None:
        super().__init__("cobs", 0)

    def stuff(self, frame: bytes) -> bytes:
        return cobs.encode(frame) + b"\x00"

    def unstuff(self, chunk: bytes) -> bytes:
        return cobs.decode(chunk)

    def max_stuffed(self, size: int) -> int:
        return cobs.max_encoded_length(size) + 1  # (either form of a final full run)


def stuffing(name: str) -> Stuffing | None:
    """The stuffing called `name`; None for `none`."""
    if name == "slip":
        return Slip()
    if name == "cobs":
        return Cobs()
    if name == "none":
        return None
    raise ValueError(f"unknown stuffing {name!r}")
