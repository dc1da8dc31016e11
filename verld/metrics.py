"""Counters and a fixed-bucket latency histogram, cheap on the hot path.

Recording a latency is one bisect into a fixed tuple of bucket bounds and two
additions: no allocation per call. Percentiles are read from the buckets (upper
bound of the bucket that holds the rank), which is what Prometheus does too.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

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


_COUNTERS = (
    ("timeouts", "Call tries and pings that got no answer in time."),
    ("retries", "Requests sent again after a timeout."),
    ("stale", "Replies that matched no outstanding request (late), dropped."),
    ("bad_frames", "Chunks from the device dropped as noise."),
    ("reconnects", "Link sessions after the first."),
    ("pings", "Handshake and heartbeat pings sent."),
    ("events", "Device events received."),
)


def _metric(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def prometheus_text(st: dict[str, Any], latency: Histogram) -> str:
    """Prometheus text exposition (format 0.0.4) of a `status` reply and the histogram."""
    c = st["counters"]
    lines: list[str] = []
    _metric(lines, "verld_calls_total", "counter", "Calls answered, by outcome.")
    lines.append(f'verld_calls_total{{outcome="ok"}} {c["calls_ok"]}')
    lines.append(f'verld_calls_total{{outcome="error"}} {c["calls_failed"]}')
    _metric(lines, "verld_call_errors_total", "counter", "Failed calls by error code.")
    for code, n in sorted(st.get("errors", {}).items()):
        lines.append(f'verld_call_errors_total{{code="{code}"}} {n}')
    for key, help_text in _COUNTERS:
        _metric(lines, f"verld_{key}_total", "counter", help_text)
        lines.append(f"verld_{key}_total {c[key]}")
    _metric(
        lines, "verld_desyncs_total", "counter", "Reconnects because the stream was out of step."
    )
    lines.append(f"verld_desyncs_total {st.get('desyncs', 0)}")
    for key, what in (("bytes", "Bytes"), ("frames", "Frames")):
        _metric(lines, f"verld_{key}_total", "counter", f"{what} on the link, by direction.")
        lines.append(f'verld_{key}_total{{dir="tx"}} {c[key + "_tx"]}')
        lines.append(f'verld_{key}_total{{dir="rx"}} {c[key + "_rx"]}')
    link = st["link"]
    gauges = (
        ("verld_link_up", "1 while the link is up.", int(link["state"] == "up")),
        ("verld_link_generation", "Link sessions so far.", link["generation"]),
        ("verld_link_up_seconds", "Seconds the current link session has been up.",
         st.get("link_up_seconds", 0.0)),
        ("verld_uptime_seconds", "Seconds since verld started.", st.get("uptime", 0.0)),
        ("verld_clients", "Clients connected.", st.get("clients", 0)),
        ("verld_queue_depth", "Calls waiting for the link.", st["queue"]),
        ("verld_inflight", "Requests on the link awaiting a reply.", st.get("inflight", 0)),
    )  # fmt: skip
    for name, help_text, value in gauges:
        _metric(lines, name, "gauge", help_text)
        lines.append(f"{name} {value}")
    _metric(lines, "verld_events_dropped_total", "counter", "Events dropped for slow subscribers.")
    lines.append(f"verld_events_dropped_total {st.get('events_dropped', 0)}")
    _metric(lines, "verld_call_latency_seconds", "histogram", "Call latency, receipt to reply.")
    lines.extend(latency.prometheus("verld_call_latency_seconds"))
    return "\n".join(lines) + "\n"
