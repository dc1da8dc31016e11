"""The alarm on a manual clock: rings once, moves, moves only earlier, cancels, re-arms."""

from __future__ import annotations

import asyncio
import math

import pytest

from verld.alarm import Alarm, Clock
from verld.testing import ManualClock


class Rings:
    """An alarm's callback that notes the clock's time at each ring."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.times: list[float] = []

    def __call__(self) -> None:
        self.times.append(self.clock.time())


def alarm() -> tuple[ManualClock, Alarm, Rings]:
    clock = ManualClock()
    rings = Rings(clock)
    return clock, Alarm(clock, rings), rings


class TestManualClock:
    def test_runs_due_timers_in_time_order(self) -> None:
        """The test clock itself: timers run by when they are due, not when they were set."""
        clock = ManualClock()
        seen: list[tuple[str, float]] = []
        clock.call_at(3.0, lambda: seen.append(("late", clock.time())))
        clock.call_at(1.0, lambda: seen.append(("early", clock.time())))
        clock.call_soon(lambda: seen.append(("soon", clock.time())))
        clock.advance(2.0)
        assert seen == [("soon", 0.0), ("early", 1.0)]
        clock.advance(1.0)
        assert seen[-1] == ("late", 3.0)

    def test_is_a_clock(self) -> None:
        """ManualClock satisfies the Clock protocol (checked by mypy here)."""
        clock: Clock = ManualClock(5.0)
        assert clock.time() == 5.0


class TestRing:
    def test_rings_once_at_the_set_time(self) -> None:
        """A set alarm rings at its time, once, and not before."""
        clock, a, rings = alarm()
        a.set(5.0)
        assert a.at == 5.0
        clock.advance(4.5)
        assert rings.times == []
        clock.advance(0.5)
        assert rings.times == [5.0]
        clock.advance(100.0)
        assert rings.times == [5.0]

    def test_at_is_infinity_after_ringing(self) -> None:
        """Once it rang, the alarm is not set: `at` is inf and nothing is pending."""
        clock, a, _ = alarm()
        a.set(1.0)
        clock.advance(1.0)
        assert a.at == math.inf
        assert clock.pending() == 0

    def test_a_new_alarm_is_not_set(self) -> None:
        """A fresh alarm has `at` inf and has set no timer."""
        clock, a, _ = alarm()
        assert a.at == math.inf
        assert clock.pending() == 0

    def test_a_time_already_past_rings_at_the_next_advance(self) -> None:
        """Set for a time before now, the alarm rings as soon as the clock runs timers."""
        clock, a, rings = alarm()
        clock.advance(10.0)
        a.set(3.0)
        clock.advance(0.0)
        assert rings.times == [10.0]


class TestMove:
    @pytest.mark.parametrize(("first", "second"), [(5.0, 8.0), (5.0, 2.0), (5.0, 5.0)])
    def test_set_moves_it(self, first: float, second: float) -> None:
        """A second set replaces the first time, later or earlier: it rings once, then."""
        clock, a, rings = alarm()
        a.set(first)
        a.set(second)
        assert a.at == second
        assert clock.pending() == 1
        clock.advance(20.0)
        assert rings.times == [second]

    @pytest.mark.parametrize(
        ("first", "earlier", "rings_at"),
        [
            (5.0, 3.0, 3.0),  # earlier: moved
            (5.0, 7.0, 5.0),  # later: ignored
            (5.0, 5.0, 5.0),  # the same: unchanged
            (math.inf, 4.0, 4.0),  # not set: set
        ],
    )
    def test_set_earlier_only_moves_it_earlier(
        self, first: float, earlier: float, rings_at: float
    ) -> None:
        """set_earlier moves the alarm only to a time before the one it is set for."""
        clock, a, rings = alarm()
        if first != math.inf:
            a.set(first)
        a.set_earlier(earlier)
        assert a.at == rings_at
        assert clock.pending() == 1
        clock.advance(20.0)
        assert rings.times == [rings_at]

    def test_many_moves_keep_one_timer(self) -> None:
        """However often it is moved, the alarm holds one live timer on the clock."""
        clock, a, rings = alarm()
        for i in range(50):
            a.set(10.0 + i % 7)
            a.set_earlier(9.0 + i % 5)
        assert clock.pending() == 1
        clock.advance(30.0)
        assert len(rings.times) == 1


class TestCancel:
    def test_cancel_stops_it(self) -> None:
        """A cancelled alarm does not ring; `at` is inf and its timer is cancelled."""
        clock, a, rings = alarm()
        a.set(5.0)
        a.cancel()
        assert a.at == math.inf
        assert clock.pending() == 0
        clock.advance(10.0)
        assert rings.times == []

    def test_cancel_of_an_unset_alarm_is_harmless(self) -> None:
        """Cancelling twice, or before any set, does nothing."""
        clock, a, rings = alarm()
        a.cancel()
        a.set(1.0)
        a.cancel()
        a.cancel()
        clock.advance(2.0)
        assert (rings.times, a.at) == ([], math.inf)

    def test_set_after_cancel_rings(self) -> None:
        """A cancelled alarm can be set again and rings then."""
        clock, a, rings = alarm()
        a.set(1.0)
        a.cancel()
        a.set(2.0)
        clock.advance(3.0)
        assert rings.times == [2.0]


class TestRearmFromCallback:
    def test_set_from_inside_the_callback(self) -> None:
        """A callback that sets its own alarm again makes it ring again then (a periodic timer)."""
        clock = ManualClock()
        times: list[float] = []
        at_in_callback: list[float] = []

        def ring() -> None:
            times.append(clock.time())
            at_in_callback.append(a.at)
            if len(times) < 3:
                a.set(clock.time() + 1.0)

        a = Alarm(clock, ring)
        a.set(1.0)
        clock.advance(10.0)
        assert times == [1.0, 2.0, 3.0]
        assert at_in_callback == [math.inf] * 3  # not set while it rings
        assert a.at == math.inf and clock.pending() == 0

    def test_set_earlier_from_inside_the_callback(self) -> None:
        """Inside the callback the alarm is not set, so set_earlier arms it at any time."""
        clock = ManualClock()
        times: list[float] = []

        def ring() -> None:
            times.append(clock.time())
            if len(times) == 1:
                a.set_earlier(clock.time() + 50.0)

        a = Alarm(clock, ring)
        a.set(1.0)
        clock.advance(5.0)
        assert a.at == 51.0
        clock.advance(50.0)
        assert times == [1.0, 51.0]


class TestEventLoop:
    @pytest.mark.timeout(10)
    def test_rings_on_an_asyncio_loop(self) -> None:
        """An asyncio event loop is a Clock: the alarm rings on it, once, at its time."""

        async def main() -> list[float]:
            loop = asyncio.get_running_loop()
            rang = asyncio.Event()
            times: list[float] = []

            def ring() -> None:
                times.append(loop.time())
                rang.set()

            a = Alarm(loop, ring)
            when = loop.time() + 0.05
            a.set(when + 10.0)
            a.set_earlier(when)
            await asyncio.wait_for(rang.wait(), 5.0)
            await asyncio.sleep(0.05)
            assert a.at == math.inf
            return [t - when for t in times]

        late = asyncio.run(main())
        assert len(late) == 1 and late[0] > -0.001  # (the loop may run a timer a hair early)
