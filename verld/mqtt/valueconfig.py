"""verld-mqtt's `entities:`, the parts below an entity: its calls and its `value:` block.

Strategy: as in the rest of the config, each key is checked on its own and every bad one
is reported with its line (`fields` walks a mapping that way); then the rules between a
value block's keys are checked on what passed: a `type` for register, offset and pattern
(bytes or text types), none for bit; word_order with register, byte_order with offset;
no arithmetic on bits or text; an on_value of the value's own type. A call is exactly
one of hex, text or data, at least one byte, and may say `reply: false` (a command the
device does not answer; the entity's rules say which calls may) or `reply: true`.
`modbus_read` says whether a poll is a Modbus read that can give a register or bit
decoder its value. A checker that has already reported what is wrong where it is
raises `Reported`, which says nothing more.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from verld.codec.modbus import pdu
from verld.config import leaves
from verld.config.suggest import unknown_key
from verld.config.validate import BadValue, Item, MarkedMap, expected, given
from verld.mqtt.decode import BYTE_TYPES, ORDERS, TEXT_TYPES, WHERE, ValueSpec

_CALL_KEYS = ("hex", "text", "data")


@dataclass(frozen=True, slots=True)
class Command:
    """A call an entity makes (poll, turn_on, turn_off, press): its bytes, and its text
    when it was given as `text`."""

    data: bytes
    text: str | None = None
    reply: bool | None = None  #: the call's `reply` (False: the device gives no answer)

    def fields(self) -> dict[str, Any]:
        """The API call's fields for it."""
        if self.text is not None:
            out: dict[str, Any] = {"text": self.text}
        else:
            out = {"data": base64.b64encode(self.data).decode("ascii")}
        if self.reply is not None:
            out["reply"] = self.reply
        return out


class Reported(BadValue):
    """Errors inside a value were reported where they are: nothing more to say."""


def command(item: Item) -> Command:
    """`{hex: ...}`, `{text: ...}` or `{data: BASE64}`: exactly one, at least one byte;
    and `reply: false` (or true) beside it."""
    if not isinstance(item.value, MarkedMap):
        raise BadValue(
            f'expected a call: {{hex: "0103..."}}, {{text: ...}} or {{data: BASE64}}, '
            f"got {given(item)}"
        )
    named = [k for k in item.value if k in _CALL_KEYS]
    if len(named) > 1:
        raise BadValue(f"give one of hex, text or data, not {' and '.join(named)}")
    found, reply, before = None, None, len(item.ctx.errors)
    for key, child in item.children():
        if key not in _CALL_KEYS and key != "reply":
            item.ctx.error(child, unknown_key(key, (*_CALL_KEYS, "reply")))
            continue
        try:
            if key == "reply":
                reply = leaves.boolean(child)
            else:
                found = _payload(key, child)
        except BadValue as exc:
            item.ctx.error(child, str(exc))
    if len(item.ctx.errors) != before:
        raise Reported
    if found is None:
        raise BadValue("expected one of hex, text or data")
    return Command(found.data, found.text, reply)


def _payload(key: str, item: Item) -> Command:
    if key == "text":
        text = leaves.string(item, "a text")
        if not text:
            raise BadValue("expected a text of at least one character")
        return Command(text.encode("utf-8"), text)
    if key == "hex":
        text = leaves.string(item, 'hex digits, two per byte ("010300000002")')
        try:
            data = bytes.fromhex(text)
        except ValueError:
            raise BadValue(f"{text!r} is not hex digits, two per byte") from None
    else:
        text = leaves.string(item, "base64")
        try:
            data = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise BadValue(f"{text!r} is not base64 (standard alphabet, padded)") from None
    if not data:
        raise BadValue("expected at least one byte")
    return Command(data)


def _regex(item: Item) -> str:
    pattern = leaves.regex(item)
    groups = re.compile(pattern).groups
    if groups != 1:
        raise BadValue(
            f"{pattern!r} has {groups} groups; write exactly one, around the value "
            r"(e.g. 'T=([-0-9.]+)'; (?:...) groups nothing)"
        )
    return pattern


def _number(item: Item) -> float:
    v = item.value
    if type(v) not in (int, float) or not math.isfinite(v):
        raise expected(item, "a number")
    return float(v)


def _on_value(item: Item) -> int | float | str:
    v = item.value
    if type(v) is float and not math.isfinite(v):
        raise expected(item, "a finite number or a string")
    if type(v) in (int, float, str):
        return v  # type: ignore[no-any-return]
    if isinstance(v, bool):
        raise BadValue(
            f"expected a number or a string, got {given(item)}; write 1 or 0 (or quote it for text)"
        )
    raise expected(item, "a number or a string")


VALUE_CHECKS: Mapping[str, Callable[[Item], Any]] = {
    "register": leaves.integer(0, 124, "a register index"),
    "bit": leaves.integer(0, 1999, "a bit index"),
    "offset": leaves.integer(0, 65535, "a byte offset"),
    "pattern": _regex,
    "type": leaves.choice((*BYTE_TYPES, *TEXT_TYPES)),
    "word_order": leaves.choice(ORDERS),
    "byte_order": leaves.choice(ORDERS),
    "scale": _number,
    "shift": _number,
    "round": leaves.optional(leaves.integer(0, 15, "a number of decimals")),
    "on_value": leaves.optional(_on_value),
}


def fields(item: Item, checks: Mapping[str, Callable[[Item], Any]]) -> dict[str, Any] | None:
    """Each key of the mapping `item`, checked (None when any failed, all reported)."""
    if not isinstance(item.value, MarkedMap):
        raise BadValue(f"expected a mapping of keys, got {given(item)}")
    ctx, before, out = item.ctx, len(item.ctx.errors), {}
    for key, child in item.children():
        if isinstance(key, bool):
            ctx.error(
                child,
                f"YAML reads {child.path.rsplit('.', 1)[-1]}: as {str(key).lower()}; "
                "a switch's calls are turn_on: and turn_off:",
            )
        elif key not in checks:
            ctx.error(child, unknown_key(key, checks))
        else:
            try:
                out[key] = checks[key](child)
            except Reported:
                pass
            except BadValue as exc:
                ctx.error(child, str(exc))
    return out if len(ctx.errors) == before else None


def value(item: Item) -> ValueSpec:
    """An entity's `value:` block."""
    got = fields(item, VALUE_CHECKS)
    if got is None:
        raise Reported
    where = [w for w in WHERE if w in got]
    if len(where) != 1:
        named = " and ".join(where) if where else "none"
        raise BadValue(
            f"needs exactly one of register (Modbus registers), bit (Modbus coils, "
            f"inputs), offset (other binary codecs) or pattern (line); got {named}"
        )
    problems = _value_problems(where[0], got)
    for key, problem in problems:
        item.ctx.error_at((f"{item.path}.{key}", item.path), problem)
    if problems:
        raise Reported
    return ValueSpec(**got)


def _value_problems(at: str, got: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, what is wrong) for the rules between a value block's keys."""
    kind, out = got.get("type"), []
    if at == "bit" and kind is not None:
        out.append(("type", "bit takes no type (its value is 1 or 0)"))
    elif at != "bit" and kind is None:
        kinds = ", ".join(TEXT_TYPES if at == "pattern" else BYTE_TYPES)
        out.append((at, f"{at} needs a type: {kinds}"))
    elif at == "pattern" and kind not in TEXT_TYPES:
        out.append(
            (
                "type",
                f"pattern takes type {', '.join(TEXT_TYPES)} (the text it matched), not {kind}",
            )
        )
    elif at in ("register", "offset") and kind not in BYTE_TYPES:
        out.append(("type", f"{at} takes type {', '.join(BYTE_TYPES)}, not {kind}"))
    for key, needs in (("word_order", "register"), ("byte_order", "offset")):
        if key in got and at != needs:
            out.append((key, f"{key} goes with {needs}, not {at}"))
    for key in ("scale", "shift", "round"):
        if key in got and (at == "bit" or kind == "str"):
            out.append((key, f"{key} is for numbers, not {'a bit' if at == 'bit' else 'text'}"))
    on = got.get("on_value")
    if on is not None and isinstance(on, str) != (kind == "str"):
        out.append(
            (
                "on_value",
                f"{on!r} is {'text' if isinstance(on, str) else 'a number'}, "
                f"and the value is {'text' if kind == 'str' else 'a number'}",
            )
        )
    return out


def modbus_read(spec: ValueSpec, data: bytes) -> str | None:
    """Why the poll `data` cannot give `spec`'s register or bit (None: it can)."""
    registers = spec.where == "register"
    functions = pdu.READ_REGISTERS if registers else pdu.READ_BITS
    what = "registers (fc 3 or 4)" if registers else "coils or inputs (fc 1 or 2)"
    if len(data) != 6 or data[1] not in functions:
        return (
            f"value.{spec.where} needs a poll that reads {what}: unit, function code, "
            f"address, quantity (6 bytes, e.g. 010300000002); got {data.hex()}"
        )
    _, quantity = pdu.fields(data[2:])
    if registers:
        assert spec.type is not None and spec.register is not None
        last = spec.register + BYTE_TYPES[spec.type][1] // 2 - 1
        if last >= quantity:
            return (
                f"value.register {spec.register} ({spec.type}) needs registers "
                f"{spec.register}..{last} of the reply; the poll reads {quantity}"
            )
    elif spec.bit is not None and spec.bit >= quantity:
        return f"value.bit {spec.bit} is not among the {quantity} the poll reads"
    return None
