"""Counters and a fixed-bucket latency histogram, cheap on the hot path.

Recording a latency is one bisect into a fixed tuple of bucket bounds and two
additions: no allocation per call. Percentiles are read from the buckets (upper
bound of the bucket that holds the rank), which is what Prometheus does too.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

# Upper bounds in seconds: 25 µs .. 60 s, roughly 1-2.5-5 per decade.
BOUNDS: tuple[float, ...] = (
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class Histogram:
    """Latency histogram in seconds with exact max and sum."""

    __slots__ = ("counts", "max", "sum", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS) + 1)
        self.total = 0
        self.sum = 0.0
        self.max = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BOUNDS, seconds)] += 1
        self.total += 1
        self.sum += seconds
        self.max = max(self.max, seconds)

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding the q-quantile (the max for the last one)."""
        if not self.total:
            return 0.0
        rank = q * self.total
        seen = 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= rank and n:
                return min(BOUNDS[i], self.max) if i < len(BOUNDS) else self.max
        return self.max

    def summary_ms(self) -> dict[str, float]:
        """p50/p90/p99/max in milliseconds, for `status`."""
        return {
            "p50": round(self.quantile(0.5) * 1000, 3),
            "p90": round(self.quantile(0.9) * 1000, 3),
            "p99": round(self.quantile(0.99) * 1000, 3),
            "max": round(self.max * 1000, 3),
        }

    def prometheus(self, name: str) -> Iterable[str]:
        """Exposition lines (`_bucket`, `_sum`, `_count`) for this histogram."""
        seen = 0
        for bound, n in zip(BOUNDS, self.counts, strict=False):
            seen += n
            yield f'{name}_bucket{{le="{bound:g}"}} {seen}'
        yield f'{name}_bucket{{le="+Inf"}} {self.total}'
        yield f"{name}_sum {self.sum:.6f}"
        yield f"{name}_count {self.total}"
