"""When each entity is polled: periodic due times at spread phases, sans-I/O.

Strategy: every polled entity has a period (`every`). Entities with the same period
start at phases spread evenly over it (k of them: 0, p/k, 2p/k, ...), so a hundred
entities at 1 s make a poll every 10 ms, not a hundred at once each second. Due times
stay on that grid (fixed rate, no drift); when the caller comes back late by more than a
period (a busy loop, a suspended machine), the slots it missed are skipped, not made
up in a burst. Time is passed in (`now`), as everywhere the bridge decides by time; the
caller owns the timer and asks `due(now)` what to start, and whether a poll still
running is doubled is the caller's rule (it is not: see `entities`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

__all__ = ["Schedule"]


class Schedule:
    """Due times of jobs 0..n-1 with periods `periods`, from `start`."""

    def __init__(self, periods: Sequence[float], start: float) -> None:
        self.periods = tuple(periods)
        groups: dict[float, list[int]] = {}
        for job, period in enumerate(self.periods):
            groups.setdefault(period, []).append(job)
        self._heap: list[tuple[float, int]] = []
        for period, jobs in groups.items():
            for k, job in enumerate(jobs):
                self._heap.append((start + k * period / len(jobs), job))
        heapq.heapify(self._heap)

    @property
    def next_at(self) -> float | None:
        """When the next job is due (None: there are none)."""
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[int]:
        """The jobs due at `now`, each once, in due order; each is then due a period
        later (or at its first slot after `now`, when it fell behind)."""
        heap, out = self._heap, []
        while heap and heap[0][0] <= now:
            at, job = heap[0]
            period = self.periods[job]
            after = at + period
            if after <= now:
                after = at + period * (math.floor((now - at) / period) + 1)
                while after <= now:  # (rounding)
                    after += period
            heapq.heapreplace(heap, (after, job))
            out.append(job)
        return out
