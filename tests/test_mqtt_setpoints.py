"""verld-mqtt's setpoints (`kind: number`, `kind: select`) without a broker: the set call a
payload becomes (byte-exact Modbus PDUs, line text), what is refused, a select's label for a
polled value, the codec a set fits, and the Home Assistant discovery config's keys."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verld.codec.modbus import pdu
from verld.mqtt import setpoint
from verld.mqtt.config import parse_bridge_config
from verld.mqtt.decode import DecodeError, Decoder, ValueSpec
from verld.mqtt.entityconfig import Entity
from verld.mqtt.hass import entity_config
from verld.mqtt.setpoint import Refused, RegisterSet
from verld.mqtt.topics import Topics, device_block

T = Topics("verld/h")


def _entities(text: str) -> tuple[Entity, ...]:
    return parse_bridge_config(
        f"devices: {{meter: /run/m.sock, psu: /run/p.sock}}\nentities:\n{text}"
    ).entities


LIMIT, FLOAT_BIG, FLOAT_LITTLE, WORD, VOLT, AMPS, OUTPUT, MODE, RANGE = _entities("""\
  - {device: meter, name: limit, kind: number, poll: {hex: '0103000a0001'},
     value: {register: 0, type: int16, scale: 0.1}, min: -50, max: 50, step: 0.1, unit: A,
     set: {unit: 1, register: 10, type: int16, scale: 0.1}}
  - {device: meter, name: fbig, kind: number, poll: {hex: '010300140002'},
     value: {register: 0, type: float32}, min: 0, max: 1000, step: 0.5, mode: slider,
     set: {unit: 1, register: 20, type: float32}}
  - {device: meter, name: flittle, kind: number, poll: {hex: '0103001e0002'},
     value: {register: 0, type: float32, word_order: little}, min: 0, max: 100, step: 0.25,
     set: {unit: 2, register: 30, type: float32, word_order: little}}
  - {device: meter, name: word, kind: number, poll: {hex: '010300280001'},
     value: {register: 0, type: uint16}, min: 0, max: 100000,
     set: {unit: 1, register: 40, type: uint16, shift: 10}}
  - {device: psu, name: volt, kind: number, poll: {text: 'VOLT?'},
     value: {pattern: '([-0-9.]+)', type: float}, min: 0, max: 30, step: 0.01,
     set: {text: 'VOLT {value}', reply: false}}
  - {device: psu, name: amps, kind: number, poll: {text: 'CURR?'},
     value: {pattern: '([0-9]+)', type: int}, min: 0, max: 5, step: 0.5,
     set: {text: 'CURR {value}'}}
  - {device: psu, name: output, kind: select, poll: {text: 'OUTP?'},
     value: {pattern: '([01])', type: int}, options: {'off': 0, 'on': 1},
     set: {text: 'OUTP {value}', reply: false}}
  - {device: psu, name: mode, kind: select, poll: {text: 'MODE?'},
     value: {pattern: '(\\w+)', type: str}, options: [CV, CC],
     set: {text: 'MODE {value}'}}
  - {device: meter, name: range, kind: select, poll: {hex: '010300320001'},
     value: {register: 0, type: uint16}, options: {low: 1, mid: 2, high: 3},
     set: {unit: 1, register: 50, type: uint16}}
""")


def data(entity: Entity, payload: str) -> bytes:
    return setpoint.request(entity, payload.encode()).data


class TestModbusCalls:
    def test_an_int16_is_fc6_two_s_complement_scaled(self) -> None:
        """-12.3 at scale 0.1 is raw -123: fc 6, unit 1, register 10, 0xff85."""
        assert data(LIMIT, "-12.3") == bytes.fromhex("0106000aff85")

    def test_an_int_type_rounds_the_raw_value(self) -> None:
        """(value - shift) / scale is rounded for an int type: 2.3 at scale 0.1 is 23."""
        assert data(LIMIT, "2.3") == bytes.fromhex("0106000a0017")

    def test_shift_is_taken_off_before_the_scale(self) -> None:
        """uint16 with shift 10: 60 is raw 50."""
        assert data(WORD, "60") == bytes.fromhex("010600280032")

    def test_a_float32_is_fc16_in_big_word_order(self) -> None:
        """230.5 as float32 0x43668000 over registers 20, 21: AB CD."""
        assert data(FLOAT_BIG, "230.5") == bytes.fromhex("01100014000204" + "43668000")

    def test_a_float32_in_little_word_order(self) -> None:
        """49.75 as float32 0x42470000, words swapped (CD AB), unit 2, register 30."""
        assert data(FLOAT_LITTLE, "49.75") == bytes.fromhex("0210001e000204" + "00004247")

    def test_a_select_writes_its_mapped_value(self) -> None:
        """Label `high` writes 3 to register 50 with fc 6."""
        assert data(RANGE, "high") == bytes.fromhex("010600320003")

    def test_the_pdu_is_the_modbus_modules(self) -> None:
        """The calls' PDUs are what verld.codec.modbus.pdu builds for the same writes."""
        assert data(LIMIT, "1")[1:] == pdu.write_register(10, 10)
        words = list(struct.unpack(">2H", struct.pack(">f", 230.5)))
        assert data(FLOAT_BIG, "230.5")[1:] == pdu.write_registers(20, words)

    @pytest.mark.parametrize("kind", ["int16", "uint16", "int32", "uint32"])
    @given(st.data())
    def test_int_registers_round_trip(self, kind: str, draw: st.DataObject) -> None:
        """Any value of an int type, both word orders: the decoder reads back what was set."""
        low, high = setpoint._INT_RANGE[kind]
        value = draw.draw(st.integers(low, high))
        order = draw.draw(st.sampled_from(["big", "little"]))
        self._round_trip(kind, order, value, value)

    @given(
        st.floats(width=32, allow_nan=False, allow_infinity=False),
        st.sampled_from(["big", "little"]),
    )
    def test_float32_registers_round_trip(self, value: float, order: str) -> None:
        """Any finite float32, both word orders: the decoder reads back the same float32."""
        self._round_trip("float32", order, value, value)

    @given(
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(["big", "little"]),
    )
    def test_float64_registers_round_trip(self, value: float, order: str) -> None:
        """Any finite float64 over four registers, both word orders: the same float."""
        self._round_trip("float64", order, value, value)

    def _round_trip(self, kind: str, order: str, value: float, expect: float) -> None:
        call = RegisterSet(unit=1, register=0, type=kind, word_order=order)
        words = setpoint.registers(call, value)
        reply = bytes((1, 3, 2 * len(words))) + struct.pack(f">{len(words)}H", *words)
        got = Decoder(ValueSpec(register=0, type=kind, word_order=order)).decode(reply)
        if kind == "float32":
            assert struct.pack(">f", got) == struct.pack(">f", expect)
        else:
            assert got == expect

    @pytest.mark.parametrize(
        ("kind", "value"), [("uint16", 70000), ("uint16", -1), ("int16", 40000), ("int32", 2**31)]
    )
    def test_a_value_that_does_not_fit_the_type_is_refused(self, kind: str, value: int) -> None:
        """An int type's raw value outside its range: Refused, nothing built."""
        with pytest.raises(Refused, match=kind):
            setpoint.registers(RegisterSet(1, 0, kind), value)

    def test_a_float32_too_big_is_refused(self) -> None:
        """1e39 is no float32."""
        with pytest.raises(Refused, match="too big"):
            setpoint.registers(RegisterSet(1, 0, "float32"), 1e39)


class TestLineCalls:
    def test_a_number_is_formatted_into_the_template(self) -> None:
        """VOLT {value} with 12.5: the text `VOLT 12.5`, and its reply: false."""
        call = setpoint.request(VOLT, b"12.5")
        assert (call.text, call.data, call.reply) == ("VOLT 12.5", b"VOLT 12.5", False)

    def test_an_int_type_gives_an_int(self) -> None:
        """value.type int: `3` and `3.0` both give `CURR 3`; 2.5 is refused (a fraction)."""
        assert setpoint.request(AMPS, b"3").text == "CURR 3"
        assert setpoint.request(AMPS, b" 3.0 ").text == "CURR 3"
        with pytest.raises(Refused, match="not an integer"):
            setpoint.request(AMPS, b"2.5")

    def test_a_select_sends_its_mapped_value_or_its_label(self) -> None:
        """A mapping sends the value (`on` → `OUTP 1`); a list sends the label (`MODE CC`)."""
        assert setpoint.request(OUTPUT, b"on").text == "OUTP 1"
        assert setpoint.request(MODE, b"CC").text == "MODE CC"


class TestRefused:
    @pytest.mark.parametrize(
        ("entity", "payload", "why"),
        [
            (LIMIT, "50.1", "outside"),
            (LIMIT, "-60", "outside"),
            (LIMIT, "12.34", "not on the step"),
            (LIMIT, "abc", "not a number"),
            (LIMIT, "nan", "not a finite number"),
            (LIMIT, "inf", "not a finite number"),
            (WORD, "70010", "outside uint16"),
            (FLOAT_LITTLE, "0.3", "not on the step"),
            (VOLT, "", "not a number"),
            (OUTPUT, "ON", "not one of off, on"),
            (MODE, "cv", "not one of"),
        ],
    )
    def test_what_runs_nothing(self, entity: Entity, payload: str, why: str) -> None:
        """Out of range, off the step, not a number, not an option, too big for the type."""
        with pytest.raises(Refused, match=why):
            setpoint.request(entity, payload.encode())

    def test_not_utf8_is_refused(self) -> None:
        """A payload that is not UTF-8 text runs nothing."""
        with pytest.raises(Refused, match="UTF-8"):
            setpoint.request(VOLT, b"\xff\xfe")

    @pytest.mark.parametrize(
        ("value", "low", "step", "on"),
        [(12.5, 0, 0.1, True), (0.3, 0, 0.1, True), (12.34, 0, 0.1, False), (7, 1, 2, True),
         (6, 1, 2, False), (-12.3, -50, 0.1, True), (29.99, 0, 0.01, True)],
    )  # fmt: skip
    def test_on_the_step(self, value: float, low: float, step: float, on: bool) -> None:
        """(value - min) / step within 1e-9 of an integer: 12.5 is on a 0.1 step."""
        assert setpoint.on_step(value, low, step) is on


class TestLabels:
    def test_a_polled_value_maps_back_to_its_label(self) -> None:
        """1 → `on` (a number as a number: 1.0 too); a list's text is its own label."""
        assert OUTPUT.options is not None and MODE.options is not None
        assert setpoint.label(OUTPUT.options, 1) == "on"
        assert setpoint.label(OUTPUT.options, 1.0) == "on"
        assert setpoint.label(MODE.options, "CV") == "CV"

    def test_a_value_no_option_has_is_a_decode_error(self) -> None:
        """7, or the text "1" where the options map to numbers, is no label."""
        assert OUTPUT.options is not None
        for value in (7, "1"):
            with pytest.raises(DecodeError, match="not the value of any option"):
                setpoint.label(OUTPUT.options, value)


class TestFits:
    @pytest.mark.parametrize(
        ("entity", "codec", "fits"),
        [
            (LIMIT, "modbus-rtu", True),
            (LIMIT, "modbus-tcp", True),
            (LIMIT, "line", False),
            (LIMIT, "verl", False),
            (VOLT, "line", True),
            (VOLT, "modbus-rtu", False),
            (VOLT, "verl", False),
            (VOLT, None, True),
        ],
    )
    def test_which_codec_a_set_fits(self, entity: Entity, codec: str | None, fits: bool) -> None:
        """A register write on the Modbus codecs, a text on line; unknown yet: no misfit."""
        assert entity.set is not None
        assert (setpoint.fits(entity.set, codec) is None) is fits


#: Home Assistant's MQTT number and select discovery keys (home-assistant.io/integrations/
#: number.mqtt/ and select.mqtt/, "Configuration Variables")
_HA_COMMON = {
    "availability", "availability_mode", "availability_template", "availability_topic",
    "command_template", "command_topic", "device", "enabled_by_default", "encoding",
    "entity_category", "entity_picture", "icon", "json_attributes_template",
    "json_attributes_topic", "name", "object_id", "default_entity_id", "optimistic",
    "origin", "platform", "qos", "retain", "state_topic", "unique_id", "value_template",
}  # fmt: skip
HA_NUMBER = _HA_COMMON | {
    "device_class", "min", "max", "mode", "payload_reset", "step", "unit_of_measurement"
}  # fmt: skip
HA_SELECT = _HA_COMMON | {"options"}


class TestDiscovery:
    def _config(self, entity: Entity) -> dict[str, Any]:
        block = device_block("vm", entity.device, "modbus-rtu", "verld 0.1.0")
        return dict(json.loads(entity_config(T, "vm", entity, block)))

    def test_a_number(self) -> None:
        """min, max, step, mode, unit, command and state topics."""
        c = self._config(LIMIT)
        assert (c["min"], c["max"], c["step"], c["mode"]) == (-50, 50, 0.1, "box")
        assert c["command_topic"] == "verld/h/meter/value/limit/set"
        assert c["state_topic"] == "verld/h/meter/value/limit"
        assert c["value_template"] == "{{ value_json.value }}"
        assert c["unit_of_measurement"] == "A" and "expire_after" not in c
        assert self._config(FLOAT_BIG)["mode"] == "slider"

    def test_a_select(self) -> None:
        """The labels as options, command and state topics."""
        c = self._config(OUTPUT)
        assert c["options"] == ["off", "on"]
        assert c["command_topic"] == "verld/h/psu/value/output/set"
        assert c["state_topic"] == "verld/h/psu/value/output"
        assert "min" not in c and "payload_on" not in c

    @pytest.mark.parametrize(
        ("entity", "keys"), [(LIMIT, HA_NUMBER), (VOLT, HA_NUMBER), (OUTPUT, HA_SELECT)]
    )
    def test_the_keys_are_home_assistants(self, entity: Entity, keys: set[str]) -> None:
        """Every key of a number's or select's discovery config is one HA's schema has."""
        assert set(self._config(entity)) <= keys
