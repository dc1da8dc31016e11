"""verld-mqtt's `entities:` (device values as Home Assistant entities): the schema.

Strategy: each list item is walked like a section of verld's config (every bad key
reported with its line, unknown keys with a suggestion), then the rules that span its
keys are checked on what passed: what each kind takes and needs (a button is pressed,
not polled; only a switch has turn_on and turn_off; unit and state_class are for
sensors), what its value may be (on_value only on the binary kinds, which need one
for text; unit and state_class need a number), that a poll awaits its answer (`reply:
false` is for commands), and, for a Modbus decoder, that the poll is a read whose
quantity covers the value (the calls and the `value:` block
themselves are checked in `valueconfig`, a setpoint's `set`, `options` and the rules
between them in `setpoint`). An entity with
any error is left out of the result, so the rules after it never see half an entity.
Whether a device (`devices:`) exists is checked by the caller, which knows them; the
device's codec is known only at run time (`decode.fits`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from verld.config import leaves
from verld.config.validate import BadValue, Context, Item, expected, given
from verld.mqtt import setpoint
from verld.mqtt.decode import ValueSpec
from verld.mqtt.valueconfig import Command, command, fields, modbus_read, value

KINDS = ("sensor", "binary_sensor", "switch", "button", "number", "select")
#: an entity's name: a topic level and a piece of a Home Assistant id
NAME = re.compile(r"[a-z0-9_]{1,64}")
#: a device's name as verld-mqtt's config allows it (`config.DEVICE_NAME`)
DEVICE = re.compile(r"[A-Za-z0-9_-]+")
EVERY_MIN, EVERY_MAX, DEFAULT_EVERY = 0.2, 86400.0, 10.0
STATE_CLASSES = ("measurement", "total", "total_increasing", "measurement_angle")
_CLASS = re.compile(r"[a-z0-9_]{1,64}")
_ICON = re.compile(r"[a-z0-9_-]+:[a-z0-9_-]+")
#: keys every kind may have, and what each kind adds (and needs)
_COMMON = ("device", "name", "kind", "device_class", "icon")
_POLLED = ("poll", "every", "value", "retain")
_KEYS: dict[str, tuple[str, ...]] = {
    "sensor": (*_POLLED, "unit", "state_class"),
    "binary_sensor": _POLLED,
    "switch": (*_POLLED, "turn_on", "turn_off"),
    "button": ("press",),
    "number": (*_POLLED, "unit", "min", "max", "step", "mode", "set"),
    "select": (*_POLLED, "options", "set"),
}
_NEEDS: dict[str, tuple[str, ...]] = {
    "sensor": ("poll", "value"),
    "binary_sensor": ("poll", "value"),
    "switch": ("poll", "value", "turn_on", "turn_off"),
    "button": ("press",),
    "number": ("poll", "value", "min", "max", "set"),
    "select": ("poll", "value", "options", "set"),
}
_WHY_NOT = {
    "unit": "unit and state_class are for sensors (and unit for numbers)",
    "state_class": "unit and state_class are for sensors",
    "turn_on": "only a switch has turn_on and turn_off",
    "turn_off": "only a switch has turn_on and turn_off",
    "press": "only a button has press",
    "poll": "a button is pressed, not polled",
    "every": "a button is pressed, not polled",
    "value": "a button has no value",
    "retain": "a button has no value",
    "min": "only a number has min, max, step and mode",
    "max": "only a number has min, max, step and mode",
    "step": "only a number has min, max, step and mode",
    "mode": "only a number has min, max, step and mode",
    "options": "only a select has options",
    "set": "only a number or a select has set",
}


@dataclass(frozen=True, slots=True)
class Entity:
    """One item of `entities:`."""

    device: str
    name: str
    kind: str
    poll: Command | None = None
    every: float = DEFAULT_EVERY
    value: ValueSpec | None = None
    turn_on: Command | None = None
    turn_off: Command | None = None
    press: Command | None = None
    unit: str | None = None
    device_class: str | None = None
    state_class: str | None = None
    icon: str | None = None
    retain: bool = False  #: its values are published retained
    # setpoints (number, select: `setpoint`)
    min: float | None = None
    max: float | None = None
    step: float = setpoint.DEFAULT_STEP
    mode: str = setpoint.DEFAULT_MODE
    options: setpoint.Options | None = None
    set: setpoint.SetCall | None = None
    where: str = field(default="", compare=False)  #: its key path, for messages

    @property
    def binary(self) -> bool:
        return self.kind in ("binary_sensor", "switch")


# ---------------------------------------------------------------------------
# Leaf checkers


def _pattern_word(regex: re.Pattern[str], what: str) -> Callable[[Item], str]:
    def check(item: Item) -> str:
        text = leaves.string(item, what)
        if not regex.fullmatch(text):
            raise BadValue(f"expected {what}, got {given(item)}")
        return text

    return check


def _every(item: Item) -> float:
    v, expect = item.value, f"a number of seconds {EVERY_MIN:g}..{EVERY_MAX:g}"
    if type(v) not in (int, float) or not EVERY_MIN <= v <= EVERY_MAX:
        raise expected(item, expect)
    return float(v)


def _unit(item: Item) -> str:
    text = leaves.string(item, "a unit such as V, °C or kWh")
    if not text.strip() or len(text) > 32:
        raise expected(item, "a unit such as V, °C or kWh")
    return text


# ---------------------------------------------------------------------------
# One entity, the list


_CHECKS: Mapping[str, Callable[[Item], Any]] = {
    "device": _pattern_word(DEVICE, "a name under devices"),
    "name": _pattern_word(NAME, "a name of [a-z0-9_], 1 to 64 characters"),
    "kind": leaves.choice(KINDS),
    "poll": command,
    "every": _every,
    "value": value,
    "turn_on": command,
    "turn_off": command,
    "press": command,
    "unit": leaves.optional(_unit),
    "device_class": leaves.optional(_pattern_word(_CLASS, "a device class of [a-z0-9_]")),
    "state_class": leaves.optional(leaves.choice(STATE_CLASSES)),
    "icon": leaves.optional(_pattern_word(_ICON, "an icon such as mdi:flash")),
    "retain": leaves.boolean,
    "min": setpoint.number,
    "max": setpoint.number,
    "step": setpoint.step,
    "mode": leaves.choice(setpoint.MODES),
    "options": setpoint.options,
    "set": setpoint.set_call,
}


def _entity(item: Item) -> Entity | None:
    ctx, before = item.ctx, len(item.ctx.errors)
    try:
        got = fields(item, _CHECKS)
    except BadValue as exc:
        ctx.error(item, f"{exc} (device:, name:, kind:, ...)")
        return None
    keys = list(item.value)
    missing = [k for k in ("device", "name", "kind") if k not in keys]
    if missing:
        ctx.error(item, f"needs {', '.join(missing)} (and what its kind takes)")
    kind = got.get("kind") if got is not None else _kind_of(item)
    if kind is not None:
        _kind_rules(item, kind, keys)
    if got is None or len(ctx.errors) != before:
        return None
    entity = Entity(**got, where=item.path)
    _fit(ctx, entity)
    return entity if len(ctx.errors) == before else None


def _kind_of(item: Item) -> str | None:
    kind = item.value.get("kind")
    return kind if kind in KINDS else None


def _kind_rules(item: Item, kind: str, keys: list[Any]) -> None:
    allowed = (*_COMMON, *_KEYS[kind])
    for key in keys:
        if isinstance(key, str) and key in _CHECKS and key not in allowed:
            why = _WHY_NOT.get(key, "")
            item.ctx.error_at((f"{item.path}.{key}",), f"a {kind} has no {key} ({why})")
    for key in _NEEDS[kind]:
        if key not in keys:
            item.ctx.error(item, f"a {kind} needs {key}")


def _fit(ctx: Context, e: Entity) -> None:
    """Rules between an entity's keys: its kind and its value; a Modbus poll and its decoder;
    a poll that awaits its answer."""
    spec, where = e.value, e.where
    if e.poll is not None and e.poll.reply is False:
        ctx.error_at(
            (f"{where}.poll.reply", where),
            "a poll reads the value in the answer: reply: false is for turn_on, turn_off and press",
        )
    for at, why in setpoint.problems(e):
        ctx.error_at((f"{where}.{at}" if at else where, where), why)
    if spec is None:
        return
    if spec.on_value is not None and not e.binary:
        ctx.error_at((f"{where}.value.on_value",), "only a binary_sensor or switch has on_value")
    if e.binary and spec.type == "str" and spec.on_value is None:
        ctx.error_at(
            (f"{where}.value.type",),
            f"a {e.kind} of type str needs value.on_value (the text that means ON)",
        )
    for key in ("unit", "state_class"):
        if not spec.numeric and getattr(e, key) is not None:
            ctx.error_at(
                (f"{where}.{key}", where), "needs a number, and this value is text (type str)"
            )
    if e.poll is not None and spec.where in ("register", "bit"):
        problem = modbus_read(spec, e.poll.data)
        if problem:
            ctx.error_at((f"{where}.poll", where), problem)


def entities(item: Item) -> tuple[Entity, ...]:
    """The `entities:` list; each bad entity is reported and left out."""
    out: list[Entity] = []
    first: dict[tuple[str, str], int] = {}
    for child in item.items():
        entity = _entity(child)
        if entity is None:
            continue
        key = (entity.device, entity.name)
        if key in first:
            item.ctx.error_at(
                (f"{child.path}.name",),
                f"{entity.name!r} is already an entity of "
                f"device {entity.device!r} (line {first[key]})",
            )
            continue
        first[key] = item.ctx.lines.get(f"{child.path}.name", child.line)
        out.append(entity)
    return tuple(out)


def check_devices(item: Item, devices: Mapping[str, str]) -> None:
    """Each entity's device (`item`: the `entities:` list as written, so an entity with
    other errors is checked too) is one under `devices:`, unless that entry was itself
    wrong (it has its own message)."""
    ctx = item.ctx
    if not ctx.ok("devices") or not isinstance(item.value, list):
        return
    names = ", ".join(devices) or "none"
    for i, entry in enumerate(item.value):
        device = entry.get("device") if isinstance(entry, dict) else None
        path = f"{item.path}[{i}].device"
        if not isinstance(device, str) or device in devices or not ctx.ok(path):
            continue
        if not ctx.ok(f"devices.{device}"):
            continue
        near = [d for d in devices if d.lower() == device.lower()]
        hint = f"; did you mean {near[0]!r}?" if near else ""
        ctx.error_at((path,), f"no device {device!r} under devices (devices: {names}){hint}")
