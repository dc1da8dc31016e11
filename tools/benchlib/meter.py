"""What a load generator counts: the workload spec, the meter, the per-call payloads."""

from __future__ import annotations

import json
import random
import struct
import time
from dataclasses import asdict, dataclass
from typing import Any

_TAG = struct.Struct(">HI")  #: client number, call number: makes every payload unique
_MAX_ERRORS_SHOWN = 5


@dataclass(frozen=True)
class Spec:
    """One workload, as passed on the worker's command line (JSON)."""

    kind: str  #: pty | unix | api | serial | pyserial (a port or pty opened with pyserial)
    target: str  #: the pty path, the Unix socket path, or the port's link
    clients: int  #: connections (pty/unix: always 1)
    inflight: int  #: calls each client keeps outstanding (1 = lock-step)
    size: int  #: echoed data bytes per call
    warmup: float
    duration: float
    drain: float = 15.0  #: seconds to wait for outstanding replies after END
    max_payload: int = 4096
    seed: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Spec:
        return cls(**json.loads(text))


class Meter:
    """Counts and latencies shared by every client of one worker."""

    def __init__(self) -> None:
        self.measuring = False
        self.stopping = False
        self.latencies: list[int] = []  #: ns, calls answered inside the window
        self.calls = 0  #: calls answered correctly inside the window
        self.sent = 0
        self.answered = 0  #: all replies matched to a call, right or wrong
        self.errors = 0
        self.error_samples: list[str] = []
        self.stale = 0  #: replies matching no outstanding call
        self.t0 = self.t1 = 0

    def begin(self) -> None:
        self.latencies.clear()
        self.calls = 0
        self.measuring = True
        self.t0 = time.perf_counter_ns()

    def end(self) -> None:
        self.t1 = time.perf_counter_ns()
        self.measuring = False
        self.stopping = True

    def good(self, ns: int) -> None:
        self.answered += 1
        if self.measuring:
            self.calls += 1
            self.latencies.append(ns)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < _MAX_ERRORS_SHOWN:
            self.error_samples.append(what)

    def result(self, missing: int, extra: dict[str, Any]) -> dict[str, Any]:
        elapsed = (self.t1 - self.t0) / 1e9
        lat = sorted(self.latencies)
        return {
            "calls": self.calls,
            "seconds": round(elapsed, 4),
            "rate": round(self.calls / elapsed, 1) if elapsed > 0 else 0.0,
            "sent": self.sent,
            "answered": self.answered,
            "errors": self.errors + missing,
            "missing": missing,
            "stale": self.stale,
            "error_samples": self.error_samples,
            "latency_us": percentiles(lat),
            **extra,
        }


def percentiles(sorted_ns: list[int]) -> dict[str, float | None]:
    """p50/p90/p99/p99.9/max and mean in microseconds (nearest rank)."""
    names = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p999": 0.999}
    n = len(sorted_ns)
    if not n:
        return {**dict.fromkeys(names), "max": None, "mean": None}
    out: dict[str, float | None] = {
        name: round(sorted_ns[min(n - 1, max(0, int(q * n + 0.999999) - 1))] / 1000, 2)
        for name, q in names.items()
    }
    out["max"] = round(sorted_ns[-1] / 1000, 2)
    out["mean"] = round(sum(sorted_ns) / n / 1000, 2)
    return out


class Payloads:
    """Unique echo data per call: client number and call number, then fixed filler."""

    def __init__(self, client: int, size: int, rng: random.Random) -> None:
        self.client = client
        self.filler = rng.randbytes(max(0, size - _TAG.size))
        self.n = 0

    def next(self) -> bytes:
        self.n += 1
        return _TAG.pack(self.client, self.n & 0xFFFFFFFF) + self.filler
