"""verld.mqtt.decode: replies to values, byte by byte, and hypothesis properties of each decoder."""

from __future__ import annotations

import math
import re
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verld.mqtt.decode import BYTE_TYPES, DecodeError, Decoder, ValueSpec, fits, state

R = ValueSpec  # (short, for the tables)


def regs(*words: int, fc: int = 3) -> bytes:
    """A Modbus read reply's data: unit 1, `fc`, byte count, registers."""
    body = b"".join(struct.pack(">H", w) for w in words)
    return bytes([1, fc, len(body)]) + body


class TestRegisters:
    @pytest.mark.parametrize(
        ("spec", "data", "value"),
        [
            (R(register=0, type="int16"), regs(0xFF85), -123),
            (R(register=0, type="uint16"), regs(0xFF85), 0xFF85),
            (R(register=1, type="uint16"), regs(1, 2), 2),
            (R(register=0, type="int32"), regs(0xFFFF, 0xFFFE), -2),
            (R(register=0, type="int32", word_order="little"), regs(0xFFFE, 0xFFFF), -2),
            (R(register=0, type="uint32"), regs(0x0001, 0x0000), 65536),
            (R(register=0, type="uint32", word_order="little"), regs(0x0000, 0x0001), 65536),
            (R(register=0, type="float32"), regs(0x4366, 0x199A), 230.1),
            (R(register=0, type="float32", word_order="little"), regs(0x199A, 0x4366), 230.1),
            (R(register=1, type="float32"), regs(7, 0x4247, 0xCCCD), 49.95),
            (R(register=0, type="float64"), regs(0x3FF8, 0, 0, 0), 1.5),
            (R(register=0, type="float64", word_order="little"), regs(0, 0, 0, 0x3FF8), 1.5),
            (R(register=0, type="uint16"), regs(0x1234, fc=4), 0x1234),
        ],
    )
    def test_values(self, spec: ValueSpec, data: bytes, value: float) -> None:
        """Register k at byte 3 + 2k, each register big-endian, words in word_order."""
        got = Decoder(spec).decode(data)
        assert got == value and type(got) is type(value)

    @pytest.mark.parametrize(
        ("spec", "data", "words"),
        [
            (R(register=0, type="uint16"), b"\x01\x03", "a reply of 2 bytes is not a Modbus read"),
            (
                R(register=0, type="uint16"),
                regs(1, fc=1),
                "a reply to function code 1, not a read of registers (fc 3 or 4)",
            ),
            (
                R(register=0, type="uint16"),
                b"\x01\x03\x04\x00\x01",
                "says 4 bytes of registers and has 2",
            ),
            (R(register=1, type="uint32"), regs(1, 2), "register 1..2 is not in a reply of 2"),
            (R(register=0, type="float32"), regs(0x7FC0, 0), "nan is not a finite number"),
            (R(register=0, type="float32"), regs(0x7F80, 0), "inf is not a finite number"),
            (R(register=0, type="uint16"), bytes([1, 0x83, 2]), "function code 131"),
        ],
    )
    def test_what_is_not_a_value(self, spec: ValueSpec, data: bytes, words: str) -> None:
        """A short, foreign or broken reply is a DecodeError saying why."""
        with pytest.raises(DecodeError, match=re.escape(words)):
            Decoder(spec).decode(data)


class TestBitsOffsetsText:
    @pytest.mark.parametrize(
        ("spec", "data", "value"),
        [
            (R(bit=0), bytes([1, 1, 1, 0b101]), 1),
            (R(bit=1), bytes([1, 1, 1, 0b101]), 0),
            (R(bit=9), bytes([1, 2, 2, 0, 0b10]), 1),
            (R(offset=0, type="uint32", byte_order="little"), bytes.fromhex("2a000000"), 42),
            (R(offset=1, type="int16"), bytes.fromhex("00fffe"), -2),
            (R(offset=0, type="float32", byte_order="little"), struct.pack("<f", 0.1), 0.1),
            (R(offset=2, type="float64"), b"xx" + struct.pack(">d", -2.25), -2.25),
        ],
    )
    def test_binary_values(self, spec: ValueSpec, data: bytes, value: float) -> None:
        """bit k of an fc 1/2 reply (LSB first), and the type's bytes at an offset."""
        assert Decoder(spec).decode(data) == value

    @pytest.mark.parametrize(
        ("spec", "text", "value"),
        [
            (R(pattern=r"T=([-0-9.]+)", type="float"), "T=21.5C", 21.5),
            (R(pattern=r"T=([-0-9.]+)", type="float"), "probe 3: T=-4e0", -4.0),
            (R(pattern=r"N=(\d+)", type="int"), "N=42", 42),
            (R(pattern=r"door (\w+)", type="str"), "door open", "open"),
            (R(pattern=r"(\d+)", type="int", scale=0.5, shift=1), "x 10", 6.0),
        ],
    )
    def test_text_values(self, spec: ValueSpec, text: str, value: float | str) -> None:
        """The pattern's one group, searched in the text, converted by type."""
        assert Decoder(spec).decode(text.encode(), text) == value

    @pytest.mark.parametrize(
        ("spec", "data", "text", "words"),
        [
            (R(bit=8), bytes([1, 1, 1, 0xFF]), None, "bit 8 is not in a reply of 1 byte"),
            (R(bit=0), regs(1), None, "a reply to function code 3, not a read of coils"),
            (
                R(offset=1, type="uint32"),
                b"abc",
                None,
                "4 bytes at offset 1 are not in a reply of 3 bytes",
            ),
            (R(pattern=r"T=(\d+)", type="int"), b"", "X=1", "does not match 'X=1'"),
            (R(pattern=r"T=(\d+)?", type="int"), b"", "T=", "its group took no part"),
            (R(pattern=r"T=(\w+)", type="int"), b"", "T=abc", "'abc' is not an int"),
            (R(pattern=r"T=(\w+)", type="float"), b"", "T=nan", "nan is not a finite number"),
            (R(pattern=r"T=(\w+)", type="float"), b"", None, "the reply has no text"),
        ],
    )
    def test_what_is_not_a_value(
        self, spec: ValueSpec, data: bytes, text: str | None, words: str
    ) -> None:
        """Too short, no match, not a number: a DecodeError saying why."""
        with pytest.raises(DecodeError, match=re.escape(words)):
            Decoder(spec).decode(data, text)


class TestArithmeticAndState:
    def test_an_int_stays_an_int_without_scale_or_shift(self) -> None:
        """scale 1 and shift 0: the int is published as an int."""
        assert type(Decoder(R(register=0, type="uint16")).decode(regs(7))) is int

    def test_scale_shift_then_round(self) -> None:
        """value × scale + shift, then round(value, round)."""
        spec = R(register=0, type="int16", scale=0.1, shift=-0.05, round=2)
        assert Decoder(spec).decode(regs(0xFF85)) == -12.35

    @pytest.mark.parametrize(
        ("on_value", "value", "expected"),
        [
            (None, 0, "OFF"),
            (None, 2, "ON"),
            (None, -0.5, "ON"),
            (None, "x", "OFF"),
            (3, 3, "ON"),
            (3, 3.0, "ON"),
            (3, 1, "OFF"),
            ("open", "open", "ON"),
            ("open", "closed", "OFF"),
            ("1", 1, "OFF"),
        ],
    )
    def test_binary_state(
        self, on_value: int | str | None, value: float | str, expected: str
    ) -> None:
        """ON where the value is on_value (same type), else where it is a number other than 0."""
        assert state(R(bit=0, on_value=on_value), value) == expected

    @pytest.mark.parametrize(
        ("spec", "codec", "fit"),
        [
            (R(register=0, type="uint16"), "modbus-rtu", True),
            (R(bit=0), "modbus-tcp", True),
            (R(pattern="(.)", type="str"), "line", True),
            (R(offset=0, type="uint16"), "verl", True),
            (R(offset=0, type="uint16"), "length", True),
            (R(register=0, type="uint16"), "line", False),
            (R(offset=0, type="uint16"), "modbus-rtu", False),
            (R(pattern="(.)", type="str"), "verl", False),
            (R(bit=0), "future-codec", False),
            (R(bit=0), None, True),
        ],
    )
    def test_fits_by_the_codecs_traits(self, spec: ValueSpec, codec: str | None, fit: bool) -> None:
        """register/bit on the Modbus codecs, pattern on line, offset on verl and length."""
        problem = fits(spec, codec)
        assert (problem is None) is fit
        if problem is not None and codec == "line":
            assert problem == (
                "value.register does not fit the device's codec line (it takes value.pattern)"
            )


# --- properties ----------------------------------------------------------------------------

TYPES = sorted(BYTE_TYPES)


@given(
    kind=st.sampled_from(TYPES),
    little=st.booleans(),
    raw=st.binary(min_size=8, max_size=8),
    first=st.integers(0, 3),
)
def test_registers_round_trip_in_either_word_order(
    kind: str, little: bool, raw: bytes, first: int
) -> None:
    """Any value's bytes, as registers in either word order, decode to that value."""
    code, size = BYTE_TYPES[kind]
    value = struct.unpack(">" + code, raw[:size])[0]
    words = [raw[i : i + 2] for i in range(0, size, 2)]
    if little:
        words.reverse()
    data = regs(*range(first), *(int.from_bytes(w, "big") for w in words))
    spec = R(register=first, type=kind, word_order="little" if little else "big")
    try:
        got = Decoder(spec).decode(data)
    except DecodeError:
        assert kind.startswith("float") and not math.isfinite(value)
        return
    assert struct.pack(">" + code, got) == raw[:size]  # (float32: the shortest that is it)


@given(
    kind=st.sampled_from(TYPES),
    little=st.booleans(),
    pad=st.binary(max_size=5),
    raw=st.binary(min_size=8, max_size=8),
)
def test_offsets_round_trip_in_either_byte_order(
    kind: str, little: bool, pad: bytes, raw: bytes
) -> None:
    """Any value's bytes at any offset decode to that value, in either byte order."""
    code, size = BYTE_TYPES[kind]
    order = "<" if little else ">"
    value = struct.unpack(order + code, raw[:size])[0]
    spec = R(offset=len(pad), type=kind, byte_order="little" if little else "big")
    try:
        got = Decoder(spec).decode(pad + raw[:size] + pad)
    except DecodeError:
        assert not math.isfinite(value)
        return
    assert struct.pack(order + code, got) == raw[:size]


SPECS = [
    R(register=2, type="float32", scale=3.5, round=2),
    R(register=0, type="int16"),
    R(bit=12),
    R(offset=3, type="float64"),
    R(pattern=r"v=(-?\d+)", type="int"),
    R(pattern=r"(\S+)$", type="float"),
    R(pattern="(.*)", type="str"),
]


@given(
    data=st.binary(max_size=40),
    text=st.one_of(st.none(), st.text(max_size=40)),
    spec=st.sampled_from(SPECS),
)
def test_any_reply_is_a_value_or_a_decode_error(
    data: bytes, text: str | None, spec: ValueSpec
) -> None:
    """Garbage never raises anything but DecodeError, and a value is finite JSON."""
    try:
        value = Decoder(spec).decode(data, text)
    except DecodeError:
        return
    assert isinstance(value, str) or math.isfinite(value)


@given(raw=st.binary(min_size=4, max_size=4))
def test_a_float32_is_published_as_its_shortest_decimal(raw: bytes) -> None:
    """The decimal a float32 decodes to has at most 9 digits and is the same float32."""
    try:
        got = Decoder(R(offset=0, type="float32")).decode(raw)
    except DecodeError:
        return
    assert isinstance(got, float) and struct.pack(">f", got) == raw
    assert len(repr(abs(got)).split("e")[0].replace(".", "").strip("0")) <= 9
