"""What the session counts, and those figures' part of the `status` reply.

Plain attributes on slotted objects: an increment on the per-call path costs one
attribute store. The session owns one `Stats`; fronts read it through `status`.
"""

from __future__ import annotations

from typing import Any

from verld.links.link import Link, LinkState
from verld.metrics import Histogram

#: the `status` counters that the session itself increments, by name
COUNTERS = (
    "calls",
    "calls_failed",
    "calls_ok",
    "events",
    "frames_rx",
    "frames_tx",
    "pings",
    "retries",
    "stale",
    "timeouts",
)


class Counters:
    """The `status` counters that the session itself increments."""

    __slots__ = COUNTERS

    def __init__(self) -> None:
        self.calls = self.calls_ok = self.calls_failed = 0
        self.timeouts = self.retries = self.stale = self.pings = 0
        self.frames_tx = self.frames_rx = self.events = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTERS}


class Stats:
    """Everything counted about calls and the link, across link sessions."""

    __slots__ = ("bytes_prev", "counters", "desyncs", "early_events", "errors", "latency")

    def __init__(self) -> None:
        self.counters = Counters()
        #: failed calls by error code
        self.errors: dict[str, int] = {}
        #: link sessions ended because the stream was out of step (length codec)
        self.desyncs = 0
        #: device events dropped because they came before the handshake reply
        self.early_events = 0
        self.latency = Histogram()
        #: bytes (tx, rx) of the transports already closed
        self.bytes_prev = (0, 0)

    def finished(self, error: str | None, elapsed: float) -> None:
        """A client call ended (pings are not counted as calls)."""
        c = self.counters
        c.calls += 1
        if error is None:
            c.calls_ok += 1
            self.latency.observe(elapsed)
        else:
            c.calls_failed += 1
            self.errors[error] = self.errors.get(error, 0) + 1

    def succeeded(self, elapsed: list[float]) -> None:
        """Client calls that ended with success, with their elapsed seconds (`finished`
        for each, at once: the reply path counts a batch of replies together)."""
        c = self.counters
        c.calls += len(elapsed)
        c.calls_ok += len(elapsed)
        self.latency.observe_all(elapsed)

    def closed_transport(self, bytes_tx: int, bytes_rx: int) -> None:
        tx, rx = self.bytes_prev
        self.bytes_prev = (tx + bytes_tx, rx + bytes_rx)

    def status(
        self,
        link_part: dict[str, Any],
        link: Link,
        *,
        now: float,
        live: tuple[int, int],
        bad_frames: int,
        queue: int,
        inflight: int,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        """The session's part of the `status` reply: `link_part` (`Link.status`), the
        counters (`live`: the open transport's bytes), latency, queue and in flight,
        then `extra` (the line discipline's: Modbus units)."""
        c: dict[str, Any] = self.counters.as_dict()
        c["bad_frames"] = bad_frames
        c["reconnects"] = link.reconnects
        tx, rx = self.bytes_prev
        c["bytes_tx"], c["bytes_rx"] = tx + live[0], rx + live[1]
        up = link.state is LinkState.UP
        return {  # the order the reply has always had
            "link": link_part,
            "counters": c,
            "latency_ms": self.latency.summary_ms(),
            "queue": queue,
            "inflight": inflight,
            "errors": dict(self.errors),
            "desyncs": self.desyncs,
            "early_events": self.early_events,
            "link_up_seconds": round(now - link.since, 3) if up else 0.0,
            **extra,
        }
