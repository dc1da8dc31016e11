"""The timekeeper alone: made from the parts it uses, no session around it.

Strategy: a `Timekeeper` on a `ManualClock` with a real link state machine, window,
queue and line discipline, and the session's actions as callbacks that keep what
they were asked to do. What the timekeeper decides shows in those calls.
"""

from __future__ import annotations

import pytest

from verld.codec.registry import spec_of
from verld.config import parse_config
from verld.errors import ErrorCode
from verld.links.link import Link
from verld.session.calls import Call, CallResult, FairQueue
from verld.session.discipline import Plain
from verld.session.stats import Counters
from verld.session.timekeeper import Timekeeper
from verld.session.window import Window
from verld.testing.clock import ManualClock

pytestmark = pytest.mark.timeout(10)

CONFIG = "device: {port: /dev/fake, timeout: 1.0, retry: 1, window: 8}\n"


class Parts:
    """A timekeeper and what it asked of the session: `finished`, `resent`, `lost`."""

    def __init__(self, config: str = CONFIG) -> None:
        self.cfg = parse_config(config)
        self.clock = ManualClock()
        codec = spec_of(self.cfg).host(self.cfg)
        self.link = Link.from_config(self.cfg)
        self.window = Window(8)
        self.queue = FairQueue(100, 100)
        self.finished: list[tuple[Call, str | None, str]] = []
        self.resent: list[Call] = []
        self.lost: list[str] = []
        self.timers = Timekeeper(
            self.cfg,
            codec,
            Plain(self.cfg, codec, self.link),
            self.queue,
            clock=self.clock,
            precise=self.clock.time,
            link=self.link,
            window=self.window,
            counters=Counters(),
            finish=self._finish,
            pump=lambda: None,
            send=lambda calls: None,
            resend=self.resent.append,
            lose=self.lost.append,
            attached=lambda: True,
        )
        self.timers.use(self.cfg, codec, self.timers.line, self.queue, ping=b"", resyncs=False)

    def _finish(
        self,
        call: Call,
        error: str | None,
        message: str,
        status: int | None = None,
        data: bytes = b"",
        text: str | None = None,
    ) -> None:
        self.finished.append((call, error, message))

    def up(self) -> None:
        now = self.clock.time()
        self.link.attempt(now)
        self.link.opened(now)


def _call(timeout: float = 1.0, retry: int = 1) -> Call:
    results: list[CallResult] = []
    return Call("me", b"\x01", results.append, timeout=timeout, retry=retry)


def test_a_waiting_call_fails_link_down_after_exactly_its_timeout() -> None:
    """A queued call that asked to wait ends `link_down` once its timeout has passed."""
    parts = Parts()
    call = _call(timeout=2.5)
    call.wait = True
    parts.queue.push(call)
    parts.timers.wait(call)
    parts.clock.advance(2.4)
    assert parts.finished == []
    parts.clock.advance(0.2)
    assert [(c, e) for c, e, _ in parts.finished] == [(call, ErrorCode.LINK_DOWN)]
    assert not call.queued


def test_a_try_that_runs_out_with_seqs_is_resent_then_fails_timeout() -> None:
    """With seqs, a try past its deadline goes out again; the last one fails `timeout`."""
    parts = Parts()
    parts.up()
    call = _call(timeout=1.0, retry=1)
    parts.timers.sweep.set(parts.window.add(call, parts.clock.time()))
    parts.clock.advance(1.0)
    assert parts.resent == [call] and parts.finished == []
    parts.timers.sweep.set(parts.window.readd(call, parts.clock.time()))
    parts.clock.advance(1.0)
    assert [(c, e) for c, e, _ in parts.finished] == [(call, ErrorCode.TIMEOUT)]
    assert parts.lost == []
