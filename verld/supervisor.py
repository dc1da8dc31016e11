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


def _heard(nbytes: int, bad_frames: int) -> str:
    """What came instead of the handshake's answer, when anything did: bytes the codec
    could not read mean a device speaking another codec or at another baud rate."""
    if not nbytes:
        return ""
    frames = f" and {bad_frames} bad frame{'s' * (bad_frames != 1)}" if bad_frames else ""
    return f" ({nbytes} byte{'s' * (nbytes != 1)}{frames} arrived: wrong codec or baud rate?)"


class Supervisor:
    """Keeps one session's link open."""

    def __init__(self, session: Session, opener: Opener = open_link) -> None:
        self.session = session
        self._open = opener
        self._wake: asyncio.Future[None] | None = None
        self._opening = False  #: an open is under way (a TCP connect may take a while)
        session.on_lost = self._wakeup

    async def run(self) -> None:
        """Until `close`: connect whenever the link is down and an attempt is due."""
        s, loop = self.session, asyncio.get_running_loop()
        while not s.closing:
            if s.inhibited_by is not None:
                await self._sleep(None)  # the port belongs to another program: hands off
                continue
            delay = s.link.retry_in(loop.time())
            if delay > 0:
                await self._sleep(delay)
                continue  # re-check: closing or a reconnect request may have come meanwhile
            s.announce(s.link.attempt(loop.time()))
            if await self._connect():
                await self._sleep(None)

    async def _connect(self) -> bool:
        s, loop = self.session, asyncio.get_running_loop()
        self._opening = True
        try:
            transport = await self._open(s.cfg.device, s.port, s, s.cfg.device.timeout)
        except OpenError as exc:
            s.announce(s.link.lost(loop.time(), f"open failed: {exc}"))
            return False
        finally:
            self._opening = False
        if s.closing or s.inhibited_by is not None:
            transport.close()  # (inhibit() waits for this open, then says `inhibited`)
            return False
        s.attach(transport)
        rx, bad = transport.bytes_rx, s.codec.bad_frames
        result = await self._handshake()
        if s.attached is not transport:
            return False  # lost during the handshake; the session announced it
        if not s.proves_alive(result):
            timed_out = result.error == ErrorCode.TIMEOUT
            heard = _heard(transport.bytes_rx - rx, s.codec.bad_frames - bad) if timed_out else ""
            s.lose(f"handshake failed: {result.message}{heard}")
            return False
        return True

    async def _handshake(self) -> CallResult:
        """Ping the device; up at once when it answers (or when there is no ping)."""
        s = self.session
        answer: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()

        def answered(result: CallResult) -> None:
            # Up at once, inside the reply's handling: an event right behind the reply
            # (same read) then already belongs to the new generation.
            if s.proves_alive(result) and s.link.state is LinkState.CONNECTING:
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

    def inhibit(self, reason: str) -> None:
        """Start letting go of the port for another program ("inhibited by pid N"):
        from now on new calls are refused `busy` with `reason` (or wait), queued ones
        fail so, and nothing more goes out. `let_go` finishes the job."""
        s = self.session
        s.inhibited_by = reason
        s.timers.fail_queued(ErrorCode.BUSY, reason, everyone=False)

    async def let_go(self, reason: str) -> None:
        """The calls on the link finish, or fail `link_down` after `device.timeout`;
        then the port is closed and the link `inhibited` until `release`."""
        s, loop = self.session, asyncio.get_running_loop()
        await self._settle(loop.time() + s.cfg.device.timeout)
        if s.inhibited_by != reason or s.closing:
            return  # released (its holder went away) or stopping meanwhile: hands off
        for call in s.take_inflight():
            s.finish(call, ErrorCode.LINK_DOWN, f"link {reason}")
        s.drop_transport()
        s.announce(s.link.inhibit(loop.time(), reason))
        self._wakeup()

    def release(self) -> None:
        """End an inhibition: the port is reopened (flush, handshake) at once."""
        s = self.session
        if s.inhibited_by is None:
            return
        s.inhibited_by = None
        if s.link.state is LinkState.INHIBITED:
            s.link.release()
            self._wakeup()
        else:  # released before the port was let go of: the link is as it was
            s.pump()

    async def _settle(self, deadline: float) -> None:
        """Until no client call is on the link and no open is under way, or `deadline`."""
        loop = asyncio.get_running_loop()
        # Polled, only while stopping or inhibiting: a hook would cost every call's path.
        while (self.session.inflight_calls() or self._opening) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    async def close(self, drain: float) -> None:
        """Stop: fail queued calls, let in-flight ones finish for up to `drain` s."""
        s, loop = self.session, asyncio.get_running_loop()
        s.closing = True
        s.timers.fail_queued(ErrorCode.SHUTTING_DOWN, "verld is shutting down", everyone=True)
        await self._settle(loop.time() + drain)
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
