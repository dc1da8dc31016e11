"""Setpoints (`kind: number`, `kind: select`): their config, the call a set runs, and a
select's label for a polled value; sans-I/O (docs/fleet.md, "Setpoints").

Strategy: a setpoint's `set` is one of two forms, told apart by its keys. On a text
codec (`line`) it is a template, `{text: "VOLT {value}"}` (Python format syntax, the
only field `value`; `reply: false` beside it for a command the device does not
answer). On a Modbus codec it is a register, `{unit, register, type, scale, shift,
word_order}`: the value becomes the raw `(value - shift) / scale` (rounded for an int
type), packed big-endian as `type` (signed types as two's complement), in `word_order`
over the registers, and written with fc 6 (one register, a 16-bit type) or fc 16 (2
or 4 registers); the call is unit + PDU, as a poll's is, and the PDU comes from
`verld.codec.modbus.pdu`.

A payload on the set topic becomes the call in `request`, or raises `Refused` saying
why it runs nothing (not a number, outside `min`..`max`, off `step`, not one of the
options, a fraction for an int type, too big for the register type): the caller
counts it as `ignored` and sends nothing. `fits` says whether the set's form fits the
device's codec (known at run time, from verld's `hello`): a misfit is an error of the
entity. A select's options are labels, or labels each mapped to a value: the value
(or the label itself) is what is written, and `label` maps a polled value back.

The checkers (`set_call`, `options`, `problems`) report like the rest of
`entities:`: each bad key with its line, then the rules between keys.
"""

from __future__ import annotations

import math
import string
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from verld.codec.modbus import pdu
from verld.codec.registry import CODECS
from verld.config import leaves
from verld.config.validate import BadValue, Item, MarkedMap, MarkedSeq, expected, given
from verld.mqtt.decode import BYTE_TYPES, ORDERS, DecodeError, Value, ValueSpec
from verld.mqtt.valueconfig import Command, Reported, fields

MODES = ("box", "slider")
DEFAULT_STEP, DEFAULT_MODE = 1.0, "box"
#: how near (value - min) / step must be to an integer to be on the step
STEP_TOLERANCE = 1e-9
_TEXT_KEYS = ("text", "reply")
_REGISTER_KEYS = ("unit", "register", "type", "scale", "shift", "word_order")
#: an int type's range, by type
_INT_RANGE = {
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
}


class Refused(ValueError):
    """A payload on a set topic that runs nothing; the message says why."""


@dataclass(frozen=True, slots=True)
class TextSet:
    """`set: {text: "VOLT {value}"}`: a text codec's call, the value formatted in."""

    template: str
    reply: bool | None = None


@dataclass(frozen=True, slots=True)
class RegisterSet:
    """`set: {unit, register, type, ...}`: a Modbus write of the value's registers."""

    unit: int
    register: int
    type: str
    scale: float = 1.0
    shift: float = 0.0
    word_order: str = "big"


SetCall = TextSet | RegisterSet


@dataclass(frozen=True, slots=True)
class Options:
    """A select's options: its labels, and what each writes (the label itself when
    `options` is a list)."""

    labels: tuple[str, ...]
    values: tuple[Value, ...]
    mapped: bool  #: given as a mapping label → value

    def value_of(self, label: str) -> Value | None:
        for have, value in zip(self.labels, self.values, strict=True):
            if have == label:
                return value
        return None


class Entity(Protocol):
    """What this module reads of an entity (`entityconfig.Entity`)."""

    @property
    def kind(self) -> str: ...
    @property
    def value(self) -> ValueSpec | None: ...
    @property
    def min(self) -> float | None: ...
    @property
    def max(self) -> float | None: ...
    @property
    def step(self) -> float: ...
    @property
    def mode(self) -> str: ...
    @property
    def options(self) -> Options | None: ...
    @property
    def set(self) -> SetCall | None: ...


# ---------------------------------------------------------------------------
# Config: the keys, then the rules between them


def number(item: Item) -> float:
    v = item.value
    if type(v) not in (int, float) or not math.isfinite(v):
        raise expected(item, "a number")
    return float(v)


def step(item: Item) -> float:
    value = number(item)
    if value <= 0:
        raise expected(item, "a number > 0")
    return value


def _scale(item: Item) -> float:
    value = number(item)
    if value == 0:
        raise expected(item, "a number other than 0")
    return value


def _template(item: Item) -> str:
    text = leaves.string(item, 'a text with {value} in it ("VOLT {value}")')
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        raise BadValue(
            f"{text!r} is not a template ({exc}); write {{{{ and }}}} for braces"
        ) from None
    wrong = [name for name in names if name != "value"]
    if wrong or not names:
        raise BadValue(
            f"{text!r}: the template's one field is {{value}} "
            f"({'got {' + wrong[0] + '}' if wrong else 'it has none'})"
        )
    return text


_SET_CHECKS = {
    "text": _template,
    "reply": leaves.boolean,
    "unit": leaves.integer(0, 247, "a unit"),
    "register": leaves.integer(0, 65535, "a register address"),
    "type": leaves.choice(tuple(BYTE_TYPES)),
    "scale": _scale,
    "shift": number,
    "word_order": leaves.choice(ORDERS),
}


def set_call(item: Item) -> SetCall:
    """`set:`: `{text: "... {value} ...", reply}` (line) or `{unit, register, type,
    scale, shift, word_order}` (Modbus)."""
    if not isinstance(item.value, MarkedMap):
        raise BadValue(
            f'expected {{text: "VOLT {{value}}"}} (line) or {{unit: 1, register: 0, '
            f"type: uint16}} (Modbus), got {given(item)}"
        )
    got = fields(item, _SET_CHECKS)
    if got is None:
        raise Reported
    text = [k for k in got if k in _TEXT_KEYS]
    register = [k for k in got if k in _REGISTER_KEYS]
    if "text" in got:
        if register:
            raise BadValue(
                f"give text (line) or unit, register and type (Modbus), not text and {register[0]}"
            )
        return TextSet(got["text"], got.get("reply"))
    if text:
        raise BadValue("reply goes with text (a line command)")
    missing = [k for k in ("unit", "register", "type") if k not in got]
    if missing:
        raise BadValue(
            f"needs text (line: {{text: 'VOLT {{value}}'}}) or unit, register and type "
            f"(Modbus); missing {', '.join(missing)}"
        )
    return RegisterSet(**got)


def options(item: Item) -> Options:
    """`options:`: a list of labels, or a mapping label → value; at least one, labels
    unique (and, mapped, values unique: a polled value maps back to one label)."""
    ctx, before = item.ctx, len(item.ctx.errors)
    labels: list[str] = []
    values: list[Value] = []
    if isinstance(item.value, MarkedSeq):
        for child in item.items():
            if not isinstance(child.value, str) or not child.value:
                ctx.error(child, f"expected a label (text; quote a number), got {given(child)}")
            elif child.value in labels:
                ctx.error(child, f"the label {child.value!r} is already an option")
            else:
                labels.append(child.value)
                values.append(child.value)
        mapped = False
    elif isinstance(item.value, MarkedMap):
        for key, child in item.children():
            v = child.value
            if not isinstance(key, str) or not key:
                ctx.error(child, "a label is text: quote it")
            elif type(v) not in (int, float, str) or (type(v) is float and not math.isfinite(v)):
                ctx.error(
                    child, f"expected the value it writes (a number or a text), got {given(child)}"
                )
            elif (first := _label_of(labels, values, v)) is not None:
                ctx.error(
                    child,
                    f"{v!r} is already the value of {first!r} (a read maps back to one label)",
                )
            else:
                labels.append(key)
                values.append(v)
        mapped = True
    else:
        raise BadValue(f"expected a list of labels or a mapping label → value, got {given(item)}")
    if len(ctx.errors) != before:
        raise Reported
    if not labels:
        raise BadValue("expected at least one option")
    return Options(tuple(labels), tuple(values), mapped)


def problems(e: Entity) -> list[tuple[str, str]]:
    """(key, what is wrong) for the rules between a setpoint's keys."""
    out: list[tuple[str, str]] = []
    spec, call = e.value, e.set
    if e.kind == "number":
        if e.min is not None and e.max is not None and not e.min < e.max:
            out.append(("max", f"max {e.max:g} is not above min {e.min:g}"))
        if spec is not None and not spec.numeric:
            out.append(("value.type", "a number's value is a number, not text (type str)"))
    if spec is None or call is None:
        return out
    text_value = spec.where == "pattern"
    if isinstance(call, RegisterSet) and spec.where not in ("register", "bit"):
        out.append(
            (
                "set",
                f"a Modbus set (register) and a value read by {spec.where} are never on one codec",
            )
        )
    if isinstance(call, TextSet) and text_value is False:
        out.append(
            (
                "set.text",
                f"a text set and a value read by {spec.where} "
                "are never on one codec (a line value uses pattern)",
            )
        )
    opts = e.options
    if opts is not None:
        if isinstance(call, RegisterSet) and not all(type(v) in (int, float) for v in opts.values):
            out.append(
                ("options", "a Modbus set writes numbers: options maps each label to a number")
            )
        elif not opts.mapped and spec.type != "str":
            out.append(
                (
                    "options",
                    "a list of labels is read back as text: the value needs type str "
                    "(or map each label to a number)",
                )
            )
        elif opts.mapped and any(isinstance(v, str) != (spec.type == "str") for v in opts.values):
            out.append(
                (
                    "options",
                    "each option's value is read back as the value's type: "
                    f"{'text' if spec.type == 'str' else 'a number'}",
                )
            )
    if isinstance(call, TextSet):
        samples: tuple[Value, ...] = (
            opts.values if opts is not None else ((1 if spec.type == "int" else 1.5),)
        )
        for sample in samples:
            try:
                call.template.format(value=sample)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
                out.append(("set.text", f"{call.template!r} cannot format {sample!r}: {exc}"))
                break
    return out


# ---------------------------------------------------------------------------
# Run time: a payload becomes a call; a polled value becomes a label


def fits(call: SetCall, codec: str | None) -> str | None:
    """Why `call` cannot run on `codec` (None: it can, or the codec is not known yet)."""
    traits = CODECS.get(codec) if codec is not None else None
    if codec is None:
        return None
    if traits is None:
        return f"the device's codec {codec!r} is unknown to this verld-mqtt"
    if isinstance(call, RegisterSet) and not traits.bus:
        return f"set: a Modbus register write does not fit the device's codec {codec}"
    if isinstance(call, TextSet) and not traits.text:
        return f"set: a text command does not fit the device's codec {codec}"
    return None


def request(e: Entity, payload: bytes) -> Command:
    """The call a set topic's `payload` runs for the setpoint `e`; Refused if none."""
    assert e.set is not None
    try:
        text = payload.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise Refused("not UTF-8 text") from None
    value: Value
    if e.options is not None:
        value = _selected(e, text)
    else:
        number = _number_in_range(e, text)
        if e.value is not None and e.value.type == "int" and isinstance(e.set, TextSet):
            if number != int(number):
                raise Refused(f"{_shown(number)} is not an integer (value.type int)")
            number = int(number)
        value = number
    call = e.set
    if isinstance(call, RegisterSet):
        if isinstance(value, str):
            raise Refused(f"{value!r} is not a number a register can hold")
        return Command(bytes((call.unit,)) + write_pdu(call, value))
    try:
        text = call.template.format(value=value)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise Refused(f"the template cannot format {value!r}: {exc}") from None
    if not text:
        raise Refused("the template gives an empty command")
    return Command(text.encode("utf-8"), text, call.reply)


def _selected(e: Entity, text: str) -> Value:
    assert e.options is not None
    value = e.options.value_of(text)
    if value is None:
        raise Refused(f"{_short(text)!r} is not one of {', '.join(e.options.labels)}")
    return value


def _number_in_range(e: Entity, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise Refused(f"{_short(text)!r} is not a number") from None
    if not math.isfinite(value):
        raise Refused(f"{_short(text)!r} is not a finite number")
    low = e.min if e.min is not None else -math.inf
    high = e.max if e.max is not None else math.inf
    if not low <= value <= high:
        raise Refused(f"{_shown(value)} is outside {low:g}..{high:g}")
    if not on_step(value, low, e.step):
        raise Refused(f"{_shown(value)} is not on the step {e.step:g} from {low:g}")
    return value


def on_step(value: float, low: float, step: float) -> bool:
    """Whether `value` is `low` plus a whole number of `step`s (within 1e-9 of one)."""
    k = (value - low) / step
    return abs(k - round(k)) <= STEP_TOLERANCE


def registers(call: RegisterSet, value: int | float) -> list[int]:
    """The register values `value` is written as (Refused if it does not fit the type)."""
    raw = (value - call.shift) / call.scale
    code, size = BYTE_TYPES[call.type]
    if call.type in _INT_RANGE:
        whole = round(raw)
        low, high = _INT_RANGE[call.type]
        if not low <= whole <= high:
            raise Refused(f"{_shown(value)} is {whole} raw, outside {call.type}'s {low}..{high}")
        packed = struct.pack(">" + code, whole)
    else:
        try:
            packed = struct.pack(">" + code, raw)
        except OverflowError:
            raise Refused(f"{_shown(value)} is too big for a {call.type}") from None
        if not math.isfinite(struct.unpack(">" + code, packed)[0]):
            raise Refused(f"{_shown(value)} is too big for a {call.type}")
    words = [packed[i] << 8 | packed[i + 1] for i in range(0, size, 2)]
    return words[::-1] if call.word_order == "little" else words


def write_pdu(call: RegisterSet, value: int | float) -> bytes:
    """The PDU that writes `value`: fc 6 for a 16-bit type, fc 16 for 2 or 4 registers."""
    words = registers(call, value)
    if len(words) == 1:
        return pdu.write_register(call.register, words[0])
    if call.register + len(words) > 0x10000:
        raise Refused(f"registers {call.register}.. run past address 65535")
    return pdu.write_registers(call.register, words)


def label(opts: Options, value: Value) -> str:
    """The label of a polled value (DecodeError when no option has it)."""
    found = _label_of(opts.labels, opts.values, value)
    if found is None:
        raise DecodeError(f"{value!r} is not the value of any option")
    return found


def _label_of(labels: Sequence[str], values: Sequence[Value], value: Value) -> str | None:
    """The label whose value is `value` (text compared as text, a number as a number)."""
    for have, written in zip(labels, values, strict=True):
        if isinstance(written, str) == isinstance(value, str) and written == value:
            return have
    return None


def discovery(e: Entity) -> dict[str, Any]:
    """What a setpoint adds to its Home Assistant discovery config."""
    if e.kind == "number":
        return {"min": e.min, "max": e.max, "step": e.step, "mode": e.mode}
    if e.kind == "select" and e.options is not None:
        return {"options": list(e.options.labels)}
    return {}


def _shown(value: float) -> str:
    return f"{value:g}"


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
