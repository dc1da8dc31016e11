"""Time for tests: a manual clock, and an event loop on virtual time.

- `ManualClock`: a `verld.alarm.Clock` whose time moves only by `advance`; the
  session and supervisor steps that need no waiting run on it with no loop at all.
- `VirtualClockLoop`: a real asyncio loop whose clock jumps to the next timer
  whenever nothing is ready, for what must await (the supervisor's `run`): a
  minute of link time takes milliseconds, and timings are exact.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
from collections.abc import Callable, Coroutine
from typing import Any


class _Handle:
    __slots__ = ("args", "callback", "cancelled")

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.callback, self.args, self.cancelled = callback, args, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Time that moves only by `advance`; timers ring in time order (then FIFO)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self._heap: list[tuple[float, int, _Handle]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> _Handle:
        handle = _Handle(callback, args)
        heapq.heappush(self._heap, (when, next(self._order), handle))
        return handle

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> _Handle:
        return self.call_at(self.now + delay, callback, *args)

    def call_soon(self, callback: Callable[..., object], *args: Any) -> _Handle:
        return self.call_at(self.now, callback, *args)

    def advance(self, seconds: float = 0.0) -> None:
        """Move time forward by `seconds`, ringing every timer due on the way."""
        end = self.now + seconds
        while self._heap and self._heap[0][0] <= end:
            when, _, handle = heapq.heappop(self._heap)
            self.now = max(self.now, when)
            if not handle.cancelled:
                handle.callback(*handle.args)
        self.now = end

    def pending(self) -> int:
        """Timers set and not cancelled."""
        return sum(1 for _, _, h in self._heap if not h.cancelled)


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; when nothing is ready, moves the loop's clock forward."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._vloop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            self._vloop.now += timeout
        elif not ready and timeout is None:
            raise RuntimeError("virtual loop: nothing scheduled, the test would wait forever")
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose time advances only when every task waits for a timer."""

    def __init__(self) -> None:
        self.now = 1000.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run_virtual(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `main()` to the end on a `VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        runner.run(main())
