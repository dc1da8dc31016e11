"""Counters and a fixed-bucket latency histogram, cheap on the hot path.

Recording a latency is one bisect into a fixed tuple of bucket bounds and two
additions: no allocation per call. Percentiles are interpolated inside the bucket
that holds the rank, which is what Prometheus's histogram_quantile does too.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

# Upper bounds in seconds: 10 µs .. 100 s, 1-1.5-2-3-5-7 per decade.
BOUNDS: tuple[float, ...] = (
    *(round(m * 10.0**e, 9) for e in range(-5, 2) for m in (1, 1.5, 2, 3, 5, 7)),
    100.0,
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

    def observe_all(self, samples: list[float]) -> None:
        """`observe` each of `samples`."""
        counts = self.counts
        for seconds in samples:
            counts[bisect_left(BOUNDS, seconds)] += 1
        self.total += len(samples)
        self.sum += sum(samples)
        self.max = max(self.max, *samples)

    def quantile(self, q: float) -> float:
        """The q-quantile, interpolated linearly inside its bucket (as Prometheus does)."""
        if not self.total:
            return 0.0
        rank = q * self.total
        seen = 0
        for i, n in enumerate(self.counts):
            if n and seen + n >= rank:
                lo = BOUNDS[i - 1] if i else 0.0
                hi = BOUNDS[i] if i < len(BOUNDS) else self.max
                return min(lo + (hi - lo) * (rank - seen) / n, self.max)
            seen += n
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


def _modbus_units(
    lines: list[str], units: dict[tuple[int, str], int], status: list[dict[str, Any]]
) -> None:
    what = "Modbus calls by unit and outcome (ok, exception, timeout, offline, error)."
    _metric(lines, "verld_modbus_unit_calls_total", "counter", what)
    for (unit, outcome), n in units.items():
        lines.append(f'verld_modbus_unit_calls_total{{unit="{unit}",outcome="{outcome}"}} {n}')
    what = "1 while a Modbus unit is offline (its calls fail at once)."
    _metric(lines, "verld_modbus_unit_offline", "gauge", what)
    for row in status:
        lines.append(f'verld_modbus_unit_offline{{unit="{row["unit"]}"}} {int(row["offline"])}')


def _ports(lines: list[str], ports: list[dict[str, Any]]) -> None:
    """Per virtual serial port series, labelled by its link."""
    series = (
        ("verld_port_open", "gauge", "1 while a program has the virtual port open.", "open"),
        ("verld_port_calls_total", "counter", "Requests programs wrote to the port.", "calls"),
        ("verld_port_answered_total", "counter", "Port calls the device answered.", "ok"),
        (
            "verld_port_dropped_total",
            "counter",
            "Answers and events not delivered to the port (nobody there, backlog full).",
            "dropped",
        ),
        (
            "verld_port_ignored_bytes_total",
            "counter",
            "Bytes a program wrote that were ignored (read-only, out of step).",
            "ignored",
        ),
        ("verld_port_bad_frames_total", "counter", "Malformed requests dropped.", "bad_frames"),
    )
    for name, kind, help_text, key in series:
        _metric(lines, name, kind, help_text)
        for port in ports:
            lines.append(f'{name}{{link="{_label(port["link"])}"}} {int(port.get(key, 0))}')
    _metric(
        lines, "verld_port_failed_total", "counter", "Port calls that got no answer, by error code."
    )
    for port in ports:
        link = _label(port["link"])
        for code, n in sorted(port.get("failed", {}).items()):
            lines.append(f'verld_port_failed_total{{link="{link}",code="{code}"}} {n}')


def _network(lines: list[str], entries: list[dict[str, Any]]) -> None:
    """Per network port series, labelled by its name."""
    _metric(lines, "verld_network_connections", "gauge", "Connections open on the network port.")
    for e in entries:
        lines.append(f'verld_network_connections{{name="{_label(e["name"])}"}} {e["connections"]}')
    _metric(
        lines,
        "verld_network_refused_total",
        "counter",
        "Connections refused at the network port, by why.",
    )
    for e in entries:
        for why, n in sorted(e["refused"].items()):
            lines.append(
                f'verld_network_refused_total{{name="{_label(e["name"])}",why="{why}"}} {n}'
            )
    _metric(
        lines,
        "verld_network_calls_total",
        "counter",
        "Calls from the network port's connections, by outcome.",
    )
    for e in entries:
        name = _label(e["name"])
        for outcome, n in (("ok", e["ok"]), *sorted(e["failed"].items())):
            lines.append(f'verld_network_calls_total{{name="{name}",outcome="{outcome}"}} {n}')
    _metric(
        lines,
        "verld_network_bytes_total",
        "counter",
        "Bytes through the network port, by direction (in: from its connections).",
    )
    for e in entries:
        name = _label(e["name"])
        lines.append(f'verld_network_bytes_total{{name="{name}",dir="in"}} {e["bytes_in"]}')
        lines.append(f'verld_network_bytes_total{{name="{name}",dir="out"}} {e["bytes_out"]}')


def _label(value: str) -> str:
    """A Prometheus label value: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(
    st: dict[str, Any],
    latency: Histogram,
    fronts: dict[str, dict[str, int]] | None = None,
    units: dict[tuple[int, str], int] | None = None,
) -> str:
    """Prometheus text exposition (format 0.0.4) of a `status` reply and the histogram
    (`units`: the Modbus codecs' calls by (unit, outcome); None on other codecs)."""
    c = st["counters"]
    lines: list[str] = []
    _metric(lines, "verld_calls_total", "counter", "Calls answered, by outcome.")
    lines.append(f'verld_calls_total{{outcome="ok"}} {c["calls_ok"]}')
    lines.append(f'verld_calls_total{{outcome="error"}} {c["calls_failed"]}')
    _metric(lines, "verld_call_errors_total", "counter", "Failed calls by error code.")
    for code, n in sorted(st.get("errors", {}).items()):
        lines.append(f'verld_call_errors_total{{code="{code}"}} {n}')
    _metric(lines, "verld_front_calls_total", "counter", "Calls answered, by front and outcome.")
    for front, outcomes in sorted((fronts or {}).items()):
        for outcome, n in sorted(outcomes.items()):
            lines.append(f'verld_front_calls_total{{front="{front}",outcome="{outcome}"}} {n}')
    for key, help_text in _COUNTERS:
        _metric(lines, f"verld_{key}_total", "counter", help_text)
        lines.append(f"verld_{key}_total {c[key]}")
    _metric(
        lines, "verld_desyncs_total", "counter", "Reconnects because the stream was out of step."
    )
    lines.append(f"verld_desyncs_total {st.get('desyncs', 0)}")
    link = st["link"]
    for key, metric, help_text in (
        ("late", "verld_late_lines_total", "Lines dropped as late answers (after a timeout)."),
        ("unexpected", "verld_unexpected_lines_total", "Lines dropped after a no-reply command."),
    ):
        _metric(lines, metric, "counter", help_text)
        lines.append(f"{metric} {link.get(key, 0)}")
    for key, what in (("bytes", "Bytes"), ("frames", "Frames")):
        _metric(lines, f"verld_{key}_total", "counter", f"{what} on the link, by direction.")
        lines.append(f'verld_{key}_total{{dir="tx"}} {c[key + "_tx"]}')
        lines.append(f'verld_{key}_total{{dir="rx"}} {c[key + "_rx"]}')
    link = st["link"]
    gauges = (
        ("verld_link_up", "1 while the link is up.", int(link["state"] == "up")),
        ("verld_link_generation", "Link sessions so far.", link["generation"]),
        (
            "verld_link_up_seconds",
            "Seconds the current link session has been up.",
            st.get("link_up_seconds", 0.0),
        ),
        ("verld_uptime_seconds", "Seconds since verld started.", st.get("uptime", 0.0)),
        ("verld_clients", "Clients connected.", st.get("clients", 0)),
        (
            "verld_inhibited",
            "1 while the port is let go of for another program.",
            int(st.get("inhibit") is not None),
        ),
        ("verld_queue_depth", "Calls waiting for the link.", st["queue"]),
        ("verld_inflight", "Requests on the link awaiting a reply.", st.get("inflight", 0)),
    )
    for name, help_text, value in gauges:
        _metric(lines, name, "gauge", help_text)
        lines.append(f"{name} {value}")
    _metric(lines, "verld_inhibits_total", "counter", "Times the port was let go of (inhibit).")
    lines.append(f"verld_inhibits_total {st.get('inhibits', 0)}")
    _metric(lines, "verld_events_dropped_total", "counter", "Events dropped for slow subscribers.")
    lines.append(f"verld_events_dropped_total {st.get('events_dropped', 0)}")
    if units is not None:
        _modbus_units(lines, units, st.get("units") or [])
    if st.get("ports"):
        _ports(lines, st["ports"])
    if st.get("network"):
        _network(lines, st["network"])
    _metric(lines, "verld_call_latency_seconds", "histogram", "Call latency, receipt to reply.")
    lines.extend(latency.prometheus("verld_call_latency_seconds"))
    return "\n".join(lines) + "\n"
