"""Fault settings and counters of the simulated device.

Both are plain mutable records shared by the sans-I/O device core (which draws
drop / corrupt / garbage / latency decisions from them) and the I/O loop (which
paces writes by `baud`, and unplugs on a timer). The control socket changes
them at run time through `Faults.set`.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Faults the control socket's `set NAME VALUE` may change, with their kind.
SETTABLE: dict[str, str] = {
    "latency": "ms",
    "jitter": "ms",
    "drop": "probability",
    "corrupt": "probability",
    "garbage": "probability",
    "baud": "baud",
}


@dataclass
class Faults:
    """What the device does wrong, on purpose."""

    latency: float = 0.0  #: ms added before every reply
    jitter: float = 0.0  #: ms, uniform extra 0..jitter on top of latency
    drop: float = 0.0  #: probability a request gets no reply
    corrupt: float = 0.0  #: probability a reply has one byte flipped
    garbage: float = 0.0  #: probability a random burst precedes a reply
    baud: int = 0  #: pace writes to baud/10 bytes per second; 0 = unpaced
    hang: bool = False  #: read requests but never answer them
    unplug_every: float = 0.0  #: seconds between automatic unplugs; 0 = never
    replug_after: float = 1.0  #: seconds an automatic unplug lasts

    def set(self, name: str, value: str) -> None:
        """Set one runtime-settable fault from its text value; ValueError if invalid."""
        parse = _PARSERS.get(SETTABLE.get(name, ""))
        if parse is None:
            raise ValueError(f"unknown fault {name!r}; settable: {', '.join(SETTABLE)}")
        try:
            setattr(self, name, parse(value))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None

    def reset(self) -> None:
        """Turn every fault off."""
        for f in dataclasses.fields(self):
            if f.name != "replug_after":
                setattr(self, f.name, f.default)

    def reply_delay(self, rng: random.Random) -> float:
        """Seconds the latency/jitter faults add to one reply."""
        extra = rng.uniform(0.0, self.jitter) if self.jitter > 0 else 0.0
        return (self.latency + extra) / 1000.0

    def as_dict(self) -> dict[str, Any]:
        """The settings as JSON-able values."""
        return dataclasses.asdict(self)


@dataclass
class Counters:
    """What the device has seen and done; monotonic, reported by `status`."""

    requests: int = 0  #: requests decoded (hung, dropped and oversize ones included)
    replies: int = 0  #: replies sent (corrupted ones included)
    events: int = 0  #: events sent
    dropped: int = 0  #: requests left unanswered, and NMEA fixes lost, by the drop fault
    ignored: int = 0  #: requests left unanswered because the device hung
    corrupted: int = 0  #: replies sent with a flipped byte
    garbage_bursts: int = 0  #: garbage bursts written (fault or `garbage N`)
    oversize: int = 0  #: requests above max_payload
    unplugs: int = 0  #: unplugs (automatic, signalled or commanded)
    overflow: int = 0  #: output bytes discarded because nobody read them (skipped NMEA fixes too)

    def as_dict(self) -> dict[str, int]:
        """The counters as a JSON-able dict."""
        return dataclasses.asdict(self)


def parse_ms(text: str) -> float:
    """A non-negative, finite number of milliseconds."""
    return _number(text, float, "milliseconds >= 0", 0.0, math.inf)


def parse_seconds(text: str) -> float:
    """A non-negative, finite number of seconds."""
    return _number(text, float, "seconds >= 0", 0.0, math.inf)


def parse_probability(text: str) -> float:
    """A probability 0..1."""
    return _number(text, float, "a probability 0..1", 0.0, 1.0)


def parse_baud(text: str) -> int:
    """A baud rate >= 0 (0 = unpaced)."""
    return int(_number(text, int, "a baud rate >= 0", 0, math.inf))


def _number(text: str, kind: type[int] | type[float], what: str, low: float, high: float) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"expected {what}, got {text!r}") from None
    if not (low <= value <= high and math.isfinite(value)):
        raise ValueError(f"expected {what}, got {text!r}")
    return value


_PARSERS: dict[str, Callable[[str], float]] = {
    "ms": parse_ms,
    "probability": parse_probability,
    "baud": parse_baud,
}
