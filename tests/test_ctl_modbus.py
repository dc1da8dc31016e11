"""verlctl on the modbus codecs: the unit + PDU decoder, `status` units rows, `monitor` lines.

The functions are called directly (no daemon): `verld.ctl.modbus.describe`,
`verld.ctl.render.render_status` and `verld.ctl.render.render_traffic`, and
`cmd_monitor` against a stand-in client.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verld.client import Client, ClientError
from verld.ctl.commands import cmd_monitor
from verld.ctl.modbus import describe, is_modbus
from verld.ctl.render import hexdump, render_status, render_traffic


def req(hexstr: str) -> str:
    return describe(bytes.fromhex(hexstr.replace(" ", "")), request=True)


def resp(hexstr: str) -> str:
    return describe(bytes.fromhex(hexstr.replace(" ", "")), request=False)


def regs(*values: int) -> str:
    return "".join(f"{v:04x}" for v in values)


# --- describe: requests --------------------------------------------------------------
class TestRequests:
    def test_read_holding_registers_request_shows_addr_and_count(self) -> None:
        """A read holding registers request reads as its unit, function, address and count."""
        assert req("01 03 0000 000a") == "unit 1 read holding registers (03) addr 0 count 10"

    @pytest.mark.parametrize(
        ("fc", "name"),
        [
            (1, "read coils"),
            (2, "read discrete inputs"),
            (3, "read holding registers"),
            (4, "read input registers"),
        ],
    )
    def test_read_requests_name_the_function_and_show_addr_count(self, fc: int, name: str) -> None:
        """Each read request names its function and shows its address and count in decimal."""
        assert req(f"11 {fc:02x} 0100 0002") == f"unit 17 {name} ({fc:02x}) addr 256 count 2"

    def test_write_single_coil_request_shows_on(self) -> None:
        """A write single coil request with 0xFF00 shows "on"."""
        assert req("01 05 000a ff00") == "unit 1 write single coil (05) addr 10 on"

    def test_write_single_coil_request_shows_off(self) -> None:
        """A write single coil request with 0x0000 shows "off"."""
        assert req("01 05 000a 0000") == "unit 1 write single coil (05) addr 10 off"

    def test_write_single_coil_request_flags_a_value_neither_on_nor_off(self) -> None:
        """A write single coil value neither on nor off is shown in hex and flagged."""
        assert (
            req("01 05 000a 1234")
            == "unit 1 write single coil (05) addr 10 value 0x1234 (not on/off)"
        )

    def test_write_single_register_request_shows_addr_and_value(self) -> None:
        """A write single register request shows its address and value."""
        assert req("01 06 0001 0003") == "unit 1 write single register (06) addr 1 value 3"

    def test_write_multiple_coils_request_shows_addr_count_and_bits(self) -> None:
        """A write multiple coils request shows address, count and the bits in coil order."""
        # coils 0..9: 1 0 1 1 0 0 1 1 | 1 0 (bit 0 of the first byte is coil 0)
        assert req("01 0f 0013 000a 02 cd 01") == (
            "unit 1 write multiple coils (0f) addr 19 count 10: 10110011 10"
        )

    def test_write_multiple_registers_request_shows_the_values(self) -> None:
        """A write multiple registers request shows address, count and the values."""
        assert req(f"01 10 0001 0002 04 {regs(10, 258)}") == (
            "unit 1 write multiple registers (10) addr 1 count 2: 10 258"
        )

    def test_write_multiple_registers_request_shows_eight_values_then_ellipsis(self) -> None:
        """A write multiple registers request shows its first eight values, then an ellipsis."""
        values = list(range(12))
        assert req(f"01 10 0000 000c 18 {regs(*values)}") == (
            "unit 1 write multiple registers (10) addr 0 count 12: 0 1 2 3 4 5 6 7 ..."
        )

    def test_read_write_multiple_registers_request_shows_both_ranges(self) -> None:
        """A read/write multiple registers request shows both ranges and the values written."""
        assert req(f"01 17 0003 0006 000e 0003 06 {regs(255, 255, 255)}") == (
            "unit 1 read/write multiple registers (17) read addr 3 count 6 "
            "write addr 14 count 3: 255 255 255"
        )

    def test_diagnostics_request_shows_sub_function_and_data(self) -> None:
        """A diagnostics request shows its sub-function and data bytes."""
        assert req("01 08 0000 a537") == "unit 1 diagnostics (08) sub-function 0 data a5 37"

    def test_device_identification_request_shows_code_and_object(self) -> None:
        """A read device identification request shows its MEI type, code and object id."""
        assert req("01 2b 0e 01 00") == (
            "unit 1 encapsulated interface (2b) read device identification (MEI 0e) code 1 object 0"
        )

    def test_unknown_function_is_named_by_number_with_its_data(self) -> None:
        """An unknown function is named by its number, with its data bytes."""
        assert req("01 41 aabb") == "unit 1 function 65 (41) data aa bb"

    def test_broadcast_unit_is_marked(self) -> None:
        """Unit 0 is marked as broadcast."""
        assert (
            req("00 06 0001 0003") == "unit 0 (broadcast) write single register (06) addr 1 value 3"
        )

    def test_exception_function_code_in_a_request_is_malformed(self) -> None:
        """An exception function code in a request reads as malformed."""
        assert req("01 83 02") == "unit 1 malformed: function code 83 (an exception's) in a request"


# --- describe: responses -------------------------------------------------------------
class TestResponses:
    def test_read_holding_registers_response_lists_the_values(self) -> None:
        """A read holding registers response lists the count and the register values."""
        assert resp(f"01 03 14 {regs(*range(10))}") == (
            "unit 1 read holding registers (03) 10 registers: 0 1 2 3 4 5 6 7 8 9"
        )

    def test_read_input_registers_response_lists_the_values(self) -> None:
        """A read input registers response lists its values, 65535 included."""
        assert resp(f"02 04 04 {regs(1, 65535)}") == (
            "unit 2 read input registers (04) 2 registers: 1 65535"
        )

    def test_one_register_is_singular(self) -> None:
        """A response with one register says "1 register", singular."""
        assert resp(f"01 03 02 {regs(7)}") == "unit 1 read holding registers (03) 1 register: 7"

    def test_register_response_shows_ten_values_then_ellipsis(self) -> None:
        """A register response shows its first ten values, then an ellipsis."""
        assert resp(f"01 03 18 {regs(*range(100, 112))}") == (
            "unit 1 read holding registers (03) 12 registers: "
            "100 101 102 103 104 105 106 107 108 109 ..."
        )

    def test_read_coils_response_shows_bits_in_address_order(self) -> None:
        """A read coils response shows its bits in address order, grouped by byte."""
        assert resp("01 01 02 cd 01") == "unit 1 read coils (01) 16 bits: 10110011 10000000"

    def test_read_discrete_inputs_response_shows_sixteen_bits_then_ellipsis(self) -> None:
        """A read discrete inputs response shows its first sixteen bits, then an ellipsis."""
        assert resp("01 02 03 ff 00 0f") == (
            "unit 1 read discrete inputs (02) 24 bits: 11111111 00000000 ..."
        )

    def test_write_single_coil_response_is_the_echo(self) -> None:
        """A write single coil response reads as its echo of the request."""
        assert resp("01 05 000a ff00") == "unit 1 write single coil (05) addr 10 on"

    def test_write_single_register_response_is_the_echo(self) -> None:
        """A write single register response reads as its echo of the request."""
        assert resp("01 06 0001 0003") == "unit 1 write single register (06) addr 1 value 3"

    def test_write_multiple_coils_response_shows_addr_and_count(self) -> None:
        """A write multiple coils response shows its address and count."""
        assert resp("01 0f 0013 000a") == "unit 1 write multiple coils (0f) addr 19 count 10"

    def test_write_multiple_registers_response_shows_addr_and_count(self) -> None:
        """A write multiple registers response shows its address and count."""
        assert resp("01 10 0001 0002") == "unit 1 write multiple registers (10) addr 1 count 2"

    def test_read_write_multiple_registers_response_lists_the_read_values(self) -> None:
        """A read/write multiple registers response lists the registers read."""
        assert resp(f"01 17 04 {regs(254, 1)}") == (
            "unit 1 read/write multiple registers (17) 2 registers: 254 1"
        )

    def test_diagnostics_response_is_the_echo(self) -> None:
        """A diagnostics response reads as its echo of the request."""
        assert resp("01 08 0000 a537") == "unit 1 diagnostics (08) sub-function 0 data a5 37"

    def test_device_identification_response_lists_the_objects(self) -> None:
        """A device identification response shows its code, conformity and each object's text."""
        body = "0e 01 81 00 00 02" + " 00 04" + b"Acme".hex() + " 01 03" + b"PX1".hex()
        assert resp(f"01 2b {body}") == (
            "unit 1 encapsulated interface (2b) read device identification (MEI 0e) "
            'code 1 conformity 81 2 objects: 0="Acme" 1="PX1"'
        )

    def test_device_identification_text_has_control_characters_escaped(self) -> None:
        """Control characters in device identification text are shown escaped."""
        body = "0e 01 01 00 00 01 00 03" + b"a\x1bb".hex()
        assert '0="a\\x1bb"' in resp(f"01 2b {body}")


class TestExceptions:
    def test_exception_response_names_function_and_exception(self) -> None:
        """An exception response names the function and the exception code."""
        assert (
            resp("01 83 02")
            == "unit 1 read holding registers (03) exception 02 illegal data address"
        )

    @pytest.mark.parametrize(
        ("code", "name"),
        [
            (0x01, "illegal function"),
            (0x02, "illegal data address"),
            (0x03, "illegal data value"),
            (0x04, "server device failure"),
            (0x05, "acknowledge"),
            (0x06, "server device busy"),
            (0x08, "memory parity error"),
            (0x0A, "gateway path unavailable"),
            (0x0B, "gateway target device failed to respond"),
        ],
    )
    def test_each_standard_exception_code_is_named(self, code: int, name: str) -> None:
        """Each standard exception code is shown with its name."""
        assert resp(f"01 86 {code:02x}").endswith(f"exception {code:02x} {name}")

    @pytest.mark.parametrize("fc", [0x01, 0x02, 0x04, 0x05, 0x06, 0x0F, 0x10, 0x17, 0x2B, 0x08])
    def test_exception_of_each_function_names_that_function(self, fc: int) -> None:
        """An exception to each known function names that function."""
        assert f"({fc:02x}) exception 01 illegal function" in resp(f"01 {fc | 0x80:02x} 01")

    def test_unknown_exception_code_is_shown_by_number(self) -> None:
        """An exception code without a name is shown by its number alone."""
        assert resp("01 83 0c") == "unit 1 read holding registers (03) exception 0c"

    def test_exception_code_zero_is_malformed(self) -> None:
        """Exception code 0 reads as malformed."""
        assert resp("01 83 00") == "unit 1 read holding registers (03) malformed: exception code 00"

    def test_exception_without_code_is_malformed(self) -> None:
        """An exception response without an exception code reads as malformed."""
        assert resp("01 83").endswith("malformed: exception response without an exception code")


# --- describe: malformed ---------------------------------------------------------------
class TestMalformed:
    def test_no_bytes_is_malformed(self) -> None:
        """No bytes at all read as malformed: no data."""
        assert describe(b"", request=True).startswith("malformed: no data")

    def test_unit_without_function_code_is_malformed(self) -> None:
        """A unit without a function code reads as malformed."""
        assert resp("01") == "unit 1 malformed: no function code"

    def test_short_read_request_is_malformed(self) -> None:
        """A read request short of its 4 data bytes reads as malformed, counting them."""
        assert (
            req("01 03 0000 00")
            == "unit 1 read holding registers (03) malformed: 3 data bytes, 4 expected"
        )

    def test_long_write_register_request_is_malformed(self) -> None:
        """A write register request with a byte too many reads as malformed, counting them."""
        assert req("01 06 0001 0003 ff").endswith("malformed: 5 data bytes, 4 expected")

    def test_byte_count_disagreeing_with_the_data_is_malformed(self) -> None:
        """A byte count disagreeing with the bytes after it reads as malformed."""
        assert resp("01 03 04 0001") == (
            "unit 1 read holding registers (03) malformed: byte count 4, 2 bytes after it"
        )

    def test_odd_register_byte_count_is_malformed(self) -> None:
        """An odd byte count for 16-bit registers reads as malformed."""
        assert resp("01 03 03 000100").endswith("malformed: odd byte count 3 for 16-bit registers")

    def test_write_registers_count_disagreeing_with_the_values_is_malformed(self) -> None:
        """A write registers count disagreeing with the value bytes reads as malformed."""
        assert req(f"01 10 0000 0003 04 {regs(1, 2)}").endswith(
            "malformed: 4 bytes of register values for count 3"
        )

    def test_write_coils_count_disagreeing_with_the_bytes_is_malformed(self) -> None:
        """A write coils count disagreeing with the coil bytes reads as malformed."""
        assert req("01 0f 0000 0009 01 ff").endswith("malformed: 1 byte of coil values for count 9")

    def test_device_identification_object_past_the_end_is_malformed(self) -> None:
        """A device identification object running past the end reads as malformed."""
        assert "malformed: 1 objects announced" in resp("01 2b 0e 01 01 00 00 01 00 09 41")

    @settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.binary(max_size=300), request=st.booleans())
    def test_describe_never_raises_and_gives_one_line(self, data: bytes, request: bool) -> None:
        """describe never raises on any bytes and always gives one non-empty line."""
        text = describe(data, request=request)
        assert text and "\n" not in text

    @settings(max_examples=300, deadline=None)
    @given(
        unit=st.integers(0, 255),
        fc=st.sampled_from([1, 2, 3, 4, 5, 6, 8, 15, 16, 0x17, 0x2B]),
        rest=st.binary(max_size=40),
        request=st.booleans(),
    )
    def test_describe_never_raises_on_known_function_codes(
        self, unit: int, fc: int, rest: bytes, request: bool
    ) -> None:
        """describe never raises on known function codes with any data and starts with the unit."""
        text = describe(bytes([unit, fc]) + rest, request=request)
        assert text.startswith(f"unit {unit}")


def test_is_modbus_is_true_only_for_the_modbus_codecs() -> None:
    """is_modbus is true for modbus-rtu and modbus-tcp only, not other codecs or non-strings."""
    assert is_modbus("modbus-rtu") and is_modbus("modbus-tcp")
    assert not any(is_modbus(c) for c in ("verl", "line", "cobs", "length", None, 3))


# --- render_status -----------------------------------------------------------------------
STATUS: dict[str, Any] = {
    "link": {
        "state": "up",
        "reason": "connected",
        "generation": 1,
        "port": "/dev/ttyUSB0",
        "codec": "modbus-rtu",
        "settings": "19200 8E1",
        "since": 0,
    },
    "uptime": 5.0,
    "clients": 1,
    "queue": 0,
    "counters": {
        "calls": 13,
        "calls_ok": 10,
        "calls_failed": 3,
        "timeouts": 2,
        "retries": 0,
        "frames_tx": 13,
        "frames_rx": 11,
        "bad_frames": 0,
        "stale": 0,
        "bytes_tx": 104,
        "bytes_rx": 99,
        "events": 0,
        "pings": 0,
        "reconnects": 0,
    },
    "latency_ms": {"p50": 3.1, "p90": 4.0, "p99": 4.2, "max": 4.2},
    "lease": None,
    "inhibit": None,
}


def status_with(**extra: Any) -> dict[str, Any]:
    st_ = copy.deepcopy(STATUS)
    st_.update(extra)
    return st_


class TestStatusUnits:
    def test_units_rows_follow_the_existing_rows(self) -> None:
        """The units rows come after the existing status rows, one per unit with its counts."""
        lines = render_status(status_with(units=[unit_entry(1)])).splitlines()
        assert lines[-3].startswith("inhibit     ")
        assert lines[-2:] == [
            "units       1",
            "unit 1      calls 12  ok 10  exceptions 1  timeouts 1",
        ]

    def test_units_rows_are_aligned_and_offline_is_shown(self) -> None:
        """Units rows are aligned in columns and an offline unit is counted and marked OFFLINE."""
        units = [
            unit_entry(1),
            unit_entry(17, calls=1234, ok=1200, exceptions=30, timeouts=4, offline=True),
        ]
        assert render_status(status_with(units=units)).splitlines()[-3:] == [
            "units       2 (1 offline)",
            "unit 1      calls 12    ok 10    exceptions 1   timeouts 1",
            "unit 17     calls 1234  ok 1200  exceptions 30  timeouts 4  OFFLINE",
        ]

    def test_empty_units_list_shows_none_yet(self) -> None:
        """An empty units list shows "units none yet"."""
        assert render_status(status_with(units=[])).splitlines()[-1] == "units       none yet"

    def test_absent_units_adds_no_rows(self) -> None:
        """A status without units adds no unit rows."""
        out = render_status(status_with())
        assert out.splitlines()[-1].startswith("inhibit     ")
        assert "unit" not in out

    def test_null_units_renders_like_absent(self) -> None:
        """A null units entry renders like an absent one."""
        assert render_status(status_with(units=None)) == render_status(status_with())


def unit_entry(
    unit: int,
    *,
    calls: int = 12,
    ok: int = 10,
    exceptions: int = 1,
    timeouts: int = 1,
    offline: bool = False,
) -> dict[str, Any]:
    return {
        "unit": unit,
        "calls": calls,
        "ok": ok,
        "exceptions": exceptions,
        "timeouts": timeouts,
        "offline": offline,
    }


# --- render_traffic ----------------------------------------------------------------------
@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC, so a line's time stamp is known."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def traffic(
    direction: str, kind: str, seq: int | None, status: int | None, hexstr: str
) -> dict[str, Any]:
    data = bytes.fromhex(hexstr)
    return {
        "event": "traffic",
        "dir": direction,
        "t": 1.25,
        "kind": kind,
        "seq": seq,
        "status": status,
        "len": len(data),
        "hex": hexstr,
    }


@pytest.mark.usefixtures("utc")
class TestTraffic:
    def test_modbus_request_line_carries_the_reading_then_the_dump(self) -> None:
        """A Modbus request's traffic line carries its reading, followed by the hex dump."""
        out = render_traffic(traffic("tx", "request", 3, None, "01030000000a"), decode=describe)
        assert out.splitlines() == [
            "00:00:01.250000 -> request seq=3     len=6  "
            "unit 1 read holding registers (03) addr 0 count 10",
            "00000000  01 03 00 00 00 0a                                |......|",
        ]

    def test_modbus_reply_is_decoded_as_a_response(self) -> None:
        """A reply's traffic line is decoded as a Modbus response."""
        ev = traffic("rx", "reply", 3, 0, "010304" + regs(1, 2))
        head = render_traffic(ev, decode=describe).splitlines()[0]
        assert head.endswith(
            "len=7 status=0x00  unit 1 read holding registers (03) 2 registers: 1 2"
        )

    def test_modbus_exception_reply_shows_the_exception(self) -> None:
        """An exception reply's traffic line shows its status and the named exception."""
        head = render_traffic(traffic("rx", "reply", 4, 2, "018302"), decode=describe).splitlines()[
            0
        ]
        assert head.endswith(
            "status=0x02  unit 1 read holding registers (03) exception 02 illegal data address"
        )

    def test_without_decoder_the_line_is_as_before(self) -> None:
        """Without a decoder the traffic line is the plain head and hex dump."""
        ev = traffic("tx", "request", 2, None, "01aabb")
        assert render_traffic(ev) == (
            "00:00:01.250000 -> request seq=2     len=3\n"
            "00000000  01 aa bb                                         |...|"
        )

    def test_without_decoder_an_empty_reply_is_one_line(self) -> None:
        """Without a decoder an empty reply is a single line, no dump."""
        assert render_traffic(traffic("rx", "reply", 4, 0, "")) == (
            "00:00:01.250000 <- reply   seq=4     len=0 status=0x00"
        )

    def test_decoder_leaves_the_dump_unchanged(self) -> None:
        """The decoder only appends its reading to the head line and leaves the dump unchanged."""
        ev = traffic("rx", "reply", 5, 0, "0106000100ff")
        plain, decoded = render_traffic(ev), render_traffic(ev, decode=describe)
        assert (
            decoded.splitlines()[1:]
            == plain.splitlines()[1:]
            == [hexdump(bytes.fromhex("0106000100ff"))]
        )
        assert decoded.splitlines()[0].startswith(plain.splitlines()[0] + "  unit 1 ")

    def test_wire_events_are_not_decoded(self) -> None:
        """Raw wire events are not decoded, only dumped."""
        ev = {"event": "wire", "dir": "rx", "t": 1.25, "hex": "01030000000ac5cd"}
        assert render_traffic(ev, decode=describe) == render_traffic(ev)
        assert render_traffic(ev).startswith("00:00:01.250000 <- raw 8 bytes\n")


# --- cmd_monitor: which decoder ----------------------------------------------------------
class FakeClient:
    """Just what `cmd_monitor` uses of a `Client`: hello, subscribe, events, timeout."""

    def __init__(self, hello: dict[str, Any] | ClientError, events: list[dict[str, Any]]) -> None:
        self._hello, self._events = hello, events
        self.timeout: float | None = 60.0
        self.ops: list[str] = []

    def hello(self) -> dict[str, Any]:
        self.ops.append("hello")
        if isinstance(self._hello, ClientError):
            raise self._hello
        return self._hello

    def subscribe(self, topics: list[str]) -> dict[str, Any]:
        self.ops.append(f"subscribe {','.join(topics)}")
        return {"topics": topics}

    def events(self) -> Iterator[dict[str, Any]]:
        yield from self._events


def monitor(fake: FakeClient, capsys: pytest.CaptureFixture[str], *, raw: bool = False) -> str:
    args = argparse.Namespace(raw=raw, json=False)
    assert cmd_monitor(cast(Client, fake), args) == 0
    return capsys.readouterr().out


def hello_codec(codec: str) -> dict[str, Any]:
    return {"ok": True, "device": {"port": "/dev/ttyUSB0", "codec": codec}}


@pytest.mark.usefixtures("utc")
class TestMonitorCommand:
    EV = traffic("tx", "request", 1, None, "01030000000a")

    @pytest.mark.parametrize("codec", ["modbus-rtu", "modbus-tcp"])
    def test_monitor_decodes_on_a_modbus_codec(
        self, codec: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`monitor` decodes traffic when hello names a Modbus codec."""
        out = monitor(FakeClient(hello_codec(codec), [self.EV]), capsys)
        assert out == render_traffic(self.EV, decode=describe) + "\n"

    def test_monitor_does_not_decode_on_other_codecs(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`monitor` does not decode traffic on a non-Modbus codec."""
        out = monitor(FakeClient(hello_codec("verl"), [self.EV]), capsys)
        assert out == render_traffic(self.EV) + "\n"

    def test_monitor_does_not_decode_when_hello_fails(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`monitor` does not decode traffic when hello fails with a client error."""
        out = monitor(FakeClient(ClientError("bad_request", "no"), [self.EV]), capsys)
        assert out == render_traffic(self.EV) + "\n"

    def test_monitor_raw_subscribes_to_wire_without_hello(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`monitor --raw` subscribes to wire events without asking hello."""
        fake = FakeClient(hello_codec("modbus-rtu"), [])
        monitor(fake, capsys, raw=True)
        assert fake.ops == ["subscribe wire"]


def test_unit_0_is_an_ordinary_unit_on_modbus_tcp() -> None:
    """`rtu=False` (codec modbus-tcp): no broadcast label on unit 0."""
    from verld.ctl.modbus import describe

    assert describe(bytes.fromhex("000300000001"), request=True, rtu=False).startswith(
        "unit 0 read"
    )
    assert "(broadcast)" in describe(bytes.fromhex("000600000001"), request=True)


COUNTERS = [
    "calls",
    "calls_ok",
    "calls_failed",
    "timeouts",
    "retries",
    "stale",
    "bad_frames",
    "reconnects",
    "pings",
    "bytes_tx",
    "bytes_rx",
    "frames_tx",
    "frames_rx",
    "events",
]


def test_status_shows_the_modbus_front_when_it_is_on() -> None:
    """A `modbus` row: address, connections, calls, exceptions, refusals by why; none when off."""
    from verld.ctl.render import render_status

    base = {
        "link": {
            "state": "up",
            "reason": "connected",
            "generation": 1,
            "port": "/dev/x",
            "codec": "modbus-rtu",
            "since": 0.0,
        },
        "counters": dict.fromkeys(COUNTERS, 0),
        "latency_ms": {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0},
        "uptime": 1.0,
        "clients": 0,
        "queue": 0,
        "lease": None,
        "inhibit": None,
    }
    assert "modbus " not in render_status({**base, "modbus": None})
    front = {
        "listen": "127.0.0.1:1502",
        "connections": 2,
        "calls": 9,
        "exceptions": {"11": 3},
        "closed_malformed": 1,
        "refused": {"allow": 2, "tls": 1},
    }
    row = next(
        r for r in render_status({**base, "modbus": front}).splitlines() if r.startswith("modbus")
    )
    assert "127.0.0.1:1502" in row and "2 connections" in row and "0x0b x3" in row
    assert "refused allow x2, tls x1" in row


def test_units_show_errors_only_when_some_unit_has_them() -> None:
    """`errors` (calls refused before the bus) appears as a column once non-zero."""
    from verld.ctl.render import _unit_rows

    quiet = [{"unit": 1, "calls": 2, "ok": 2, "exceptions": 0, "timeouts": 0, "errors": 0}]
    assert "errors" not in " ".join(v for _, v in _unit_rows(quiet))
    busy = [{**quiet[0], "calls": 3, "errors": 1}]
    assert "errors 1" in " ".join(v for _, v in _unit_rows(busy))
