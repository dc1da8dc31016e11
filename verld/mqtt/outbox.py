"""What waits to be published, bounded whatever the broker does; sans-I/O.

Strategy: four kinds of message, four rules.

- Retained topics (bridge-wide: device state, status, discovery configs) are kept as
  a latest-value map: a topic changed ten times while the broker was away is sent
  once, with its last value. After each (re)connect every retained topic is marked
  to be sent again, because the broker may have lost them (or be a new one).
- Values (an entity's polled value; retained only for an entity with `retain: true`)
  are kept as a latest-value map too: at most one waits per entity, so a slow broker
  gets the newest value once, never a backlog. A value is current only while it is
  fresh: one made while the broker is away is dropped (counted), and so is one still
  waiting when the connection goes.
- A retained topic can also be cleared once (an empty retained message: a removed
  Home Assistant entity's config); a clear is not kept for the next connect.
- Events go through a bounded FIFO; when it is full the oldest is dropped and
  counted, so memory stays bounded and what is sent after an outage is the newest.
- Replies are only taken while connected: a reply owed to a requester whose broker
  connection is gone has no one to go to, so it is dropped (and counted), never
  queued for later.

`pop` hands out replies first (someone is waiting), then retained topics and clears,
then values, then events. `wakeup` is called whenever something became ready, for the I/O edge's
event; nothing here knows about asyncio.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

EVENTS_MAX = 1000


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One PUBLISH: topic, payload, retain flag, and the Correlation Data of a reply."""

    topic: str
    payload: bytes
    retain: bool = False
    correlation: bytes | None = None
    kind: str = "event"  #: "reply", "retained", "clear", "value" or "event"


class Outbox:
    """Pending publishes; see the module docstring."""

    def __init__(self, events_max: int = EVENTS_MAX) -> None:
        self.connected = False
        self.wakeup: Callable[[], None] = lambda: None
        self._retained: dict[str, bytes] = {}
        self._dirty: dict[str, None] = {}  # (an ordered set)
        self._events: deque[Outgoing] = deque()
        self._events_max = events_max
        self._replies: deque[Outgoing] = deque()
        self._values: dict[str, tuple[bytes, bool]] = {}  # (in the order they became due)
        self._clears: dict[str, None] = {}
        self.events_dropped = 0
        self.replies_dropped = 0
        self.values_dropped = 0
        self._reported = 0

    # --- producers -------------------------------------------------------------------
    def retain(self, topic: str, payload: bytes, *, force: bool = False) -> None:
        """Set a retained topic's value; sent unless it is the value already there."""
        if not force and self._retained.get(topic) == payload:
            return
        self._retained[topic] = payload
        self._dirty[topic] = None
        self.wakeup()

    def event(self, topic: str, payload: bytes) -> None:
        if len(self._events) >= self._events_max:
            self._events.popleft()
            self.events_dropped += 1
        self._events.append(Outgoing(topic, payload))
        self.wakeup()

    def value(self, topic: str, payload: bytes, *, retain: bool = False) -> bool:
        """An entity's new value (replacing one still waiting on `topic`), published
        retained with `retain`; False (dropped, counted) while the broker is not connected."""
        if not self.connected:
            self.values_dropped += 1
            return False
        if self._values.pop(topic, None) is not None:
            self.values_dropped += 1  # (superseded before it went out)
        self._values[topic] = (payload, retain)
        self.wakeup()
        return True

    def clear(self, topic: str) -> None:
        """Publish an empty retained message on `topic` once (the broker forgets it)."""
        self._retained.pop(topic, None)
        self._dirty.pop(topic, None)
        self._clears[topic] = None
        self.wakeup()

    def reply(self, topic: str, payload: bytes, correlation: bytes | None) -> bool:
        """Queue a reply; False (dropped, counted) while the broker is not connected."""
        if not self.connected:
            self.replies_dropped += 1
            return False
        self._replies.append(Outgoing(topic, payload, correlation=correlation, kind="reply"))
        self.wakeup()
        return True

    # --- the connection --------------------------------------------------------------
    def connect(self) -> None:
        """A (re)connect: every retained topic is due again."""
        self.connected = True
        self._dirty = dict.fromkeys(self._retained)
        if self._dirty or self._events:
            self.wakeup()

    def disconnect(self) -> None:
        """The connection is gone: replies waiting for it are dropped."""
        self.connected = False
        self.replies_dropped += len(self._replies)
        self._replies.clear()
        self.values_dropped += len(self._values)
        self._values.clear()

    def resend(self, prefix: str) -> None:
        """Mark the retained topics under `prefix` due again (Home Assistant restarted)."""
        for topic in self._retained:
            if topic.startswith(prefix):
                self._dirty[topic] = None
        self.wakeup()

    # --- the consumer ----------------------------------------------------------------
    def pop(self) -> Outgoing | None:
        """The next message to publish, or None when nothing is due."""
        if not self.connected:
            return None
        if self._replies:
            return self._replies.popleft()
        if self._dirty:
            topic = next(iter(self._dirty))
            del self._dirty[topic]
            return Outgoing(topic, self._retained[topic], retain=True, kind="retained")
        if self._clears:
            topic = next(iter(self._clears))
            del self._clears[topic]
            return Outgoing(topic, b"", retain=True, kind="clear")
        if self._values:
            topic = next(iter(self._values))
            payload, retain = self._values.pop(topic)
            return Outgoing(topic, payload, retain=retain, kind="value")
        if self._events:
            return self._events.popleft()
        return None

    def lost(self, item: Outgoing) -> None:
        """A publish of `item` failed (the connection broke under it)."""
        if item.kind in ("retained", "clear"):
            return  # (retained topics are sent again on the next connect; a clear is
            # found again: the bridge reads the retained configs on each connect)
        if item.kind == "value":
            self.values_dropped += 1
        elif item.kind == "event":
            self.events_dropped += 1
        else:
            self.replies_dropped += 1

    @property
    def pending_replies(self) -> int:
        return len(self._replies)

    def __len__(self) -> int:
        waiting = (self._replies, self._dirty, self._clears, self._values, self._events)
        return sum(map(len, waiting))

    def drops_to_report(self) -> int:
        """Events dropped since the last call (for a rate-limited warning)."""
        new = self.events_dropped - self._reported
        self._reported = self.events_dropped
        return new
