"""The Modbus PDU (verld/codec/modbus/pdu.py): requests and responses, both sides, byte by byte."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verld.codec.modbus import pdu
from verld.codec.modbus.pdu import (
    CountMismatch,
    CutObject,
    DeviceException,
    ExtraBytes,
    FunctionCode,
    OddLength,
    PduError,
    ReadRequest,
    WriteMultiple,
    WriteSingle,
    WrongLength,
    ZeroExceptionCode,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# The Modbus Application Protocol v1.1b3's examples (section 6), without the unit.
SPEC_COILS = [1, 0, 1, 1, 0, 0, 1, 1, 1, 0]  #: fc 15's example: 0xCD 0x01


# --- strategies ----------------------------------------------------------------------
def _ranged(most: int) -> st.SearchStrategy[tuple[int, int]]:
    """An address and a count of 1..most that stay within address 65535."""
    return st.integers(1, most).flatmap(
        lambda count: st.tuples(st.integers(0, 0x10000 - count), st.just(count))
    )


words = st.integers(0, 0xFFFF)
bits = st.lists(st.booleans(), min_size=1, max_size=pdu.MAX_WRITE_BITS)
registers = st.lists(words, min_size=1, max_size=pdu.MAX_WRITE_REGISTERS)


class TestTables:
    def test_every_standard_exception_code_has_its_name(self) -> None:
        """Exception codes 1-6, 8, 10 and 11 carry the standard's names."""
        assert sorted(pdu.EXCEPTION_NAMES) == [1, 2, 3, 4, 5, 6, 8, 10, 11]
        assert pdu.EXCEPTION_NAMES[pdu.ILLEGAL_DATA_ADDRESS] == "illegal data address"

    def test_every_function_code_built_has_a_name(self) -> None:
        """Each function code verld builds is named as its enum member reads."""
        for fc in FunctionCode:
            assert pdu.FUNCTION_NAMES[fc] == fc.name.lower().replace("_", " ")


class TestRequests:
    @pytest.mark.parametrize(
        ("built", "expected"),
        [
            (pdu.read_request(1, 0x13, 0x13), "0100130013"),
            (pdu.read_request(2, 0xC4, 0x16), "0200c40016"),
            (pdu.read_request(3, 0x6B, 3), "03006b0003"),
            (pdu.read_request(4, 0x08, 1), "0400080001"),
            (pdu.write_coil(0xAC, True), "0500acff00"),
            (pdu.write_coil(0xAC, False), "0500ac0000"),
            (pdu.write_register(1, 3), "0600010003"),
            (pdu.write_coils(0x13, [bool(b) for b in SPEC_COILS]), "0f0013000a02cd01"),
            (pdu.write_registers(1, [0x000A, 0x0102]), "100001000204000a0102"),
        ],
    )
    def test_builders_give_the_standards_bytes(self, built: bytes, expected: str) -> None:
        """Each builder gives the bytes of the standard's example."""
        assert built == h(expected)

    @pytest.mark.parametrize(
        ("build", "message"),
        [
            (lambda: pdu.read_request(3, 0, 0), "modbus: count of registers 0 is not in 1..125"),
            (lambda: pdu.read_request(1, 0, 2001), "modbus: count of coils 2001 is not in 1..2000"),
            (lambda: pdu.read_request(2, -1, 1), "modbus: address -1 is not in 0..65535"),
            (
                lambda: pdu.read_request(4, 65535, 2),
                "modbus: 2 registers from address 65535 run past address 65535",
            ),
            (lambda: pdu.read_request(5, 0, 1), "modbus: function code 5 is not a read (1..4)"),
            (
                lambda: pdu.write_register(0, 65536),
                "modbus: register value 65536 is not in 0..65535",
            ),
            (lambda: pdu.write_coils(0, []), "modbus: count of coils 0 is not in 1..1968"),
            (
                lambda: pdu.write_registers(0, [1, -1]),
                "modbus: register value at index 1 -1 is not in 0..65535",
            ),
        ],
    )
    def test_an_argument_out_of_range_is_a_value_error(
        self, build: Callable[[], bytes], message: str
    ) -> None:
        """An argument out of range raises ValueError naming it, before anything is built."""
        with pytest.raises(ValueError) as caught:
            build()
        assert str(caught.value) == message

    @given(st.sampled_from([1, 2, 3, 4]), st.data())
    def test_a_built_read_parses_back_on_the_device(self, fc: int, data: st.DataObject) -> None:
        """A read the host builds is the same read on the device side."""
        most = pdu.MAX_READ_BITS if fc in pdu.READ_BITS else pdu.MAX_READ_REGISTERS
        address, count = data.draw(_ranged(most))
        assert pdu.parse_request(pdu.read_request(fc, address, count)) == ReadRequest(
            fc, address, count
        )

    @given(words, st.booleans())
    def test_a_built_coil_write_parses_back_on_the_device(self, address: int, on: bool) -> None:
        """fc 5 carries 0xFF00 for on and 0x0000 for off."""
        value = pdu.COIL_ON if on else pdu.COIL_OFF
        assert pdu.parse_request(pdu.write_coil(address, on)) == WriteSingle(5, address, value)

    @given(words, words)
    def test_a_built_register_write_parses_back_on_the_device(
        self, address: int, value: int
    ) -> None:
        """fc 6 carries the register's address and value."""
        assert pdu.parse_request(pdu.write_register(address, value)) == WriteSingle(
            6, address, value
        )

    @given(bits, st.data())
    def test_built_coil_writes_parse_back_on_the_device(
        self, values: list[bool], data: st.DataObject
    ) -> None:
        """fc 15's packed coils unpack to the values written, in address order."""
        address = data.draw(st.integers(0, 0x10000 - len(values)))
        parsed = pdu.parse_request(pdu.write_coils(address, values))
        assert parsed == WriteMultiple(15, address, tuple(int(v) for v in values))

    @given(registers, st.data())
    def test_built_register_writes_parse_back_on_the_device(
        self, values: list[int], data: st.DataObject
    ) -> None:
        """fc 16's registers are the values written, in address order."""
        address = data.draw(st.integers(0, 0x10000 - len(values)))
        parsed = pdu.parse_request(pdu.write_registers(address, values))
        assert parsed == WriteMultiple(16, address, tuple(values))


class TestDeviceRequests:
    @pytest.mark.parametrize(
        ("request_hex", "code"),
        [
            ("07", pdu.ILLEGAL_FUNCTION),
            ("2b0e0100", pdu.ILLEGAL_FUNCTION),
            ("0300000001ff", pdu.ILLEGAL_DATA_VALUE),  # a read of 5 data bytes
            ("03000000", pdu.ILLEGAL_DATA_VALUE),  # a read without its quantity
            ("0300000000", pdu.ILLEGAL_DATA_VALUE),  # quantity 0
            ("030000007e", pdu.ILLEGAL_DATA_VALUE),  # 126 registers
            ("01000007d1", pdu.ILLEGAL_DATA_VALUE),  # 2001 coils
            ("0500011234", pdu.ILLEGAL_DATA_VALUE),  # a coil value other than on / off
            ("06000100", pdu.ILLEGAL_DATA_VALUE),  # a register write without its value
            ("0f0013000a03cd0100", pdu.ILLEGAL_DATA_VALUE),  # byte count 3 for 10 coils
            ("0f0013000a02cd", pdu.ILLEGAL_DATA_VALUE),  # the data ends early
            ("0f0013000a", pdu.ILLEGAL_DATA_VALUE),  # no byte count
            ("100001000204000a01", pdu.ILLEGAL_DATA_VALUE),  # a register cut short
            ("100001007c", pdu.ILLEGAL_DATA_VALUE),  # 124 registers
        ],
    )
    def test_a_request_a_device_refuses_names_its_exception(
        self, request_hex: str, code: int
    ) -> None:
        """01 for an unserved function code, 03 for a bad quantity, value or length."""
        with pytest.raises(DeviceException) as caught:
            pdu.parse_request(h(request_hex))
        assert caught.value.code == code

    @given(st.binary(min_size=1, max_size=pdu.MAX_PDU))
    def test_any_pdu_parses_or_names_an_exception(self, data: bytes) -> None:
        """A device's parse of any bytes gives a request or a DeviceException, nothing else."""
        try:
            parsed = pdu.parse_request(data)
        except DeviceException as exc:
            assert exc.code in (pdu.ILLEGAL_FUNCTION, pdu.ILLEGAL_DATA_VALUE)
        else:
            assert parsed.fc == data[0]


class TestDeviceResponses:
    @pytest.mark.parametrize(
        ("built", "expected"),
        [
            (pdu.read_bits_response(1, SPEC_COILS), "0102cd01"),
            (pdu.read_bits_response(2, [0] * 8), "020100"),
            (pdu.read_registers_response(3, [0x022B, 0, 0x64]), "0306022b00000064"),
            (pdu.read_registers_response(4, [10]), "0402000a"),
            (pdu.write_response(WriteSingle(5, 0xAC, pdu.COIL_ON)), "0500acff00"),
            (pdu.write_response(WriteSingle(6, 1, 3)), "0600010003"),
            (pdu.write_response(WriteMultiple(15, 0x13, tuple(SPEC_COILS))), "0f0013000a"),
            (pdu.write_response(WriteMultiple(16, 1, (0x0A, 0x0102))), "1000010002"),
            (pdu.exception_response(3, pdu.ILLEGAL_DATA_ADDRESS), "8302"),
            (pdu.exception_response(0x2B, pdu.ILLEGAL_FUNCTION), "ab01"),
        ],
    )
    def test_builders_give_the_standards_bytes(self, built: bytes, expected: str) -> None:
        """Each response builder gives the bytes of the standard's example."""
        assert built == h(expected)

    @given(st.sampled_from([1, 2]), st.lists(st.booleans(), min_size=1, max_size=2000))
    def test_a_bit_response_reads_back(self, fc: int, values: list[bool]) -> None:
        """A fc 1 / 2 response's byte count and bits read back as the bits sent."""
        response = pdu.read_bits_response(fc, values)
        assert response[0] == fc
        packed = pdu.counted(response[1:])
        assert len(packed) == pdu.bit_bytes(len(values))
        assert pdu.unpack_bits(packed, len(values)) == values
        assert [pdu.bit(packed, i) for i in range(len(values))] == values

    @given(st.sampled_from([3, 4]), st.lists(words, min_size=1, max_size=125))
    def test_a_register_response_reads_back(self, fc: int, values: list[int]) -> None:
        """A fc 3 / 4 response's byte count and registers read back as the registers sent."""
        response = pdu.read_registers_response(fc, values)
        assert response[0] == fc
        assert pdu.unpack_registers(pdu.counted(response[1:])) == values

    @given(st.sampled_from([1, 2, 3, 4]), st.data())
    def test_a_read_response_has_the_byte_count_its_request_fixes(
        self, fc: int, data: st.DataObject
    ) -> None:
        """response_shape's byte count is the one the device's response carries."""
        most = pdu.MAX_READ_BITS if fc in pdu.READ_BITS else pdu.MAX_READ_REGISTERS
        address, count = data.draw(_ranged(most))
        request = pdu.read_request(fc, address, count)
        if fc in pdu.READ_BITS:
            response = pdu.read_bits_response(fc, [True] * count)
        else:
            response = pdu.read_registers_response(fc, [0] * count)
        assert pdu.response_shape(request) == (response[1], None)

    @given(
        st.one_of(
            st.builds(pdu.write_coil, words, st.booleans()),
            st.builds(pdu.write_register, words, words),
            st.builds(pdu.write_coils, st.just(0), bits),
            st.builds(pdu.write_registers, st.just(0), registers),
        )
    )
    def test_a_write_response_echoes_what_its_request_fixes(self, request: bytes) -> None:
        """A write's response is the echo response_shape expects, and reads back as fields."""
        parsed = pdu.parse_request(request)
        assert isinstance(parsed, WriteSingle | WriteMultiple)
        response = pdu.write_response(parsed)
        assert response[0] == request[0]
        assert pdu.response_shape(request) == (None, response[1:])
        assert pdu.fields(response[1:]) == pdu.FIELDS.unpack(request[1:5])

    @given(st.integers(1, 0x7F), st.integers(1, 255))
    def test_every_exception_code_reads_back(self, fc: int, code: int) -> None:
        """An exception response carries fc | 0x80 and reads back as its code."""
        response = pdu.exception_response(fc, code)
        assert pdu.is_exception(response[0]) and response[0] & 0x7F == fc
        assert pdu.exception_code(response[1:]) == code
        assert not pdu.is_exception(fc)


class TestHostReading:
    def test_counted_gives_the_bytes_after_the_count(self) -> None:
        """The bytes a byte count announces, after `header` bytes."""
        assert pdu.counted(h("03cd6b05")) == h("cd6b05")
        assert pdu.counted(h("0013000a02cd01"), 4) == h("cd01")

    @pytest.mark.parametrize(
        ("data", "header", "have", "need"), [("", 0, 0, 1), ("0013000a", 4, 4, 5)]
    )
    def test_counted_without_a_count_is_too_short(
        self, data: str, header: int, have: int, need: int
    ) -> None:
        """No byte count: WrongLength with the bytes there are and the least expected."""
        with pytest.raises(WrongLength) as caught:
            pdu.counted(h(data), header)
        assert (caught.value.have, caught.value.need, caught.value.at_least) == (have, need, True)

    @pytest.mark.parametrize(("data", "count", "have"), [("02cd", 2, 1), ("01cd6b", 1, 2)])
    def test_counted_against_its_count_is_a_mismatch(
        self, data: str, count: int, have: int
    ) -> None:
        """Fewer or more bytes than the count says: CountMismatch with both numbers."""
        with pytest.raises(CountMismatch) as caught:
            pdu.counted(h(data))
        assert (caught.value.count, caught.value.have) == (count, have)

    @pytest.mark.parametrize(("data", "have"), [("", 0), ("0203", 2)])
    def test_an_exception_code_is_one_byte(self, data: str, have: int) -> None:
        """An exception response's data is exactly its code."""
        with pytest.raises(WrongLength) as caught:
            pdu.exception_code(h(data))
        assert (caught.value.have, caught.value.need, caught.value.at_least) == (have, 1, False)

    def test_exception_code_0_is_no_exception(self) -> None:
        """Exception code 0 is refused."""
        with pytest.raises(ZeroExceptionCode):
            pdu.exception_code(h("00"))

    def test_fields_are_four_bytes(self) -> None:
        """Address and count (or value): exactly 4 bytes."""
        assert pdu.fields(h("00acff00")) == (0xAC, 0xFF00)
        with pytest.raises(WrongLength) as caught:
            pdu.fields(h("00acff"))
        assert (caught.value.have, caught.value.need) == (3, 4)

    def test_bits_are_read_lsb_first(self) -> None:
        """The standard's fc 1 example: CD 6B 05 are coils 20..38 in address order."""
        expected = "1011001111010110101"  # coils 20, 21, ... 38
        got = "".join("1" if b else "0" for b in pdu.unpack_bits(h("cd6b05"), 19))
        assert got == expected

    def test_an_odd_register_data_is_refused(self) -> None:
        """Registers are two bytes each: an odd length is OddLength."""
        assert pdu.unpack_registers(h("022b00000064")) == [0x022B, 0, 0x64]
        with pytest.raises(OddLength) as caught:
            pdu.unpack_registers(h("022b00"))
        assert caught.value.have == 3

    @given(st.binary(max_size=pdu.MAX_PDU), st.integers(0, 8))
    def test_a_reader_refuses_any_bytes_only_with_a_pdu_error(
        self, data: bytes, header: int
    ) -> None:
        """The host's readers take any bytes: a value or a PduError, nothing else."""
        for read in (
            lambda: pdu.counted(data, header),
            lambda: pdu.exception_code(data),
            lambda: pdu.fields(data),
            lambda: pdu.unpack_registers(data),
        ):
            try:
                read()
            except PduError:
                pass


def _identification(more: bool, objects: list[tuple[int, bytes]]) -> bytes:
    """fc 43 / MEI 0x0E's response data (after the MEI type): code 1, conformity 0x81."""
    head = bytes((1, 0x81, 0xFF if more else 0, 3 if more else 0, len(objects)))
    return head + b"".join(bytes((oid, len(value))) + value for oid, value in objects)


class TestDescribedOnly:
    def test_a_diagnostics_pdu_is_its_sub_function_and_data(self) -> None:
        """fc 8: a 16-bit sub-function, then its data."""
        assert pdu.sub_function(h("0000a537")) == (0, h("a537"))
        with pytest.raises(WrongLength) as caught:
            pdu.sub_function(h("00"))
        assert (caught.value.have, caught.value.need, caught.value.at_least) == (1, 2, True)

    def test_a_device_identification_request_is_code_and_object(self) -> None:
        """fc 43 / MEI 0x0E asks with a read code and an object id: two bytes."""
        assert pdu.device_identification_request(h("0100")) == (1, 0)
        with pytest.raises(WrongLength):
            pdu.device_identification_request(h("010000"))

    def test_the_standards_device_identification_reads(self) -> None:
        """The standard's example: three objects, nothing more to ask for."""
        data = h("0101000003") + b"\x00\x07Company" + b"\x01\x07Product" + b"\x02\x04V2.1"
        found = pdu.device_identification(data)
        assert (found.code, found.conformity, found.more, found.next_object) == (1, 1, False, 0)
        assert found.objects == ((0, b"Company"), (1, b"Product"), (2, b"V2.1"))

    @given(
        st.booleans(),
        st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=20)), max_size=8),
    )
    def test_a_device_identification_reads_back(
        self, more: bool, objects: list[tuple[int, bytes]]
    ) -> None:
        """The objects a device identification carries read back, in order."""
        found = pdu.device_identification(_identification(more, objects))
        assert found.objects == tuple(objects) and found.more == more

    def test_a_device_identification_cut_or_overlong_is_refused(self) -> None:
        """Data ending inside an object is CutObject; bytes after the last, ExtraBytes."""
        whole = _identification(False, [(0, b"abc")])
        with pytest.raises(CutObject) as cut:
            pdu.device_identification(whole[:-1])
        assert cut.value.announced == 1
        with pytest.raises(ExtraBytes) as extra:
            pdu.device_identification(whole + b"\x00\x00")
        assert extra.value.extra == 2
        with pytest.raises(WrongLength):
            pdu.device_identification(whole[:4])
