"""The in-flight window: which calls are on the link, under which seq, until when.

Strategy: sans-I/O and clock-free (times come in as `now`). `add` gives a call the
next seq — incrementing mod 65536 (or the codec's smaller `modulus`: a frame
codec's seq field) across reconnects too, skipping any seq still outstanding, so
a timed-out seq is not reused for a long while — and its deadline.
A reply is `match`ed by seq (codecs with seqs) or to the one call outstanding
(codecs without); a reply that matches nothing is stale, and the caller counts it.
`expired(now)` lists the tries that ran out; `earliest()` says when the next one
will. This is the only seq allocator: the handshake, heartbeat pings, calls and
retries all take their seqs here.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator

from verld.session.calls import Call

SEQ_MOD = 65536
#: a deadline within this of the clock has passed (float rounding of virtual clocks)
EPSILON = 1e-6


class Window:
    """Up to `size` calls on the link, keyed by seq."""

    __slots__ = ("_calls", "_next_seq", "_retired", "modulus", "size")

    def __init__(self, size: int, modulus: int = SEQ_MOD) -> None:
        self.size = size
        #: seqs wrap here: 65536, or the numbers the codec's seq field holds
        self.modulus = modulus
        self._calls: dict[int, Call] = {}
        self._next_seq = 0
        #: with a small seq field (a frame codec's byte), the seqs of calls taken off the
        #: link unanswered (abandoned by their owner, timed out) → until when they stay
        #: unused: a late reply to one is then stale, never another call's answer (with
        #: 65536 seqs the wrap itself keeps them unused for long enough)
        self._retired: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def __bool__(self) -> bool:
        return bool(self._calls)

    def __iter__(self) -> Iterator[Call]:
        """The calls on the link (a snapshot: safe to change the window meanwhile)."""
        return iter(list(self._calls.values()))

    def room(self) -> int:
        """How many more calls fit."""
        return self.size - len(self._calls)

    def add(self, call: Call, now: float) -> float:
        """Put a call's first try on the link: its seq, its deadline (returned)."""
        calls, modulus, retired = self._calls, self.modulus, self._retired
        if retired:
            self._prune(now)
        seq = self._next_seq % modulus
        while seq in calls or seq in retired:
            seq = (seq + 1) % modulus
        self._next_seq = (seq + 1) % modulus
        call.seq = seq
        call.tries += 1
        calls[seq] = call
        call.deadline = deadline = now + call.timeout
        return deadline

    def add_all(self, calls: list[Call], now: float) -> float:
        """`add` for each call in turn; the earliest deadline of them (returned)."""
        slots, modulus, retired = self._calls, self.modulus, self._retired
        if retired:
            self._prune(now)
        seq = self._next_seq % modulus
        earliest = math.inf
        for call in calls:
            while seq in slots or seq in retired:
                seq = (seq + 1) % modulus
            call.seq = seq
            call.tries += 1
            slots[seq] = call
            call.deadline = deadline = now + call.timeout
            earliest = min(earliest, deadline)
            seq = (seq + 1) % modulus
        self._next_seq = seq
        return earliest

    def readd(self, call: Call, now: float) -> float:
        """A retry: the same seq again, a fresh deadline (returned)."""
        call.tries += 1
        self._calls[call.seq] = call
        call.deadline = deadline = now + call.timeout
        return deadline

    def match(self, seq: int | None) -> Call | None:
        """Take the call a reply answers off the link; None: the reply is stale."""
        if seq is not None:
            return self._calls.pop(seq, None)
        for seq_ in self._calls:  # no seqs: the one call outstanding
            return self._calls.pop(seq_)
        return None

    def first(self) -> Call | None:
        """A call on the link (the one, without seqs), or None."""
        for call in self._calls.values():
            return call
        return None

    def holds(self, call: Call) -> bool:
        """Whether this very call is on the link now."""
        return self._calls.get(call.seq) is call

    def remove(self, call: Call) -> None:
        """Take a call off the link (its try ran out): with a small seq field its seq
        stays unused for another timeout."""
        del self._calls[call.seq]
        if self.modulus < SEQ_MOD:
            self._retired[call.seq] = call.deadline + call.timeout

    def _prune(self, now: float) -> None:
        """Retired seqs whose time is up are free again; and all of them when, with the
        calls on the link, they would leave no seq free (a seq reused beats no call)."""
        retired = self._retired
        for seq in [s for s, until in retired.items() if until <= now]:
            del retired[seq]
        if len(retired) + len(self._calls) >= self.modulus:
            retired.clear()

    def expired(self, now: float) -> list[Call]:
        """The calls whose try has run out by `now`, earliest sent first."""
        due = now + EPSILON
        return [c for c in self._calls.values() if c.deadline <= due]

    def earliest(self) -> float:
        """The next deadline (infinity when nothing is on the link)."""
        return min((c.deadline for c in self._calls.values()), default=math.inf)

    def drop_owner(self, owner: Hashable) -> list[Call]:
        """An owner went away: its calls (not pings) leave the link, their slots free."""
        gone = [c for c in self._calls.values() if c.owner is owner and not c.is_ping]
        for call in gone:
            del self._calls[call.seq]
            if self.modulus < SEQ_MOD:  # (its reply may still come: stale then)
                self._retired[call.seq] = call.deadline
        return gone

    def owned_by(self, owner: Hashable) -> list[Call]:
        """The owner's calls on the link (left there)."""
        return [c for c in self._calls.values() if c.owner is owner]

    def calls(self) -> int:
        """Client calls on the link (pings not counted)."""
        return sum(1 for c in self._calls.values() if not c.is_ping)

    def drain(self) -> list[Call]:
        """Every call off the link (the link is lost, or verld stops)."""
        calls = list(self._calls.values())
        self._calls.clear()
        return calls
