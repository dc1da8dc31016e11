"""A frame's check: a CRC from the catalogue, or a one- or two-byte sum.

Strategy: a declaration's `check.kind` becomes one `Check` at start, a function from
the covered bytes to the check's wire bytes, so the per-frame path is one call. CRCs
are named as in the CRC RevEng catalogue (`catalogue.MODELS`, case-insensitive; its
aliases too). They are computed by the `anycrc` package's C code where it is
installed (a pip dependency), and otherwise by `PyCrc`, this module's own code from
the same catalogue parameters (Debian 12 has no package of anycrc): both give the
catalogue's check value for every name (tests/test_codec_frame.py).

Why anycrc: it has the whole catalogue, every width, by name and by parameters
(refin and refout apart too), in C. crcmod-plus (crcmod's maintained fork, whose
original is Debian 12's python3-crcmod) takes neither the catalogue's names nor a
refin unlike refout; fastcrc is faster but knows 76 named CRCs of 8, 16, 32 and 64
bits only, under its own names, and no parameters. Measured on a 32-byte frame
(timeit, best of 5 × 200000, this project's 2-core machine under load): anycrc
CRC-16/MODBUS 0.22 µs, CRC-32/ISO-HDLC 0.23 µs; `PyCrc` 1.3 µs and 2.0 µs (zlib.crc32
0.08 µs); a whole STX frame of 32 data bytes costs `FrameCodec.encode_request` 0.7 µs
and `feed` 2.1 µs with anycrc, 1.8 µs and 3.2 µs with `PyCrc` (1.3 and 2.7, 2.3 and
3.8 before the per-call work of docs/benchmarks.md, "What made the frame codec cheaper").

The sums: `sum8` (the bytes' sum mod 256), `sum8-inv` (its complement, 255 - sum:
Dynamixel Protocol 1.0), `xor8` (the bytes XORed), `fletcher8` (two bytes, A then B:
u-blox UBX's 8-bit Fletcher, A += byte, B += A, both mod 256; `order` does not apply).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

from verld.codec.frame.catalogue import ALIASES, MODELS, Model

__all__ = ["KINDS", "SUMS", "Check", "PyCrc", "canonical", "crc_function", "make_check"]

#: the bytes a check covers: a frame's, or a slice of the reader's buffer
Covered = bytes | bytearray

#: the check kinds that are not CRCs
SUMS = ("sum8", "sum8-inv", "xor8", "fletcher8")
_UPPER = {name.upper(): name for name in (*MODELS, *ALIASES)}
#: every kind a declaration may name: the sums, then the catalogue's CRCs by name
KINDS = (*SUMS, *MODELS)


def canonical(kind: str) -> str | None:
    """The kind `kind` names (a sum, or a CRC's catalogue name), or None: not one."""
    lower = kind.lower()
    if lower in SUMS:
        return lower
    name = _UPPER.get(kind.upper())
    if name is None:
        return None
    return ALIASES.get(name, name)


class Check(NamedTuple):
    """One check kind, ready to use."""

    size: int  #: bytes on the wire
    compute: Callable[[Covered], bytes]  #: covered bytes → the check's wire bytes
    #: a CRC: covered bytes → its value, written in `order` (`compute` is this and
    #: `to_bytes`; a frame's reader and writer call it directly, one call less a frame)
    crc: Callable[[Covered], int] | None = None
    order: Literal["little", "big"] = "big"


def _reflect(value: int, width: int) -> int:
    return int(f"{value:0{width}b}"[::-1], 2)


class PyCrc:
    """One catalogue CRC in Python: a 256-entry table computed from the parameters, one
    lookup per byte (refin: the register shifts right, else left)."""

    def __init__(self, model: Model) -> None:
        width = model.width
        self._width, self._xorout = width, model.xorout
        self._mask = (1 << width) - 1
        self._reflect_out = model.refin != model.refout
        if model.refin:
            poly = _reflect(model.poly, width)
            self._init = _reflect(model.init, width)
            self._table = [self._entry_reflected(i, poly) for i in range(256)]
        else:
            self._init = model.init
            self._table = [self._entry_normal(i << (width - 8), model.poly) for i in range(256)]
        self.calc = self._calc_reflected if model.refin else self._calc_normal

    def _entry_reflected(self, crc: int, poly: int) -> int:
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        return crc

    def _entry_normal(self, crc: int, poly: int) -> int:
        top, mask = 1 << (self._width - 1), self._mask
        for _ in range(8):
            crc = ((crc << 1) ^ poly) & mask if crc & top else (crc << 1) & mask
        return crc

    def _calc_reflected(self, data: Covered) -> int:
        crc, table = self._init, self._table
        for byte in data:
            crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        return self._finish(crc)

    def _calc_normal(self, data: Covered) -> int:
        crc, table, shift, mask = self._init, self._table, self._width - 8, self._mask
        for byte in data:
            crc = table[((crc >> shift) ^ byte) & 0xFF] ^ ((crc << 8) & mask)
        return self._finish(crc)

    def _finish(self, crc: int) -> int:
        if self._reflect_out:
            crc = _reflect(crc, self._width)
        return crc ^ self._xorout


def _native(model: Model) -> Callable[[Covered], int] | None:
    """anycrc's calculator for `model`, or None where anycrc is not installed."""
    try:
        import anycrc  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    crc = anycrc.CRC(model.width, model.poly, model.init, model.refin, model.refout, model.xorout)
    calc: Callable[[Covered], int] = crc.calc
    return calc


def crc_function(name: str, *, native: bool = True) -> Callable[[Covered], int]:
    """The CRC called `name` (a catalogue name), as an int; `native`: anycrc where it is
    installed, else (and with native=False) `PyCrc`."""
    model = MODELS[name]
    calc = _native(model) if native else None
    return calc if calc is not None else PyCrc(model).calc


def make_check(kind: str, order: str) -> Check:
    """The check `kind` names (`canonical` has accepted it), its bytes in `order`."""
    name = canonical(kind)
    if name is None:
        raise ValueError(f"unknown check kind {kind!r}")
    if name in SUMS:
        return Check(2 if name == "fletcher8" else 1, _SUM_FUNCTIONS[name])
    size = MODELS[name].width // 8
    calc = crc_function(name)
    byteorder: Literal["little", "big"] = "little" if order == "little" else "big"
    return Check(size, lambda data: calc(data).to_bytes(size, byteorder), calc, byteorder)


def _sum8(data: Covered) -> bytes:
    return bytes((sum(data) & 0xFF,))


def _sum8_inv(data: Covered) -> bytes:
    return bytes((~sum(data) & 0xFF,))


def _xor8(data: Covered) -> bytes:
    value = 0
    for byte in data:
        value ^= byte
    return bytes((value,))


def _fletcher8(data: Covered) -> bytes:
    a = b = 0
    for byte in data:
        a = (a + byte) & 0xFF
        b = (b + a) & 0xFF
    return bytes((a, b))


_SUM_FUNCTIONS: dict[str, Callable[[Covered], bytes]] = {
    "sum8": _sum8,
    "sum8-inv": _sum8_inv,
    "xor8": _xor8,
    "fletcher8": _fletcher8,
}
