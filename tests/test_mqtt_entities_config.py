"""verld-mqtt's `entities:` schema: what passes, and every bad field's message with its line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from verld.errors import ConfigError
from verld.mqtt.config import parse_bridge_config
from verld.mqtt.decode import ValueSpec
from verld.mqtt.entityconfig import Entity
from verld.mqtt.valueconfig import Command

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
HEAD = "devices: {meter: /run/m.sock, probe: /run/p.sock}\nentities:\n"
BARE = "  - device: meter\n    name: v\n    kind: sensor\n    poll: {hex: '010300000002'}\n"
METER = BARE + "    value: {register: 0, type: uint16}\n"


def errors_of(entities: str) -> list[str]:
    """The messages (without file and line) for an `entities:` list under HEAD."""
    with pytest.raises(ConfigError) as info:
        parse_bridge_config(HEAD + entities, "m.yaml")
    return [line.split(": ", 1)[1] for line in str(info.value).splitlines()]


def one(entities: str) -> str:
    found = errors_of(entities)
    assert len(found) == 1, found
    return found[0]


def has(entities: str, words: str) -> bool:
    """Whether one of the errors of `entities` says `words`."""
    return any(words in error for error in errors_of(entities))


class TestValid:
    def test_a_full_sensor_is_read_as_written(self) -> None:
        """Every key of a Modbus sensor lands in its Entity and ValueSpec."""
        more = (
            "    every: 2.5\n    value: {register: 0, type: float32, word_order: little, "
            "scale: 2, shift: -1, round: 2}\n    unit: V\n    device_class: voltage\n"
            "    state_class: measurement\n    icon: 'mdi:flash'\n"
        )
        cfg = parse_bridge_config(HEAD + BARE + more)
        spec = ValueSpec(
            register=0, type="float32", word_order="little", scale=2.0, shift=-1.0, round=2
        )
        assert cfg.entities == (
            Entity(
                "meter",
                "v",
                "sensor",
                Command(bytes.fromhex("010300000002")),
                2.5,
                spec,
                unit="V",
                device_class="voltage",
                state_class="measurement",
                icon="mdi:flash",
            ),
        )

    def test_each_kind_with_what_it_needs(self) -> None:
        """A line sensor, a text binary_sensor, a coil switch and a button all pass."""
        cfg = parse_bridge_config(
            HEAD
            + """\
  - {device: probe, name: t, kind: sensor, poll: {text: "T?"},
     value: {pattern: 'T=(.*)', type: float}}
  - {device: probe, name: door, kind: binary_sensor, poll: {text: "D?"},
     value: {pattern: 'D=(\\w+)', type: str, on_value: open}}
  - {device: meter, name: relay, kind: switch, poll: {hex: '010100000001'}, value: {bit: 0},
     turn_on: {hex: '01050000ff00'}, turn_off: {data: AQUAAAAA}}
  - {device: meter, name: reset, kind: button, press: {hex: '010600010000'}}
"""
        )
        assert [e.kind for e in cfg.entities] == ["sensor", "binary_sensor", "switch", "button"]
        assert cfg.entities[0].every == 10.0 and cfg.entities[1].value is not None
        assert cfg.entities[1].value.on_value == "open"
        assert cfg.entities[2].turn_off == Command(bytes.fromhex("010500000000"))
        assert cfg.entities[3].poll is None and cfg.entities[3].press is not None

    def test_a_command_may_say_reply_false(self) -> None:
        """press, turn_on and turn_off take reply: false (no answer), a poll reply: true."""
        cfg = parse_bridge_config(
            HEAD
            + """\
  - {device: probe, name: out, kind: switch, poll: {text: "OUTP?", reply: true},
     value: {pattern: '(.*)', type: int}, turn_on: {text: "OUTP ON", reply: false},
     turn_off: {text: "OUTP OFF"}}
  - {device: probe, name: trg, kind: button, press: {text: "*TRG", reply: false}}
"""
        )
        switch, button = cfg.entities
        assert switch.poll == Command(b"OUTP?", "OUTP?", reply=True)
        assert switch.turn_on == Command(b"OUTP ON", "OUTP ON", reply=False)
        assert switch.turn_on.fields() == {"text": "OUTP ON", "reply": False}
        assert switch.turn_off is not None and switch.turn_off.fields() == {"text": "OUTP OFF"}
        assert button.press is not None and button.press.reply is False

    def test_the_example_file_passes_check_config(self) -> None:
        """configs/mqtt-entities.yaml passes verld-mqtt --check-config."""
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "verld.mqtt",
                "--check-config",
                str(CONFIGS / "mqtt-entities.yaml"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert out.returncode == 0, out.stderr


class TestEntityErrors:
    @pytest.mark.parametrize(
        ("entity", "words"),
        [
            ("  - hello\n", "expected a mapping of keys, got 'hello'"),
            (METER.replace("device: meter\n    name: v", "device: meter"), "needs name"),
            (METER.replace("name: v", "name: Volts"), "expected a name of [a-z0-9_]"),
            (METER.replace("name: v", "name: " + "x" * 65), "1 to 64 characters"),
            (METER.replace("kind: sensor", "kind: sensr"), "did you mean 'sensor'?"),
            (METER.replace("device: meter", "device: metre"), "no device 'metre' under devices"),
            (METER.replace("device: meter", "device: Meter"), "did you mean 'meter'?"),
            (METER + "    evry: 3\n", "unknown key; did you mean 'every'?"),
            (METER + "    every: 0.1\n", "expected a number of seconds 0.2..86400, got 0.1"),
            (METER + "    every: 90000\n", "0.2..86400"),
            (METER + "    every: '5'\n", "remove the quotes"),
            (METER + "    unit: ''\n", "a unit such as"),
            (METER + "    device_class: Volt age\n", "a device class of [a-z0-9_]"),
            (METER + "    state_class: measure\n", "did you mean 'measurement'?"),
            (METER + "    icon: flash\n", "an icon such as mdi:flash"),
            (BARE, "a sensor needs value"),
        ],
    )
    def test_bad_entity_field(self, entity: str, words: str) -> None:
        """Each bad key of an entity is one error naming what was expected."""
        assert words in one(entity)

    @pytest.mark.parametrize(
        ("entity", "words"),
        [
            ("  - {name: v, kind: sensor}\n", "needs device"),
            ("  - {device: meter, name: v}\n", "needs kind"),
            (
                METER.replace("device: meter", "foo: 1"),
                "foo: unknown key; valid keys here: device, ",
            ),
            (
                "  - {device: meter, kind: sensor, name: v, value: {bit: 0}}\n",
                "a sensor needs poll",
            ),
        ],
    )
    def test_a_missing_key_is_named(self, entity: str, words: str) -> None:
        """device, name and kind are needed, and what the kind needs."""
        assert has(entity, words)

    def test_the_name_is_unique_per_device(self) -> None:
        """Two entities named v on one device: the second is an error naming the first's line."""
        assert "'v' is already an entity of device 'meter' (line 4)" in one(2 * METER)

    def test_on_and_off_are_told_to_be_turn_on_and_turn_off(self) -> None:
        """on:/off: (booleans to YAML) are told to be turn_on:/turn_off:."""
        found = errors_of(
            "  - {device: meter, name: r, kind: switch, poll: {hex: '010100000001'}"
            ", value: {bit: 0}, on: {hex: '01'}, off: {hex: '01'}}\n"
        )
        assert any("YAML reads on: as true; a switch's calls are turn_on:" in e for e in found)
        assert any("YAML reads off: as false" in e for e in found)
        assert "entities[0]: a switch needs turn_on" in found
        assert "entities[0]: a switch needs turn_off" in found

    @pytest.mark.parametrize(
        ("kind", "extra", "words"),
        [
            (
                "button",
                "press: {hex: '01'}, poll: {hex: '01'}",
                "a button has no poll (a button is pressed, not polled)",
            ),
            ("button", "press: {hex: '01'}, every: 3", "a button has no every"),
            ("button", "press: {hex: '01'}, value: {bit: 0}", "a button has no value"),
            (
                "switch",
                "poll: {hex: '010100000001'}, value: {bit: 0}, turn_on: {hex: '01'}, "
                "turn_off: {hex: '01'}, press: {hex: '01'}",
                "only a button has press",
            ),
            (
                "sensor",
                "poll: {hex: '010300000001'}, value: {register: 0, type: int16}, "
                "turn_on: {hex: '01'}",
                "only a switch has turn_on and turn_off",
            ),
            (
                "binary_sensor",
                "poll: {hex: '010100000001'}, value: {bit: 0}, unit: V",
                "unit and state_class are for sensors",
            ),
            ("sensor", "value: {register: 0, type: int16}", "a sensor needs poll"),
        ],
    )
    def test_what_a_kind_takes_and_needs(self, kind: str, extra: str, words: str) -> None:
        """A key another kind has is an error saying whose it is; a missing one, what it needs."""
        assert words in one(f"  - {{device: meter, name: x, kind: {kind}, {extra}}}\n")

    def test_a_button_without_press(self) -> None:
        """A button polled instead of pressed: both are said."""
        assert errors_of("  - {device: meter, name: x, kind: button, poll: {hex: '01'}}\n") == [
            "entities[0].poll: a button has no poll (a button is pressed, not polled)",
            "entities[0]: a button needs press",
        ]


class TestCallErrors:
    @pytest.mark.parametrize(
        ("call", "words"),
        {
            "{hex: 010300000002}": 'quote it: "010300000002"',
            "{hex: '0103zz'}": "is not hex digits, two per byte",
            "{hex: ''}": "expected at least one byte",
            "{data: 'not base64!'}": "is not base64",
            "{text: ''}": "at least one character",
            "{hex: '01', text: x}": "give one of hex, text or data, not hex and text",
            "{hx: '01'}": "did you mean 'hex'?",
            "{}": "expected one of hex, text or data",
            "'0103'": "expected a call",
            "{text: x, reply: 'no'}": "reply: expected true or false, got 'no'",
            "{text: x, replay: false}": "did you mean 'reply'?",
            "{reply: true}": "expected one of hex, text or data",
        }.items(),
    )
    def test_bad_poll(self, call: str, words: str) -> None:
        """A call is one of hex, text or data with at least one byte; each mistake named."""
        entity = (
            f"  - {{device: probe, name: t, kind: sensor, poll: {call}, "
            "value: {pattern: '(.*)', type: str}}\n"
        )
        assert words in one(entity)

    def test_a_poll_awaits_its_answer(self) -> None:
        """A poll with reply: false is an error: the value is in the answer."""
        entity = (
            "  - {device: probe, name: t, kind: sensor, poll: {text: x, reply: false}, "
            "value: {pattern: '(.*)', type: str}}\n"
        )
        assert one(entity) == (
            "entities[0].poll.reply: a poll reads the value in the answer: reply: false is for "
            "turn_on, turn_off and press"
        )


class TestValueErrors:
    @pytest.mark.parametrize(
        ("value", "words"),
        [
            ("{type: int16}", "needs exactly one of register (Modbus registers), bit"),
            ("{register: 0, offset: 1, type: int16}", "got register and offset"),
            ("{register: 0}", "register needs a type: int16, uint16, int32, uint32, float32"),
            ("{register: 0, type: int}", "register takes type int16, uint16"),
            ("{register: 0, type: float16}", "expected one of int16, uint16"),
            ("{register: 125, type: int16}", "expected a register index 0..124"),
            ("{register: -1, type: int16}", "expected a register index 0..124"),
            ("{register: 0, type: int16, byte_order: little}", "byte_order goes with offset"),
            ("{register: 0, type: int32, word_order: middle}", "expected one of big, little"),
            ("{register: 0, type: int16, scale: x}", "scale: expected a number, got 'x'"),
            ("{register: 0, type: int16, shift: .nan}", "shift: expected a number"),
            ("{register: 0, type: int16, round: 1.5}", "expected a number of decimals 0..15"),
            ("{register: 0, type: int16, round: 16}", "expected a number of decimals 0..15"),
            ("{register: 0, type: int16, rount: 1}", "did you mean 'round'?"),
            ("{bit: 0, type: uint16}", "bit takes no type"),
            ("{bit: 0, scale: 2}", "scale is for numbers, not a bit"),
            ("{bit: 2000}", "expected a bit index 0..1999"),
            ("[register, 0]", "expected a mapping of keys, got a list"),
        ],
    )
    def test_bad_modbus_value(self, value: str, words: str) -> None:
        """Each bad key of a Modbus value block is named with what it takes."""
        entity = (
            f"  - {{device: meter, name: v, kind: sensor, poll: {{hex: '010300000002'}}, "
            f"value: {value}}}\n"
        )
        assert words in one(entity)

    @pytest.mark.parametrize(
        ("value", "words"),
        [
            ("{pattern: 'T=.*', type: float}", "has 0 groups; write exactly one"),
            ("{pattern: '(a)(b)', type: float}", "has 2 groups"),
            ("{pattern: '(', type: float}", "is not a valid regular expression"),
            ("{pattern: '(.*)', type: uint16}", "pattern takes type int, float, str"),
            ("{pattern: '(.*)'}", "pattern needs a type: int, float, str"),
            ("{pattern: '(.*)', type: str, scale: 2}", "scale is for numbers, not text"),
            ("{pattern: '(.*)', type: int, word_order: big}", "word_order goes with register"),
            ("{offset: 0, type: int, byte_order: big}", "offset takes type int16"),
            ("{offset: 70000, type: int16}", "expected a byte offset 0..65535"),
        ],
    )
    def test_bad_text_or_offset_value(self, value: str, words: str) -> None:
        """A pattern takes one group and a text type; an offset a bytes type."""
        assert words in one(
            f"  - {{device: probe, name: t, kind: sensor, poll: {{text: x}}, value: {value}}}\n"
        )

    @pytest.mark.parametrize(
        ("kind", "value", "extra", "words"),
        [
            (
                "sensor",
                "{pattern: '(.*)', type: float, on_value: 1}",
                "",
                "only a binary_sensor or switch has on_value",
            ),
            (
                "binary_sensor",
                "{pattern: '(.*)', type: str}",
                "",
                "a binary_sensor of type str needs value.on_value",
            ),
            (
                "binary_sensor",
                "{pattern: '(.*)', type: float, on_value: open}",
                "",
                "'open' is text, and the value is a number",
            ),
            (
                "binary_sensor",
                "{pattern: '(.*)', type: str, on_value: 1}",
                "",
                "1 is a number, and the value is text",
            ),
            ("binary_sensor", "{pattern: '(.*)', type: int, on_value: true}", "", "write 1 or 0"),
            (
                "sensor",
                "{pattern: '(.*)', type: str}",
                ", unit: V",
                "needs a number, and this value is text",
            ),
            (
                "sensor",
                "{pattern: '(.*)', type: str}",
                ", state_class: measurement",
                "needs a number, and this value is text",
            ),
        ],
    )
    def test_value_against_kind(self, kind: str, value: str, extra: str, words: str) -> None:
        """on_value only on the binary kinds, of the value's type; text has no unit."""
        assert words in one(
            f"  - {{device: probe, name: t, kind: {kind}, poll: {{text: x}}, "
            f"value: {value}{extra}}}\n"
        )

    @pytest.mark.parametrize(
        ("read", "words"),
        {
            ("010300000001", "{register: 0, type: float32}"): "needs registers 0..1 of the "
            "reply; the poll reads 1",
            ("010300000002", "{register: 1, type: uint32}"): "needs registers 1..2",
            ("010300000004", "{register: 1, type: float64}"): "needs registers 1..4",
            ("010100000001", "{register: 0, type: int16}"): "needs a poll that reads "
            "registers (fc 3 or 4)",
            ("0103000000", "{register: 0, type: int16}"): "6 bytes",
            ("010300000008", "{bit: 0}"): "needs a poll that reads coils or inputs (fc 1 or 2)",
            ("010200000008", "{bit: 8}"): "value.bit 8 is not among the 8 the poll reads",
        }.items(),
    )
    def test_a_modbus_poll_must_read_what_the_value_takes(
        self, read: tuple[str, str], words: str
    ) -> None:
        """A register or bit decoder needs a read of the right function code and quantity."""
        poll, value = read
        assert words in one(
            f"  - {{device: meter, name: v, kind: sensor, poll: {{hex: '{poll}'}},"
            f" value: {value}}}\n"
        )


def test_every_error_at_once_with_its_line() -> None:
    """Errors in several entities and keys are all reported, each with its file:line."""
    text = (
        HEAD
        + """\
  - device: meter
    name: v
    kind: sensor
    poll: {hex: '010300000002'}
    every: 0
    value: {register: 0, type: float32, word_order: middle}
  - device: nosuch
    name: w
    kind: button
"""
    )
    with pytest.raises(ConfigError) as info:
        parse_bridge_config(text, "m.yaml")
    assert str(info.value).splitlines() == [
        "m.yaml:7: entities[0].every: expected a number of seconds 0.2..86400, got 0",
        "m.yaml:8: entities[0].value.word_order: expected one of big, little, got 'middle'",
        "m.yaml:9: entities[1]: a button needs press",
        "m.yaml:9: entities[1].device: no device 'nosuch' under devices (devices: meter, probe)",
    ]


def test_entities_must_be_a_list() -> None:
    """entities: as a mapping is refused."""
    with pytest.raises(ConfigError, match=r"entities: expected a list, got a mapping"):
        parse_bridge_config("entities: {a: 1}\n", "m.yaml")


def test_retain_is_a_boolean_of_the_entities_with_a_value() -> None:
    """retain: true is kept (default false); not a boolean, or on a button: an error."""
    cfg = parse_bridge_config(HEAD + METER + "    retain: true\n", "m.yaml")
    assert cfg.entities[0].retain is True
    assert parse_bridge_config(HEAD + METER, "m.yaml").entities[0].retain is False
    assert (
        one(METER + "    retain: 'yes'\n")
        == "entities[0].retain: expected true or false, got 'yes'"
    )
    button = "  - {device: meter, name: b, kind: button, press: {hex: '01'}, retain: true}\n"
    assert one(button) == "entities[0].retain: a button has no retain (a button has no value)"
