"""Events to subscribers: device events, link changes, logs, traffic and wire taps.

Each event is encoded once and handed to every subscriber of its topic
(`Peer.send_event`): a subscriber that lags loses events on its own transport
(counted, then an `overflow` event; on the socket, dropped past `api.max_backlog`),
so nobody else waits for it. Subscribers are peers, whatever carries them. The
traffic and wire taps are asked of the core only while someone subscribes to them:
they cost nothing otherwise.
"""

from __future__ import annotations

import time
from typing import Any

from verld import wire
from verld.fronts.api.peer import Peer
from verld.fronts.base import Core
from verld.links.link import Transition
from verld.logs import Record


class Fanout:
    """Who subscribed to what, and the writing of events to them."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.subscribers: dict[str, set[Peer]] = {t: set() for t in wire.TOPICS}

    def subscribe(self, peer: Peer, topics: frozenset[str]) -> None:
        for topic in topics:
            self.subscribers[topic].add(peer)
        self._update_taps()

    def unsubscribe(self, peer: Peer, topics: frozenset[str]) -> None:
        for topic in topics:
            self.subscribers[topic].discard(peer)
        self._update_taps()

    def topics_of(self, peer: Peer) -> list[str]:
        """The topics `peer` subscribes to, sorted."""
        return sorted(topic for topic, peers in self.subscribers.items() if peer in peers)

    def broadcast(self, topic: str, obj: dict[str, Any]) -> None:
        subs = self.subscribers[topic]
        if not subs:
            return
        data = wire.encode(obj)
        for peer in list(subs):
            peer.send_event(data)

    # --- the core's Listener ------------------------------------------------------------
    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        if not self.subscribers["events"]:
            return
        event: dict[str, Any] = {
            "event": "device",
            "data": wire.b64(data),
            "generation": generation,
        }
        if text is not None:
            event["text"] = text
        self.broadcast("events", event)

    def link_event(self, transition: Transition) -> None:
        self.broadcast(
            "link",
            {
                "event": "link",
                "state": transition.state.value,
                "reason": transition.reason,
                "generation": transition.generation,
            },
        )

    def log_record(self, record: Record) -> None:
        if self.subscribers["logs"]:
            self.broadcast("logs", {"event": "log", "record": record})

    # --- taps -------------------------------------------------------------------------
    def _update_taps(self) -> None:
        traffic = self._traffic if self.subscribers["traffic"] else None
        self.core.set_taps(self, traffic, self._wire if self.subscribers["wire"] else None)

    def _traffic(
        self, direction: str, kind: str, seq: int | None, status: int | None, payload: bytes
    ) -> None:
        self.broadcast(
            "traffic",
            {
                "event": "traffic",
                "dir": direction,
                "t": round(time.time(), 6),
                "kind": kind,
                "seq": seq,
                "status": status,
                "len": len(payload),
                "hex": payload.hex(),
            },
        )

    def _wire(self, direction: str, data: bytes) -> None:
        self.broadcast(
            "wire",
            {"event": "wire", "dir": direction, "t": round(time.time(), 6), "hex": data.hex()},
        )
