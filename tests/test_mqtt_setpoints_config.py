"""verld-mqtt's setpoint keys in `entities:` (number: min, max, step, mode, set; select:
options, set): what passes, and every bad field's message with its file and line."""

from __future__ import annotations

import pytest

from verld.errors import ConfigError
from verld.mqtt.config import parse_bridge_config
from verld.mqtt.setpoint import Options, RegisterSet, TextSet

HEAD = "devices: {meter: /run/m.sock, psu: /run/p.sock}\nentities:\n"
NUMBER = """\
  - device: meter
    name: limit
    kind: number
    poll: {hex: '0103000a0001'}
    value: {register: 0, type: int16, scale: 0.1}
"""
RANGE = "    min: 0\n    max: 50\n"
SET = "    set: {unit: 1, register: 10, type: int16, scale: 0.1}\n"
SELECT = """\
  - device: psu
    name: output
    kind: select
    poll: {text: 'OUTP?'}
    value: {pattern: '([01])', type: int}
"""
OPTIONS = "    options: {'off': 0, 'on': 1}\n"
TEXT_SET = "    set: {text: 'OUTP {value}', reply: false}\n"


def errors_of(entities: str) -> list[str]:
    """The errors (`m.yaml:LINE: path: message`) of an `entities:` list under HEAD."""
    with pytest.raises(ConfigError) as info:
        parse_bridge_config(HEAD + entities, "m.yaml")
    return str(info.value).splitlines()


def one(entities: str) -> str:
    found = errors_of(entities)
    assert len(found) == 1, found
    return found[0]


class TestValid:
    def test_a_modbus_number_is_read_as_written(self) -> None:
        """min, max, step, mode, unit and a register set land in the Entity."""
        more = "    step: 0.1\n    mode: slider\n    unit: A\n"
        (e,) = parse_bridge_config(HEAD + NUMBER + RANGE + SET + more).entities
        assert (e.kind, e.min, e.max, e.step, e.mode, e.unit) == (
            "number",
            0.0,
            50.0,
            0.1,
            "slider",
            "A",
        )
        assert e.set == RegisterSet(unit=1, register=10, type="int16", scale=0.1)

    def test_defaults_step_1_mode_box_word_order_big(self) -> None:
        """A number without step and mode: step 1, mode box; a set's word order big."""
        (e,) = parse_bridge_config(HEAD + NUMBER + RANGE + SET).entities
        assert (e.step, e.mode) == (1.0, "box")
        assert isinstance(e.set, RegisterSet) and e.set.word_order == "big"

    def test_a_line_select_with_a_mapping_and_one_with_a_list(self) -> None:
        """options as a mapping label → value, or a list of labels (read back as text)."""
        listed = """\
  - {device: psu, name: mode, kind: select, poll: {text: 'MODE?'},
     value: {pattern: '(\\w+)', type: str}, options: [CV, CC], set: {text: 'MODE {value}'}}
"""
        a, b = parse_bridge_config(HEAD + SELECT + OPTIONS + TEXT_SET + listed).entities
        assert a.options == Options(("off", "on"), (0, 1), mapped=True)
        assert a.set == TextSet("OUTP {value}", reply=False)
        assert b.options == Options(("CV", "CC"), ("CV", "CC"), mapped=False)


class TestErrors:
    @pytest.mark.parametrize(
        ("extra", "error"),
        [
            ("    max: 50\n" + SET, "m.yaml:3: entities[0]: a number needs min"),
            (RANGE, "m.yaml:3: entities[0]: a number needs set"),
            (
                "    min: 50\n    max: 50\n" + SET,
                "m.yaml:9: entities[0].max: max 50 is not above min 50",
            ),
            (RANGE + SET + "    step: 0\n", "m.yaml:11: entities[0].step: expected a number > 0"),
            (
                RANGE + SET + "    mode: auto\n",
                "m.yaml:11: entities[0].mode: expected one of box, slider, got 'auto'",
            ),
            (
                RANGE + "    set: {unit: 1, register: 10, type: int8}\n",
                "m.yaml:10: entities[0].set.type: expected one of int16, uint16",
            ),
            (
                RANGE + "    set: {unit: 1, register: 10, type: int16, scale: 0}\n",
                "m.yaml:10: entities[0].set.scale: expected a number other than 0",
            ),
            (
                RANGE + "    set: {unit: 1, type: int16}\n",
                "m.yaml:10: entities[0].set: needs text (line",
            ),
            (
                RANGE + "    set: {unit: 1, register: 10, type: int16, text: 'V {value}'}\n",
                "m.yaml:10: entities[0].set: give text (line) or unit, register and type",
            ),
            (
                RANGE + "    set: {unit: 1, register: 10, type: int16, wordorder: big}\n",
                "m.yaml:10: entities[0].set.wordorder: unknown key",
            ),
            (
                RANGE + "    set: {text: 'V {value}'}\n",
                "m.yaml:10: entities[0].set.text: a text set and a value read by register",
            ),
            (
                RANGE + SET + "    options: [a]\n",
                "m.yaml:11: entities[0].options: a number has no options",
            ),
        ],
    )
    def test_a_bad_number(self, extra: str, error: str) -> None:
        """Each bad number key, or a missing one, is one error at its line."""
        assert one(NUMBER + extra).startswith(error)

    @pytest.mark.parametrize(
        ("extra", "error"),
        [
            (TEXT_SET, "m.yaml:3: entities[0]: a select needs options"),
            (OPTIONS, "m.yaml:3: entities[0]: a select needs set"),
            (
                "    options: []\n" + TEXT_SET,
                "m.yaml:8: entities[0].options: expected at least one",
            ),
            (
                "    options: {}\n" + TEXT_SET,
                "m.yaml:8: entities[0].options: expected at least one",
            ),
            (
                "    options: {a: 1, b: 2, a: 3}\n" + TEXT_SET,
                "m.yaml:8: entities[0].options.a: duplicate key (first on line 8)",
            ),
            (
                "    options: {a: 1, b: 1}\n" + TEXT_SET,
                "m.yaml:8: entities[0].options.b: 1 is already the value of 'a'",
            ),
            (
                "    options:\n      - a\n      - 2\n" + TEXT_SET,
                "m.yaml:10: entities[0].options[1]: expected a label (text; quote a number)",
            ),
            (
                "    options: [a, b]\n" + TEXT_SET,
                "m.yaml:8: entities[0].options: a list of labels is read back as text",
            ),
            (
                "    options: {a: x, b: y}\n" + TEXT_SET,
                "m.yaml:8: entities[0].options: each option's value is read back",
            ),
            (
                OPTIONS + "    set: {text: 'OUTP {v}'}\n",
                "m.yaml:9: entities[0].set.text: 'OUTP {v}': the template's one field is {value}",
            ),
            (
                OPTIONS + "    set: {text: 'OUTP'}\n",
                "m.yaml:9: entities[0].set.text: 'OUTP': the template's one field is {value}",
            ),
            (
                OPTIONS + "    set: {text: 'OUTP {value'}\n",
                "m.yaml:9: entities[0].set.text: 'OUTP {value' is not a template",
            ),
            (
                OPTIONS + "    set: {text: 'OUTP {value:q}'}\n",
                "m.yaml:9: entities[0].set.text: 'OUTP {value:q}' cannot format 0",
            ),
            (
                OPTIONS + "    set: {unit: 1, register: 3, type: uint16}\n",
                "m.yaml:9: entities[0].set: a Modbus set (register) and a value read by pattern",
            ),
            (
                OPTIONS + "    set: {hex: '0106000a0001'}\n",
                "m.yaml:9: entities[0].set.hex: unknown key",
            ),
            (
                OPTIONS + TEXT_SET + "    min: 1\n",
                "m.yaml:10: entities[0].min: a select has no min",
            ),
        ],
    )
    def test_a_bad_select(self, extra: str, error: str) -> None:
        """Each bad select key, or a missing one, is one error at its line."""
        assert one(SELECT + extra).startswith(error)

    def test_a_modbus_select_maps_labels_to_numbers(self) -> None:
        """A register set writes numbers: a mapping to text is an error at options."""
        entity = """\
  - {device: meter, name: range, kind: select, poll: {hex: '010300320001'},
     value: {register: 0, type: uint16}, options: {low: a, high: b},
     set: {unit: 1, register: 50, type: uint16}}
"""
        assert one(entity).startswith("m.yaml:4: entities[0].options: a Modbus set writes numbers")

    def test_a_number_reads_a_number(self) -> None:
        """A number whose value is text (type str) is an error at value.type."""
        entity = """\
  - {device: psu, name: v, kind: number, poll: {text: 'V?'}, value: {pattern: '(.*)', type: str},
     min: 0, max: 1, set: {text: 'V {value}'}}
"""
        assert "entities[0].value.type: a number's value is a number" in one(entity)

    @pytest.mark.parametrize(
        ("kind", "key"), [("sensor", "set"), ("switch", "set"), ("sensor", "step")]
    )
    def test_other_kinds_have_no_setpoint_keys(self, kind: str, key: str) -> None:
        """set, min, max, step, mode and options belong to number and select."""
        value = "{unit: 1, register: 0, type: uint16}" if key == "set" else "1"
        calls = "turn_on: {hex: '01050000ff00'}, turn_off: {hex: '010500000000'}, "
        entity = (
            f"  - {{device: meter, name: x, kind: {kind}, poll: {{hex: '010300000001'}}, "
            f"value: {{register: 0, type: uint16}}, {calls if kind == 'switch' else ''}"
            f"{key}: {value}}}\n"
        )
        assert f"a {kind} has no {key}" in one(entity)
