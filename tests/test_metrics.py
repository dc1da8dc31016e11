"""The latency histogram and the Prometheus text, without any I/O."""

from __future__ import annotations

import itertools

from prometheus_client.parser import text_string_to_metric_families

from verld import metrics
from verld.metrics import BOUNDS, Histogram


class TestHistogram:
    def test_quantiles_are_ordered_and_bounded_by_max(self) -> None:
        """p50 <= p90 <= p99 <= max, and no quantile exceeds the largest sample."""
        h = Histogram()
        for i in range(1, 1001):
            h.observe(i / 1e5)  # 10 µs .. 10 ms
        qs = [h.quantile(q) for q in (0.5, 0.9, 0.99)]
        assert qs == sorted(qs)
        assert qs[-1] <= h.max == 0.01

    def test_median_lands_in_the_right_bucket(self) -> None:
        """The interpolated median of uniform samples is within one bucket of the truth."""
        h = Histogram()
        for i in range(1, 1001):
            h.observe(i / 1e5)
        assert 0.003 <= h.quantile(0.5) <= 0.007

    def test_empty_is_zero(self) -> None:
        """An empty histogram reports zeros."""
        assert Histogram().summary_ms() == {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}

    def test_bounds_are_increasing(self) -> None:
        """Bucket bounds strictly increase."""
        assert all(a < b for a, b in itertools.pairwise(BOUNDS))


def test_prometheus_text_parses() -> None:
    """The exposition parses and carries counters, gauges and the histogram."""
    h = Histogram()
    h.observe(0.0004)
    counters = dict.fromkeys(
        [
            "calls",
            "calls_ok",
            "calls_failed",
            "timeouts",
            "retries",
            "stale",
            "bad_frames",
            "reconnects",
            "pings",
            "events",
            "bytes_tx",
            "bytes_rx",
            "frames_tx",
            "frames_rx",
        ],
        1,
    )
    st = {
        "counters": counters,
        "link": {"state": "up", "generation": 2},
        "queue": 0,
        "errors": {"timeout": 3},
    }
    text = metrics.exposition(metrics.families(st, h))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["verld_link_up"].samples[0].value == 1
    errors = families["verld_call_errors"].samples
    assert errors[0].labels == {"code": "timeout"} and errors[0].value == 3
    buckets = [
        s for s in families["verld_call_latency_seconds"].samples if s.name.endswith("_count")
    ]
    assert buckets[0].value == 1
