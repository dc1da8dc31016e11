"""Consistent Overhead Byte Stuffing (Cheshire & Baker), without delimiters.

Strategy: COBS replaces every zero byte by the distance to the next one. The data
is cut at its zero bytes (`bytes.split`), and each zero-free segment becomes one
or more blocks `code, bytes...`: a full 254-byte run gets code 0xFF and implies no
zero, a shorter one gets `len + 1` and implies the zero that ended it (the last
block implies nothing). Both directions work per block, never per byte, so a
frame costs a few C-level slices and one join.

Where the data ends in a full 254-byte run, `encode` emits the final `0x01` block
(the form the test vectors show); `decode` accepts the data with or without it.
"""

from __future__ import annotations

__all__ = ["decode", "encode", "max_encoded_length"]

_RUN = 254  #: data bytes in a full block (code 0xFF)
_CODE = [bytes((i,)) for i in range(256)]


def max_encoded_length(size: int) -> int:
    """The longest encoding of `size` data bytes (by any conforming encoder)."""
    return size + size // _RUN + 1


def encode(data: bytes) -> bytes:
    """COBS-encode `data`; the result holds no zero byte."""
    if len(data) < _RUN and 0 not in data:
        return _CODE[len(data) + 1] + data  # short and zero-free: one block
    parts: list[bytes] = []
    append = parts.append
    for segment in data.split(b"\x00"):
        size = len(segment)
        if size < _RUN:
            append(_CODE[size + 1])
            append(segment)
            continue
        start = 0
        while size - start >= _RUN:
            append(b"\xff")
            append(segment[start : start + _RUN])
            start += _RUN
        append(_CODE[size - start + 1])
        append(segment[start:])
    return b"".join(parts)


def decode(data: bytes) -> bytes:
    """Decode one COBS block sequence; ValueError if it is not a valid encoding."""
    size = len(data)
    if not size:
        raise ValueError("COBS: empty input (the shortest encoding is 01)")
    if 0 in data:
        raise ValueError(f"COBS: zero byte at offset {data.index(0)}")
    code = data[0]
    if code == size:
        return data[1:]  # one block: no zero in the data
    if size <= _RUN:  # too short for a full run (0xFF): every later code byte was a zero
        buf = bytearray(data)
        pos = 0
        while (end := pos + code) < size:
            code = buf[end]
            buf[end] = 0
            pos = end
        if end > size:
            raise ValueError(f"COBS: code {code:#04x} at offset {pos} runs past the end")
        del buf[0]
        return bytes(buf)
    # Every code byte but the first stands where a zero was, except one that
    # follows a full run (0xFF): overwrite the former, delete the latter.
    buf = bytearray(data)
    after_run: list[int] = []
    pos = 0
    while (end := pos + code) < size:
        if code == 0xFF:
            after_run.append(end)
        code = buf[end]
        buf[end] = 0
        pos = end
    if end > size:
        raise ValueError(f"COBS: code {code:#04x} at offset {pos} runs past the end")
    for index in reversed(after_run):  # rare: only frames with 254-byte runs
        del buf[index]
    return bytes(buf[1:])
