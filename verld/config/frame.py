"""`device.frame`: the `frame` codec's declaration, key by key.

Strategy: each key is checked on its own here (hex strings, offsets, sizes, a check
kind the catalogue knows, with the closest names suggested), and the declaration is
built into `verld.codec.frame.declaration`'s dataclasses; how the keys fit together
(offsets inside the header, a way to find frames, ...) is the codec's own rule
(`verld.codec.frame.rules`), run by the codec's `check` once every key here passed.
A mapping that misses a required key says so, with an example; a bad key anywhere
inside marks `device.frame` itself bad, so the codec's rules do not run on a half
declaration (one mistake, one message).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from verld.codec.frame.check import KINDS, canonical
from verld.codec.frame.declaration import (
    COUNTS,
    FIELD_SIZES,
    MAX_HEADER,
    ORDERS,
    OVERS,
    STUFFINGS,
    Check,
    Event,
    Field,
    FrameDeclaration,
    Length,
    Status,
)
from verld.config import leaves
from verld.config.suggest import closest
from verld.config.validate import BadValue, Item, Section, build, given
from verld.config.validate import Check as Checker

__all__ = ["frame"]

_OFFSET = leaves.integer(0, MAX_HEADER - 1, "a header offset")
_HEX = 'hex bytes, e.g. "b5 62" (spaces ignored)'
_UPPER_KINDS = {kind.upper(): kind for kind in KINDS}


def _hex(item: Item) -> bytes:
    """Hex bytes, spaces ignored ("" for none)."""
    text = leaves.string(item, _HEX)
    try:
        return bytes.fromhex("".join(text.split()))
    except ValueError:
        raise BadValue(f"expected {_HEX}, got {given(item)}") from None


def _byte(item: Item) -> int:
    """One byte, as two hex digits."""
    value = _hex(item)
    if len(value) != 1:
        raise BadValue(f'expected one byte as hex, e.g. "01", got {given(item)}')
    return value[0]


def _bytes(item: Item) -> tuple[int, ...]:
    """A list of single bytes as hex (["00", "01"])."""
    return tuple(_byte(child) for child in item.items())


def _offsets(item: Item) -> tuple[int, ...]:
    """A list of header offsets."""
    return tuple(_OFFSET(child) for child in item.items())


def _size(item: Item) -> int:
    value = item.value
    if value not in FIELD_SIZES or isinstance(value, bool):
        raise BadValue(f"expected a field size of 1, 2 or 4 bytes, got {given(item)}")
    return int(value)


def _kind(item: Item) -> str:
    """A check kind: a sum, or a CRC's catalogue name (any case), the closest offered."""
    text = leaves.string(item, "a check kind (sum8, fletcher8, CRC-16/MODBUS, ...)")
    name = canonical(text)
    if name is not None:
        return name
    near = closest(text.upper(), _UPPER_KINDS)
    hint = f"; did you mean '{_UPPER_KINDS[near]}'?" if near is not None else ""
    raise BadValue(
        f"expected sum8, sum8-inv, xor8, fletcher8 or a CRC by its CRC RevEng catalogue "
        f"name (CRC-16/MODBUS, CRC-32/ISO-HDLC, ...), got {given(item)}{hint}"
    )


def _mapping(
    cls: Callable[..., Any], keys: Mapping[str, Checker], required: tuple[str, ...], example: str
) -> Checker:
    """A mapping of `keys` built into `cls`, which needs each of `required`."""
    section = Section(dict, keys)

    def check(item: Item) -> Any:
        kwargs = build(item, section)
        if _inner_bad(item):
            item.ctx.bad.add(item.path)  # (reported already, inside)
            return None
        missing = [key for key in required if key not in kwargs]
        if missing:
            raise BadValue(f"needs {' and '.join(missing)}, e.g. {example}")
        return cls(**kwargs)

    return check


def _inner_bad(item: Item) -> bool:
    inside = item.path + "." if item.path else ""
    return any(path.startswith(inside) for path in item.ctx.bad)


_LENGTH = _mapping(
    Length,
    {
        "offset": _OFFSET,
        "size": _size,
        "order": leaves.choice(ORDERS),
        "counts": leaves.choice(COUNTS),
        "adjust": leaves.integer(-65535, 65535),
    },
    ("offset", "size"),
    "length: {offset: 2, size: 2}",
)
_CHECK = _mapping(
    Check,
    {"kind": _kind, "over": leaves.choice(OVERS), "order": leaves.choice(ORDERS)},
    ("kind",),
    "check: {kind: CRC-16/MODBUS}",
)
_SEQ = _mapping(
    Field,
    {"offset": _OFFSET, "size": _size, "order": leaves.choice(ORDERS)},
    ("offset", "size"),
    "seq: {offset: 1, size: 1}",
)
_EVENT = _mapping(
    Event,
    {"offset": _OFFSET, "values": _bytes},
    ("offset", "values"),
    'event: {offset: 0, values: ["80"]}',
)
_STATUS = _mapping(
    Status, {"offset": _OFFSET, "ok": _bytes}, ("offset",), 'status: {offset: 2, ok: ["00"]}'
)

#: `device.frame`: the declaration, or None where it has a bad key (reported)
frame = _mapping(
    FrameDeclaration,
    {
        "start": _hex,
        "header": leaves.integer(0, MAX_HEADER),
        "length": leaves.optional(_LENGTH),
        "check": leaves.optional(_CHECK),
        "end": _hex,
        "stuffing": leaves.choice(STUFFINGS),
        "match": _offsets,
        "seq": leaves.optional(_SEQ),
        "event": leaves.optional(_EVENT),
        "status": leaves.optional(_STATUS),
    },
    ("header",),
    'frame: {start: "b5 62", header: 4, length: {offset: 2, size: 2, order: little}}',
)
