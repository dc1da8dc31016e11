"""The link's life: open, handshake, serve until lost, back off, repeat.

Strategy: the supervisor owns the link's life and is the session's only asyncio
task. It asks the link state machine when the next attempt is due
(`Link.retry_in`), opens the port with `open_port` (a parameter, so tests
hand it a fake device), attaches it to the session and pings for the handshake;
then it sleeps until the link is lost or someone asks for a reconnect. Every loss
(hang-up, EIO, dead heartbeat, desync, a failed handshake, a reconnect asked for)
comes through `lose`, and every transition is announced here, an outage once
(`outage.Outage`). The steps that need no waiting (`attempt`, `opened`, `lose`,
`came_up`) are plain methods on the session's clock, so a test drives them with a
manual clock (`verld.testing.session`). Every time it hands the link, and every
wait it times, is read from that one clock (`now`: the session's `clock`, which
is the loop in the daemon); it drives the link state machine (the session's
`link`) and acts on the session only through its surface (`attach`, `send_ping`,
`proves_alive`, `fail_queued`, `take_inflight`, `finish`, `detach`...), never
reaching into its parts (timekeeper, line, codec). Stopping (`close`) lets
in-flight calls finish for up to `api.drain` seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from verld.config import DeviceConfig
from verld.errors import ErrorCode, OpenError
from verld.links.link import LinkState, Transition
from verld.links.port import open_port
from verld.links.transport import LinkHandler, LinkTransport
from verld.session.calls import CallResult
from verld.session.outage import Outage, log_transition
from verld.session.session import Session

Opener = Callable[[DeviceConfig, str, LinkHandler, float], Awaitable[LinkTransport]]
LinkSink = Callable[[Transition], None]
Answered = Callable[[CallResult], None]


def _heard(nbytes: int, bad_frames: int) -> str:
    """What came instead of the handshake's answer, when anything did: bytes the codec
    could not read mean a device speaking another codec or at another baud rate."""
    if not nbytes:
        return ""
    frames = f" and {bad_frames} bad frame{'s' * (bad_frames != 1)}" if bad_frames else ""
    return f" ({nbytes} byte{'s' * (nbytes != 1)}{frames} arrived: wrong codec or baud rate?)"


class Supervisor:
    """Keeps one session's link open."""

    def __init__(self, session: Session, on_link: LinkSink, opener: Opener = open_port) -> None:
        self.session = session
        self._on_link = on_link  #: a transition to tell (once per outage: `Outage`)
        self._open = opener
        self._outage = Outage()
        self._wake: asyncio.Future[None] | None = None
        self._opening = False  #: an open is under way (a TCP connect may take a while)
        #: the link state machine whose transitions it drives (made by the session)
        self.link = session.link
        self.clock = session.clock  #: the session's clock: every step's and wait's
        session.on_lost = self.lose

    def now(self) -> float:
        """The time on the session's clock: the one clock of every step and wait."""
        return self.clock.time()

    async def run(self) -> None:
        """Until `close`: connect whenever the link is down and an attempt is due."""
        link = self.link
        while not link.closing:
            if link.inhibited_by is not None:
                await self._sleep(None)  # the port belongs to another program: hands off
                continue
            delay = link.retry_in(self.now())
            if delay > 0:
                await self._sleep(delay)
                continue  # re-check: closing or a reconnect request may have come meanwhile
            self.attempt()
            if await self._connect():
                await self._sleep(None)

    # --- the steps of one attempt (no waiting in them) ----------------------------------
    def attempt(self) -> None:
        """An open attempt starts."""
        self.announce(self.link.attempt(self.now()))

    def opened(self, transport: LinkTransport, answered: Answered) -> None:
        """The port opened: attach it and ping for the handshake; `answered` gets the
        ping's result (at once, ok, when the codec has no ping)."""
        s = self.session
        s.attach(transport)

        def handshake(result: CallResult) -> None:
            # Up at once, inside the reply's handling: an event right behind the reply
            # (same read) then already belongs to the new generation.
            if s.proves_alive(result) and self.link.state is LinkState.CONNECTING:
                self.came_up()
            answered(result)

        if s.ping_payload is None:
            handshake(CallResult(None, "ok", 0, b"", None, 0.0, self.link.generation))
            return
        s.send_ping(handshake)

    def came_up(self) -> None:
        """The handshake was answered (or there is none): a new link session."""
        s = self.session
        self.announce(self.link.opened(self.now()))
        s.resume()

    def handshaken(self, transport: LinkTransport, result: CallResult, heard: str) -> bool:
        """The handshake's result: True when the link is up (else it was lost)."""
        s = self.session
        if s.attached is not transport:
            return False  # lost during the handshake; that was announced
        if not s.proves_alive(result):
            heard = heard if result.error == ErrorCode.TIMEOUT else ""
            self.lose(f"handshake failed: {result.message}{heard}")
            return False
        return True

    def lose(self, reason: str) -> None:
        """The link is gone (hang-up, EIO, dead heartbeat, desync...) or to be dropped
        (a reconnect, a failed handshake): one path for every cause."""
        s, link = self.session, self.link
        if link.state not in (LinkState.UP, LinkState.CONNECTING):
            return
        s.detach()
        transition = link.lost(self.now(), reason)
        for call in s.take_inflight():
            s.finish(call, ErrorCode.LINK_DOWN, f"link lost: {reason}")
        s.fail_queued(ErrorCode.LINK_DOWN, f"link lost: {reason}", everyone=False)
        self.announce(transition)
        self._wakeup()

    def announce(self, transition: Transition) -> None:
        """Log a transition and tell the link listener (an outage once: `outage.Outage`)."""
        s = self.session
        now, link = self.now(), self.link
        told = self._outage.tell(transition, now)
        log_transition(
            transition,
            port=s.port,
            retry_in=link.retry_in(now),
            level=told.level,
            attempts=link.attempts,
            remind=told.remind,
        )
        if told.event:
            self._on_link(transition)

    # --- one attempt, waited for ---------------------------------------------------------
    async def _connect(self) -> bool:
        s, loop = self.session, asyncio.get_running_loop()
        self._opening = True
        try:
            transport = await self._open(s.cfg.device, s.port, s, s.cfg.device.timeout)
        except OpenError as exc:
            self.announce(self.link.lost(self.now(), f"open failed: {exc}"))
            return False
        finally:
            self._opening = False
        if self.link.closing or self.link.inhibited_by is not None:
            transport.close()  # (inhibit() waits for this open, then says `inhibited`)
            return False
        rx, bad = transport.bytes_rx, s.bad_frames
        answer: asyncio.Future[CallResult] = loop.create_future()

        def answered(result: CallResult) -> None:
            if not answer.done():
                answer.set_result(result)

        self.opened(transport, answered)
        result = await answer
        return self.handshaken(
            transport, result, _heard(transport.bytes_rx - rx, s.bad_frames - bad)
        )

    def request_reconnect(self, reason: str = "reconnect requested") -> None:
        """Drop the link now and reopen it (the admin `reconnect` op, a reload)."""
        s = self.session
        if self.link.state in (LinkState.UP, LinkState.CONNECTING) and s.attached is not None:
            self.lose(reason)
        elif self.link.state is LinkState.DOWN:
            self.link.retry_now()
            self._wakeup()

    # --- inhibit: the port handed to another program ------------------------------------
    def inhibit(self, reason: str) -> None:
        """Start letting go of the port for another program ("inhibited by pid N"):
        from now on new calls are refused `busy` with `reason` (or wait), queued ones
        fail so, and nothing more goes out. `let_go` finishes the job."""
        s = self.session
        self.link.begin_inhibit(reason)
        s.fail_queued(ErrorCode.BUSY, reason, everyone=False)

    async def let_go(self, reason: str) -> None:
        """The calls on the link finish, or fail `link_down` after `device.timeout`;
        then the port is closed and the link `inhibited` until `release`."""
        s = self.session
        await self._settle(self.now() + s.cfg.device.timeout)
        if self.link.inhibited_by != reason or self.link.closing:
            return  # released (its holder went away) or stopping meanwhile: hands off
        for call in s.take_inflight():
            s.finish(call, ErrorCode.LINK_DOWN, f"link {reason}")
        s.detach()
        self.announce(self.link.inhibit(self.now(), reason))
        self._wakeup()

    def release(self) -> None:
        """End an inhibition: the port is reopened (flush, handshake) at once."""
        s = self.session
        if self.link.inhibited_by is None:
            return
        if self.link.end_inhibit():
            self._wakeup()
        else:  # released before the port was let go of: the link is as it was
            s.pump()

    # --- stopping ----------------------------------------------------------------------
    async def _settle(self, deadline: float) -> None:
        """Until no client call is on the link and no open is under way, or `deadline`."""
        # Polled, only while stopping or inhibiting: a hook would cost every call's path.
        while (self.session.inflight_calls() or self._opening) and self.now() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    async def close(self, drain: float) -> None:
        """Stop: fail queued calls, let in-flight ones finish for up to `drain` s."""
        s = self.session
        self.link.begin_close()
        s.fail_queued(ErrorCode.SHUTTING_DOWN, "verld is shutting down", everyone=True)
        await self._settle(self.now() + drain)
        for call in s.take_inflight():
            s.finish(call, ErrorCode.SHUTTING_DOWN, "verld is shutting down")
        s.detach()
        if self.link.state is not LinkState.CLOSED:
            self.announce(self.link.close(self.now()))
        self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _sleep(self, delay: float | None) -> None:
        """Until woken, or `delay` seconds on the session's clock (None: until woken)."""
        self._wake = asyncio.get_running_loop().create_future()
        clock = self.clock
        handle = None if delay is None else clock.call_at(self.now() + delay, self._wakeup)
        try:
            await self._wake
        finally:
            if handle is not None:
                handle.cancel()
