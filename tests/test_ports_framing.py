"""The ports' device-side framing: what a program writes in, what the daemon side reads back.

Every round trip is built with the daemon-side codecs of `verld.codec`: the bytes a
device-speaking program writes are what those codecs encode, and what the port
writes back must decode there as the matching reply.
"""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verld.codec import cobs
from verld.codec.base import Inbound, Kind, PortFraming, PortRequest
from verld.codec.length import LengthCodec, LengthPortFraming
from verld.codec.length import encode as length_encode
from verld.codec.line import LineCodec, LinePortFraming
from verld.codec.modbus import (
    ModbusRtuCodec,
    ModbusRtuPortFraming,
    ModbusTcpCodec,
    ModbusTcpPortFraming,
    mbap_frame,
    rtu_frame,
)
from verld.codec.registry import spec_of
from verld.codec.verl import VerlCodec, VerlPortFraming, encode_frame
from verld.config import Config
from verld.config.model import DeviceConfig, LineConfig

MAX = 64  #: max_payload for most tests

READ = bytes.fromhex("01030000000a")  #: unit 1 reads 10 holding registers from 0
READ_REPLY = bytes((1, 3, 20)) + bytes(range(20))  #: its normal response


def feed_at(framing: PortFraming, data: bytes, cuts: list[int]) -> list[PortRequest]:
    """Feed `data` split at `cuts` (offsets); every request decoded."""
    requests = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        requests += framing.feed(data[start:cut])
        start = max(start, cut)
    return requests


def every_byte(data: bytes) -> list[int]:
    return list(range(1, len(data)))


def config(codec: str, **line: str) -> Config:
    return Config(device=DeviceConfig(codec=codec, max_payload=MAX, line=LineConfig(**line)))


def device_side(cfg: Config) -> PortFraming:
    """The device side the registry makes for `cfg` (what a port front uses)."""
    return spec_of(cfg).device(cfg)


# --- the registry's device side ----------------------------------------------------


@pytest.mark.parametrize(
    ("codec", "kind"),
    [
        ("verl", VerlPortFraming),
        ("length", LengthPortFraming),
        ("line", LinePortFraming),
        ("modbus-rtu", ModbusRtuPortFraming),
        ("modbus-tcp", ModbusTcpPortFraming),
    ],
)
def test_device_side_picks_the_devices_codec(codec: str, kind: type) -> None:
    """The registry gives each device codec its own port framing class."""
    assert isinstance(device_side(config(codec)), kind)


def test_device_side_uses_the_line_terminator() -> None:
    """The line device side ends a program's lines at CR or LF, replies at the terminator."""
    framing = device_side(config("line", terminator="\r\n"))
    assert framing.feed(b"a\nb\r\n") == [PortRequest(None, b"a"), PortRequest(None, b"b")]
    assert framing.reply(None, 0, b"", "OK") == b"OK\r\n"


def test_device_side_rejects_an_unknown_codec() -> None:
    """An unknown codec has no device side: ValueError naming it."""
    cfg = config("verl")
    cfg = dataclasses.replace(cfg, device=dataclasses.replace(cfg.device, codec="smoke"))
    with pytest.raises(ValueError, match="smoke"):
        device_side(cfg)


@pytest.mark.parametrize("codec", ["verl", "length", "line", "modbus-rtu", "modbus-tcp"])
def test_reply_without_status_writes_nothing_like_a_silent_device(codec: str) -> None:
    """A reply without a status (a failed call) writes nothing, like a silent device."""
    assert device_side(config(codec)).reply(1, None, b"", None) == b""


@pytest.mark.parametrize("codec", ["verl", "length", "line", "modbus-tcp"])
def test_flush_ends_nothing_on_self_delimiting_codecs(codec: str) -> None:
    """On self-delimiting codecs a flush (silence) ends no partial frame and counts nothing."""
    framing = device_side(config(codec))
    assert framing.feed(b"\x00\x00") == []
    assert framing.flush() == []
    assert framing.bad_frames == 0


# --- verl -----------------------------------------------------------------------


class TestVerl:
    def test_request_frames_become_calls_tagged_with_the_programs_seq(self) -> None:
        """verl request frames become calls tagged with the program's seq, 65535 included."""
        program = VerlCodec(MAX)
        wire = program.encode_request(7, b"\x01hi") + program.encode_request(65535, b"")
        assert VerlPortFraming(MAX).feed(wire) == [
            PortRequest(7, b"\x01hi"),
            PortRequest(65535, b""),
        ]

    def test_reply_is_a_reply_frame_with_the_programs_seq(self) -> None:
        """A reply is written as a verl reply frame carrying the program's seq, status and data."""
        framing, program = VerlPortFraming(MAX), VerlCodec(MAX)
        (request,) = framing.feed(program.encode_request(513, b"\x02"))
        wire = framing.reply(request.tag, 0xFE, b"no\x00pe", None)
        assert program.feed(wire, True) == [Inbound(Kind.REPLY, 513, 0xFE, b"no\x00pe")]

    def test_event_is_an_event_frame_with_seq_zero(self) -> None:
        """An event is written as a verl event frame with seq 0."""
        wire = VerlPortFraming(MAX).event(b"temp\x00", None)
        assert wire == encode_frame(Kind.EVENT, 0, b"temp\x00")
        assert VerlCodec(MAX).feed(wire, False) == [Inbound(Kind.EVENT, None, None, b"temp\x00")]

    def test_request_split_at_every_byte_decodes_once(self) -> None:
        """A verl request fed one byte at a time decodes once, nothing dropped or ignored."""
        wire = VerlCodec(MAX).encode_request(3, bytes(range(MAX)))
        framing = VerlPortFraming(MAX)
        assert feed_at(framing, wire, every_byte(wire)) == [PortRequest(3, bytes(range(MAX)))]
        assert (framing.bad_frames, framing.ignored) == (0, 0)

    def test_bad_crc_frame_is_dropped_and_counted(self) -> None:
        """A frame with a bad CRC is dropped and counted; the next good frame still decodes."""
        good = VerlCodec(MAX).encode_request(1, b"ok")
        bad = bytearray(VerlCodec(MAX).encode_request(2, b"xy"))
        bad[-3] ^= 0x01
        framing = VerlPortFraming(MAX)
        assert framing.feed(bytes(bad) + good) == [PortRequest(1, b"ok")]
        assert framing.bad_frames == 1
        assert not framing.discarding

    def test_reply_frames_from_the_program_are_dropped_and_counted(self) -> None:
        """A reply frame written by the program is dropped and counted as bad."""
        framing = VerlPortFraming(MAX)
        assert framing.feed(encode_frame(Kind.REPLY, 1, b"\x00")) == []
        assert framing.bad_frames == 1

    def test_garbage_between_frames_is_dropped_and_counted(self) -> None:
        """Garbage between two verl frames is dropped and counted once; both frames decode."""
        program = VerlCodec(MAX)
        wire = program.encode_request(1, b"a") + b"\x07noise" + program.encode_request(2, b"b")
        framing = VerlPortFraming(MAX)
        assert framing.feed(wire) == [PortRequest(1, b"a"), PortRequest(2, b"b")]
        assert framing.bad_frames == 1

    def test_oversize_payload_is_dropped_and_counted(self) -> None:
        """A verl frame with a payload over max_payload is dropped and counted."""
        framing = VerlPortFraming(MAX)
        assert framing.feed(VerlCodec(MAX + 1).encode_request(1, bytes(MAX + 1))) == []
        assert framing.bad_frames == 1

    def test_overlong_frame_in_pieces_is_ignored_until_reset(self) -> None:
        """A frame growing past the longest possible is ignored, with what follows, until reset."""
        framing = VerlPortFraming(MAX)
        limit = cobs.max_encoded_length(MAX + 8) + 1
        assert framing.feed(b"\x00" + b"\x01" * limit) == []
        assert (framing.discarding, framing.ignored) == (False, 0)
        assert framing.feed(b"\x01") == []
        assert framing.discarding
        assert framing.ignored == limit + 1
        good = VerlCodec(MAX).encode_request(9, b"late")
        assert framing.feed(good) == []  # still discarding
        assert framing.ignored == limit + 1 + len(good)
        framing.reset()
        assert framing.feed(good) == [PortRequest(9, b"late")]
        assert framing.bad_frames == 0

    def test_overlong_frame_arriving_whole_is_ignored_after_earlier_frames(self) -> None:
        """An overlong frame arriving whole is ignored with what follows; earlier frames decode."""
        framing = VerlPortFraming(MAX)
        limit = cobs.max_encoded_length(MAX + 8) + 1
        good = VerlCodec(MAX).encode_request(4, b"first")
        junk = b"\x02" * (limit + 1) + b"\x00"
        assert framing.feed(good + junk + good) == [PortRequest(4, b"first")]
        assert framing.discarding
        assert framing.ignored == len(junk) + len(good)

    def test_longest_request_is_not_overlong(self) -> None:
        """A request of max_payload bytes, all 0xFF, is not overlong, even fed bytewise."""
        wire = VerlCodec(MAX).encode_request(1, b"\xff" * MAX)
        framing = VerlPortFraming(MAX)
        assert feed_at(framing, wire, every_byte(wire)) == [PortRequest(1, b"\xff" * MAX)]
        assert not framing.discarding

    @settings(max_examples=200, deadline=None)
    @given(
        calls=st.lists(
            st.tuples(
                st.integers(0, 0xFFFF),
                st.binary(max_size=MAX),
                st.integers(0, 255),
                st.binary(max_size=MAX),
            ),
            min_size=1,
            max_size=5,
        ),
        cuts=st.lists(st.integers(0, 800), max_size=10),
    )
    def test_random_calls_round_trip_with_their_seqs(
        self, calls: list[tuple[int, bytes, int, bytes]], cuts: list[int]
    ) -> None:
        """Random verl calls split anywhere decode with their seqs; their replies decode back."""
        framing, program = VerlPortFraming(MAX), VerlCodec(MAX)
        wire = b"".join(program.encode_request(seq, payload) for seq, payload, _, _ in calls)
        requests = feed_at(framing, wire, cuts)
        assert requests == [PortRequest(seq, payload) for seq, payload, _, _ in calls]
        back = b"".join(
            framing.reply(request.tag, status, data, None)
            for request, (_, _, status, data) in zip(requests, calls, strict=True)
        )
        assert program.feed(back, True) == [
            Inbound(Kind.REPLY, seq, status, data) for seq, _, status, data in calls
        ]


# --- length ----------------------------------------------------------------------


class TestLength:
    def test_length_prefixed_messages_become_calls(self) -> None:
        """Length-prefixed messages, an empty one included, become calls."""
        program = LengthCodec(MAX)
        wire = program.encode_request(0, b"\x01abc") + program.encode_request(0, b"")
        assert LengthPortFraming(MAX).feed(wire) == [
            PortRequest(None, b"\x01abc"),
            PortRequest(None, b""),
        ]

    def test_reply_is_length_then_status_then_data(self) -> None:
        """A length reply is the 4-byte length, then the status byte, then the data."""
        framing = LengthPortFraming(MAX)
        wire = framing.reply(None, 0x05, b"data", None)
        assert wire == b"\x00\x00\x00\x05\x05data"
        assert LengthCodec(MAX).feed(wire, True) == [Inbound(Kind.REPLY, None, 0x05, b"data")]

    def test_event_is_a_length_frame(self) -> None:
        """An event is written as a length frame the daemon side reads as an event."""
        wire = LengthPortFraming(MAX).event(b"evt", None)
        assert LengthCodec(MAX).feed(wire, False) == [Inbound(Kind.EVENT, None, None, b"evt")]

    def test_request_split_at_every_byte_decodes_once(self) -> None:
        """Length requests fed one byte at a time each decode once."""
        wire = length_encode(b"\x00" * MAX) + length_encode(b"x")
        framing = LengthPortFraming(MAX)
        assert feed_at(framing, wire, every_byte(wire)) == [
            PortRequest(None, b"\x00" * MAX),
            PortRequest(None, b"x"),
        ]

    def test_oversize_length_is_ignored_until_reset(self) -> None:
        """A length over max_payload is ignored, with what follows, until reset."""
        framing = LengthPortFraming(MAX)
        good = length_encode(b"ok")
        oversize = struct.pack(">I", MAX + 1) + b"zz"
        assert framing.feed(good + oversize) == [PortRequest(None, b"ok")]
        assert framing.discarding
        assert framing.ignored == len(oversize)
        assert framing.feed(good) == []
        assert framing.ignored == len(oversize) + len(good)
        framing.reset()
        assert framing.feed(good) == [PortRequest(None, b"ok")]

    def test_oversize_length_counts_the_partial_frame_before_it(self) -> None:
        """An oversize length arriving in pieces counts all its header bytes as ignored."""
        framing = LengthPortFraming(MAX)
        assert framing.feed(b"\x00\x00") == []
        assert framing.feed(b"\x01\x00") == []  # 256 > MAX
        assert framing.discarding
        assert framing.ignored == 4

    @settings(max_examples=200, deadline=None)
    @given(
        calls=st.lists(
            st.tuples(st.binary(max_size=MAX), st.integers(0, 255), st.binary(max_size=MAX)),
            min_size=1,
            max_size=5,
        ),
        cuts=st.lists(st.integers(0, 400), max_size=10),
    )
    def test_random_calls_round_trip(
        self, calls: list[tuple[bytes, int, bytes]], cuts: list[int]
    ) -> None:
        """Random length calls split anywhere decode, and their replies decode back."""
        framing, program = LengthPortFraming(MAX), LengthCodec(MAX)
        wire = b"".join(program.encode_request(0, payload) for payload, _, _ in calls)
        requests = feed_at(framing, wire, cuts)
        assert requests == [PortRequest(None, payload) for payload, _, _ in calls]
        for _, status, data in calls:
            wire = framing.reply(None, status, data, None)
            assert program.feed(wire, True) == [Inbound(Kind.REPLY, None, status, data)]


# --- line ------------------------------------------------------------------------


class TestLine:
    def test_each_line_is_a_call_without_its_terminator(self) -> None:
        """Each line is a call without its end (LF, CRLF or CR); empty lines are ignored."""
        framing = LinePortFraming(MAX)
        assert framing.feed(b"*IDN?\nMEAS:VOLT?\r\n\nVOLT?\r\r") == [
            PortRequest(None, b"*IDN?"),
            PortRequest(None, b"MEAS:VOLT?"),
            PortRequest(None, b"VOLT?"),
        ]

    def test_a_crlf_split_over_two_reads_is_one_line_end(self) -> None:
        """picocom's Enter (CR alone) ends a line; a CRLF cut between reads ends just one."""
        framing = LinePortFraming(MAX, "\n")
        assert framing.feed(b"*IDN?\r") == [PortRequest(None, b"*IDN?")]
        assert framing.feed(b"\nVOLT?\r") == [PortRequest(None, b"VOLT?")]
        assert framing.feed(b"\n") == []

    def test_a_program_line_also_ends_at_another_terminator(self) -> None:
        """With a terminator other than CR/LF, a program's line ends there too."""
        framing = LinePortFraming(MAX, ";")
        assert framing.feed(b"A;B\nC\r") == [PortRequest(None, p) for p in (b"A", b"B", b"C")]

    def test_daemon_side_request_round_trips(self) -> None:
        """A request the daemon-side line codec encodes comes out as the same call."""
        wire = LineCodec(MAX, terminator="\r\n").encode_request(0, b"AT+CSQ")
        assert LinePortFraming(MAX, "\r\n").feed(wire) == [PortRequest(None, b"AT+CSQ")]

    def test_reply_lines_each_get_the_devices_terminator(self) -> None:
        """Each line of a reply gets the device's terminator and decodes back as one reply."""
        framing = LinePortFraming(MAX, "\r\n")
        wire = framing.reply(None, 0, b"+CSQ: 20,99\nOK", "+CSQ: 20,99\nOK")
        assert wire == b"+CSQ: 20,99\r\nOK\r\n"
        program = LineCodec(MAX, terminator="\r\n", end="^OK$")
        assert program.feed(wire, True) == [
            Inbound(Kind.REPLY, None, 0, b"+CSQ: 20,99\nOK", "+CSQ: 20,99\nOK")
        ]

    def test_reply_without_text_is_written_from_its_data(self) -> None:
        """A reply without text is written from its data bytes, with the terminator."""
        assert LinePortFraming(MAX).reply(None, 0xFF, b"ERR\nX", None) == b"ERR\nX\n"

    def test_error_reply_is_written_like_any_other(self) -> None:
        """An error reply is written like any other and the daemon side reads its error status."""
        framing = LinePortFraming(MAX)
        wire = framing.reply(None, 0xFF, b"ERROR", "ERROR")
        assert LineCodec(MAX, error="^ERROR").feed(wire, True) == [
            Inbound(Kind.REPLY, None, 0xFF, b"ERROR", "ERROR")
        ]

    def test_event_is_a_line_with_the_terminator(self) -> None:
        """An event is written as a line ending with the device's terminator."""
        wire = LinePortFraming(MAX, ";").event(b"$GPGGA,1", "$GPGGA,1")
        assert wire == b"$GPGGA,1;"
        assert LineCodec(MAX, terminator=";").feed(wire, False) == [
            Inbound(Kind.EVENT, None, None, b"$GPGGA,1", "$GPGGA,1")
        ]

    def test_lines_split_at_every_byte_decode_once(self) -> None:
        """Lines fed a byte at a time, a max_payload one included, decode once (empty: none)."""
        wire = b"ab\r\n\r\n" + b"z" * MAX + b"\r\nc\r\n"
        framing = LinePortFraming(MAX, "\r\n")
        assert feed_at(framing, wire, every_byte(wire)) == [
            PortRequest(None, b"ab"),
            PortRequest(None, b"z" * MAX),
            PortRequest(None, b"c"),
        ]
        assert framing.ignored == 0

    def test_overlong_line_is_ignored_until_reset(self) -> None:
        """A line over max_payload is ignored, with what follows, until reset; not a bad frame."""
        framing = LinePortFraming(MAX)
        long = b"y" * (MAX + 1) + b"\n"
        assert framing.feed(b"ok\n" + long + b"next\n") == [PortRequest(None, b"ok")]
        assert framing.discarding
        assert framing.ignored == len(long) + len(b"next\n")
        assert framing.feed(b"more\n") == []
        framing.reset()
        assert framing.feed(b"more\n") == [PortRequest(None, b"more")]
        assert framing.bad_frames == 0

    def test_overlong_partial_line_is_ignored_as_it_grows(self) -> None:
        """A partial line growing past max_payload is ignored as soon as it is too long."""
        framing = LinePortFraming(MAX)
        assert framing.feed(b"x" * MAX) == []
        assert framing.feed(b"x" * 2) == []
        assert framing.discarding
        assert framing.ignored == MAX + 2

    @settings(max_examples=200, deadline=None)
    @given(
        lines=st.lists(
            st.text(st.characters(codec="utf-8", exclude_characters="\r\n")),
            min_size=1,
            max_size=5,
        ),
        cuts=st.lists(st.integers(0, 400), max_size=10),
    )
    def test_random_lines_round_trip(self, lines: list[str], cuts: list[int]) -> None:
        """Random UTF-8 lines split anywhere decode, and their replies decode back."""
        encoded = [line.encode() for line in lines]
        limit = max(MAX, *map(len, encoded))
        framing, program = LinePortFraming(limit, "\r\n"), LineCodec(limit, terminator="\r\n")
        wire = b"".join(program.encode_request(0, line) for line in encoded)
        requests = [PortRequest(None, line) for line in encoded if line]  # (empty: ignored)
        assert feed_at(framing, wire, cuts) == requests
        for line, raw in zip(lines, encoded, strict=True):
            back = framing.reply(None, 0, raw, line)
            assert program.feed(back, True) == [Inbound(Kind.REPLY, None, 0, raw, line)]


# --- modbus-rtu ---------------------------------------------------------------------


class TestModbusRtu:
    def test_request_ends_where_its_function_code_says(self) -> None:
        """An RTU request ends at the length its function code implies, not before."""
        framing = ModbusRtuPortFraming()
        wire = ModbusRtuCodec(MAX).encode_request(0, READ)
        assert framing.feed(wire[:-1]) == []
        assert framing.feed(wire[-1:]) == [PortRequest(None, READ)]

    def test_reply_is_an_rtu_frame_the_master_accepts(self) -> None:
        """A reply is written as an RTU frame with CRC that the master's codec accepts."""
        framing, master = ModbusRtuPortFraming(), ModbusRtuCodec(MAX)
        (request,) = framing.feed(master.encode_request(0, READ))
        wire = framing.reply(request.tag, 0, READ_REPLY, None)
        assert wire == rtu_frame(READ_REPLY)
        assert master.feed(wire, True) == [Inbound(Kind.REPLY, None, 0, READ_REPLY)]

    def test_exception_reply_reaches_the_master_as_its_code(self) -> None:
        """An exception reply reaches the master with its exception code as status."""
        framing, master = ModbusRtuPortFraming(), ModbusRtuCodec(MAX)
        framing.feed(master.encode_request(0, READ))
        wire = framing.reply(None, 0x02, b"\x01\x83\x02", None)
        assert master.feed(wire, True) == [Inbound(Kind.REPLY, None, 0x02, b"\x01\x83\x02")]

    def test_write_multiple_split_at_every_byte_decodes_once(self) -> None:
        """A write multiple and a read fed one byte at a time each decode once."""
        write = bytes.fromhex("01100001000204000a0102")  # fc 16, two registers
        wire = rtu_frame(write) + rtu_frame(READ)
        framing = ModbusRtuPortFraming()
        assert feed_at(framing, wire, every_byte(wire)) == [
            PortRequest(None, write),
            PortRequest(None, READ),
        ]
        assert framing.bad_frames == 0

    def test_bad_crc_is_dropped_counted_once_and_the_next_request_found_by_silence(
        self,
    ) -> None:
        """A bad CRC frame is dropped and counted once; silence finds the next request."""
        bad = bytearray(rtu_frame(READ))
        bad[-1] ^= 0xFF
        framing = ModbusRtuPortFraming()
        requests = framing.feed(bytes(bad) + rtu_frame(READ))
        assert requests + framing.flush() == [PortRequest(None, READ)]
        assert framing.bad_frames == 1

    def test_candidate_of_unknown_length_holds_the_hunt_until_silence(self) -> None:
        """A candidate of unknown length holds the hunt until silence, then the request is found."""
        framing = ModbusRtuPortFraming()
        assert framing.feed(b"\x01\x41\x02" + rtu_frame(READ)) == []
        assert framing.flush() == [PortRequest(None, READ)]
        assert framing.bad_frames == 1

    def test_garbage_before_a_request_is_hunted_through(self) -> None:
        """Garbage before an RTU request is hunted through and counted once."""
        framing = ModbusRtuPortFraming()
        assert framing.feed(b"\x55\xaa\x01" + rtu_frame(READ)) == [PortRequest(None, READ)]
        assert framing.bad_frames == 1

    def test_unknown_function_code_ends_at_silence(self) -> None:
        """A request with an unknown function code ends at silence, not counted bad."""
        custom = bytes.fromhex("0141deadbeef")  # fc 0x41, user-defined
        framing = ModbusRtuPortFraming()
        wire = rtu_frame(custom)
        assert feed_at(framing, wire, every_byte(wire)) == []
        assert framing.flush() == [PortRequest(None, custom)]
        assert framing.bad_frames == 0

    def test_incomplete_request_is_dropped_at_silence(self) -> None:
        """An incomplete RTU request is dropped and counted at silence; the next one decodes."""
        framing = ModbusRtuPortFraming()
        assert framing.feed(rtu_frame(READ)[:5]) == []
        assert framing.flush() == []
        assert framing.bad_frames == 1
        assert framing.feed(rtu_frame(READ)) == [PortRequest(None, READ)]

    def test_noise_counts_once_per_quiet_spell(self) -> None:
        """RTU noise counts one bad frame per quiet spell."""
        framing = ModbusRtuPortFraming()
        framing.feed(rtu_frame(READ)[:5])
        framing.flush()
        framing.feed(b"\x01")
        framing.flush()
        assert framing.bad_frames == 2

    def test_request_to_a_reserved_unit_is_dropped(self) -> None:
        """A request to a reserved unit (248) is dropped and counted."""
        framing = ModbusRtuPortFraming()
        assert framing.feed(rtu_frame(b"\xf8" + READ[1:])) == []
        framing.flush()
        assert framing.bad_frames == 1

    def test_broadcast_is_a_call_the_front_leaves_unanswered(self) -> None:
        """A broadcast request is a call like any other (the front leaves it unanswered)."""
        broadcast = bytes.fromhex("000600010003")
        assert ModbusRtuPortFraming().feed(rtu_frame(broadcast)) == [PortRequest(None, broadcast)]

    def test_unknown_length_frame_longer_than_any_is_ignored_until_reset(self) -> None:
        """An unknown-length frame longer than any RTU frame is ignored until reset."""
        framing = ModbusRtuPortFraming()
        assert framing.feed(b"\x01\x41" + b"\x00" * 254) == []
        assert (framing.discarding, framing.ignored) == (False, 0)
        assert framing.feed(b"\x00") == []
        assert framing.discarding
        assert framing.ignored == 257
        assert framing.feed(rtu_frame(READ)) == []
        assert framing.flush() == []
        framing.reset()
        assert framing.feed(rtu_frame(READ)) == [PortRequest(None, READ)]

    def test_empty_reply_data_writes_nothing_and_there_are_no_events(self) -> None:
        """An empty RTU reply writes nothing, and events write nothing."""
        framing = ModbusRtuPortFraming()
        assert framing.reply(None, 0, b"", None) == b""
        assert framing.event(b"\x01\x02", None) == b""

    @settings(max_examples=200, deadline=None)
    @given(
        unit=st.integers(1, 247),
        address=st.integers(0, 0xFFFF),
        quantity=st.integers(1, 125),
        cuts=st.lists(st.integers(0, 8), max_size=4),
        data=st.data(),
    )
    def test_random_reads_round_trip(
        self, unit: int, address: int, quantity: int, cuts: list[int], data: st.DataObject
    ) -> None:
        """Random register reads split anywhere decode, and their replies reach the master."""
        request = struct.pack(">BBHH", unit, 3, address, quantity)
        framing, master = ModbusRtuPortFraming(), ModbusRtuCodec(4096)
        assert feed_at(framing, master.encode_request(0, request), cuts) == [
            PortRequest(None, request)
        ]
        registers = data.draw(st.binary(min_size=2 * quantity, max_size=2 * quantity))
        answer = bytes((unit, 3, 2 * quantity)) + registers
        back = framing.reply(None, 0, answer, None)
        assert master.feed(back, True) == [Inbound(Kind.REPLY, None, 0, answer)]


# --- modbus-tcp ----------------------------------------------------------------------


class TestModbusTcp:
    def test_mbap_requests_become_calls_tagged_with_their_transaction_id(self) -> None:
        """MBAP requests become calls tagged with their transaction ids."""
        master = ModbusTcpCodec(MAX)
        wire = master.encode_request(1, READ) + master.encode_request(0xBEEF, b"\x07\x04\x00\x00")
        assert ModbusTcpPortFraming().feed(wire) == [
            PortRequest(1, READ),
            PortRequest(0xBEEF, b"\x07\x04\x00\x00"),
        ]

    def test_replies_carry_the_programs_transaction_id(self) -> None:
        """Replies, even out of order, carry the program's transaction ids."""
        framing, master = ModbusTcpPortFraming(), ModbusTcpCodec(MAX)
        requests = framing.feed(master.encode_request(5, READ) + master.encode_request(6, READ))
        back = b"".join(
            framing.reply(request.tag, 0, READ_REPLY, None) for request in reversed(requests)
        )
        assert back[:2] == b"\x00\x06"
        assert master.feed(back, True) == [
            Inbound(Kind.REPLY, 6, 0, READ_REPLY),
            Inbound(Kind.REPLY, 5, 0, READ_REPLY),
        ]

    def test_request_split_at_every_byte_decodes_once(self) -> None:
        """An MBAP request fed one byte at a time decodes once."""
        wire = mbap_frame(77, READ)
        framing = ModbusTcpPortFraming()
        assert feed_at(framing, wire, every_byte(wire)) == [PortRequest(77, READ)]

    def test_invalid_function_code_is_dropped_and_counted(self) -> None:
        """An MBAP request with an exception function code is dropped and counted."""
        framing = ModbusTcpPortFraming()
        wire = mbap_frame(1, b"\x01\x83\x02") + mbap_frame(2, READ)
        assert framing.feed(wire) == [PortRequest(2, READ)]
        assert framing.bad_frames == 1
        assert not framing.discarding

    def test_impossible_header_is_ignored_until_reset(self) -> None:
        """An MBAP header with an impossible length is ignored, with what follows, until reset."""
        framing = ModbusTcpPortFraming()
        good = mbap_frame(3, READ)
        oversize = b"\x00\x04\x00\x00\x01\x00" + b"\x01" * 8  # length 256 > 254
        assert framing.feed(good + oversize) == [PortRequest(3, READ)]
        assert framing.discarding
        assert framing.ignored == len(oversize)
        assert framing.feed(good) == []
        framing.reset()
        assert framing.feed(good) == [PortRequest(3, READ)]
        assert framing.bad_frames == 0

    def test_wrong_protocol_id_is_ignored(self) -> None:
        """An MBAP header with a non-zero protocol id makes the port ignore its input."""
        framing = ModbusTcpPortFraming()
        assert framing.feed(b"\x00\x01\x00\x07\x00\x06" + READ) == []
        assert framing.discarding
        assert framing.ignored == 12

    def test_there_are_no_events(self) -> None:
        """Modbus TCP ports write nothing for events."""
        assert ModbusTcpPortFraming().event(b"\x01", None) == b""

    @settings(max_examples=200, deadline=None)
    @given(
        calls=st.lists(
            st.tuples(
                st.integers(0, 0xFFFF),
                st.integers(0, 255),
                st.integers(1, 0x7F),
                st.binary(max_size=60),
            ),
            min_size=1,
            max_size=5,
            unique_by=lambda call: call[0],
        ),
        cuts=st.lists(st.integers(0, 400), max_size=10),
    )
    def test_random_calls_round_trip_with_their_transaction_ids(
        self, calls: list[tuple[int, int, int, bytes]], cuts: list[int]
    ) -> None:
        """Random MBAP calls split anywhere decode with their ids, and their replies decode back."""
        framing, master = ModbusTcpPortFraming(), ModbusTcpCodec(MAX)
        payloads = [bytes((unit, fc)) + data for _, unit, fc, data in calls]
        wire = b"".join(
            master.encode_request(tid, payload)
            for (tid, *_), payload in zip(calls, payloads, strict=True)
        )
        requests = feed_at(framing, wire, cuts)
        assert requests == [
            PortRequest(tid, payload) for (tid, *_), payload in zip(calls, payloads, strict=True)
        ]
        back = b"".join(framing.reply(r.tag, 0, r.payload, None) for r in requests)
        assert master.feed(back, True) == [
            Inbound(Kind.REPLY, r.tag, 0, r.payload) for r in requests
        ]
