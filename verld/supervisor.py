"""The connect loop: open the link, handshake, serve until lost, back off, repeat.

Strategy: the supervisor is the session's only asyncio task. It asks the link state
machine when the next attempt is due (`Link.retry_in`), opens the transport with
`open_link` (a parameter, so tests hand it a fake device), attaches it to the
session and waits for the handshake's answer; then it sleeps until the session says
the link was lost (`Session.on_lost`) or someone asks for a reconnect. Stopping
(`close`) lets in-flight calls finish for up to `api.drain` seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from verld.calls import CallResult
from verld.config import DeviceConfig
from verld.errors import ErrorCode, OpenError
from verld.link import LinkState
from verld.session import Session
from verld.transport import LinkHandler, LinkTransport, open_link

Opener = Callable[[DeviceConfig, str, LinkHandler, float], Awaitable[LinkTransport]]


class Supervisor:
    """Keeps one session's link open."""

    def __init__(self, session: Session, opener: Opener = open_link) -> None:
        self.session = session
        self._open = opener
        self._wake: asyncio.Future[None] | None = None
        session.on_lost = self._wakeup

    async def run(self) -> None:
        """Until `close`: connect whenever the link is down and an attempt is due."""
        s, loop = self.session, asyncio.get_running_loop()
        while not s.closing:
            delay = s.link.retry_in(loop.time())
            if delay > 0:
                await self._sleep(delay)
                continue  # re-check: closing or a reconnect request may have come meanwhile
            s.announce(s.link.attempt(loop.time()))
            if await self._connect():
                await self._sleep(None)

    async def _connect(self) -> bool:
        s, loop = self.session, asyncio.get_running_loop()
        try:
            transport = await self._open(s.cfg.device, s.port, s, s.cfg.device.timeout)
        except OpenError as exc:
            s.announce(s.link.lost(loop.time(), f"open failed: {exc}"))
            return False
        if s.closing:
            transport.close()
            return False
        s.attach(transport)
        result = await self._handshake()
        if s.attached is not transport:
            return False  # lost during the handshake; the session announced it
        if result.error is not None:
            s.lose(f"handshake failed: {result.message}")
            return False
        return True

    async def _handshake(self) -> CallResult:
        """Ping the device; up at once when it answers (or when there is no ping)."""
        s = self.session
        answer: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()

        def answered(result: CallResult) -> None:
            # Up at once, inside the reply's handling: an event right behind the reply
            # (same read) then already belongs to the new generation.
            if result.error is None and s.link.state is LinkState.CONNECTING:
                s.came_up()
            if not answer.done():
                answer.set_result(result)

        if s.ping_payload is None:
            s.came_up()
            return CallResult(None, "ok", 0, b"", None, 0.0, s.link.generation)
        s.send([s.timers.ping(answered)])
        return await answer

    def request_reconnect(self, reason: str = "reconnect requested") -> None:
        """Drop the link now and reopen it (the admin `reconnect` op, a reload)."""
        s = self.session
        if s.link.state in (LinkState.UP, LinkState.CONNECTING) and s.attached is not None:
            s.lose(reason)
        elif s.link.state is LinkState.DOWN:
            s.link.next_attempt = 0.0
            self._wakeup()

    async def close(self, drain: float) -> None:
        """Stop: fail queued calls, let in-flight ones finish for up to `drain` s."""
        s, loop = self.session, asyncio.get_running_loop()
        s.closing = True
        s.timers.fail_queued(ErrorCode.SHUTTING_DOWN, "verld is shutting down", everyone=True)
        deadline = loop.time() + drain
        # Polled, only while stopping: a wake-up hook would cost every call's path.
        while s.inflight_calls() and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        for call in s.take_inflight():
            s.finish(call, ErrorCode.SHUTTING_DOWN, "verld is shutting down")
        s.drop_transport()
        if s.link.state is not LinkState.CLOSED:
            s.announce(s.link.close(loop.time()))
        self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _sleep(self, delay: float | None) -> None:
        """Until woken, or `delay` seconds (None: until woken)."""
        loop = asyncio.get_running_loop()
        self._wake = loop.create_future()
        handle = None if delay is None else loop.call_later(delay, self._wakeup)
        try:
            await self._wake
        finally:
            if handle is not None:
                handle.cancel()
