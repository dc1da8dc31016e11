"""How a call's reply becomes an entity's value, sans-I/O (docs/fleet.md, "Device values").

Strategy: a `ValueSpec` (the `value:` block of an entity, checked by the config) says
where the value is and what it is; `Decoder` turns it into a function of the reply's
bytes (and text, on a text codec) that returns the value or raises `DecodeError`
saying why not. Four places a value can be:

- `register: k`, Modbus codecs: the reply's data is unit, function code, byte count and
  the registers (fc 3, 4), so register k starts at byte 3 + 2k; 32- and 64-bit types
  span 2 or 4 registers, each big-endian, in `word_order` (big: the most significant
  register first, AB CD; little: CD AB);
- `bit: k`, Modbus fc 1, 2: the k-th coil or input (LSB first in each byte), 1 or 0;
- `offset: n`, other binary codecs: the type's bytes at byte n of the data, in
  `byte_order`;
- `pattern`, text codecs: a regex with one group, searched in the reply's text; the
  group is converted by `type` (int, float or str).

A number is then `value × scale + shift` (an int stays an int while scale is 1 and
shift 0) and `round(value, round)` when `round` is set. A float32 is first brought to
the shortest decimal that is the same float32 (230.1, not 230.10000610351562). NaN
and infinities are not values (JSON has no spelling for them). Which of the four a
device's codec can answer is a trait of the codec (`fits`): the registry is asked,
never a codec's name. A Modbus reply's PDU is read by `verld.codec.modbus.pdu`.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

from verld.codec.modbus import pdu
from verld.codec.registry import CODECS

#: binary types: struct code and size in bytes
BYTE_TYPES: dict[str, tuple[str, int]] = {
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "float32": ("f", 4),
    "float64": ("d", 8),
}
TEXT_TYPES = ("int", "float", "str")
ORDERS = ("big", "little")
#: where a value can be taken from, each with what answers it
WHERE = ("register", "bit", "offset", "pattern")

Value = int | float | str


class DecodeError(ValueError):
    """A reply that is not a value; the message says why."""


@dataclass(frozen=True, slots=True)
class ValueSpec:
    """An entity's `value:` block; exactly one of register, bit, offset, pattern is set."""

    register: int | None = None
    bit: int | None = None
    offset: int | None = None
    pattern: str | None = None
    type: str | None = None  #: None only with bit
    word_order: str = "big"
    byte_order: str = "big"
    scale: float = 1.0
    shift: float = 0.0
    round: int | None = None
    on_value: Value | None = None

    @property
    def where(self) -> str:
        return next(w for w in WHERE if getattr(self, w) is not None)

    @property
    def numeric(self) -> bool:
        return self.type != "str"


def fits(spec: ValueSpec, codec: str | None) -> str | None:
    """Why `spec` cannot decode replies of `codec` (None: it can, or the codec is not
    known yet)."""
    if codec is None:
        return None
    traits = CODECS.get(codec)
    if traits is None:
        return f"the device's codec {codec!r} is unknown to this verld-mqtt"
    where = spec.where
    if traits.bus:
        ok, wanted = where in ("register", "bit"), "register or bit"
    elif traits.text:
        ok, wanted = where == "pattern", "pattern"
    else:
        ok, wanted = where == "offset", "offset"
    if ok:
        return None
    return f"value.{where} does not fit the device's codec {codec} (it takes value.{wanted})"


def state(spec: ValueSpec, value: Value) -> str:
    """A binary kind's state: ON where the value is `on_value` (when given; text is
    compared as text, a number as a number), else where it is a number other than 0."""
    on = spec.on_value
    if on is not None:
        same = isinstance(value, str) == isinstance(on, str) and value == on
        return "ON" if same else "OFF"
    return "ON" if not isinstance(value, str) and value != 0 else "OFF"


class Decoder:
    """`decode(data, text)` for one ValueSpec; see the module docstring."""

    def __init__(self, spec: ValueSpec) -> None:
        self.spec = spec
        self._take = self._taker(spec)

    def decode(self, data: bytes, text: str | None = None) -> Value:
        """The value in a reply's data (and text); DecodeError if there is none."""
        raw = self._take(data, text)
        if isinstance(raw, str):
            return raw
        spec = self.spec
        if isinstance(raw, float) and not math.isfinite(raw):
            raise DecodeError(f"{raw} is not a finite number")
        value: int | float = raw
        if spec.scale != 1 or spec.shift != 0:
            value = value * spec.scale + spec.shift
        if spec.round is not None:
            value = round(value, spec.round)
        if isinstance(value, float) and not math.isfinite(value):
            raise DecodeError(f"{value} is not a finite number")
        return value

    # --- where the raw value comes from ----------------------------------------------
    def _taker(self, spec: ValueSpec) -> Callable[[bytes, str | None], Value]:
        where = spec.where
        if where == "pattern":
            assert spec.pattern is not None and spec.type is not None
            regex, kind = re.compile(spec.pattern), spec.type
            return lambda _data, text: _text(regex, kind, text)
        if where == "bit":
            assert spec.bit is not None
            index = spec.bit
            return lambda data, _text: _bit(data, index)
        assert spec.type is not None
        code, size = BYTE_TYPES[spec.type]
        if where == "offset":
            assert spec.offset is not None
            fmt = struct.Struct(("<" if spec.byte_order == "little" else ">") + code)
            at, kind = spec.offset, spec.type
            return lambda data, _text: _unpack(fmt, kind, _bytes(data, at, size))
        assert spec.register is not None
        fmt = struct.Struct(">" + code)
        first, reverse, kind = spec.register, spec.word_order == "little", spec.type
        return lambda data, _text: _unpack(fmt, kind, _registers(data, first, size, reverse))


def _text(regex: re.Pattern[str], kind: str, text: str | None) -> Value:
    if text is None:
        raise DecodeError("the reply has no text")
    match = regex.search(text)
    if match is None:
        raise DecodeError(f"pattern {regex.pattern!r} does not match {_short(text)!r}")
    found = match.group(1)
    if found is None:
        raise DecodeError(f"pattern {regex.pattern!r}: its group took no part in the match")
    if kind == "str":
        return found
    try:
        return int(found) if kind == "int" else float(found)
    except ValueError:
        raise DecodeError(
            f"{_short(found)!r} is not {'an int' if kind == 'int' else 'a float'}"
        ) from None


def _modbus(data: bytes, functions: tuple[int, ...], what: str) -> bytes:
    """The byte-count-long body of a Modbus read reply (unit, fc, count, body)."""
    if len(data) < 3:
        raise DecodeError(f"a reply of {len(data)} bytes is not a Modbus read reply")
    fc = data[1]
    if fc not in functions:
        raise DecodeError(
            f"a reply to function code {fc}, not a read of {what} "
            f"(fc {' or '.join(map(str, functions))})"
        )
    try:
        return pdu.counted(data[2:])
    except pdu.CountMismatch as exc:
        if exc.have < exc.count:
            raise DecodeError(
                f"the reply says {exc.count} bytes of {what} and has {exc.have}"
            ) from None
        return data[3 : 3 + exc.count]  # (bytes after the counted ones are not read)


def _registers(data: bytes, first: int, size: int, reverse: bool) -> bytes:
    body = _modbus(data, pdu.READ_REGISTERS, "registers")
    count = size // 2
    if len(body) < 2 * (first + count):
        last = f"..{first + count - 1}" if count > 1 else ""
        raise DecodeError(
            f"register {first}{last} is not in a reply of {len(body) // 2} register(s)"
        )
    words = body[2 * first : 2 * (first + count)]
    if reverse and count > 1:
        words = b"".join(words[i : i + 2] for i in range(2 * (count - 1), -1, -2))
    return words


def _bit(data: bytes, index: int) -> int:
    body = _modbus(data, pdu.READ_BITS, "coils or inputs")
    if index // 8 >= len(body):
        raise DecodeError(f"bit {index} is not in a reply of {len(body)} byte(s) of bits")
    return int(pdu.bit(body, index))


def _bytes(data: bytes, at: int, size: int) -> bytes:
    if len(data) < at + size:
        raise DecodeError(f"{size} bytes at offset {at} are not in a reply of {len(data)} bytes")
    return data[at : at + size]


def _unpack(fmt: struct.Struct, kind: str, raw: bytes) -> Value:
    value: int | float = fmt.unpack(raw)[0]
    if kind == "float32" and math.isfinite(value):
        value = _shortest32(value, raw if fmt.format[0] == ">" else raw[::-1])
    return value


def _shortest32(value: float, big: bytes) -> float:
    """The shortest decimal that reads back as the same float32 (`big`: its bytes)."""
    for digits in range(6, 10):
        near = float(f"{value:.{digits}g}")
        if struct.pack(">f", near) == big:
            return near
    return value


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."
