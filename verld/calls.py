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
from typing import Any, NamedTuple


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
        "owner",
        "payload",
        "queued",
        "req_id",
        "retry",
        "seq",
        "t_submit",
        "timeout",
        "timer",
        "tries",
        "wait",
    )

    def __init__(
        self,
        owner: Hashable | None,
        payload: bytes,
        done: Callable[[CallResult], None],
        *,
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


class FairQueue:
    """Per-owner FIFOs served round-robin, with a total and a per-owner limit."""

    def __init__(self, limit: int, share: int) -> None:
        self.limit = limit  #: calls waiting, all owners together (api.queue_limit)
        self.share = share  #: one owner's calls waiting or in flight (api.client_queue)
        self.exclusive: Hashable | None = None  #: the lease holder, when there is one
        self._queues: dict[Hashable, deque[Call]] = {}
        self._ring: deque[Hashable] = deque()
        self._load: dict[Hashable, int] = {}
        self.waiting = 0

    def __len__(self) -> int:
        return self.waiting

    def __iter__(self) -> Iterator[Call]:
        """Every waiting call (a snapshot: safe to remove while iterating)."""
        return iter([c for q in self._queues.values() for c in q])

    def admit(self, call: Call) -> str | None:
        """Take a unit of the owner's share; the reason it is refused, if it is."""
        if self.waiting >= self.limit:
            return "the call queue is full"
        load = self._load.get(call.owner, 0)
        if load >= self.share:
            return "this client has too many calls waiting or in flight"
        self._load[call.owner] = load + 1
        call.counted = True
        return None

    def release(self, call: Call) -> None:
        """A call finished: its unit of share is free again."""
        if not call.counted:
            return
        call.counted = False
        load = self._load.get(call.owner, 0) - 1
        if load > 0:
            self._load[call.owner] = load
        else:
            self._load.pop(call.owner, None)

    def push(self, call: Call, *, front: bool = False) -> None:
        """Queue a call at the back (or, for a retry, the front) of its owner's FIFO."""
        owner = call.owner
        queue = self._queues.get(owner)
        if queue is None:
            queue = self._queues[owner] = deque()
            if front:
                self._ring.appendleft(owner)
            else:
                self._ring.append(owner)
        elif front:
            self._ring.remove(owner)
            self._ring.appendleft(owner)
        if front:
            queue.appendleft(call)
        else:
            queue.append(call)
        call.queued = True
        self.waiting += 1

    def ready(self) -> bool:
        """Whether `take` would return anything."""
        if self.exclusive is None:
            return bool(self._ring)
        return self.exclusive in self._queues

    def take(self, n: int) -> list[Call]:
        """Up to n calls, one owner at a time in turn (only the lease holder's while leased)."""
        out: list[Call] = []
        ring, queues = self._ring, self._queues
        excl = self.exclusive
        while len(out) < n:
            if excl is None:
                if not ring:
                    break
                owner = ring.popleft()
            elif excl in queues:
                owner = excl
                ring.remove(owner)
            else:
                break
            queue = queues[owner]
            call = queue.popleft()
            call.queued = False
            out.append(call)
            if queue:
                ring.append(owner)
            else:
                del queues[owner]
        self.waiting -= len(out)
        return out

    def remove(self, call: Call) -> None:
        """Take one waiting call out (its wait expired, or it is being failed)."""
        queue = self._queues[call.owner]
        queue.remove(call)
        call.queued = False
        self.waiting -= 1
        if not queue:
            del self._queues[call.owner]
            self._ring.remove(call.owner)

    def drop_owner(self, owner: Hashable) -> list[Call]:
        """An owner went away: its waiting calls leave unsent, their shares freed."""
        queue = self._queues.pop(owner, None)
        if queue is None:
            return []
        self._ring.remove(owner)
        self.waiting -= len(queue)
        for call in queue:
            call.queued = False
            self.release(call)
        return list(queue)
