"""Telling an outage once: which link transitions are announced, and at what level.

Strategy: while a device is unplugged verld tries to reopen it every few seconds
for as long as it takes. Announcing every attempt (a `connecting` and a `down`
event, a WARNING, two retained MQTT publishes) floods logs and subscribers with
nothing new. So an outage is told once: the loss itself, the first attempt's
`connecting`, and again only when the kind of reason changes (a missing device
that comes back busy, say); in between the WARNING comes at most once a `REMIND`
interval, with the attempt count, and each attempt is logged at DEBUG. `up` is
always told. Sans-I/O: time comes in as `now`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import structlog

from verld.links.link import LinkState, Transition

log = structlog.get_logger("verld.session.session")

#: seconds between WARNINGs while an outage goes on with the same reason
REMIND = 60.0

_NUMBERS = re.compile(r"\d+(\.\d+)?")


def reason_kind(reason: str) -> str:
    """A reason without its figures: "locked by pid 812" and "pid 813" are one kind."""
    return _NUMBERS.sub("#", reason)


@dataclass(frozen=True, slots=True)
class Told:
    """What to do with one transition."""

    event: bool  #: hand it to the link listeners (events, MQTT, STATUS=)
    level: str  #: log level of its line: "info", "warning" or "debug"
    remind: bool = False  #: the line is the once-a-minute reminder (with the attempt count)


class Outage:
    """Decides, transition by transition, what is worth telling."""

    def __init__(self) -> None:
        self._kind: str | None = None  #: the kind of reason told last (None: link up)
        self._connecting_told = False  #: `connecting` told for the current kind
        self._warned = 0.0  #: when the last WARNING of this outage was logged

    def tell(self, t: Transition, now: float) -> Told:
        """Whether (and how) to announce `t`, which just happened at `now`."""
        if t.state is LinkState.CONNECTING:
            if self._connecting_told:
                return Told(event=False, level="debug")
            self._connecting_told = True
            return Told(event=True, level="debug")
        if t.state is not LinkState.DOWN:
            self._kind, self._connecting_told = None, False  # up, inhibited, closed
            return Told(event=True, level="info" if t.state is LinkState.UP else "debug")
        kind = reason_kind(t.reason)
        if kind != self._kind:  # the loss itself, or a new kind of reason
            self._kind, self._connecting_told, self._warned = kind, False, now
            return Told(event=True, level="warning")
        if now - self._warned >= REMIND:
            self._warned = now
            return Told(event=False, level="warning", remind=True)
        return Told(event=False, level="debug")


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
        line(
            event,
            link_state="down",
            port=port,
            reason=t.reason,
            generation=t.generation,
            attempts=attempts,
            retry_in=round(retry_in, 3),
        )
    else:
        log.debug(
            "link_" + t.state.value, link_state=t.state.value, port=port, generation=t.generation
        )
