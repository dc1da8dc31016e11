"""The session rig: a session and its supervisor on a fake link, for tests.

Strategy: `SessionRig` builds the real `Session` and `Supervisor` from a config
and drives them with no port and no sleeps. The link is a `Wire`: what the
session writes is split into requests exactly as the device would split it (the
codec's own device side, `CodecSpec.device`), and answers are framed by that same
side, so one rig serves every codec. Time is a `ManualClock` (the steps of an
attempt are the supervisor's own methods: `connect` runs them) or, for what must
await (`Supervisor.run`), a `VirtualClockLoop` with a `FakeDevice` behind the
supervisor's opener.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from verld.alarm import Clock
from verld.codec.base import PortRequest
from verld.codec.registry import retry_of, spec_of
from verld.config import Config, parse_config
from verld.errors import OpenError
from verld.fronts.base import Core
from verld.links.link import Transition
from verld.links.port import open_port
from verld.links.transport import LinkHandler
from verld.session.calls import Call, CallResult
from verld.session.session import Session
from verld.session.supervisor import Supervisor
from verld.testing.clock import ManualClock, VirtualClockLoop, run_virtual

__all__ = ["FakeDevice", "ManualClock", "SessionRig", "VirtualClockLoop", "Wire", "run_virtual"]

#: what a device answers to one request: (status, data), or None: nothing
Respond = Callable[[PortRequest], "tuple[int, bytes] | None"]


def echo(request: PortRequest) -> tuple[int, bytes] | None:
    """The test device's answer: status 0 and the payload after its first byte."""
    return 0, request.payload[1:]


class Wire:
    """A LinkTransport whose far end is the codec's device side (`writes`: how many
    writes the session made)."""

    def __init__(self, cfg: Config, handler: LinkHandler) -> None:
        self.framing = spec_of(cfg).device(cfg)
        self.handler = handler
        self.tap: Any = None
        self.bytes_tx = self.bytes_rx = 0
        self.write_backlog = 0
        self.closed = False
        self.requests: list[PortRequest] = []  #: written, not answered yet
        self.writes = 0
        #: called with each request as it is written (a device that answers on its own)
        self.on_request: Callable[[PortRequest], None] | None = None

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        self.bytes_tx += len(data)
        self.writes += 1
        for request in self.framing.feed(data) + self.framing.flush():
            self.requests.append(request)
            if self.on_request is not None:
                self.on_request(request)

    def deliver(self, data: bytes) -> None:
        """Bytes from the device."""
        if not self.closed:
            self.bytes_rx += len(data)
            self.handler.link_data(data)

    def reply(self, request: PortRequest, status: int, data: bytes = b"") -> bytes:
        """The device's framing of an answer to `request`."""
        return self.framing.reply(request.tag, status, data, None)

    def event(self, data: bytes) -> bytes:
        return self.framing.event(data, None)

    def close(self) -> None:
        self.closed = True


class _Heard:
    """A `Listener` of the core keeping what the rig heard."""

    def __init__(self, rig: SessionRig) -> None:
        self.rig = rig

    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        self.rig.events.append((data, text, generation))

    def link_event(self, transition: Transition) -> None:
        self.rig.transitions.append(transition)


class SessionRig:
    """A session, its supervisor, a wire, and what they announced; with `core=True`
    the session and supervisor are a real `Core`'s (`rig.core`), for testing fronts
    over the core as the daemon builds it."""

    def __init__(
        self,
        config: str | Config,
        *,
        clock: Clock | None = None,
        port: str = "/dev/fake",
        rng: random.Random | None = None,
        opener: Any = None,
        core: bool = False,
    ) -> None:
        self.cfg = parse_config(config) if isinstance(config, str) else config
        self.clock: Any = ManualClock() if clock is None else clock
        self.transitions: list[Transition] = []
        self.events: list[tuple[bytes, str | None, int]] = []
        if core:
            self.core = Core(self.cfg, port, clock=self.clock, opener=opener or open_port, rng=rng)
            self.core.listeners.append(_Heard(self))
            # the rig runs the supervisor's steps itself: it drives the core's own parts
            self.session, self.supervisor = self.core._session, self.core._supervisor
        else:
            self.session = Session(
                self.cfg,
                spec_of(self.cfg).host(self.cfg),
                port,
                clock=self.clock,
                on_event=lambda *event: self.events.append(event),
                rng=rng,
            )
            self.supervisor = Supervisor(self.session, self._told, opener or open_port)
        self.lost = 0  #: losses the session reported (a dead heartbeat, a desync...)
        lose = self.supervisor.lose

        def lost(reason: str) -> None:
            self.lost += 1
            lose(reason)

        self.session.on_lost = lost
        self.wire = Wire(self.cfg, self.session)

    def _told(self, transition: Transition) -> None:
        self.transitions.append(transition)

    def connect(self, respond: Respond | None = echo) -> list[CallResult]:
        """The supervisor's steps of one attempt on `wire`: attempt, open, handshake
        (answered with `respond`; None: left unanswered). The handshake's result."""
        results: list[CallResult] = []
        self.supervisor.attempt()
        self.supervisor.opened(self.wire, results.append)
        if respond is not None:
            self.answer(respond)
        return results

    def answer(self, respond: Respond = echo, *, skip: int = 0) -> int:
        """The device answers every request not answered yet (after `skip` of them);
        how many answers it sent."""
        pending, self.wire.requests = self.wire.requests[skip:], []
        sent = 0
        for request in pending:
            answer = respond(request)
            if answer is not None:
                self.wire.deliver(self.wire.reply(request, *answer))
                sent += 1
        return sent

    def call(
        self, payload: bytes, owner: object = "me", *, reply: bool = True, **kw: Any
    ) -> list[CallResult]:
        """Submit a call (`reply` False: the device gives no answer); the list gets its
        result."""
        results: list[CallResult] = []
        kw.setdefault("timeout", self.cfg.device.timeout)
        kw.setdefault("retry", retry_of(self.cfg))
        call = Call(owner, payload, results.append, **kw)
        call.reply = reply
        self.session.submit(call)
        return results


class FakeDevice:
    """A device behind the supervisor's opener (`open_link`), answering on the clock:
    `respond` (default `echo`) after `latency` + jitter; faults are attributes."""

    def __init__(self, clock: Any, rng: random.Random | None = None) -> None:
        self.clock = clock
        self.rng = rng or random.Random(0)
        self.respond: Respond = echo
        self.plugged = True
        self.hung = False
        self.latency = 0.0
        self.jitter = 0.0
        self.drop = 0.0
        self.duplicate = 0.0
        self.early_event: bytes | None = None  #: sent before the reply to the next ping
        self.ignore: bytes | None = None  #: requests starting so are never answered
        self.requests: list[tuple[float, bytes]] = []
        self.opens: list[float] = []
        self.wire: Wire | None = None

    async def open_link(self, cfg: Any, _port: str, handler: LinkHandler, _t: float) -> Wire:
        self.opens.append(self.clock.time())
        if not self.plugged:
            raise OpenError("No such file or directory")
        wire = self.wire = Wire(_config_of(handler), handler)
        wire.on_request = lambda request: self._on_request(wire, request)
        return wire

    def _on_request(self, wire: Wire, request: PortRequest) -> None:
        payload = request.payload
        self.requests.append((self.clock.time(), payload))
        if self.hung or (self.drop and self.rng.random() < self.drop):
            return
        if self.ignore is not None and payload and payload.startswith(self.ignore):
            return
        if self.early_event is not None and not payload:
            wire.deliver(wire.event(self.early_event))
            self.early_event = None
        answer = self.respond(request)
        if answer is None:
            return
        reply = wire.reply(request, *answer)
        copies = 2 if self.duplicate and self.rng.random() < self.duplicate else 1
        for _ in range(copies):
            delay = self.latency + self.rng.uniform(0, self.jitter)
            self.clock.call_later(delay, wire.deliver, reply)

    def unplug(self) -> None:
        """The adapter is pulled: the fd hangs up and the path is gone until replugged."""
        self.plugged = False
        wire, self.wire = self.wire, None
        if wire is not None and not wire.closed:
            wire.closed = True
            wire.handler.link_lost("hangup")

    def pings(self) -> list[float]:
        return [t for t, payload in self.requests if not payload]


def _config_of(handler: LinkHandler) -> Config:
    """The config of the session the opener serves (the handler is the session)."""
    assert isinstance(handler, Session)
    return handler.cfg
