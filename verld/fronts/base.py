"""What every front gets from the core: calls, events, leases, taps, counts.

Strategy: a front (the JSON API, later virtual serial ports and a Modbus TCP server)
never reaches into the session. It submits a call for an owner — any hashable that
stands for one program on that front — and gets exactly one `CallResult` back;
it registers as a `Listener` for device events and link transitions, and says
which taps (decoded frames, raw bytes) it wants while someone of its own listens.
Every owner is a client of the same fair queue, under the same limits and leases;
each front's calls are counted by outcome (`verld_front_calls_total{front,outcome}`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Protocol

from verld.alarm import Clock
from verld.calls import Call, CallResult
from verld.codec.base import LinkCodec
from verld.config import Config
from verld.link import LinkState, Transition
from verld.session import Session, TrafficTap, WireTap
from verld.stats import session_status
from verld.supervisor import Opener, Supervisor
from verld.transport import open_link


class Listener(Protocol):
    """What a front hears from the device and the link."""

    def device_event(self, data: bytes, text: str | None, generation: int) -> None: ...

    def link_event(self, transition: Transition) -> None: ...


class Front(Protocol):
    """A way in for programs (the JSON API, virtual ports, Modbus TCP, ...): the
    daemon keeps a list of them and drives each through these steps only."""

    #: its key in `status` and the metrics' `front` label
    name: str

    async def claim(self) -> None:
        """Take what another verld could own (a socket path's lock, a listen
        address), before anything is created; raise `ServeError` when it is taken."""
        ...

    async def start(self) -> None:
        """Serve (claims made); raise `ServeError` (or OSError) when it cannot."""
        ...

    def reload(self, cfg: Config, changed: list[str]) -> None:
        """Take a reloaded config (`changed`: its changed keys); any task this starts
        is the front's own, and `close` ends it."""
        ...

    def status(self) -> Any:
        """Its part of `status` (None: nothing to show)."""
        ...

    async def close(self) -> None:
        """Stop serving and remove what it made (safe before `start`, and twice)."""
        ...


class FrontCounts:
    """One front's calls by outcome ("ok" or the error code): its `done` callbacks
    add to `outcomes` (a dict, so the per-call path costs one update)."""

    __slots__ = ("name", "outcomes")

    def __init__(self, name: str) -> None:
        self.name = name
        self.outcomes: dict[str, int] = {}

    def add(self, outcome: str) -> None:
        """Count a call that ended before reaching the core (refused by the front)."""
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


class Core:
    """The session and its supervisor, as every front sees them (made here, wired once)."""

    def __init__(
        self,
        cfg: Config,
        codec: LinkCodec,
        port: str,
        *,
        clock: Clock,
        opener: Opener = open_link,
        rng: random.Random | None = None,
    ) -> None:
        self.cfg = cfg
        self.listeners: list[Listener] = []
        self.fronts: dict[str, FrontCounts] = {}
        self.inhibits = 0  #: inhibitions so far (verld_inhibits_total)
        self._taps: dict[object, tuple[TrafficTap | None, WireTap | None]] = {}
        self.session = Session(
            cfg,
            codec,
            port,
            clock=clock,
            on_event=self.device_event,
            on_link=self.link_event,
            rng=rng,
        )
        self.supervisor = Supervisor(self.session, opener)
        #: submit(call): the call joins the fair queue; its `done` runs exactly once
        #: (maybe before this returns). The session's own method: no layer per call.
        self.submit: Callable[[Call], None] = self.session.submit

    def front(self, name: str) -> FrontCounts:
        """The counts of front `name` (made on first use)."""
        counts = self.fronts.get(name)
        if counts is None:
            counts = self.fronts[name] = FrontCounts(name)
        return counts

    # --- calls ----------------------------------------------------------------------
    def make_call(
        self,
        counts: FrontCounts | None,
        owner: Hashable,
        payload: bytes,
        done: Callable[[CallResult], None],
        *,
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool | None = None,
        req_id: object = None,
    ) -> Call:
        """A call for `owner` with `device.timeout`/`device.retry` where not given;
        hand it to `submit`, and `done` runs exactly once. Its outcome is counted in
        `counts` (the front's) as it ends. `wait` None: the call waits only while an
        open attempt is under way (at start, say), else fails at once when the link
        is not up."""
        dev = self.cfg.device
        retry = dev.retry if retry is None else retry
        if wait is None:
            wait = self.session.link.state is LinkState.CONNECTING
        call = Call(owner, payload, done, timeout=timeout or dev.timeout, retry=retry,
                    wait=wait, req_id=req_id)  # fmt: skip
        if counts is not None:
            call.outcomes = counts.outcomes
        return call

    def forget(self, owner: Hashable) -> None:
        """The owner went away: its waiting calls are dropped, its calls on the link
        abandoned (their late replies are then stale)."""
        self.session.forget_owner(owner)

    def hold(self) -> None:
        """Collect calls without writing until `flush`: one write for a burst."""
        self.session.hold()

    def flush(self) -> None:
        self.session.flush()

    def set_exclusive(self, owner: Hashable | None) -> None:
        """A lease: only `owner`'s calls reach the device (None: everyone's again)."""
        self.session.set_exclusive(owner)

    def request_reconnect(self, reason: str) -> None:
        self.supervisor.request_reconnect(reason)

    def inhibit(self, reason: str) -> Coroutine[Any, Any, str]:
        """Let go of the device port for another program: calls stop going out now;
        the coroutine returned ends, with the port's path, once it is closed."""
        self.inhibits += 1
        self.supervisor.inhibit(reason)
        return self._let_go(reason)

    async def _let_go(self, reason: str) -> str:
        await self.supervisor.let_go(reason)
        return self.session.port

    def release(self) -> None:
        """End an inhibition: the port reopens (a no-op when not inhibited)."""
        self.supervisor.release()

    @property
    def inhibited(self) -> bool:
        """An inhibition is in force (or letting go of the port is under way)."""
        return self.session.inhibited_by is not None

    # --- what the device says -----------------------------------------------------------
    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        for listener in self.listeners:
            listener.device_event(data, text, generation)

    def link_event(self, transition: Transition) -> None:
        for listener in self.listeners:
            listener.link_event(transition)

    def set_taps(self, who: object, traffic: TrafficTap | None, wire: WireTap | None) -> None:
        """`who` (a front) wants these taps (None: not that one); the session taps
        only while some front wants it, and then costs nothing for the others."""
        self._taps[who] = (traffic, wire)
        traffics = [t for t, _ in self._taps.values() if t is not None]
        wires = [w for _, w in self._taps.values() if w is not None]
        self.session.set_taps(_fan(traffics), _fan(wires))

    # --- figures ----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The session's part of `status`."""
        return session_status(self.session)

    def front_calls(self) -> dict[str, dict[str, int]]:
        """Each front's calls by outcome (`verld_front_calls_total{front,outcome}`)."""
        return {name: dict(c.outcomes) for name, c in sorted(self.fronts.items())}


def _fan(taps: list[Any]) -> Any:
    """One tap calling each of `taps` (or the one itself; None for none)."""
    if not taps:
        return None
    if len(taps) == 1:
        return taps[0]

    def fan(*args: Any) -> None:
        for tap in taps:
            tap(*args)

    return fan
