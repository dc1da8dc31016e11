"""Calls and the fair queue they wait in, sans-I/O.

Strategy: every client (owner) has its own FIFO; owners with waiting calls sit in
a round-robin ring, so `take` hands out one call per owner in turn and a chatty
client cannot starve the others. A call holds one unit of its owner's share
(`client_queue`) from admission until it finishes, whether waiting or in flight.
While a lease is held (`exclusive`), only that owner's calls are taken. Nothing
here does I/O or reads a clock: the session times calls, this module orders them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Any, NamedTuple, Protocol


class CallResult(NamedTuple):
    """How one call ended. `error` is None on success (status 0x00 or otherwise)."""

    error: str | None
    message: str
    status: int | None
    data: bytes
    text: str | None
    ms: float
    generation: int


class Call:
    """One call (or an internal ping) on its way to the device and back."""

    __slots__ = (
        "counted",
        "deadline",
        "done",
        "frame",
        "is_ping",
        "outcomes",
        "owner",
        "payload",
        "queued",
        "reply",
        "req_id",
        "retry",
        "seq",
        "t_submit",
        "timeout",
        "timer",
        "tries",
        "unit",
        "wait",
    )

    def __init__(
        self,
        owner: Hashable | None,
        payload: bytes,
        done: Callable[[CallResult], None],
        timeout: float,
        retry: int,
        wait: bool = False,
        req_id: object = None,
        is_ping: bool = False,
    ) -> None:
        self.owner = owner
        self.payload = payload
        self.done = done
        self.timeout = timeout
        self.retry = retry
        self.wait = wait
        self.req_id = req_id
        self.is_ping = is_ping
        self.seq = -1
        self.frame = b""
        self.tries = 0  #: tries written so far
        self.deadline = 0.0  #: loop time the current try runs out (on the link)
        self.timer: Any = None  #: a waiting call's wait timer (asyncio.TimerHandle) or None
        self.t_submit = 0.0
        self.queued = False  #: waiting in a FairQueue
        self.counted = False  #: holds one unit of its owner's `client_queue` share
        self.unit = -1  #: Modbus codecs: the unit called (the queue's lane); -1 otherwise
        #: False: the device does not answer it (`reply: false`, `line.no_reply`): written
        #: once, then the line is kept quiet for `device.guard` and the call ends ok
        self.reply = True
        #: the front's calls by outcome ("ok" or the error code), counted as it ends
        self.outcomes: dict[str, int] | None = None


class Finish(Protocol):
    """How a call ends: the session's `finish` (its `done` gets the result)."""

    def __call__(
        self,
        call: Call,
        error: str | None,
        message: str,
        status: int | None = None,
        data: bytes = b"",
        text: str | None = None,
    ) -> None: ...


class _Owners:
    """Per-owner FIFOs in a round-robin ring of the owners with calls waiting."""

    __slots__ = ("queues", "ring", "served")

    def __init__(self) -> None:
        self.queues: dict[Hashable, deque[Call]] = {}
        self.ring: deque[Hashable] = deque()
        #: the owner served last, back at the ring's end with more calls (or None)
        self.served: Hashable | None = None

    def __bool__(self) -> bool:
        return bool(self.ring)

    def push(self, call: Call, front: bool) -> None:
        owner = call.owner
        queue = self.queues.get(owner)
        if queue is None:
            queue = self.queues[owner] = deque()
            ring = self.ring
            if front:
                ring.appendleft(owner)
            elif ring and ring[-1] is self.served:
                # A newcomer goes before the owner just served, not after it: else that
                # owner would be served twice before the newcomer's first call.
                ring.insert(len(ring) - 1, owner)
            else:
                ring.append(owner)
        elif front:
            self.ring.remove(owner)
            self.ring.appendleft(owner)
        if front:
            queue.appendleft(call)
        else:
            queue.append(call)
        call.queued = True

    def ready(self, excl: Hashable | None) -> bool:
        if excl is None:
            return bool(self.ring)
        return excl in self.queues or None in self.queues

    def take(self, excl: Hashable | None) -> Call | None:
        """The next owner's next call (only `excl`'s, when given, and verld's own
        pings, owner None), or None."""
        ring, queues = self.ring, self.queues
        if excl is None:
            if not ring:
                return None
            owner = ring.popleft()
        elif None in queues or excl in queues:
            owner = None if None in queues else excl
            ring.remove(owner)
        else:
            return None
        queue = queues[owner]
        call = queue.popleft()
        call.queued = False
        if queue:
            ring.append(owner)
            self.served = owner
        else:
            del queues[owner]
            self.served = None
        return call

    def take_turns(self, n: int, excl: Hashable | None) -> list[Call]:
        """`take(excl)` up to n times: the next n calls, one owner at a time in turn."""
        out: list[Call] = []
        if excl is not None:
            while len(out) < n and (call := self.take(excl)) is not None:
                out.append(call)
            return out
        ring, queues = self.ring, self.queues
        served = self.served
        while ring and len(out) < n:
            owner = ring.popleft()
            queue = queues[owner]
            call = queue.popleft()
            call.queued = False
            out.append(call)
            if queue:
                ring.append(owner)
                served = owner
            else:
                del queues[owner]
                served = None
        self.served = served
        return out

    def remove(self, call: Call) -> None:
        queue = self.queues[call.owner]
        queue.remove(call)
        call.queued = False
        if not queue:
            del self.queues[call.owner]
            self.ring.remove(call.owner)

    def take_owner(self, owner: Hashable) -> list[Call]:
        queue = self.queues.pop(owner, None)
        if queue is None:
            return []
        self.ring.remove(owner)
        for call in queue:
            call.queued = False
        return list(queue)

    def calls(self) -> Iterator[Call]:
        return (c for q in self.queues.values() for c in q)


class FairQueue:
    """Per-owner FIFOs served round-robin, with a total and a per-owner limit."""

    def __init__(self, limit: int, share: int) -> None:
        self.limit = limit  #: calls waiting, all owners together (api.queue_limit)
        self.share = share  #: one owner's calls waiting or in flight (api.client_queue)
        self.exclusive: Hashable | None = None  #: the lease holder, when there is one
        self._owners = _Owners()
        self._loads: dict[Hashable, int] = {}  #: each owner's calls waiting or in flight
        self.waiting = 0

    def __len__(self) -> int:
        return self.waiting

    def __iter__(self) -> Iterator[Call]:
        """Every waiting call (a snapshot: safe to remove while iterating)."""
        return iter(list(self._owners.calls()))

    def load_of(self, owner: Hashable) -> int:
        """`owner`'s calls waiting or in flight: its units of share taken (a query)."""
        return self._loads.get(owner, 0)

    def carry_over(self, old: FairQueue) -> None:
        """Take over `old`'s lease holder and shares (the line's discipline changed:
        its calls in flight keep their units of share)."""
        self.exclusive, self._loads = old.exclusive, old._loads

    def admit(self, call: Call) -> str | None:
        """Take a unit of the owner's share; the reason it is refused, if it is."""
        if self.waiting >= self.limit:
            return "the call queue is full"
        load = self._loads.get(call.owner, 0)
        if load >= self.share:
            return "this client has too many calls waiting or in flight"
        self._loads[call.owner] = load + 1
        call.counted = True
        return None

    def release(self, call: Call) -> None:
        """A call finished: its unit of share is free again."""
        if not call.counted:
            return
        call.counted = False
        load = self._loads.get(call.owner, 0) - 1
        if load > 0:
            self._loads[call.owner] = load
        else:
            self._loads.pop(call.owner, None)

    def push(self, call: Call, *, front: bool = False) -> None:
        """Queue a call at the back (or, for a retry, the front) of its owner's FIFO."""
        self._owners.push(call, front)
        self.waiting += 1

    def ready(self) -> bool:
        """Whether `take` would return anything."""
        return self._owners.ready(self.exclusive)

    def take(self, n: int) -> list[Call]:
        """Up to n calls, one owner at a time in turn (only the lease holder's while leased)."""
        out = self._owners.take_turns(n, self.exclusive)
        self.waiting -= len(out)
        return out

    def remove(self, call: Call) -> None:
        """Take one waiting call out (its wait expired, or it is being failed)."""
        self._owners.remove(call)
        self.waiting -= 1

    def drop_owner(self, owner: Hashable) -> list[Call]:
        """An owner went away: its waiting calls leave unsent, their shares freed."""
        gone = self._owners.take_owner(owner)
        self._gone(gone)
        return gone

    def sent_directly(self, key: int) -> None:
        """A call went out without queueing (`LaneQueue` takes note; no-op here)."""
        return

    def cut_turn(self, key: int) -> None:
        """Lane `key` turned out slow (`LaneQueue` ends its turn; no-op here)."""
        return

    def _gone(self, calls: list[Call]) -> None:
        self.waiting -= len(calls)
        for call in calls:
            self.release(call)


class LaneQueue(FairQueue):
    """A `FairQueue` served round-robin by lane (`Call.unit`: a Modbus unit) as well as
    by owner.

    The lanes stand in a ring in the order they were first seen and keep their place
    while empty (at most 256 units); a pointer goes round it, skipping empty lanes. A
    lane seen for the first time joins just before the lane that had the last turn
    (before that lane's next turn: a lane is new once, so this starves nobody). A
    lane's turn serves each of its owners waiting when the turn began once, except a
    `heavy` lane's (a unit whose last try timed out), which is one call. So a call
    waits for at most one turn of each other lane, and a silent unit costs the others
    one try a round however many owners call it. The pointer leaves a lane when its
    turn's last call is taken (not when it ends), so a call that comes while a silent
    unit's try is on the bus goes before that unit's next try.

    A call pushed back (a retry) goes to the front of its owner's FIFO in its lane;
    the lane keeps its place, so it waits for the others' turns.
    """

    def __init__(self, limit: int, share: int, heavy: Callable[[int], bool] | None = None) -> None:
        super().__init__(limit, share)
        self._lanes: dict[int, _Owners] = {}
        self._order: list[int] = []  #: the ring of lanes, in the order first seen
        self._pos = 0  #: the lane whose turn it is (or comes next)
        self._turn_left = 0  #: calls left in that lane's turn (0: not begun)
        self._last: int | None = None  #: the lane that had the last turn
        #: whether a lane's turn is one call only (the bus: the unit's last try timed out)
        self.heavy: Callable[[int], bool] = heavy or _light

    def __iter__(self) -> Iterator[Call]:
        return iter([c for lane in self._lanes.values() for c in lane.calls()])

    def push(self, call: Call, *, front: bool = False) -> None:
        """Queue a call in its lane (`front`, a retry: first of its owner's calls)."""
        lane = self._lanes.get(call.unit)
        if lane is None:
            lane = self._new_lane(call.unit)
        lane.push(call, front)
        self.waiting += 1

    def _new_lane(self, key: int) -> _Owners:
        """A lane seen for the first time: at the end of the round, just before the lane
        that had the last turn (so before that lane's next turn), or last of all."""
        lane = self._lanes[key] = _Owners()
        order = self._order
        at = order.index(self._last) if self._last in order else len(order)
        if self._turn_left and self._pos == at:
            at += 1  # (that lane is amid a turn again: the newcomer goes after it)
        order.insert(at, key)
        if self._pos > at:
            self._pos += 1  # the pointer stays on its lane (on the last-turned lane
        return lane  # it now points at the newcomer, whose turn comes first)

    def sent_directly(self, key: int) -> None:
        """A call of lane `key` went out without queueing (nothing was waiting): that
        was the lane's turn, so the pointer moves past it."""
        if key not in self._lanes:
            self._new_lane(key)
        self._pos = self._order.index(key)  # (wherever the pointer was: the round goes
        self._end_turn()  # on from the lane that just had its turn)

    def ready(self) -> bool:
        excl = self.exclusive
        if excl is None:
            return self.waiting > 0
        return any(lane.ready(excl) for lane in self._lanes.values())

    def take(self, n: int) -> list[Call]:
        out: list[Call] = []
        excl, order, lanes = self.exclusive, self._order, self._lanes
        while len(out) < n and order:
            for _ in range(len(order)):  # the next lane with a call to give, from the pointer
                lane = lanes[order[self._pos]]
                if lane.ready(excl):
                    break
                self._skip()
            else:
                break
            if not self._turn_left:
                key = order[self._pos]
                self._turn_left = 1 if excl is not None or self.heavy(key) else len(lane.ring)
            taken = lane.take(excl)
            assert taken is not None
            out.append(taken)
            self._turn_left -= 1
            if not self._turn_left or not lane:
                self._end_turn()
        self.waiting -= len(out)
        return out

    def cut_turn(self, key: int) -> None:
        """A try of lane `key` timed out: what is left of its turn is given up (it is
        heavy now: one call a turn), so a silent unit found out in mid-turn does not
        make the others wait a second try."""
        if self._turn_left and self._order[self._pos] == key:
            self._end_turn()

    def _end_turn(self) -> None:
        self._last = self._order[self._pos]
        self._skip()

    def _skip(self) -> None:
        self._pos = (self._pos + 1) % len(self._order)
        self._turn_left = 0

    def remove(self, call: Call) -> None:
        self._lanes[call.unit].remove(call)
        self.waiting -= 1

    def drop_owner(self, owner: Hashable) -> list[Call]:
        gone: list[Call] = []
        for lane in self._lanes.values():
            gone += lane.take_owner(owner)
        self._gone(gone)
        return gone

    def lane(self, key: int) -> list[Call]:
        """The calls waiting in one lane (a snapshot)."""
        lane = self._lanes.get(key)
        return [] if lane is None else list(lane.calls())


def _light(_: int) -> bool:
    return False
