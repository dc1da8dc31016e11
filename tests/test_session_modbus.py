"""The session on the Modbus codecs, with no event loop: a manual clock, a recording wire.

What the session writes is split into RTU (or MBAP) requests, answered by verld-sim's
sans-I/O `ModbusSlave` when the test says so; time moves only by `clock.advance`.
The behaviours are docs/protocol.md's (section 3.5): `bad_request` for what is not
Modbus, exceptions as `device_error`, broadcast, the 3.5-character gap, call timeouts
that do not count toward the heartbeat, offline units and round-robin by unit.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from verld.codec.base import PortRequest
from verld.codec.modbus import rtu_frame
from verld.links.link import LinkState
from verld.metrics import exposition, families
from verld.session.bus import Bus
from verld.session.calls import Call, CallResult
from verld.session.discipline import Turns
from verld.sim.modbus import ModbusSlave
from verld.testing.session import ManualClock, SessionRig

RTU = """
device: {port: /dev/fake, codec: modbus-rtu, baudrate: 9600}
heartbeat: {interval: 0}
"""
READ = bytes.fromhex("010300000002")  # unit 1: holding registers 0..1
GAP_9600 = 3.5 * 10 / 9600  # 3.5 characters of 8N1 at 9600 baud


class Rig(SessionRig):
    """The shipped rig on a Modbus config, with verld-sim's slave to answer from."""

    def __init__(self, config: str = RTU, units: tuple[int, ...] = (1, 2)) -> None:
        super().__init__(config, clock=ManualClock(100.0))
        self.slave = ModbusSlave(units)

    def connect(self, respond: Any = None) -> list[CallResult]:
        """Up: the handshake ping (if any) is answered, by its unit's exception reply
        when the slave does not serve that unit (an answer all the same)."""
        return super().connect(lambda r: self._respond(r) or (0, r.payload[:1] + b"\x83\x04"))

    def sent(self) -> list[bytes]:
        """The requests written and not answered yet: unit + PDU each."""
        return [request.payload for request in self.wire.requests]

    def answer(self, respond: Any = None, *, skip: int = 0) -> int:
        """The slave answers every request written so far (silent units stay silent)."""
        return super().answer(respond or self._respond, skip=skip)

    def _respond(self, request: PortRequest) -> tuple[int, bytes] | None:
        response = self.slave.handle(request.payload)
        return None if response is None else (0, response)


def bus_of(rig: Rig) -> Bus:
    """The session's bus of units."""
    line = rig.session.line
    assert isinstance(line, Turns)
    return line.bus


def up(config: str = RTU, units: tuple[int, ...] = (1, 2)) -> Rig:
    rig = Rig(config, units)
    rig.connect()
    return rig


class TestCalls:
    def test_a_read_goes_out_as_an_rtu_frame_and_returns_unit_and_pdu(self) -> None:
        """Call data is unit + PDU; the reply's data is the slave's unit + PDU, status 0."""
        rig = up()
        results = rig.call(READ)
        assert rig.sent() == [READ]
        rig.answer()
        assert [(r.error, r.status, r.data.hex()) for r in results] == [
            (None, 0, "0103040000" + "0001")
        ]

    def test_an_exception_is_a_device_error_with_its_code(self) -> None:
        """Out of range: exception 02 → device_error, status 2, data unit + fc|0x80 + code."""
        rig = up()
        results = rig.call(bytes.fromhex("010300c80001"))  # register 200 of 100
        rig.answer()
        (r,) = results
        assert (r.error, r.status, r.data.hex()) == ("device_error", 2, "018302")
        assert "illegal data address" in r.message

    def test_exception_code_ff_is_a_device_error_not_a_remote_failure(self) -> None:
        """On Modbus 0xFF is an exception code like any other."""
        rig = up()
        results = rig.call(READ)
        rig.wire.requests.clear()
        rig.session.link_data(rtu_frame(bytes.fromhex("0183ff")))
        assert [(r.error, r.status) for r in results] == [("device_error", 0xFF)]

    @pytest.mark.parametrize(
        "payload",
        [
            b"",
            b"\x01",
            bytes.fromhex("f80300000001"),
            bytes.fromhex("0183"),
            b"\x01\x03" + bytes(253),
        ],
        ids=["empty", "unit-only", "unit-248", "exception-fc", "pdu-254"],
    )
    def test_what_is_not_a_modbus_request_is_a_bad_request(self, payload: bytes) -> None:
        """Too short, a unit above 247 on RTU, fc 0x80+, a PDU over 253 bytes: bad_request."""
        rig = up()
        results = rig.call(payload)
        assert [r.error for r in results] == ["bad_request"] and rig.sent() == []

    def test_modbus_tcp_passes_units_above_247(self) -> None:
        """On modbus-tcp units 0..255 are all ordinary."""
        rig = up("device: {port: 'tcp://127.0.0.1:502', codec: modbus-tcp}\n", units=(255,))
        results = rig.call(bytes.fromhex("ff0300000001"))
        rig.answer()
        assert [r.error for r in results] == [None]

    def test_modbus_tcp_pipelines_with_the_seq_as_transaction_id(self) -> None:
        """Up to `window` calls go out at once, each MBAP transaction id its seq."""
        rig = up("device: {port: 'tcp://127.0.0.1:502', codec: modbus-tcp, window: 4}\n")
        results = [rig.call(READ, owner=f"c{i}") for i in range(6)]
        assert [request.tag for request in rig.wire.requests] == [0, 1, 2, 3]
        rig.answer()
        rig.answer()
        assert [r[0].error for r in results] == [None] * 6


class TestBroadcast:
    def test_a_broadcast_succeeds_after_the_turnaround_with_no_data(self) -> None:
        """Unit 0 on RTU: written, nothing read; ok with empty data after turnaround."""
        rig = up(RTU + "modbus: {turnaround: 0.2}\n")
        results = rig.call(bytes.fromhex("000600010007"))
        assert rig.sent() == [bytes.fromhex("000600010007")]
        rig.clock.advance(0.199)
        assert results == []
        rig.clock.advance(0.002)
        assert [(r.error, r.status, r.data) for r in results] == [(None, 0, b"")]

    def test_nothing_else_goes_out_during_the_turnaround(self) -> None:
        """The bus is the broadcast's until the turnaround ends."""
        rig = up()
        rig.call(bytes.fromhex("000600010007"))
        rig.call(READ, owner="other")
        assert len(rig.wire.requests) == 1
        rig.clock.advance(0.1 + GAP_9600)
        assert rig.sent()[-1] == READ

    def test_a_broadcast_is_not_retried_and_bytes_meanwhile_are_noise(self) -> None:
        """Whatever comes during the turnaround cannot be the broadcast's reply."""
        rig = up()
        results = rig.call(bytes.fromhex("000600010007"), retry=3)
        rig.session.link_data(rtu_frame(bytes.fromhex("000600010007")))
        rig.clock.advance(0.2)
        assert [r.data for r in results] == [b""]
        assert len(rig.wire.requests) == 1 and rig.session.codec.bad_frames == 1


class TestTiming:
    def test_a_request_waits_for_three_and_a_half_characters_after_a_reply(self) -> None:
        """At 9600 baud the next request goes 3.65 ms after the last reply byte."""
        rig = up()
        rig.call(READ)
        second = rig.call(READ, owner="other")
        rig.answer()
        assert rig.sent() == []  # the reply's end is too recent
        rig.clock.advance(GAP_9600 - 0.0005)
        assert rig.sent() == []
        rig.clock.advance(0.001)
        assert rig.sent() == [READ]
        rig.answer()
        assert [r.error for r in second] == [None]

    def test_above_19200_baud_the_gap_is_1_75_ms(self) -> None:
        """The fixed 1.75 ms of the Modbus serial line spec above 19200 baud."""
        rig = up(RTU.replace("9600", "115200"))
        rig.call(READ)
        rig.call(READ, owner="other")
        rig.answer()
        rig.clock.advance(0.0017)
        assert rig.sent() == []
        rig.clock.advance(0.0001)
        assert rig.sent() == [READ]

    def test_a_reply_of_known_length_survives_a_pause_in_mid_frame(self) -> None:
        """A reply of known length split by 20 ms of silence arrives whole, nothing dropped."""
        # (a USB adapter's packet timer: silence ends only frames of unknown length)
        rig = up()
        results = rig.call(READ)
        frame = rtu_frame(bytes.fromhex("0103040000" + "0001"))
        rig.session.link_data(frame[:4])
        rig.clock.advance(0.02)
        rig.session.link_data(frame[4:])
        assert [(r.error, r.data) for r in results] == [(None, frame[:-2])]
        assert rig.session.codec.bad_frames == 0

    def test_a_reply_of_unknown_length_ends_when_the_line_falls_quiet(self) -> None:
        """fc 0x2B's reply length is not in its bytes: 3.5 characters of silence end it."""
        rig = up()
        results = rig.call(bytes.fromhex("012b0e0100"))
        rig.session.link_data(rtu_frame(bytes.fromhex("012b0e0101000001000356")))
        assert results == []
        rig.clock.advance(GAP_9600 + 0.0001)
        assert [(r.error, r.data.hex()) for r in results] == [(None, "012b0e0101000001000356")]


class TestSilentUnits:
    def test_call_timeouts_do_not_make_the_link_dead(self) -> None:
        """With misses 1, ten calls to a silent unit time out and the link stays up."""
        config = RTU.replace("{interval: 0}", "{interval: 0, misses: 1}")
        rig = up(config + "modbus: {offline_after: 100}\n")
        for _ in range(10):
            results = rig.call(bytes.fromhex("090300000001"), retry=0)
            rig.clock.advance(0.5 + 0.2)
            assert [r.error for r in results] == ["timeout"]
        assert rig.session.link.state is LinkState.UP and rig.lost == 0

    def test_a_unit_goes_offline_after_three_calls_and_fails_at_once(self) -> None:
        """Three calls whose every try timed out: the fourth fails at once, unit N offline."""
        rig = up()
        for _ in range(3):
            rig.call(bytes.fromhex("090300000001"))
            rig.clock.advance(2.0)
        sent = len(rig.wire.requests)
        results = rig.call(bytes.fromhex("090300000001"))
        assert [(r.error, r.message) for r in results] == [("timeout", "unit 9 offline")]
        assert len(rig.wire.requests) == sent

    def test_after_the_backoff_one_call_probes_and_a_reply_brings_the_unit_back(self) -> None:
        """Backoff over: one call goes out (no retry); the slave answering clears offline."""
        rig = up(units=(1,))
        for _ in range(3):
            rig.call(bytes.fromhex("020300000001"))
            rig.clock.advance(2.0)
        rig.wire.requests.clear()
        rig.clock.advance(5.0)
        rig.slave = ModbusSlave((1, 2))  # unit 2 is back
        probe = rig.call(bytes.fromhex("020300000001"))
        meanwhile = rig.call(bytes.fromhex("020300000001"), owner="other")
        assert [r.message for r in meanwhile] == ["unit 2 offline"]
        rig.answer()
        assert [r.error for r in probe] == [None]
        assert bus_of(rig) is not None and not bus_of(rig).units[2].offline

    def test_a_failed_probe_backs_off_again(self) -> None:
        """A probe that times out: calls fail at once for another backoff."""
        rig = up(units=(1,))
        for _ in range(3):
            rig.call(bytes.fromhex("020300000001"))
            rig.clock.advance(2.0)
        rig.clock.advance(5.0)
        probe = rig.call(bytes.fromhex("020300000001"))
        rig.clock.advance(0.6)
        assert [r.error for r in probe] == ["timeout"]
        rig.clock.advance(4.0)
        assert [r.message for r in rig.call(bytes.fromhex("020300000001"))] == ["unit 2 offline"]

    def test_an_exception_reply_keeps_a_unit_online(self) -> None:
        """Any reply, exception included, resets the count toward offline."""
        rig = up()
        for _ in range(2):
            rig.call(bytes.fromhex("090300000001"))
            rig.clock.advance(2.0)
        rig.call(bytes.fromhex("090300000001"))
        rig.wire.requests.clear()
        rig.session.link_data(rtu_frame(bytes.fromhex("098304")))
        rig.clock.advance(0.1)
        for _ in range(2):
            rig.call(bytes.fromhex("090300000001"))
            rig.clock.advance(2.0)
        assert bus_of(rig) is not None and not bus_of(rig).units[9].offline

    def test_queued_calls_to_a_unit_that_goes_offline_fail_at_once(self) -> None:
        """The third timeout takes the unit offline: its waiting calls end then, not later."""
        rig = up()
        waiting = [
            rig.call(bytes.fromhex("090300000001"), owner=f"c{i}", retry=0) for i in range(6)
        ]
        rig.clock.advance(3 * (0.5 + 0.1) + 0.05)  # three tries, each with its guard
        assert [r[0].message if r else None for r in waiting[3:]] == ["unit 9 offline"] * 3

    def test_a_silent_unit_costs_another_unit_at_most_one_try(self) -> None:
        """One client floods a silent unit; another's call to unit 1 goes after one try."""
        rig = up(RTU + "modbus: {offline_after: 100}\n")
        for _ in range(5):
            rig.call(bytes.fromhex("090300000001"), owner="flood")
        results = rig.call(READ, owner="poller")
        rig.clock.advance(0.5 + 0.1 + GAP_9600)  # one try of unit 9, then the guard
        assert rig.sent()[-1] == READ
        rig.answer()
        assert [r.error for r in results] == [None]

    def test_a_retry_goes_to_the_back_of_its_units_turn(self) -> None:
        """Unit 9's retry waits while unit 1's queued call goes first."""
        rig = up()
        rig.call(bytes.fromhex("090300000001"), retry=1)
        rig.call(READ, owner="other")
        rig.clock.advance(0.5 + 0.1 + 0.01)
        assert rig.sent()[1:] == [READ]
        rig.answer()
        rig.clock.advance(0.01)
        assert rig.sent() == [bytes.fromhex("090300000001")]
        assert rig.session.counters.retries == 1

    def test_under_load_to_silent_units_a_heartbeat_ping_finds_a_dead_port(self) -> None:
        """Calls to silent units going out: `misses` queued pings timed out take the link down."""
        beat = "{interval: 1.0, misses: 2, timeout: 0.3, payload: '010300000001'}"
        rig = up(RTU.replace("{interval: 0}", beat) + "modbus: {offline_after: 1000}\n")
        for _ in range(40):
            rig.call(bytes.fromhex("090300000001"), retry=0)
        rig.clock.advance(8.0)
        assert rig.session.link.state is LinkState.DOWN and rig.lost == 1
        assert rig.session.counters.pings >= 2


class TestHeartbeat:
    BEAT = "{interval: 1.0, misses: 5, timeout: 0.3, payload: '010300000001'}"

    def test_one_ping_at_a_time_under_load_to_a_silent_unit(self) -> None:
        """Calls to a silent unit for seconds: one ping per interval, never two at once."""
        rig = up(RTU.replace("{interval: 0}", self.BEAT) + "modbus: {offline_after: 1000}\n")
        for _ in range(20):
            rig.call(bytes.fromhex("090300000001"), retry=0)
        sent: list[float] = []
        for _ in range(800):
            rig.clock.advance(0.01)
            pings = sum(1 for r in rig.sent() if r == bytes.fromhex("010300000001"))
            sent += [rig.clock.time()] * pings
            rig.answer()  # the pings are answered at once; unit 9 stays silent
        assert len(sent) >= 2
        assert all(b - a >= 0.9 for a, b in itertools.pairwise(sent)), sent

    def test_failing_pings_take_turns_with_calls(self) -> None:
        """Failing pings take turns: a read of a live unit is never behind a run of them."""
        # The heartbeat's unit 5 is silent and a client floods silent unit 9, so pings are due and
        # fail; a read of unit 1 each second still goes within one try of each, and its reply keeps
        # the link up.
        beat = "{interval: 0.5, misses: 3, timeout: 0.3, payload: '050300000001'}"
        rig = up(RTU.replace("{interval: 0}", beat) + "modbus: {offline_after: 1000}\n")
        s = rig.session

        def flood(_: object = None) -> None:
            s.submit(Call("flood", bytes.fromhex("090300000001"), flood, timeout=0.3, retry=0))

        flood()
        waits: list[float] = []
        for _ in range(6):
            results = rig.call(READ, owner="poller", timeout=0.3, retry=0)
            t0 = rig.clock.time()
            for _ in range(100):
                rig.clock.advance(0.01)
                rig.answer()
                if results and not waits[len(waits) :]:
                    waits.append(rig.clock.time() - t0)
                    break
            assert [r.error for r in results] == [None]
            rig.clock.advance(1.0 - waits[-1])
        assert s.counters.pings >= 2 and s.link.state is LinkState.UP
        assert max(waits) < 2 * (0.3 + 0.1) + 0.05  # a flood try and a ping try at most

    def test_a_heartbeat_reply_brings_its_unit_back(self) -> None:
        """Unit 1 drops three reads (offline), then answers the heartbeat: back online."""
        rig = up(RTU.replace("{interval: 0}", self.BEAT.replace("1.0", "10.0")))
        ping = bytes.fromhex("010300000001")
        for _ in range(3):
            rig.call(READ)
            for _ in range(30):
                rig.clock.advance(0.05)
                rig.wire.requests = [
                    r for r in rig.wire.requests if r.payload == ping
                ]  # reads dropped
        bus = bus_of(rig)
        assert bus is not None and bus.units[1].offline
        pings = rig.session.counters.pings
        for _ in range(160):
            rig.clock.advance(0.05)
            rig.answer()  # the heartbeat, answered
        assert bus.status()[0]["offline"] is False and rig.session.counters.pings > pings


class TestFigures:
    def test_status_units_counts_each_outcome(self) -> None:
        """status.units: calls, ok, exceptions, timeouts (offline ones too), offline."""
        rig = up()
        rig.call(READ)
        rig.answer()
        rig.clock.advance(0.01)
        rig.call(bytes.fromhex("010300c80001"))
        rig.answer()
        for _ in range(4):
            rig.call(bytes.fromhex("090300000001"))
            rig.clock.advance(2.0)
        units = rig.session.status(0.0)["units"]
        assert units == [
            {
                "unit": 1,
                "calls": 2,
                "ok": 1,
                "exceptions": 1,
                "timeouts": 0,
                "offline": False,
                "errors": 0,
            },
            {
                "unit": 9,
                "calls": 4,
                "ok": 0,
                "exceptions": 0,
                "timeouts": 4,
                "offline": True,
                "errors": 0,
            },
        ]

    def test_metrics_count_unit_calls_by_outcome(self) -> None:
        """verld_modbus_unit_calls_total{unit,outcome} and the offline gauge."""
        rig = up()
        rig.call(READ)
        rig.answer()
        for _ in range(4):
            rig.call(bytes.fromhex("090300000001"))
            rig.clock.advance(2.0)
        assert bus_of(rig) is not None
        st = rig.session.status(0.0)
        st.update(inhibit=None, clients=0)
        units = bus_of(rig).unit_calls()
        text = exposition(families(st, rig.session.stats.latency, {}, units))
        assert 'verld_modbus_unit_calls_total{unit="1",outcome="ok"} 1' in text
        assert 'verld_modbus_unit_calls_total{unit="9",outcome="timeout"} 3' in text
        assert 'verld_modbus_unit_calls_total{unit="9",outcome="offline"} 1' in text
        assert 'verld_modbus_unit_offline{unit="9"} 1' in text

    def test_other_codecs_have_no_units(self) -> None:
        """status.units exists only on the Modbus codecs."""
        s = SessionRig("device: {port: /dev/fake}\n").session
        assert "units" not in s.status(0.0) and not isinstance(s.line, Turns)


def test_a_waiting_call_to_an_offline_unit_waits_for_the_reopen() -> None:
    """While the link is down a `wait` call to an offline unit waits for the reopen."""
    # (the reopen may bring the unit back) instead of failing at once
    rig = up()
    for _ in range(3):
        rig.call(bytes.fromhex("090300000001"))
        rig.clock.advance(2.0)
    s = rig.session
    s.lose("test: port gone")
    results = rig.call(bytes.fromhex("090300000001"), wait=True, timeout=5.0)
    assert results == [] and len(s.queue) == 1
