"""Telnet and RFC 2217 sans-I/O: byte vectors, any cut of the stream, garbage, both sides."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from verld.codec import rfc2217
from verld.codec.telnet import (
    BINARY,
    COM_PORT,
    DO,
    DONT,
    ECHO,
    IAC,
    MAX_SUBNEG,
    SB,
    SE,
    SGA,
    WILL,
    WONT,
    Agreed,
    ComPort,
    Data,
    Event,
    Telnet,
    escape,
)


def cmd(*parts: int) -> bytes:
    return bytes(parts)


def data_of(events: list[Event]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, Data))


def feed_all(t: Telnet, chunks: list[bytes]) -> list[Event]:
    out: list[Event] = []
    for chunk in chunks:
        out += t.feed(chunk)
    return out


def outcome(chunks: list[bytes]) -> tuple[bytes, list[Event], bytes, int]:
    """What a server end with COM-PORT makes of `chunks`: data, other events, answers, ignored."""
    t = Telnet(server=True, comport=True)
    events = feed_all(t, chunks)
    return (
        data_of(events),
        [e for e in events if not isinstance(e, Data)],
        t.take_output(),
        t.ignored,
    )


def cuts(data: bytes, rng: random.Random) -> list[bytes]:
    points = sorted(rng.sample(range(len(data) + 1), k=min(len(data), rng.randrange(0, 6))))
    out, start = [], 0
    for p in points:
        out.append(data[start:p])
        start = p
    out.append(data[start:])
    return out


STREAM = (
    b"hello"
    + cmd(IAC, IAC)  # a data 0xFF
    + cmd(IAC, WILL, BINARY)
    + b"\r\n\x00"  # binary: no CR/NUL translation
    + cmd(IAC, SB, COM_PORT, 1, 0, 0, IAC, IAC, 0, IAC, SE)  # SET-BAUDRATE 0x0000ff00
    + cmd(IAC, 241)  # NOP
    + b"tail"
)


class TestData:
    def test_plain_data_passes_untouched(self) -> None:
        """Bytes without IAC come out as one Data event, as they are."""
        t = Telnet(server=True)
        assert t.feed(b"abc\r\n\x00") == [Data(b"abc\r\n\x00")]
        assert t.feed(b"") == []

    def test_iac_iac_is_one_data_byte_both_ways(self) -> None:
        """IAC IAC in is one 0xFF; 0xFF out is doubled."""
        t = Telnet(server=True)
        assert t.feed(cmd(1, IAC, IAC, 2)) == [Data(b"\x01\xff\x02")]
        assert t.data(b"\x01\xff\xff") == b"\x01\xff\xff\xff\xff"
        assert escape(b"plain") == b"plain"

    def test_commands_are_taken_out_of_the_stream(self) -> None:
        """NOP, GA, AYT and negotiation never reach the data."""
        t = Telnet(server=True)
        events = t.feed(b"a" + cmd(IAC, 241) + b"b" + cmd(IAC, 249) + cmd(IAC, DO, ECHO) + b"c")
        assert data_of(events) == b"abc"
        assert t.take_output() == cmd(IAC, WONT, ECHO)

    def test_the_stream_vector_one_byte_at_a_time(self) -> None:
        """STREAM fed one byte at a time gives the same events as fed whole."""
        whole = Telnet(server=True, comport=True)
        expected = whole.feed(STREAM)
        bytewise = Telnet(server=True, comport=True)
        got = feed_all(bytewise, [bytes([b]) for b in STREAM])
        assert data_of(got) == data_of(expected) == b"hello\xff\r\n\x00tail"
        assert [e for e in got if not isinstance(e, Data)] == [
            e for e in expected if not isinstance(e, Data)
        ]
        assert ComPort(1, b"\x00\x00\xff\x00") in expected
        assert whole.take_output() == bytewise.take_output() == cmd(IAC, DO, BINARY)

    @given(st.integers(0, 2**32 - 1))
    @settings(max_examples=200)
    def test_random_cuts_change_nothing(self, seed: int) -> None:
        """Any cut of STREAM into chunks gives the same data, commands and answers."""
        assert outcome(cuts(STREAM, random.Random(seed))) == outcome([STREAM])


class TestNegotiation:
    def test_server_offers_binary_sga_and_com_port(self) -> None:
        """start(): WILL and DO for BINARY, SGA and (rfc2217) COM-PORT-OPTION."""
        t = Telnet(server=True, comport=True)
        out = t.start()
        for option in (BINARY, SGA, COM_PORT):
            assert cmd(IAC, WILL, option) in out and cmd(IAC, DO, option) in out
        plain = Telnet(server=True).start()
        assert cmd(IAC, WILL, COM_PORT) not in plain

    def test_other_options_are_refused_echo_included(self) -> None:
        """WILL/DO of an option verld does not support gets DONT/WONT."""
        t = Telnet(server=True, comport=True)
        t.feed(cmd(IAC, WILL, ECHO, IAC, DO, ECHO, IAC, DO, 24))
        assert t.take_output() == cmd(IAC, DONT, ECHO, IAC, WONT, ECHO, IAC, WONT, 24)
        assert not t.local(ECHO) and not t.remote(ECHO)

    def test_answer_to_our_offer_agrees_without_a_reply(self) -> None:
        """DO in answer to our WILL puts the option in force and is not answered again."""
        t = Telnet(server=True, comport=True)
        t.start()
        events = t.feed(cmd(IAC, DO, COM_PORT, IAC, WILL, COM_PORT))
        assert events == [Agreed(COM_PORT, True), Agreed(COM_PORT, False)]
        assert t.take_output() == b""
        assert t.local(COM_PORT) and t.remote(COM_PORT)

    def test_no_loops_an_option_in_force_is_not_answered_again(self) -> None:
        """A repeated WILL/DO for an option already on gets no answer (RFC 1143)."""
        t = Telnet(server=True)
        t.feed(cmd(IAC, WILL, BINARY))
        assert t.take_output() == cmd(IAC, DO, BINARY)
        assert t.feed(cmd(IAC, WILL, BINARY) * 5) == []
        assert t.take_output() == b""

    def test_switching_off_is_acknowledged_once(self) -> None:
        """WONT for an option in force is answered DONT once; a repeat is not."""
        t = Telnet(server=True)
        t.feed(cmd(IAC, WILL, SGA))
        t.take_output()
        t.feed(cmd(IAC, WONT, SGA, IAC, WONT, SGA))
        assert t.take_output() == cmd(IAC, DONT, SGA)
        assert not t.remote(SGA)

    def test_two_ends_settle_without_looping(self) -> None:
        """A server and a client wired together agree BINARY, SGA and COM-PORT, then go quiet."""
        server, client = Telnet(server=True, comport=True), Telnet(server=False, comport=True)
        to_client, to_server = server.start(), client.start()
        for _ in range(10):
            client.feed(to_client)
            server.feed(to_server)
            to_client, to_server = server.take_output(), client.take_output()
            if not to_client and not to_server:
                break
        assert not to_client and not to_server
        for option in (BINARY, SGA, COM_PORT):
            assert server.local(option) and server.remote(option)
            assert client.local(option) and client.remote(option)


class TestComPort:
    def test_subnegotiation_round_trip_with_iac_in_the_value(self) -> None:
        """comport() frames a command (0xFF escaped); the other side gets it back whole."""
        client, server = Telnet(server=False, comport=True), Telnet(server=True, comport=True)
        wire = client.comport(rfc2217.Cmd.SET_BAUDRATE, rfc2217.pack_value(1, 0x0001C2FF))
        assert wire == cmd(IAC, SB, COM_PORT, 1, 0, 1, 0xC2, IAC, IAC, IAC, SE)
        (event,) = server.feed(wire)
        assert event == ComPort(1, b"\x00\x01\xc2\xff")
        assert isinstance(event, ComPort)
        assert rfc2217.unpack_value(event.code, event.value) == 0x0001C2FF

    def test_server_answer_codes_and_values(self) -> None:
        """An answer is code + 100; baud is 4 bytes, other values one, signature text."""
        assert rfc2217.pack_value(101, 9600) == (9600).to_bytes(4, "big")
        assert rfc2217.pack_value(105, rfc2217.CONTROL["dtr_on"]) == b"\x08"
        assert rfc2217.unpack_value(100, b"verld") == b"verld"
        assert rfc2217.unpack_value(101, b"\x00\x01") is None
        assert rfc2217.unpack_value(112, b"\x03") == 3

    def test_without_com_port_the_subnegotiation_is_ignored(self) -> None:
        """On plain telnet a COM-PORT subnegotiation is dropped and counted."""
        t = Telnet(server=True)
        assert t.feed(cmd(IAC, SB, COM_PORT, 1, 0, 0, 37, 128, IAC, SE) + b"x") == [Data(b"x")]
        assert t.ignored == 1

    def test_over_long_subnegotiation_is_discarded_and_counted(self) -> None:
        """A subnegotiation longer than MAX_SUBNEG bytes is dropped; data after it flows."""
        t = Telnet(server=True, comport=True)
        long = cmd(IAC, SB, COM_PORT, 0) + b"s" * (MAX_SUBNEG + 10) + cmd(IAC, SE)
        assert t.feed(long + b"after") == [Data(b"after")]
        assert t.ignored == 1
        ok = cmd(IAC, SB, COM_PORT, 0) + b"s" * (MAX_SUBNEG - 1) + cmd(IAC, SE)
        assert t.feed(ok) == [ComPort(0, b"s" * (MAX_SUBNEG - 1))]


class TestGarbage:
    def test_malformed_commands_are_counted_not_fatal(self) -> None:
        """IAC + a non-command byte, a stray SE, IAC + junk inside SB: dropped, counted."""
        t = Telnet(server=True, comport=True)
        events = t.feed(
            b"a" + cmd(IAC, 7) + cmd(IAC, SE) + cmd(IAC, SB, COM_PORT, 1, IAC, 9) + b"b"
        )
        assert data_of(events) == b"ab"
        assert t.ignored == 3

    @given(st.binary(max_size=400), st.integers(0, 2**32 - 1))
    @settings(max_examples=300)
    def test_any_bytes_in_any_cuts_never_raise(self, garbage: bytes, seed: int) -> None:
        """Any bytes cut anywhere: no exception, no more data than input, the same as fed whole."""
        whole = outcome([garbage])
        assert outcome(cuts(garbage, random.Random(seed))) == whole
        assert len(whole[0]) <= len(garbage)

    @given(st.binary(max_size=200))
    @settings(max_examples=300)
    def test_escaped_data_comes_back_unchanged(self, payload: bytes) -> None:
        """Whatever data one side sends (escaped) the other side reads back exactly."""
        t = Telnet(server=False, comport=True)
        assert data_of(t.feed(escape(payload))) == payload
