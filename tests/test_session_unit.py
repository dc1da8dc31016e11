"""Session logic on virtual time: the shipped rig with a scripted device, no sleeps.

Strategy: `verld.testing.session` runs the real session and supervisor on a
`VirtualClockLoop` (a real asyncio loop whose clock jumps to the next timer
whenever nothing is ready), so heartbeat, timeout, backoff and wait timings are
exact and a minute of link time takes milliseconds. The supervisor's opener is a
`FakeDevice`, which answers (or not) through the session's `link_data`, as the fd
transport would. Only the session's public surface is used: `submit`, `status`
and the transport callbacks, with the supervisor's `run` and `close`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verld.links.link import LinkState, Transition
from verld.session.calls import Call, CallResult
from verld.testing.session import FakeDevice, SessionRig, run_virtual

pytestmark = pytest.mark.timeout(60)


CONFIG = """
device: {port: /dev/fake, timeout: 1.0, retry: 0, window: 8}
heartbeat: {interval: 2.0, misses: 3, timeout: 1.0}
reconnect: {initial: 0.1, max: 2.0}
"""


class Harness(SessionRig):
    """The shipped rig on a virtual-time loop, a `FakeDevice` behind the supervisor's
    opener; link transitions are kept with their times (`timed`)."""

    def __init__(self, config: str = CONFIG, port: str = "/dev/fake", **device: Any) -> None:
        self.loop = asyncio.get_running_loop()
        self.device = FakeDevice(self.loop)
        for name, value in device.items():
            setattr(self.device, name, value)
        super().__init__(
            config, clock=self.loop, port=port, rng=random.Random(1), opener=self.device.open_link
        )
        self.timed: list[tuple[float, Transition]] = []
        self.task: asyncio.Task[None] | None = None
        self.owner = object()

    def _told(self, transition: Transition) -> None:
        self.timed.append((self.loop.time(), transition))

    def start(self) -> None:
        self.task = self.loop.create_task(self.supervisor.run())

    async def stop(self) -> None:
        await self.supervisor.close(0.0)
        if self.task is not None:
            await asyncio.wait_for(self.task, 10)

    def call(self, payload: bytes, owner: object = None, **kw: Any) -> list[CallResult]:
        """Submit a call; its results (exactly one, eventually) land in the returned list."""
        return super().call(payload, self.owner if owner is None else owner, **kw)

    async def until(
        self, pred: Callable[[], bool], limit: float = 60.0, step: float = 0.01
    ) -> None:
        deadline = self.loop.time() + limit
        while not pred():
            if self.loop.time() > deadline:
                raise AssertionError(f"not true within {limit:g} virtual seconds")
            await asyncio.sleep(step)

    async def up(self, generation: int = 1) -> float:
        """Wait for the link to be up in `generation`; the time it came up."""
        await self.until(lambda: self.state_is(LinkState.UP, generation))
        return self.timed[-1][0]

    def state_is(self, state: LinkState, generation: int | None = None) -> bool:
        link = self.session.link
        return link.state is state and (generation is None or link.generation == generation)

    def states(self) -> list[str]:
        return [t.state.value for _, t in self.timed]

    def down_times(self) -> list[float]:
        return [at for at, t in self.timed if t.state is LinkState.DOWN]


def answered(results: list[CallResult]) -> Callable[[], bool]:
    """A predicate: the call whose results land in `results` has ended."""
    return lambda: bool(results)


def harness(config: str = CONFIG, port: str = "/dev/fake", **device: Any) -> Harness:
    return Harness(config, port, **device)


# --- tests ------------------------------------------------------------------------------------


class TestHeartbeat:
    def test_idle_hang_is_down_at_interval_plus_misses_times_timeout(self) -> None:
        """Idle and hung: first ping after `interval`, down after `misses` × `timeout` more."""

        async def main() -> None:
            h = harness()
            h.start()
            t_up = await h.up()
            h.device.hung = True
            await h.until(lambda: h.state_is(LinkState.DOWN))
            assert h.down_times()[-1] == pytest.approx(t_up + 2.0 + 3 * 1.0, abs=1e-6)
            pings = [t - t_up for t in h.device.pings()[1:]]  # [0] is the handshake
            assert pings == pytest.approx([2.0, 3.0, 4.0], abs=1e-6)
            await h.stop()

        run_virtual(main)

    def test_answering_device_stays_up_with_one_ping_per_interval(self) -> None:
        """A device that answers stays up for a virtual minute, pinged every `interval`."""

        async def main() -> None:
            h = harness()
            h.start()
            t_up = await h.up()
            await asyncio.sleep(60)
            assert h.state_is(LinkState.UP, 1)
            assert len(h.device.pings()) - 1 == pytest.approx(60 / 2.0, abs=1)
            assert h.device.pings()[1] - t_up == pytest.approx(2.0, abs=1e-6)
            await h.stop()

        run_virtual(main)

    def test_no_ping_while_calls_keep_the_link_busy(self) -> None:
        """Pings go out only on an idle link: back-to-back calls suppress them."""

        async def main() -> None:
            h = harness(latency=0.05)
            h.start()
            await h.up()
            end = h.loop.time() + 20
            while h.loop.time() < end:
                results = h.call(b"\x01busy")
                await h.until(answered(results))
                assert results[0].error is None
            assert len(h.device.pings()) == 1  # the handshake only
            await h.stop()

        run_virtual(main)

    def test_idle_pings_off_still_probe_after_a_timed_out_call(self) -> None:
        """With `interval: 0` a timed-out call is still probed: `misses` pings kill the link."""

        async def main() -> None:
            h = harness(CONFIG.replace("interval: 2.0", "interval: 0"))
            h.start()
            await h.up()
            h.device.hung = True
            results = h.call(b"\x01x", timeout=0.5)
            await h.until(answered(results))
            assert results[0].error == "timeout"
            await h.until(lambda: not h.state_is(LinkState.UP))
            assert "3 pings in a row" in h.session.link.reason
            await h.stop()

        run_virtual(main)

    def test_a_request_the_device_ignores_never_drops_the_link(self) -> None:
        """Calls the device never answers leave the link up: each is followed by a probe."""

        async def main() -> None:
            h = harness(ignore=b"\x09")
            h.start()
            await h.up()
            for _ in range(10):
                pings = len(h.device.pings())
                results = h.call(b"\x09set", timeout=0.5, retry=3)
                await h.until(answered(results))
                assert results[0].error == "timeout"
                await h.until(lambda n=pings: len(h.device.pings()) > n)  # type: ignore[misc]
            good = h.call(b"\x01mine")
            await h.until(answered(good))
            assert good[0].data == b"mine" and h.state_is(LinkState.UP, 1)
            assert h.states().count("down") == 0
            await h.stop()

        run_virtual(main)

    def test_a_device_hung_under_load_is_dead_misses_pings_after_the_last_try(self) -> None:
        """A hung device: probes follow the last try; `misses` unanswered ones take it down."""

        async def main() -> None:
            h = harness()
            h.start()
            await h.up()
            h.device.hung = True
            results = h.call(b"\x01x", timeout=0.5, retry=1)
            t0 = h.loop.time()
            await h.until(lambda: h.state_is(LinkState.DOWN))
            assert results[0].error == "timeout"
            last_try_out = t0 + 2 * 0.5
            assert h.down_times()[-1] == pytest.approx(last_try_out + 3 * 1.0, abs=1e-6)
            assert "3 pings in a row" in h.session.link.reason
            await h.stop()

        run_virtual(main)

    def test_a_reply_resets_the_miss_count(self) -> None:
        """Two timeouts, an answer, two timeouts: never three in a row, so the link stays up."""

        async def main() -> None:
            h = harness(CONFIG.replace("interval: 2.0", "interval: 0"))
            h.start()
            await h.up()
            for hung in (True, True, False, True, True):
                h.device.hung = hung
                results = h.call(b"\x01x", timeout=0.5)
                await h.until(answered(results))
                assert (results[0].error is None) is not hung
            assert h.state_is(LinkState.UP, 1)
            await h.stop()

        run_virtual(main)

    def test_call_queued_behind_a_timed_out_ping_is_sent(self) -> None:
        """Window 1: a call made while a ping is unanswered goes out when the ping times out."""

        async def main() -> None:
            h = harness(CONFIG.replace("window: 8", "window: 1"))
            h.start()
            t_up = await h.up()
            h.device.hung = True
            await h.until(lambda: len(h.device.pings()) == 2)  # a heartbeat ping, unanswered
            results = h.call(b"\x01queued", timeout=1.0)
            h.device.hung = False
            await asyncio.sleep(10)
            assert [r.error for r in results] == [None]
            assert h.loop.time() - t_up > 10
            await h.stop()

        run_virtual(main)


class TestLoss:
    def test_hangup_fails_every_in_flight_call_at_once(self) -> None:
        """A hang-up fails all calls on the link with link_down at that very moment."""

        async def main() -> None:
            h = harness()
            h.start()
            await h.up()
            h.device.latency = 5.0
            calls = [h.call(b"\x01" + bytes([i]), timeout=10) for i in range(5)]
            await asyncio.sleep(1)
            t_lost = h.loop.time()
            h.device.unplug()
            assert [r[0].error for r in calls] == ["link_down"] * 5
            assert all(r[0].generation == 1 for r in calls)
            assert h.down_times() == [t_lost]
            await h.stop()

        run_virtual(main)

    def test_new_calls_fail_at_once_while_down(self) -> None:
        """While the link is down a call without wait fails link_down before submit returns."""

        async def main() -> None:
            h = harness()
            h.start()
            await h.up()
            h.device.unplug()
            results = h.call(b"\x01x")
            assert [r.error for r in results] == ["link_down"]
            await h.stop()

        run_virtual(main)

    def test_backoff_doubles_to_the_cap_with_jitter(self) -> None:
        """Open attempts back off 0.1, 0.2, 0.4 ... capped at 2 s, each jittered to 75-100 %."""

        async def main() -> None:
            h = harness(plugged=False)
            h.start()
            await h.until(lambda: len(h.device.opens) >= 10, limit=120)
            gaps = [b - a for a, b in zip(h.device.opens, h.device.opens[1:], strict=False)]
            for n, gap in enumerate(gaps):
                nominal = min(0.1 * 2**n, 2.0)
                assert 0.75 * nominal - 1e-6 <= gap <= nominal + 1e-6, (n, gap)
            await h.stop()

        run_virtual(main)

    def test_backoff_resets_once_the_link_was_up(self) -> None:
        """After a link session, the first reopen attempt comes after about `initial` again."""

        async def main() -> None:
            h = harness(plugged=False)
            h.start()
            await h.until(lambda: len(h.device.opens) >= 8, limit=120)
            h.device.plugged = True
            await h.up()
            h.device.unplug()
            t_lost = h.loop.time()
            opens = len(h.device.opens)
            await h.until(lambda: len(h.device.opens) > opens)
            assert h.device.opens[opens] - t_lost <= 0.1 + 1e-6
            await h.stop()

        run_virtual(main)

    def test_replug_is_the_next_generation(self) -> None:
        """Down, connecting, up: the generation grows by one per link session."""

        async def main() -> None:
            h = harness()
            h.start()
            await h.up(1)
            h.device.unplug()
            await asyncio.sleep(5)
            h.device.plugged = True
            await h.up(2)
            states = h.states()
            assert states[:3] == ["connecting", "up", "down"]
            assert states[-1] == "up" and set(states[3:-1]) <= {"connecting", "down"}
            down = [t for _, t in h.timed if t.state is LinkState.DOWN]
            assert all(t.generation == 1 for t in down)
            results = h.call(b"\x01again")
            await h.until(answered(results))
            assert (results[0].data, results[0].generation) == (b"again", 2)
            await h.stop()

        run_virtual(main)

    def test_tcp_event_before_the_handshake_reply_is_dropped(self) -> None:
        """On tcp://, an event that arrives before the handshake reply is not delivered."""

        async def main() -> None:
            h = harness(port="tcp://127.0.0.1:9", early_event=b"old")
            h.start()
            await h.up()
            assert h.events == []
            await h.stop()

        run_virtual(main)


class TestLeaseOverQueuedCalls:
    def test_calls_queued_before_a_lease_are_busy_or_wait_their_own_timeout(self) -> None:
        """A lease fails others' queued calls busy, or lets those that wait wait their timeout."""

        async def main() -> None:
            h = harness(CONFIG.replace("window: 8", "window: 1"), latency=0.3)
            h.start()
            await h.up()
            holder, other = object(), object()
            first: list[CallResult] = []
            h.session.submit(Call(holder, b"\x01slow", first.append, timeout=1.0, retry=0))
            now: list[CallResult] = []
            patient: list[CallResult] = []
            h.session.submit(Call(other, b"\x01now", now.append, timeout=1.0, retry=0))
            h.session.submit(
                Call(other, b"\x01patient", patient.append, timeout=0.5, retry=0, wait=True)
            )
            t0 = h.loop.time()
            h.session.set_exclusive(holder)
            assert [r.error for r in now] == ["busy"]
            await h.until(answered(patient))
            assert patient[0].error == "busy"
            assert h.loop.time() - t0 == pytest.approx(0.5, abs=1e-6)
            await h.until(answered(first))
            assert first[0].data == b"slow"
            h.session.set_exclusive(None)
            await h.stop()

        run_virtual(main)


class TestWait:
    def test_waiting_call_fails_after_exactly_its_timeout(self) -> None:
        """wait: true with the link down: link_down once its timeout has passed, not before."""

        async def main() -> None:
            h = harness(plugged=False)
            h.start()
            await asyncio.sleep(1)
            t0 = h.loop.time()
            results = h.call(b"\x01w", wait=True, timeout=3.0)
            await asyncio.sleep(2.9)
            assert results == []
            await h.until(answered(results))
            assert results[0].error == "link_down"
            assert h.loop.time() - t0 == pytest.approx(3.0, abs=0.02)
            await h.stop()

        run_virtual(main)

    def test_waiting_call_goes_out_when_the_link_comes_up(self) -> None:
        """wait: true during an outage: sent and answered on the next link session."""

        async def main() -> None:
            h = harness()
            h.start()
            await h.up()
            h.device.unplug()
            results = h.call(b"\x01w", wait=True, timeout=5.0)
            await asyncio.sleep(1)
            h.device.plugged = True
            await h.until(answered(results))
            assert (results[0].error, results[0].data, results[0].generation) == (None, b"w", 2)
            await h.stop()

        run_virtual(main)


# --- every call ends exactly once, whatever the device does ---------------------------------


PROPERTY_CONFIG = CONFIG.replace("retry: 0", "retry: 2").replace("interval: 2.0", "interval: 0.5")


@st.composite
def scenarios(draw: st.DrawFn) -> list[tuple[str, float]]:
    ops = st.sampled_from(
        [
            "calls",
            "calls",
            "calls",
            "wait_calls",
            "hang",
            "unhang",
            "unplug",
            "replug",
            "noise",
            "quiet",
            "sleep",
            "sleep",
        ]
    )
    return draw(st.lists(st.tuples(ops, st.floats(0.0, 1.0)), min_size=1, max_size=25))


class TestExactlyOnce:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(scenario=scenarios(), seed=st.integers(0, 2**32 - 1))
    def test_every_call_ends_exactly_once_with_its_own_data(
        self, scenario: list[tuple[str, float]], seed: int
    ) -> None:
        """Hangs, unplugs, drops, duplicates and jitter: one result per call, with its own data."""
        calls: list[tuple[bytes, list[CallResult]]] = []

        async def main() -> None:
            h = harness(PROPERTY_CONFIG, rng=random.Random(seed))
            h.start()
            n = 0
            for op, x in scenario:
                dev = h.device
                if op in ("calls", "wait_calls"):
                    for _ in range(1 + int(x * 12)):
                        n += 1
                        tag = f"call{n}".encode()
                        wait = op == "wait_calls"
                        calls.append((tag, h.call(b"\x01" + tag, timeout=0.2 + x, wait=wait)))
                elif op == "hang":
                    dev.hung = True
                elif op == "unhang":
                    dev.hung = False
                elif op == "unplug":
                    dev.unplug()
                elif op == "replug":
                    dev.plugged = True
                elif op == "noise":
                    dev.drop, dev.duplicate, dev.jitter = x / 2, x, x * 2
                elif op == "quiet":
                    dev.drop = dev.duplicate = dev.jitter = 0.0
                await asyncio.sleep(x * 3)
            dev = h.device
            dev.hung, dev.plugged, dev.drop = False, True, 0.0
            await asyncio.sleep(30)  # longer than any call can take
            await h.stop()

        run_virtual(main)
        for tag, results in calls:
            assert len(results) == 1, (tag, results)
            if results[0].error is None:
                assert results[0].data == tag


class TestDeadlines:
    """One sweep timer serves every try on the link: each still ends at its own deadline."""

    NO_PING = CONFIG.replace("interval: 2.0", "interval: 0")

    async def _ended_at(self, h: Harness, results: list[CallResult]) -> float:
        await h.until(answered(results), step=0.001)
        return h.loop.time()

    def test_a_shorter_timeout_sent_later_ends_first(self) -> None:
        """Timeouts 3 s then (0.5 s later) 1 s on a hung device: they end at +1.5 s and +3 s."""

        async def main() -> None:
            h = harness(self.NO_PING)
            h.start()
            await h.up()
            h.device.hung = True
            t0 = h.loop.time()
            long = h.call(b"\x01a", timeout=3.0)
            await asyncio.sleep(0.5)
            short = h.call(b"\x01b", timeout=1.0)
            assert await self._ended_at(h, short) - t0 == pytest.approx(1.5, abs=0.005)
            assert long == []
            assert await self._ended_at(h, long) - t0 == pytest.approx(3.0, abs=0.005)
            assert (short[0].error, long[0].error) == ("timeout", "timeout")
            await h.stop()

        run_virtual(main)

    def test_each_retry_gets_a_fresh_deadline(self) -> None:
        """retry 2, timeout 0.5 s, no answer: three tries 0.5 s apart, timeout after 1.5 s."""

        async def main() -> None:
            h = harness(self.NO_PING.replace("misses: 3", "misses: 9"))
            h.start()
            await h.up()
            h.device.hung = True
            t0 = h.loop.time()
            results = h.call(b"\x01r", timeout=0.5, retry=2)
            assert await self._ended_at(h, results) - t0 == pytest.approx(1.5, abs=0.005)
            tries = [at - t0 for at, payload in h.device.requests if payload == b"\x01r"]
            assert tries == pytest.approx([0.0, 0.5, 1.0], abs=0.005)
            assert results[0].error == "timeout"
            await h.stop()

        run_virtual(main)

    def test_answered_calls_leave_no_timeout_behind(self) -> None:
        """A call answered at once: no timeout fires for it later, the link's counters agree."""

        async def main() -> None:
            h = harness(self.NO_PING)
            h.start()
            await h.up()
            results = h.call(b"\x01ok", timeout=0.5)
            await h.until(answered(results))
            await asyncio.sleep(2.0)
            assert len(results) == 1 and results[0].error is None
            assert h.session.counters.timeouts == 0
            assert h.state_is(LinkState.UP, 1)
            await h.stop()

        run_virtual(main)

    def test_a_retry_does_not_delay_an_earlier_deadline(self) -> None:
        """A retry with a later deadline does not delay an earlier call's timeout."""
        # B (1 s, one retry) and A (1.5 s) sent together: B's retry at +1 s goes out with a
        # deadline of +2 s, yet A still times out at +1.5 s.

        async def main() -> None:
            h = harness(self.NO_PING.replace("misses: 3", "misses: 9"))
            h.start()
            await h.up()
            h.device.hung = True
            t0 = h.loop.time()
            b = h.call(b"\x01b", timeout=1.0, retry=1)
            a = h.call(b"\x01a", timeout=1.5)
            assert await self._ended_at(h, a) - t0 == pytest.approx(1.5, abs=0.005)
            assert await self._ended_at(h, b) - t0 == pytest.approx(2.0, abs=0.005)
            await h.stop()

        run_virtual(main)
