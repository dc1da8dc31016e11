"""Counters and a fixed-bucket latency histogram, cheap on the hot path; the metrics
as data (`Family`), and their two forms: Prometheus text and JSON.

Recording a latency is one bisect into a fixed tuple of bucket bounds and two
additions: no allocation per call. Percentiles are interpolated inside the bucket
that holds the rank, which is what Prometheus's histogram_quantile does too.

Strategy: the metrics are built once as a list of `Family` (name, type, help, its
samples with their labels) — `families` for verld's own figures, each front's
from its part of `status` (`verld.fronts.protocol.FrontFigures.metrics`) — and
written out either as the Prometheus text exposition (`exposition`: the `metrics`
op's `text`, `metrics.listen`) or as JSON (`as_json`: the `metrics` op with
`"format": "json"`, which `verlctl top` reads its histogram from). No I/O here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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

    def family(self, name: str, help_text: str) -> Family:
        """This histogram as the family `name` (`_bucket` cumulative by `le`, `_sum`,
        `_count`)."""
        samples: list[Sample] = []
        seen = 0
        for bound, n in zip(BOUNDS, self.counts, strict=False):
            seen += n
            samples.append(Sample(f"{name}_bucket", {"le": f"{bound:g}"}, seen))
        samples.append(Sample(f"{name}_bucket", {"le": "+Inf"}, self.total))
        samples.append(Sample(f"{name}_sum", {}, round(self.sum, 6), shown=".6f"))
        samples.append(Sample(f"{name}_count", {}, self.total))
        return Family(name, "histogram", help_text, samples)


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of a family: its name (the family's, or `_bucket`/`_sum`/`_count` of a
    histogram's), labels and value."""

    name: str
    labels: Mapping[str, str]
    value: float
    #: the format spec of its value in the text (a histogram's sum: ".6f"); "": as is
    shown: str = ""

    def text(self) -> str:
        """Its line of the text exposition."""
        value = format(self.value, self.shown)
        if not self.labels:
            return f"{self.name} {value}"
        labels = ",".join(f'{k}="{label(v)}"' for k, v in self.labels.items())
        return f"{self.name}{{{labels}}} {value}"


@dataclass(slots=True)
class Family:
    """One metric: `kind` counter, gauge or histogram, and its samples in order."""

    name: str
    kind: str
    help: str
    samples: list[Sample] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        """A sample of the family itself (not a histogram's part)."""
        self.samples.append(Sample(self.name, labels, value))


def label(value: str) -> str:
    """A Prometheus label value: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(families: Iterable[Family]) -> str:
    """The Prometheus text exposition (format 0.0.4) of `families`."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        lines.extend(sample.text() for sample in family.samples)
    return "\n".join(lines) + "\n"


def as_json(families: Iterable[Family]) -> list[dict[str, Any]]:
    """`families` as JSON values (docs/protocol.md, `metrics` with `"format": "json"`):
    `{name, type, help, samples: [{name, labels, value}]}`, a histogram's `le` as in
    the text ("+Inf" the last)."""
    return [
        {
            "name": family.name,
            "type": family.kind,
            "help": family.help,
            "samples": [
                {"name": s.name, "labels": dict(s.labels), "value": s.value} for s in family.samples
            ],
        }
        for family in families
    ]


_COUNTERS = (
    ("timeouts", "Call tries and pings that got no answer in time."),
    ("retries", "Requests sent again after a timeout."),
    ("stale", "Replies that matched no outstanding request (late), dropped."),
    ("bad_frames", "Chunks from the device dropped as noise."),
    ("reconnects", "Link sessions after the first."),
    ("pings", "Handshake and heartbeat pings sent."),
    ("events", "Device events received."),
)

#: the latency histogram's family
LATENCY = "verld_call_latency_seconds"


def _modbus_units(units: dict[tuple[int, str], int], status: list[dict[str, Any]]) -> list[Family]:
    calls = Family(
        "verld_modbus_unit_calls_total",
        "counter",
        "Modbus calls by unit and outcome (ok, exception, timeout, offline, error).",
    )
    for (unit, outcome), n in units.items():
        calls.add(n, unit=str(unit), outcome=outcome)
    offline = Family(
        "verld_modbus_unit_offline",
        "gauge",
        "1 while a Modbus unit is offline (its calls fail at once).",
    )
    for row in status:
        offline.add(int(row["offline"]), unit=str(row["unit"]))
    return [calls, offline]


def families(
    st: Mapping[str, Any],
    latency: Histogram,
    fronts: Mapping[str, Mapping[str, int]] | None = None,
    units: dict[tuple[int, str], int] | None = None,
    front_families: Iterable[Family] = (),
) -> list[Family]:
    """The metrics of a `status` reply and the latency histogram, in the order of the
    text (`fronts`: each front's calls by outcome; `units`: the Modbus codecs' calls by
    (unit, outcome), None on other codecs; `front_families`: the fronts' own, before
    the histogram)."""
    c = st["counters"]
    out: list[Family] = []

    def family(name: str, kind: str, help_text: str) -> Family:
        out.append(Family(name, kind, help_text))
        return out[-1]

    calls = family("verld_calls_total", "counter", "Calls answered, by outcome.")
    calls.add(c["calls_ok"], outcome="ok")
    calls.add(c["calls_failed"], outcome="error")
    errors = family("verld_call_errors_total", "counter", "Failed calls by error code.")
    for code, n in sorted(st.get("errors", {}).items()):
        errors.add(n, code=code)
    by_front = family("verld_front_calls_total", "counter", "Calls answered, by front and outcome.")
    for front, outcomes in sorted((fronts or {}).items()):
        for outcome, n in sorted(outcomes.items()):
            by_front.add(n, front=front, outcome=outcome)
    for key, help_text in _COUNTERS:
        family(f"verld_{key}_total", "counter", help_text).add(c[key])
    family("verld_desyncs_total", "counter", "Reconnects because the stream was out of step.").add(
        st.get("desyncs", 0)
    )
    link = st["link"]
    for key, name, help_text in (
        ("late", "verld_late_lines_total", "Lines dropped as late answers (after a timeout)."),
        ("unexpected", "verld_unexpected_lines_total", "Lines dropped after a no-reply command."),
    ):
        family(name, "counter", help_text).add(link.get(key, 0))
    for key, what in (("bytes", "Bytes"), ("frames", "Frames")):
        both = family(f"verld_{key}_total", "counter", f"{what} on the link, by direction.")
        both.add(c[key + "_tx"], dir="tx")
        both.add(c[key + "_rx"], dir="rx")
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
        family(name, "gauge", help_text).add(value)
    family("verld_inhibits_total", "counter", "Times the port was let go of (inhibit).").add(
        st.get("inhibits", 0)
    )
    family("verld_events_dropped_total", "counter", "Events dropped for slow subscribers.").add(
        st.get("events_dropped", 0)
    )
    if units is not None:
        out.extend(_modbus_units(units, st.get("units") or []))
    out.extend(front_families)
    out.append(latency.family(LATENCY, "Call latency, receipt to reply."))
    return out


def buckets(sent: Iterable[Mapping[str, Any]], name: str = LATENCY) -> list[tuple[float, float]]:
    """A histogram's (upper bound, cumulative count) pairs out of `as_json`'s form."""
    for family in sent:
        if family["name"] == name:
            return [
                (float(s["labels"]["le"]), float(s["value"]))
                for s in family["samples"]
                if s["name"] == f"{name}_bucket"
            ]
    return []
