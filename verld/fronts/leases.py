"""The lease: one owner's exclusive hold on the device, for a while (Core's).

While a lease is held only its holder's calls reach the device; every other owner,
on every front, gets `busy` (or waits, if it asked to). The holder is any owner a
front submits calls for; the front says how `status.lease` shows it. A lease ends
on release, on expiry, when its holder goes away (`Core.forget`), or when the port
is held (`Core.hold`). Time and the expiry timer come from the core's clock, so a
test moves it by hand.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import structlog

from verld.alarm import Clock, Timer

log = structlog.get_logger("verld.server")

#: who holds the lease, as `status.lease` shows it (read each time: a name may change)
Shown = Callable[[], dict[str, Any]]


class LeaseRefused(Exception):
    """The lease cannot be had now (another owner holds it, the port is held); the
    message says why, in the words of the `busy` error."""


@dataclass
class Lease:
    owner: Hashable
    token: str
    expires: float  #: clock time
    timer: Timer
    shown: Shown


class Leases:
    """The one lease there can be; `exclusive(owner)` makes the session serve only
    `owner` (None: everyone again)."""

    def __init__(self, clock: Clock, exclusive: Callable[[Hashable | None], None]) -> None:
        self._clock = clock
        self._exclusive = exclusive
        self.held: Lease | None = None

    def take(self, owner: Hashable, seconds: float, shown: Shown) -> str:
        """Take (or renew) the lease for `seconds`; its token (the same on a renewal).
        LeaseRefused while another owner holds it."""
        held = self.held
        if held is not None and held.owner != owner:
            raise LeaseRefused(f"the device is leased to {held.owner!r}")
        if held is not None:
            held.timer.cancel()
        token = held.token if held is not None else secrets.token_hex(8)
        clock = self._clock
        expires = clock.time() + float(seconds)
        timer = clock.call_at(expires, self.end, "expired")
        self.held = Lease(owner, token, expires, timer, shown)
        self._exclusive(owner)
        return token

    def release(self, owner: Hashable, token: str | None) -> bool:
        """End `owner`'s lease (this token's, if given); False when it holds none."""
        held = self.held
        if held is None or held.owner != owner or (token is not None and token != held.token):
            return False
        self.end("released")
        return True

    def forget(self, owner: Hashable) -> None:
        """`owner` went away: its lease ends."""
        if self.held is not None and self.held.owner == owner:
            self.end("holder disconnected")

    def end(self, reason: str) -> None:
        """The lease there is ends (a no-op when there is none)."""
        held, self.held = self.held, None
        if held is None:
            return
        held.timer.cancel()
        log.info("lease_ended", client=repr(held.owner), reason=reason)
        self._exclusive(None)

    def status(self) -> dict[str, Any] | None:
        """`status.lease`: the holder as its front shows it, and `seconds_left`."""
        held = self.held
        if held is None:
            return None
        left = held.expires - self._clock.time()
        return {**held.shown(), "seconds_left": round(max(0.0, left), 3)}
