"""verld.client.modbus: request builders, reply decoders, exceptions and the client wrappers.

No daemon: the wrappers run over fake clients whose device is the simulator's
in-process `ModbusSlave`, reached through the daemon's own `ModbusTcpCodec`
(so the reply's status and data are what verld would hand the client).
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymodbus.pdu import ModbusPDU
from pymodbus.pdu.bit_message import (
    ReadCoilsRequest,
    ReadDiscreteInputsRequest,
    WriteMultipleCoilsRequest,
    WriteSingleCoilRequest,
)
from pymodbus.pdu.register_message import (
    ReadHoldingRegistersRequest,
    ReadInputRegistersRequest,
    WriteMultipleRegistersRequest,
    WriteSingleRegisterRequest,
)

from verld.client import AsyncClient, Client, ClientError, Reply
from verld.client.modbus import (
    EXCEPTION_NAMES,
    AsyncCaller,
    AsyncModbus,
    Caller,
    FunctionCode,
    Modbus,
    ModbusException,
    ModbusReplyError,
    Request,
    check_write,
    decode,
    decode_bits,
    decode_registers,
)
from verld.codec.modbus import ModbusTcpCodec, check_request, mbap_frame, rtu_request_length
from verld.sim.modbus import ModbusSlave


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# --- fakes ------------------------------------------------------------------------------
class SlaveLink:
    """A simulated slave behind verld's modbus-tcp codec: call data in, Reply out."""

    def __init__(self, units: tuple[int, ...] = (1,)) -> None:
        self.slave = ModbusSlave(units)
        self.codec = ModbusTcpCodec(4096)
        self.seq = 0
        self.calls: list[tuple[bytes, dict[str, Any]]] = []

    def exchange(self, data: bytes, options: dict[str, Any]) -> Reply:
        self.calls.append((data, options))
        self.seq += 1
        frame = self.codec.encode_request(self.seq, data)
        answer = self.slave.handle(frame[6:])  # after the 6-byte MBAP header
        if answer is None:
            raise ClientError("timeout", "no answer within 5 s")
        (inbound,) = self.codec.feed(mbap_frame(self.seq, answer), True)
        assert inbound.status is not None
        return Reply(status=inbound.status, data=inbound.data, ms=0.5, generation=1)


class FakeClient:
    """`Client.call` over a SlaveLink."""

    def __init__(self, link: SlaveLink | None = None) -> None:
        self.link = link or SlaveLink()

    def call(
        self,
        data: bytes,
        *,
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool = False,
    ) -> Reply:
        return self.link.exchange(data, {"timeout": timeout, "retry": retry, "wait": wait})


class FakeAsyncClient:
    """`AsyncClient.call` over a SlaveLink."""

    def __init__(self, link: SlaveLink | None = None) -> None:
        self.link = link or SlaveLink()

    async def call(
        self,
        data: bytes,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (as AsyncClient.call)
        retry: int | None = None,
        wait: bool = False,
    ) -> Reply:
        await asyncio.sleep(0)
        return self.link.exchange(data, {"timeout": timeout, "retry": retry, "wait": wait})


class ScriptedClient:
    """`Client.call` answering with one fixed Reply."""

    def __init__(self, status: int, data: bytes) -> None:
        self.reply = Reply(status=status, data=data, ms=0.5, generation=1)
        self.sent: list[bytes] = []

    def call(
        self,
        data: bytes,
        *,
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool = False,
    ) -> Reply:
        self.sent.append(data)
        return self.reply


# --- builders ---------------------------------------------------------------------------
SPEC_REQUESTS = [
    ("read coils 20-38", Request.read_coils(1, 19, 19), "01 01 0013 0013"),
    ("read discrete inputs 197-218", Request.read_discrete_inputs(1, 196, 22), "01 02 00c4 0016"),
    ("read holding registers 0-9", Request.read_holding_registers(1, 0, 10), "01 03 0000 000a"),
    (
        "read holding registers 108-110",
        Request.read_holding_registers(1, 107, 3),
        "01 03 006b 0003",
    ),
    ("read input register 9", Request.read_input_registers(1, 8, 1), "01 04 0008 0001"),
    ("write coil 173 on", Request.write_coil(1, 172, True), "01 05 00ac ff00"),
    ("write coil 173 off", Request.write_coil(1, 172, False), "01 05 00ac 0000"),
    ("write register 2", Request.write_register(1, 1, 3), "01 06 0001 0003"),
    (
        "write coils 20-29",
        Request.write_coils(
            1, 19, [True, False, True, True, False, False, True, True, True, False]
        ),
        "01 0f 0013 000a 02 cd01",
    ),
    (
        "write registers 2-3",
        Request.write_registers(1, 1, [0x000A, 0x0102]),
        "01 10 0001 0002 04 000a 0102",
    ),
]


@pytest.mark.parametrize(
    ("request_bytes", "expected"), [c[1:] for c in SPEC_REQUESTS], ids=[c[0] for c in SPEC_REQUESTS]
)
def test_builder_output_is_the_spec_example_byte_for_byte(
    request_bytes: bytes, expected: str
) -> None:
    """Each request builder gives the Modbus specification's example request byte for byte."""
    assert request_bytes == h(expected)


def test_builders_put_the_unit_first() -> None:
    """The builders put the unit id first, 247 and broadcast 0 included."""
    assert Request.read_holding_registers(247, 0, 1)[0] == 247
    assert Request.write_registers(0, 0, [1])[0] == 0


def test_builders_accept_the_bounds_of_every_range() -> None:
    """The builders accept each range's bounds: counts, addresses and values at their limits."""
    assert Request.read_coils(255, 0, 2000)[4:] == h("07d0")
    assert Request.read_discrete_inputs(0, 65535, 1)[2:4] == h("ffff")
    assert Request.read_holding_registers(1, 0, 125)[4:] == h("007d")
    assert Request.read_input_registers(1, 65411, 125)[2:4] == h("ff83")
    assert Request.write_register(1, 65535, 65535)[2:] == h("ffff ffff")
    assert len(Request.write_coils(1, 0, [True] * 1968)) == 7 + 246
    assert len(Request.write_registers(1, 0, [65535] * 123)) == 7 + 246


def test_write_coils_pads_the_last_byte_with_zeros() -> None:
    """write_coils pads the last byte of packed coils with zero bits."""
    assert Request.write_coils(1, 0, [True] * 9)[-2:] == h("ff01")


def test_write_coil_takes_any_truthy_value_as_on() -> None:
    """write_coil takes any truthy value as ON (0xFF00)."""
    assert Request.write_coil(1, 0, 1)[-2:] == h("ff00")  # type: ignore[arg-type]


PYMODBUS_READS: dict[int, type[ModbusPDU]] = {
    1: ReadCoilsRequest,
    2: ReadDiscreteInputsRequest,
    3: ReadHoldingRegistersRequest,
    4: ReadInputRegistersRequest,
}


@given(
    fc=st.sampled_from([1, 2, 3, 4]),
    address=st.integers(0, 65535 - 125),
    count=st.integers(1, 125),
)
def test_read_builders_agree_with_pymodbus(fc: int, address: int, count: int) -> None:
    """The read builders give the same bytes as pymodbus's requests for any address and count."""
    build = {
        1: Request.read_coils,
        2: Request.read_discrete_inputs,
        3: Request.read_holding_registers,
        4: Request.read_input_registers,
    }[fc]
    pdu = PYMODBUS_READS[fc](address=address, count=count, dev_id=1)
    assert build(1, address, count) == bytes((1, pdu.function_code)) + pdu.encode()


@given(
    address=st.integers(0, 65535 - 123),
    values=st.lists(st.integers(0, 65535), min_size=1, max_size=123),
)
def test_register_write_builders_agree_with_pymodbus(address: int, values: list[int]) -> None:
    """The register write builders give the same bytes as pymodbus's for any address and values."""
    many = WriteMultipleRegistersRequest(address=address, registers=values, dev_id=1)
    assert Request.write_registers(1, address, values) == h("01 10") + many.encode()
    one = WriteSingleRegisterRequest(address=address, registers=values[:1], dev_id=1)
    assert Request.write_register(1, address, values[0]) == h("01 06") + one.encode()


@given(
    address=st.integers(0, 65535 - 1968), values=st.lists(st.booleans(), min_size=1, max_size=1968)
)
def test_coil_write_builders_agree_with_pymodbus(address: int, values: list[bool]) -> None:
    """The coil write builders give the same bytes as pymodbus's for any address and bits."""
    many = WriteMultipleCoilsRequest(address=address, bits=values, dev_id=1)
    assert Request.write_coils(1, address, values) == h("01 0f") + many.encode()
    one = WriteSingleCoilRequest(address=address, bits=values[:1], dev_id=1)
    assert Request.write_coil(1, address, values[0]) == h("01 05") + one.encode()


@given(
    unit=st.integers(0, 247),
    address=st.integers(0, 65535 - 123),
    values=st.lists(st.integers(0, 65535), min_size=1, max_size=123),
)
def test_every_request_is_one_verlds_rtu_codec_accepts_and_frames(
    unit: int, address: int, values: list[int]
) -> None:
    """Every built request passes verld's RTU check and its length is known from its bytes."""
    bits = [v & 1 == 1 for v in values]
    for request in (
        Request.read_coils(unit, address, len(values)),
        Request.read_discrete_inputs(unit, address, len(values)),
        Request.read_holding_registers(unit, address, len(values)),
        Request.read_input_registers(unit, address, len(values)),
        Request.write_coil(unit, address, bits[0]),
        Request.write_register(unit, address, values[0]),
        Request.write_coils(unit, address, bits),
        Request.write_registers(unit, address, values),
    ):
        assert check_request(request, rtu=True) is None
        assert rtu_request_length(request) == len(request) + 2  # + CRC


# --- validation -------------------------------------------------------------------------
def _all_builders(unit: int = 1, address: int = 0) -> list[Any]:
    return [
        lambda: Request.read_coils(unit, address, 1),
        lambda: Request.read_discrete_inputs(unit, address, 1),
        lambda: Request.read_holding_registers(unit, address, 1),
        lambda: Request.read_input_registers(unit, address, 1),
        lambda: Request.write_coil(unit, address, True),
        lambda: Request.write_register(unit, address, 1),
        lambda: Request.write_coils(unit, address, [True]),
        lambda: Request.write_registers(unit, address, [1]),
    ]


@pytest.mark.parametrize("unit", [-1, 256])
def test_every_builder_rejects_a_unit_outside_0_to_255(unit: int) -> None:
    """Every builder rejects a unit outside 0..255 with ValueError naming it."""
    for build in _all_builders(unit=unit):
        with pytest.raises(ValueError, match=rf"unit {unit} is not in 0\.\.255"):
            build()


@pytest.mark.parametrize("address", [-1, 65536])
def test_every_builder_rejects_an_address_outside_0_to_65535(address: int) -> None:
    """Every builder rejects an address outside 0..65535 with ValueError naming it."""
    for build in _all_builders(address=address):
        with pytest.raises(ValueError, match=rf"address {address} is not in 0\.\.65535"):
            build()


@pytest.mark.parametrize(
    ("build", "count", "most"),
    [
        (Request.read_coils, 0, 2000),
        (Request.read_coils, 2001, 2000),
        (Request.read_discrete_inputs, 0, 2000),
        (Request.read_discrete_inputs, 2001, 2000),
        (Request.read_holding_registers, 0, 125),
        (Request.read_holding_registers, 126, 125),
        (Request.read_input_registers, 0, 125),
        (Request.read_input_registers, 126, 125),
    ],
)
def test_read_builders_reject_a_count_outside_their_range(
    build: Any, count: int, most: int
) -> None:
    """Each read builder rejects a count outside 1..2000 (bits) or 1..125 (registers)."""
    with pytest.raises(ValueError, match=rf"count of \w+ {count} is not in 1\.\.{most}"):
        build(1, 0, count)


@pytest.mark.parametrize("count", [0, 1969])
def test_write_coils_rejects_a_count_outside_1_to_1968(count: int) -> None:
    """write_coils rejects a count of coils outside 1..1968."""
    with pytest.raises(ValueError, match=rf"count of coils {count} is not in 1\.\.1968"):
        Request.write_coils(1, 0, [False] * count)


@pytest.mark.parametrize("count", [0, 124])
def test_write_registers_rejects_a_count_outside_1_to_123(count: int) -> None:
    """write_registers rejects a count of registers outside 1..123."""
    with pytest.raises(ValueError, match=rf"count of registers {count} is not in 1\.\.123"):
        Request.write_registers(1, 0, [0] * count)


@pytest.mark.parametrize("value", [-1, 65536])
def test_write_register_rejects_a_value_outside_0_to_65535(value: int) -> None:
    """write_register rejects a register value outside 0..65535."""
    with pytest.raises(ValueError, match=rf"register value {value} is not in 0\.\.65535"):
        Request.write_register(1, 0, value)


@pytest.mark.parametrize("value", [-1, 65536])
def test_write_registers_names_the_index_of_a_value_outside_0_to_65535(value: int) -> None:
    """write_registers rejects a value outside 0..65535 naming its index."""
    with pytest.raises(ValueError, match=rf"register value at index 2 {value} is not in"):
        Request.write_registers(1, 0, [0, 1, value])


@pytest.mark.parametrize(
    "build",
    [
        lambda: Request.read_coils(1, 65535, 2),
        lambda: Request.read_discrete_inputs(1, 64000, 1537),
        lambda: Request.read_holding_registers(1, 65500, 37),
        lambda: Request.read_input_registers(1, 65535, 2),
        lambda: Request.write_coils(1, 65535, [True, False]),
        lambda: Request.write_registers(1, 65535, [1, 2]),
    ],
)
def test_builders_reject_a_range_that_runs_past_address_65535(build: Any) -> None:
    """A read or multiple write whose range runs past address 65535 is rejected."""
    with pytest.raises(ValueError, match="run past address 65535"):
        build()


def test_builders_reject_a_non_integer_argument() -> None:
    """A non-integer address or value makes a builder raise TypeError."""
    with pytest.raises(TypeError):
        Request.read_holding_registers(1, 0.5, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Request.write_registers(1, 0, [1.5])  # type: ignore[list-item]


# --- decoding spec examples -----------------------------------------------------------------
def test_decode_bits_reads_the_spec_coils_example_trimmed_to_the_count() -> None:
    """decode_bits reads the spec's coils example as 19 bits, the padding dropped."""
    bits = decode_bits(Request.read_coils(1, 19, 19), h("01 01 03 cd 6b 05"))
    assert bits == [bool(b) for b in [1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1]]


def test_decode_bits_reads_the_spec_discrete_inputs_example() -> None:
    """decode_bits reads the spec's discrete inputs example as its 22 bits."""
    bits = decode_bits(Request.read_discrete_inputs(1, 196, 22), h("01 02 03 ac db 35"))
    assert bits == [
        bool(b) for b in [0, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1]
    ]


def test_decode_registers_reads_the_spec_holding_registers_example() -> None:
    """decode_registers reads the spec's holding registers example as [555, 0, 100]."""
    request = Request.read_holding_registers(1, 107, 3)
    assert decode_registers(request, h("01 03 06 022b 0000 0064")) == [555, 0, 100]


def test_decode_registers_reads_the_spec_input_register_example() -> None:
    """decode_registers reads the spec's input register example as [10]."""
    assert decode_registers(Request.read_input_registers(1, 8, 1), h("01 04 02 000a")) == [10]


@pytest.mark.parametrize(
    ("request_bytes", "reply"),
    [
        (Request.write_coil(1, 172, True), "01 05 00ac ff00"),
        (Request.write_register(1, 1, 3), "01 06 0001 0003"),
        (Request.write_coils(1, 19, [True] * 10), "01 0f 0013 000a"),
        (Request.write_registers(1, 1, [10, 258]), "01 10 0001 0002"),
    ],
    ids=["fc5", "fc6", "fc15", "fc16"],
)
def test_check_write_accepts_the_spec_echo(request_bytes: bytes, reply: str) -> None:
    """check_write accepts the spec's echo of each write function (5, 6, 15, 16)."""
    assert check_write(request_bytes, h(reply)) is None  # type: ignore[func-returns-value]


def test_check_write_accepts_no_reply_to_a_broadcast() -> None:
    """check_write accepts an empty reply to a broadcast write."""
    check_write(Request.write_register(0, 1, 3), b"")


def test_decode_dispatches_on_the_request_function_code() -> None:
    """decode picks the decoder by the request's function code: bits, registers or a write check."""
    assert decode(Request.read_coils(1, 0, 3), h("01 01 01 05")) == [True, False, True]
    assert decode(Request.read_input_registers(1, 8, 1), h("01 04 02 000a")) == [10]
    assert decode(Request.write_register(1, 1, 3), h("01 06 0001 0003")) is None


def test_decode_refuses_a_request_of_another_function_code() -> None:
    """decode refuses a function it does not decode with a ValueError, not a ModbusReplyError."""
    with pytest.raises(ValueError, match="not a request this module decodes") as info:
        decode(h("01 17 0000 0001 0000 0001 02 0000"), h("01 17 02 0000"))
    assert not isinstance(info.value, ModbusReplyError)


def test_decoders_refuse_a_request_they_do_not_decode() -> None:
    """Each decoder refuses a request of a function it does not decode or a truncated request."""
    with pytest.raises(ValueError, match=r"decode_registers: .* function code 3, 4"):
        decode_registers(Request.read_coils(1, 0, 1), h("01 01 01 01"))
    with pytest.raises(ValueError, match=r"decode_bits: .* function code 1, 2"):
        decode_bits(Request.read_holding_registers(1, 0, 1), h("01 03 02 0000"))
    with pytest.raises(ValueError, match=r"check_write: .* function code 5, 6, 15, 16"):
        check_write(Request.read_coils(1, 0, 1), h("01 01 01 01"))
    with pytest.raises(ValueError, match="is not a request"):
        decode_registers(h("01 03 00"), h("01 03 02 0000"))


# --- reply errors -----------------------------------------------------------------------------
REGS = Request.read_holding_registers(1, 0, 2)  # expects 01 03 04 xxxx xxxx
BITS = Request.read_coils(1, 0, 10)  # expects 01 01 02 xx xx


@pytest.mark.parametrize(
    ("request_bytes", "reply", "message"),
    [
        (REGS, "", "reply of 0 bytes, needs a unit and a function code"),
        (REGS, "01", "reply of 1 bytes, needs a unit and a function code"),
        (REGS, "02 03 04 0000 0000", "reply from unit 2, the request was to 1"),
        (REGS, "01 04 04 0000 0000", "reply has function code 4, the request had 3"),
        (REGS, "01 03", "reply of 2 bytes has no byte count"),
        (REGS, "01 03 02 0000", "byte count 2 for 2 registers, expected 4"),
        (REGS, "01 03 04 0000 00", "reply of 6 bytes, its byte count 4 makes 7"),
        (REGS, "01 03 04 0000 0000 00", "reply of 8 bytes, its byte count 4 makes 7"),
        (BITS, "01 01 01 ff", "byte count 1 for 10 bits, expected 2"),
        (BITS, "01 01 02 ff", "reply of 4 bytes, its byte count 2 makes 5"),
        (REGS, "01 83 02 00", "exception response of 4 bytes, expected 3"),
        (REGS, "01 83", "exception response of 2 bytes, expected 3"),
        (REGS, "01 83 00", "exception response with exception code 0"),
        (BITS, "01 81 02 00", "exception response of 4 bytes, expected 3"),
        (Request.read_holding_registers(0, 0, 1), "", r"no reply to unit 0 \(broadcast\)"),
    ],
)
def test_read_decoders_name_what_is_wrong_with_a_reply(
    request_bytes: bytes, reply: str, message: str
) -> None:
    """The read decoders raise ModbusReplyError naming what is wrong with a malformed reply."""
    decoder = decode_bits if request_bytes[1] == 1 else decode_registers
    with pytest.raises(ModbusReplyError, match=message):
        decoder(request_bytes, h(reply))


@pytest.mark.parametrize(
    ("request_bytes", "reply", "message"),
    [
        (Request.write_register(1, 1, 3), "", "reply of 0 bytes"),
        (Request.write_register(1, 1, 3), "01 06 0001 00", "write reply of 5 bytes, expected 6"),
        (Request.write_register(1, 1, 3), "01 06 0001 0003 00", "write reply of 7 bytes"),
        (Request.write_register(1, 1, 3), "01 06 0002 0003", "echoes address 2, .* at 1"),
        (Request.write_register(1, 1, 3), "01 06 0001 0004", "echoes value 0x0004, .* 0x0003"),
        (Request.write_coil(1, 172, True), "01 05 00ac 0000", "echoes value 0x0000, .* 0xff00"),
        (Request.write_coils(1, 19, [True] * 10), "01 0f 0013 0009", "echoes count 0x0009"),
        (Request.write_registers(1, 1, [1, 2]), "01 10 0001 0003", "echoes count 0x0003"),
        (Request.write_registers(1, 1, [1, 2]), "01 10 0000 0002", "echoes address 0"),
        (Request.write_registers(1, 1, [1, 2]), "07 10 0001 0002", "reply from unit 7"),
        (Request.write_registers(1, 1, [1, 2]), "01 06 0001 0002", "function code 6, .* had 16"),
    ],
)
def test_check_write_names_what_is_wrong_with_the_echo(
    request_bytes: bytes, reply: str, message: str
) -> None:
    """check_write raises ModbusReplyError naming what is wrong with a write's echo."""
    with pytest.raises(ModbusReplyError, match=message):
        check_write(request_bytes, h(reply))


def test_a_reply_error_is_a_value_error() -> None:
    """ModbusReplyError is a ValueError."""
    assert issubclass(ModbusReplyError, ValueError)


# --- round trips ------------------------------------------------------------------------------
registers = st.lists(st.integers(0, 65535), min_size=1, max_size=125)
bits_2000 = st.lists(st.booleans(), min_size=1, max_size=2000)


def bits_reply(unit: int, fc: int, bits: list[bool]) -> bytes:
    """A read-bits response, packed independently of the module (one little-endian int)."""
    nbytes = (len(bits) + 7) // 8
    value = sum(1 << i for i, bit in enumerate(bits) if bit)
    return bytes((unit, fc, nbytes)) + value.to_bytes(nbytes, "little")


@given(
    unit=st.integers(0, 255),
    address=st.integers(0, 65535 - 125),
    fc=st.sampled_from([3, 4]),
    values=registers,
)
def test_registers_round_trip_through_request_and_reply(
    unit: int, address: int, fc: int, values: list[int]
) -> None:
    """Any register values put in a read reply decode back to the same values."""
    build = Request.read_holding_registers if fc == 3 else Request.read_input_registers
    request = build(unit, address, len(values))
    reply = bytes((unit, fc, 2 * len(values))) + struct.pack(f">{len(values)}H", *values)
    assert decode_registers(request, reply) == values


@given(
    unit=st.integers(0, 255),
    address=st.integers(0, 65535 - 2000),
    fc=st.sampled_from([1, 2]),
    bits=bits_2000,
)
def test_bits_round_trip_through_request_and_reply(
    unit: int, address: int, fc: int, bits: list[bool]
) -> None:
    """Any bits put in a coil or discrete input reply decode back to the same bits."""
    build = Request.read_coils if fc == 1 else Request.read_discrete_inputs
    assert decode_bits(build(unit, address, len(bits)), bits_reply(unit, fc, bits)) == bits


@given(bits=bits_2000, padding=st.integers(0, 255))
def test_decode_bits_ignores_the_padding_bits_of_the_last_byte(
    bits: list[bool], padding: int
) -> None:
    """decode_bits ignores whatever the padding bits of the last byte hold."""
    reply = bytearray(bits_reply(1, 1, bits))
    if len(bits) % 8:
        reply[-1] |= padding << (len(bits) % 8) & 0xFF
    assert decode_bits(Request.read_coils(1, 0, len(bits)), bytes(reply)) == bits


@given(
    address=st.integers(0, 65535 - 1968), bits=st.lists(st.booleans(), min_size=1, max_size=1968)
)
def test_write_coils_packs_bits_as_a_read_of_them_unpacks(address: int, bits: list[bool]) -> None:
    """write_coils packs bits as a read reply carries them, and its echo passes check_write."""
    request = Request.write_coils(1, address, bits)
    assert request[6] == len(request) - 7
    assert request[7:] == bits_reply(1, 15, bits)[3:]
    check_write(request, request[:6])  # the echo: unit, fc, address, count


@given(
    address=st.integers(0, 65535 - 123),
    values=st.lists(st.integers(0, 65535), min_size=1, max_size=123),
)
def test_write_registers_carries_the_values_big_endian(address: int, values: list[int]) -> None:
    """write_registers carries the values big-endian, and its echo passes check_write."""
    request = Request.write_registers(1, address, values)
    assert list(struct.unpack(f">{len(values)}H", request[7:])) == values
    check_write(request, request[:6])


@given(address=st.integers(0, 65535), other=st.integers(0, 65535), value=st.integers(0, 65535))
def test_a_single_register_echo_passes_only_when_address_and_value_match(
    address: int, other: int, value: int
) -> None:
    """A write_register echo passes check_write only when its address matches the request's."""
    request = Request.write_register(1, address, value)
    echo = request[:2] + struct.pack(">HH", other, value)
    if other == address:
        check_write(request, echo)
    else:
        with pytest.raises(ModbusReplyError, match="echoes address"):
            check_write(request, echo)


# --- exceptions --------------------------------------------------------------------------------
def test_the_spec_exception_example_decodes_to_illegal_data_address() -> None:
    """The spec's exception example raises ModbusException 2, illegal data address, worded fully."""
    with pytest.raises(ModbusException) as info:
        decode_bits(Request.read_coils(1, 1185, 1), h("01 81 02"))
    exc = info.value
    assert (exc.code, exc.unit, exc.function) == (2, 1, 1)
    assert exc.name == "illegal data address"
    assert str(exc) == (
        "modbus exception 2 (illegal data address) from unit 1 to read coils (function code 1)"
    )


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (1, "illegal function"),
        (2, "illegal data address"),
        (3, "illegal data value"),
        (4, "server device failure"),
        (5, "acknowledge"),
        (6, "server device busy"),
        (8, "memory parity error"),
        (0x0A, "gateway path unavailable"),
        (0x0B, "gateway target device failed to respond"),
    ],
)
def test_each_standard_exception_code_is_named(code: int, name: str) -> None:
    """Each standard exception code has its spec name, in ModbusException's name and message."""
    assert EXCEPTION_NAMES[code] == name
    exc = ModbusException(code, 1, 3)
    assert exc.name == name
    assert f"({name})" in str(exc)


@pytest.mark.parametrize("code", [7, 9, 0x0C, 0xFF])
def test_an_unnamed_exception_code_reads_exception_n(code: int) -> None:
    """An exception code without a standard name reads "exception N"."""
    assert ModbusException(code, 1, 3).name == f"exception {code}"


@pytest.mark.parametrize(
    ("request_bytes", "reply", "function"),
    [
        (Request.read_discrete_inputs(9, 0, 1), "09 82 04", 2),
        (Request.read_holding_registers(9, 0, 1), "09 83 04", 3),
        (Request.read_input_registers(9, 0, 1), "09 84 04", 4),
        (Request.write_coil(9, 0, True), "09 85 04", 5),
        (Request.write_register(9, 0, 1), "09 86 04", 6),
        (Request.write_coils(9, 0, [True]), "09 8f 04", 15),
        (Request.write_registers(9, 0, [1]), "09 90 04", 16),
    ],
)
def test_every_decoder_raises_the_exception_a_reply_carries(
    request_bytes: bytes, reply: str, function: int
) -> None:
    """An exception reply to any function raises ModbusException with its code, unit, function."""
    with pytest.raises(ModbusException) as info:
        decode(request_bytes, h(reply))
    assert (info.value.code, info.value.unit, info.value.function) == (4, 9, function)
    assert FunctionCode(function).name.lower().replace("_", " ") in str(info.value)


def test_an_exception_for_an_unknown_function_still_reads_well() -> None:
    """A ModbusException for an unknown function still gives a readable message."""
    assert str(ModbusException(1, 2, 0x2B)) == (
        "modbus exception 1 (illegal function) from unit 2 to function (function code 43)"
    )


def test_a_modbus_exception_survives_pickling() -> None:
    """A ModbusException keeps its code, unit, function and name through pickling."""
    exc = pickle.loads(pickle.dumps(ModbusException(3, 7, 16)))
    assert (exc.code, exc.unit, exc.function, exc.name) == (3, 7, 16, "illegal data value")


# --- Modbus over a blocking client -------------------------------------------------------------
def test_modbus_reads_holding_registers_from_the_device() -> None:
    """Modbus.read_holding_registers returns the device's register values."""
    assert Modbus(FakeClient()).read_holding_registers(1, 0, 10) == list(range(10))


def test_modbus_reads_input_registers_from_the_device() -> None:
    """Modbus.read_input_registers returns the device's input register values."""
    assert Modbus(FakeClient()).read_input_registers(1, 5, 3) == [1005, 1006, 1007]


def test_modbus_reads_coils_and_discrete_inputs_from_the_device() -> None:
    """Modbus reads the device's coils and discrete inputs as lists of bools."""
    bus = Modbus(FakeClient())
    assert bus.read_coils(1, 0, 11) == [i % 2 == 1 for i in range(11)]
    assert bus.read_discrete_inputs(1, 3, 9) == [(i // 2) % 2 == 1 for i in range(3, 12)]


def test_modbus_writes_registers_the_device_then_reads_back() -> None:
    """Registers written through Modbus (single returns None) read back from the device."""
    bus = Modbus(FakeClient())
    assert bus.write_register(1, 4, 0xBEEF) is None  # type: ignore[func-returns-value]
    bus.write_registers(1, 10, [7, 8, 9])
    assert bus.read_holding_registers(1, 3, 10) == [3, 0xBEEF, 5, 6, 7, 8, 9, 7, 8, 9]


def test_modbus_writes_coils_the_device_then_reads_back() -> None:
    """Coils written through Modbus read back from the device."""
    bus = Modbus(FakeClient())
    bus.write_coil(1, 0, True)
    bus.write_coils(1, 2, [True, True, False])
    assert bus.read_coils(1, 0, 6) == [True, True, True, True, False, True]


def test_modbus_sends_the_builders_bytes() -> None:
    """Modbus sends exactly the request builder's bytes as the call."""
    client = FakeClient()
    Modbus(client).read_holding_registers(1, 0, 10)
    assert client.link.calls[0][0] == h("01 03 0000 000a")


def test_modbus_passes_its_call_options_with_every_call() -> None:
    """Modbus passes its timeout, retry and wait options with every call."""
    client = FakeClient()
    bus = Modbus(client, timeout=0.5, retry=1, wait=True)
    bus.read_coils(1, 0, 1)
    bus.write_coil(1, 0, False)
    assert [options for _, options in client.link.calls] == [
        {"timeout": 0.5, "retry": 1, "wait": True}
    ] * 2


def test_modbus_leaves_the_call_options_to_the_daemon_by_default() -> None:
    """By default Modbus sends no timeout or retry (the daemon's) and wait False."""
    client = FakeClient()
    Modbus(client).read_coils(1, 0, 1)
    assert client.link.calls[0][1] == {"timeout": None, "retry": None, "wait": False}


def test_modbus_raises_the_exception_the_device_answers() -> None:
    """Modbus raises the ModbusException the device answers a read with."""
    with pytest.raises(ModbusException) as info:
        Modbus(FakeClient()).read_holding_registers(1, 99, 2)  # the sim has registers 0..99
    assert (info.value.code, info.value.unit, info.value.function) == (2, 1, 3)


def test_modbus_raises_the_exception_a_write_is_answered_with() -> None:
    """Modbus raises the ModbusException the device answers a write with."""
    client = FakeClient()
    with pytest.raises(ModbusException, match="illegal data address") as info:
        Modbus(client).write_registers(1, 98, [1, 2, 3])
    assert info.value.function == 16


def test_modbus_passes_a_client_error_through_unchanged() -> None:
    """Modbus lets a ClientError (a timeout) through unchanged, not as a Modbus error."""
    client = FakeClient()
    with pytest.raises(ClientError) as info:
        Modbus(client).read_holding_registers(2, 0, 1)  # unit 2 is silent
    assert info.value.code == "timeout"
    assert not isinstance(info.value, ModbusException | ModbusReplyError)


def test_modbus_validates_arguments_before_calling() -> None:
    """Modbus rejects bad arguments before making any call."""
    client = FakeClient()
    with pytest.raises(ValueError, match="count of registers 126"):
        Modbus(client).read_holding_registers(1, 0, 126)
    assert client.link.calls == []


def test_modbus_maps_a_device_error_reply_to_its_exception() -> None:
    """Modbus turns a device error reply into the ModbusException it carries."""
    client = ScriptedClient(6, h("01 83 06"))
    with pytest.raises(ModbusException, match="server device busy"):
        Modbus(client).read_holding_registers(1, 0, 1)


def test_modbus_maps_exception_code_255_like_any_other() -> None:
    """Modbus maps exception code 255 to a ModbusException like any other code."""
    with pytest.raises(ModbusException, match="exception 255") as info:
        Modbus(ScriptedClient(255, h("01 86 ff"))).write_register(1, 0, 1)
    assert info.value.code == 255


def test_modbus_refuses_a_status_that_is_not_the_exception_code() -> None:
    """Modbus raises ModbusReplyError when the device status differs from the exception code."""
    with pytest.raises(ModbusReplyError, match="device status 3 with exception code 2"):
        Modbus(ScriptedClient(3, h("01 83 02"))).read_holding_registers(1, 0, 1)


def test_modbus_refuses_an_error_status_with_a_normal_response() -> None:
    """Modbus raises ModbusReplyError for an error status carrying a normal response."""
    client = ScriptedClient(2, h("01 03 02 0000"))
    with pytest.raises(ModbusReplyError, match="device status 2 with a normal function 3"):
        Modbus(client).read_holding_registers(1, 0, 1)


def test_modbus_refuses_an_error_status_with_no_data() -> None:
    """Modbus raises ModbusReplyError for an error status with no data."""
    with pytest.raises(ModbusReplyError, match="reply of 0 bytes"):
        Modbus(ScriptedClient(7, b"")).read_holding_registers(1, 0, 1)


def test_modbus_raises_a_reply_error_for_a_reply_that_does_not_fit() -> None:
    """Modbus raises ModbusReplyError for a reply whose byte count does not fit the request."""
    with pytest.raises(ModbusReplyError, match="byte count 2 for 2 registers"):
        Modbus(ScriptedClient(0, h("01 03 02 0000"))).read_holding_registers(1, 0, 2)


def test_modbus_returns_none_for_a_broadcast_write() -> None:
    """Modbus sends a broadcast write and returns None on its empty reply."""
    client = ScriptedClient(0, b"")
    Modbus(client).write_coils(0, 0, [True])
    assert client.sent == [h("00 0f 0000 0001 01 01")]


# --- AsyncModbus -------------------------------------------------------------------------------
def test_async_modbus_reads_and_writes_the_device() -> None:
    """AsyncModbus writes and reads back registers, coils and discrete inputs on the device."""

    async def main() -> tuple[list[int], list[int], list[bool], list[bool]]:
        bus = AsyncModbus(FakeAsyncClient())
        await bus.write_register(1, 0, 42)
        await bus.write_registers(1, 1, [43, 44])
        await bus.write_coil(1, 0, True)
        await bus.write_coils(1, 1, [False, False])
        return (
            await bus.read_holding_registers(1, 0, 4),
            await bus.read_input_registers(1, 0, 2),
            await bus.read_coils(1, 0, 4),
            await bus.read_discrete_inputs(1, 0, 4),
        )

    assert asyncio.run(main()) == (
        [42, 43, 44, 3],
        [1000, 1001],
        [True, False, False, True],
        [False, False, True, True],
    )


def test_async_modbus_passes_its_call_options_with_every_call() -> None:
    """AsyncModbus passes its timeout, retry and wait options with every call."""
    client = FakeAsyncClient()
    asyncio.run(AsyncModbus(client, timeout=2.0, retry=0).read_coils(1, 0, 1))
    assert client.link.calls[0][1] == {"timeout": 2.0, "retry": 0, "wait": False}


def test_async_modbus_raises_the_exception_the_device_answers() -> None:
    """AsyncModbus raises the ModbusException the device answers with."""
    bus = AsyncModbus(FakeAsyncClient())
    with pytest.raises(ModbusException) as info:
        asyncio.run(bus.read_input_registers(1, 100, 1))
    assert (info.value.code, info.value.function) == (2, 4)


def test_async_modbus_passes_a_client_error_through_unchanged() -> None:
    """AsyncModbus lets a ClientError (a timeout) through unchanged."""
    with pytest.raises(ClientError, match="timeout"):
        asyncio.run(AsyncModbus(FakeAsyncClient()).write_coil(3, 0, True))


def test_async_modbus_has_every_method_of_modbus_as_a_coroutine() -> None:
    """AsyncModbus has each of Modbus's 8 methods as a coroutine with the same parameters."""

    def public(cls: type) -> set[str]:
        return {name for name in vars(cls) if not name.startswith("_")}

    assert public(AsyncModbus) == public(Modbus)
    assert len(public(Modbus)) == 8
    for name in public(Modbus):
        sync, coro = getattr(Modbus, name), getattr(AsyncModbus, name)
        assert inspect.iscoroutinefunction(coro)
        assert inspect.signature(sync).parameters == inspect.signature(coro).parameters


def test_the_real_clients_fit_the_wrappers() -> None:
    """The real Client and AsyncClient fit the Modbus and AsyncModbus wrappers."""
    sync: Caller = Client("/nonexistent/verld.sock")  # checked by mypy: Client fits Caller
    aio: AsyncCaller = AsyncClient("/nonexistent/verld.sock")
    assert Modbus(sync).client is sync
    assert AsyncModbus(aio).client is aio
