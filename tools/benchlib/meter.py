"""What a load generator counts: the verl/API spec, the meter over [T0, T1], the payloads.

Every generator process of a workload gets one common window, T0 and T1 on
CLOCK_MONOTONIC (the same clock in every process on Linux, and `time.monotonic_ns`):
a call counts, with its latency, when its reply arrives inside the window; the calls
before T0 are the warm-up, and none starts after T1.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import struct
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

_TAG = struct.Struct(">HI")  #: client number, call number: makes every payload unique
_MAX_ERRORS_SHOWN = 5


@dataclass(frozen=True)
class Spec:
    """One generator of verl frames or verld API calls (the JSON after `--gen verl`)."""

    kind: str  #: pty | unix | tcp | api | serial | pyserial (a port or pty opened with pyserial)
    target: str  #: the pty path, the Unix socket path, HOST:PORT (tcp), or the port's link
    clients: int  #: connections (pty/unix/serial: always 1)
    inflight: int  #: calls each client keeps outstanding (1 = lock-step)
    size: int  #: echoed data bytes per call
    drain: float = 15.0  #: seconds to wait for outstanding replies after T1
    max_payload: int = 4096
    seed: int = 1
    client_base: int = 0  #: the first client number (unique payloads over processes)
    #: API calls through a `frame` codec: the frame's header before the echo command (hex),
    #: and the reply's header as expected, "??" for a byte only verld knows (its seq)
    head: str = ""
    reply_head: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Spec:
        return cls(**json.loads(text))


ECHO = b"\x01"  #: verld-sim's echo command
_OK_DATA = b'"ok":true,"status":0,"data":"'


class ApiEcho:
    """What an echo through verld's API carries, and what its reply must hold.

    A call's data is the echo command and the bytes to echo; through a `frame` codec the
    frame's header comes first (verld writes its length and seq fields), and the reply's
    data is the reply frame's header, then the echoed bytes. The reply's header is given
    in whole base64 groups (3 bytes each), so its base64 text is the header's, then the
    echo's: checked as one string when every header byte is known, else the header's
    characters decoded apart and compared but for the bytes only verld knows (`??`).
    """

    def __init__(self, spec: Spec) -> None:
        words = spec.reply_head.split()
        if len(words) % 3:
            raise ValueError(f"reply head {spec.reply_head!r}: not whole 3-byte groups")
        self.request = bytes.fromhex(spec.head) + ECHO  #: what a call's data starts with
        self._reply = bytes(0 if w == "??" else int(w, 16) for w in words)
        self._unknown = tuple(n for n, w in enumerate(words) if w == "??")
        self._chars = len(words) // 3 * 4
        self._head = base64.b64encode(self._reply)

    def expected(self, data: bytes) -> bytes:
        """The reply's `data` text for an echo of `data` (unknown header bytes as zeros)."""
        return self._head + base64.b64encode(data)

    def ok_at(self, body: bytes, at: int, expected: bytes) -> bool:
        """`body[at:]` starts with `"ok":true,"status":0,"data":"` and the `expected` text
        (a reply laid out as verld writes it; `reply_ok` reads any other)."""
        if not body.startswith(_OK_DATA, at):
            return False
        at += len(_OK_DATA)
        if not self._unknown:
            return body.startswith(expected, at)
        chars = self._chars
        return body.startswith(expected[chars:], at + chars) and self._head_ok(
            body[at : at + chars]
        )

    def reply_ok(self, msg: dict[str, Any], expected: bytes) -> bool:
        """A parsed API reply is the successful echo `expected` stands for."""
        data = msg.get("data")
        if not (msg.get("ok") is True and msg.get("status") == 0 and isinstance(data, str)):
            return False
        text, chars = data.encode(), self._chars
        if not self._unknown:
            return text == expected
        return text[chars:] == expected[chars:] and self._head_ok(text[:chars])

    def _head_ok(self, text: bytes) -> bool:
        try:
            head = bytearray(base64.b64decode(text, validate=True))
        except binascii.Error:
            return False
        if len(head) != len(self._reply):
            return False
        for n in self._unknown:
            head[n] = 0
        return head == self._reply


class Meter:
    """Counts and latencies shared by every client of one generator process."""

    def __init__(self, t0: int = 0, t1: int = 1 << 62) -> None:
        self.t0, self.t1 = t0, t1
        self.stopping = False
        self.latencies: list[int] = []  #: ns, calls answered inside the window
        self.calls = 0  #: calls answered correctly inside the window
        self.sent = 0
        self.answered = 0  #: all replies matched to a call, right or wrong
        self.errors = 0
        self.error_samples: list[str] = []
        self.stale = 0  #: replies matching no outstanding call

    def good(self, ns: int, now: int | None = None) -> None:
        self.answered += 1
        now = time.monotonic_ns() if now is None else now
        if self.t0 <= now <= self.t1:
            self.calls += 1
            self.latencies.append(ns)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < _MAX_ERRORS_SHOWN:
            self.error_samples.append(what)

    def result(self, missing: int, extra: dict[str, Any]) -> dict[str, Any]:
        seconds = (self.t1 - self.t0) / 1e9
        lat = sorted(self.latencies)
        return {
            "calls": self.calls,
            "seconds": round(seconds, 4),
            "rate": round(self.calls / seconds, 1) if seconds > 0 else 0.0,
            "sent": self.sent,
            "answered": self.answered,
            "errors": self.errors + missing,
            "missing": missing,
            "stale": self.stale,
            "error_samples": self.error_samples,
            "latency_us": percentiles(lat),
            "latencies_ns": lat,
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


SUMS = ("calls", "sent", "answered", "good", "errors", "missing", "stale", "bad_frames")


def combine(results: Sequence[dict[str, Any]], groups: Sequence[str]) -> dict[str, Any]:
    """One workload from its processes': the group "" pooled (calls/s summed, latencies
    merged), each other group pooled apart under its name (a silent unit's master)."""
    out = pool([r for r, g in zip(results, groups, strict=True) if not g])
    for group in dict.fromkeys(g for g in groups if g):
        out[group] = pool([r for r, g in zip(results, groups, strict=True) if g == group])
    out["errors"] = sum(r.get("errors", 1) for r in results)
    out["error_samples"] = [s for r in results for s in r.get("error_samples", [])][:8]
    return out


def pool(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    empty = {"calls": 0, "rate": 0.0, "sent": 0, "answered": 0, "missing": 0}
    if len(results) == 1:
        one = {**empty, "latency_us": percentiles([]), **results[0]}
        return {k: v for k, v in one.items() if k != "latencies_ns"}
    lat = sorted(x for r in results for x in r.get("latencies_ns", []))
    out: dict[str, Any] = {k: sum(r.get(k, 0) for r in results) for k in SUMS}
    out.update(
        rate=round(sum(r.get("rate", 0.0) for r in results), 2),
        gens=len(results),
        latency_us=percentiles(lat),
        exceptions={},
        per_gen=[
            {k: r.get(k) for k in ("calls", "rate", "sent", "errors", "clients", "unit")}
            | {"p50_us": r.get("latency_us", {}).get("p50")}
            for r in results
        ],
        **{k: results[0].get(k) for k in ("clients", "inflight", "client") if k in results[0]},
    )
    for r in results:
        for code, n in r.get("exceptions", {}).items():
            out["exceptions"][code] = out["exceptions"].get(code, 0) + n
    if "clients" in out:
        out["clients"] = sum(r.get("clients", 0) for r in results)
    return out
