"""One timer that is set, moved earlier, and cancelled: the session's three timers.

The deadline sweep, the heartbeat and the quiet guard each need "call me at T",
re-armed often and cancelled on a loss. An `Alarm` keeps the one handle for that,
on any `Clock` (the event loop, or a test's manual clock), so no caller juggles
handles, and `at` always says when it will ring (infinity: not set).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time and timers: an asyncio event loop is one."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Timer: ...

    def call_soon(self, callback: Callable[..., object], *args: Any) -> Timer: ...


class Alarm:
    """Rings `callback` once at `at`, unless moved or cancelled first."""

    __slots__ = ("_callback", "_clock", "_handle", "at")

    def __init__(self, clock: Clock, callback: Callable[[], None]) -> None:
        self._clock = clock
        self._callback = callback
        self._handle: Timer | None = None
        self.at = math.inf

    def set(self, when: float) -> None:
        """Ring at `when` (instead of whenever it was set for)."""
        if self._handle is not None:
            self._handle.cancel()
        self.at = when
        self._handle = self._clock.call_at(when, self._ring)

    def set_earlier(self, when: float) -> None:
        """Ring at `when` if that is before it rings now."""
        if when < self.at:
            self.set(when)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self.at = None, math.inf

    def _ring(self) -> None:
        self._handle, self.at = None, math.inf
        self._callback()
