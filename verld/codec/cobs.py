"""Consistent Overhead Byte Stuffing (Cheshire & Baker), without delimiters.

Strategy: COBS replaces every zero byte by the distance to the next one. The data
is cut at its zero bytes (`bytes.split`), and each zero-free segment becomes one
or more blocks `code, bytes...`: a full 254-byte run gets code 0xFF and implies no
zero, a shorter one gets `len + 1` and implies the zero that ended it (the last
block implies nothing). Both directions work per block, never per byte, so a
frame costs a few C-level slices and one join.

Where the data ends in a full 254-byte run, `encode` emits the final `0x01` block
(the form the test vectors show); `decode` accepts the data with or without it.

With the `fast` extra installed, the C extension of the `cobs` package (cobs-python)
does both directions, byte for byte the same (tests/test_codec_cobs.py holds both
to the vectors and to each other); without it, this module's own code runs. `NATIVE`
says which. A decode error is always this module's ValueError, with its message.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "DECODE_ERRORS",
    "NATIVE",
    "decode",
    "decode_nonempty",
    "encode",
    "encode_short",
    "max_encoded_length",
    "py_decode",
    "py_encode",
]

_RUN = 254  #: data bytes in a full block (code 0xFF)
_CODE = [bytes((i,)) for i in range(256)]


def max_encoded_length(size: int) -> int:
    """The longest encoding of `size` data bytes (by any conforming encoder)."""
    return size + size // _RUN + 1


def py_encode(data: bytes) -> bytes:
    """COBS-encode `data`; the result holds no zero byte."""
    if len(data) < _RUN:  # no segment can be a full run: one block per segment
        if 0 not in data:
            return _CODE[len(data) + 1] + data
        return b"".join([_CODE[len(segment) + 1] + segment for segment in data.split(b"\x00")])
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


def py_decode(data: bytes) -> bytes:
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


def _native() -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes], type[Exception]] | None:
    """cobs-python's C extension (encode, decode, its error), or None."""
    try:
        from cobs.cobs import _cobs_ext  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    return _cobs_ext.encode, _cobs_ext.decode, _cobs_ext.DecodeError


_NATIVE = _native()
NATIVE = _NATIVE is not None  #: the C extension does the work

#: encode for data shorter than 254 bytes (the C encoder alone, where it is there)
encode_short: Callable[[bytes], bytes] = py_encode
#: decode for non-empty data, raising one of DECODE_ERRORS (the C decoder alone, where
#: it is there: no message made for an error, for callers that only drop the frame)
decode_nonempty: Callable[[bytes], bytes] = py_decode
DECODE_ERRORS: tuple[type[Exception], ...] = (ValueError,)

if _NATIVE is None:
    encode = py_encode
    decode = py_decode
else:
    encode_short, decode_nonempty = _NATIVE[0], _NATIVE[1]
    DECODE_ERRORS = (ValueError, _NATIVE[2])
    _c_encode, _c_decode, _DecodeError = _NATIVE

    def encode(data: bytes) -> bytes:
        """COBS-encode `data`; the result holds no zero byte."""
        out = _c_encode(data)
        if len(data) >= _RUN:  # the C encoder leaves out the final 01 after a full run
            tail = len(data) - 1 - data.rfind(0)
            if tail and not tail % _RUN:
                out += b"\x01"
        return out

    def decode(data: bytes) -> bytes:
        """Decode one COBS block sequence; ValueError if it is not a valid encoding."""
        if data:  # (the C decoder takes empty input for empty data)
            try:
                return _c_decode(data)
            except _DecodeError:
                pass
        return py_decode(data)  # raises, saying what is wrong
