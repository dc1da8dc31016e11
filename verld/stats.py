"""What the session counts, and the session's part of the `status` reply.

Plain attributes on slotted objects: an increment on the per-call path costs one
attribute store. The session owns one `Stats`; fronts read it through `status`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import structlog

from verld.link import Link, LinkState, Transition

if TYPE_CHECKING:
    from verld.session import Session
from verld.metrics import Histogram

log = structlog.get_logger("verld.session")


class Counters:
    """The `status` counters that the session itself increments."""

    __slots__ = (
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

    def __init__(self) -> None:
        self.calls = self.calls_ok = self.calls_failed = 0
        self.timeouts = self.retries = self.stale = self.pings = 0
        self.frames_tx = self.frames_rx = self.events = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


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

    def closed_transport(self, bytes_tx: int, bytes_rx: int) -> None:
        tx, rx = self.bytes_prev
        self.bytes_prev = (tx + bytes_tx, rx + bytes_rx)

    def status(
        self, link: Link, *, now: float, live: tuple[int, int], bad_frames: int
    ) -> dict[str, Any]:
        """The counters, latency and link figures of the `status` reply."""
        c: dict[str, Any] = self.counters.as_dict()
        c["bad_frames"] = bad_frames
        c["reconnects"] = link.reconnects
        tx, rx = self.bytes_prev
        c["bytes_tx"], c["bytes_rx"] = tx + live[0], rx + live[1]
        up = link.state is LinkState.UP
        return {
            "counters": c,
            "latency_ms": self.latency.summary_ms(),
            "errors": dict(self.errors),
            "desyncs": self.desyncs,
            "early_events": self.early_events,
            "link_up_seconds": round(now - link.since, 3) if up else 0.0,
        }


def link_status(link: Link, port: str, codec: str, now: float, started: float) -> Any:
    """The `status.link` object; `since` in wall-clock time."""
    wall = time.time() - (now - link.since) if link.since else started
    return {
        "state": link.state.value,
        "reason": link.reason,
        "generation": link.generation,
        "port": port,
        "codec": codec,
        "since": round(wall, 3),
        "attempts": link.attempts,
        "modem": None,  # (rfc2217:// links only)
    }


def log_transition(
    t: Transition,
    *,
    port: str,
    retry_in: float,
    level: str,
    attempts: int = 0,
    remind: bool = False,
) -> None:
    """Lifecycle at INFO (up) and WARNING (down, when `level` says so: an outage is told
    once, then reminded with the attempt count); the rest at DEBUG."""
    if t.state is LinkState.UP:
        log.info("link_up", link_state="up", port=port, generation=t.generation)
    elif t.state is LinkState.DOWN:
        line = log.warning if level == "warning" else log.debug
        event = "link_still_down" if remind else "link_down"
        line(event, link_state="down", port=port, reason=t.reason, generation=t.generation,
             attempts=attempts, retry_in=round(retry_in, 3))  # fmt: skip
    else:
        log.debug("link_" + t.state.value, link_state=t.state.value, port=port,
                  generation=t.generation)  # fmt: skip


def session_status(session: Session) -> dict[str, Any]:
    """The `status` reply's session part: link, counters, latency, queue."""
    now, link, t = session.clock.time(), session.link, session.attached
    live = (0, 0) if t is None else (t.bytes_tx, t.bytes_rx)
    figures = session.stats.status(link, now=now, live=live, bad_frames=session.codec.bad_frames)
    codec = session.cfg.device.codec
    return {  # the order the reply has always had
        "link": link_status(link, session.port, codec, now, session.started),
        "counters": figures.pop("counters"),
        "latency_ms": figures.pop("latency_ms"),
        "queue": len(session.queue),
        "inflight": len(session.window),
        **figures,
        **({} if session.bus is None else {"units": session.bus.status()}),
    }
