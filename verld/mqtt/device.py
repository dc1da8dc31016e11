"""One verld socket, as the bridge sees it: connection, state, events, calls.

Strategy: `Device.run` is one reconnect loop per verld socket, independent of the
broker and of the other devices (one verld restarting disturbs no one else). Each
connection says hello as "verld-mqtt", subscribes to `events` and `link`, fetches
`status` (so the state is right after every reconnect, not only after the next link
change), and then follows the event stream; the backoff between failed attempts
starts at 0.1 s and doubles to 5 s, and resets once a connection is made.

The device never publishes itself: it puts retained state and status, and events,
into the bridge's `Outbox` (which bounds them while the broker is away).

Calls run concurrently on the current connection. To verld the bridge is one client:
verld's fair queue serves its calls in the order the bridge sent them, and they all
count toward one client's share (`api.client_queue`). So the bridge keeps its own turns:
`FairSlots` hands calls to verld at most `slots.limit` at once, and calls waiting for a
slot take turns by requester (the topic their reply goes to), so one publisher's burst
cannot keep another's call waiting behind all of it. The limit is the device's window
plus one (`hello`'s `device.window`: one call on the link at a time on `line`,
`length` and `modbus-rtu`, so 2 there), enough to keep the device busy while the calls
waiting for it wait in the bridge, in turns; at most `MAX_IN_FLIGHT`. It is learned
downwards too: a call verld refuses `busy` because the bridge's share is full
(`share_full`) lowers it to the calls then in flight and waits for its next turn instead
of failing (dispatch.py). Each new verld connection starts again (a reload may have
changed the window or the share).

The connection is a `verld.client.AsyncClient` with an `on_event` callback (an asyncio
Protocol: no reader task, events handed over as they are read, a call written at once by
`send`). A call must get its one reply even when the connection dies under it: its
future fails when the connection ends, and a call made after that answers `link_down`
at once. A verld that stops answering `status` within
`STATUS_TIMEOUT` is treated as gone (a hung daemon looks like a live socket).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from verld.client.aio import AsyncClient
from verld.client.messages import ClientError, Unreachable
from verld.mqtt.calls import error_reply
from verld.mqtt.outbox import Outbox
from verld.mqtt.topics import DeviceState, Topics, event_payload, status_payload

log = structlog.get_logger("verld.mqtt.device")

#: the most calls handed to verld at once for one device (verld's api.client_queue
#: default: more from one client get `busy`); fewer on a device with a small window
MAX_IN_FLIGHT = 256
#: requests accepted for one device (running or waiting for a slot); beyond: `busy`
MAX_PENDING = 4096
#: of which one requester (one reply topic) may have at most this many
MAX_PENDING_EACH = 1024
STATUS_TIMEOUT = 10.0
CLIENT_NAME = "verld-mqtt"
#: how verld words a `busy` for a client whose share (api.client_queue) is full
_SHARE_FULL = "too many calls waiting or in flight"


def in_flight(window: Any) -> int:
    """Calls handed to verld at once for a device with this window (`hello`'s)."""
    if type(window) is not int or window < 1:
        return MAX_IN_FLIGHT
    return min(MAX_IN_FLIGHT, window + 1)


def share_full(reply: dict[str, Any]) -> bool:
    """Whether verld refused this call because the bridge's own share was full (not a
    lease, an inhibit or verld's whole queue: those are the caller's answer)."""
    error = reply.get("error") if not reply.get("ok") else None
    return (
        isinstance(error, dict)
        and error.get("code") == "busy"
        and _SHARE_FULL in str(error.get("message", ""))
    )


class FairSlots:
    """At most `limit` calls in flight; calls waiting for a slot are served in turns by
    requester (round-robin), in order within one requester. A requester that starts
    waiting takes its turn before the one served last (which, with calls left, went to
    the back of the ring just before): otherwise a busy requester would be served twice
    in a row ahead of a newcomer whose call came while the first of the two ran."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.busy = 0  #: slots held
        self._lanes: dict[str, deque[asyncio.Future[None]]] = {}
        self._ring: deque[str] = deque()
        self._last: str | None = None  #: the requester served last

    @property
    def waiting(self) -> int:
        return sum(len(lane) for lane in self._lanes.values())

    async def acquire(self, requester: str, *, first: bool = False) -> None:
        """Wait for a slot (`first`: ahead of this requester's other waiting calls)."""
        if self.busy < self.limit and not self._ring:
            self.busy += 1
            self._last = requester
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane = self._lanes.get(requester)
        if lane is None:
            lane = self._lanes[requester] = deque()
            ring = self._ring
            if ring and ring[-1] == self._last:
                ring.insert(len(ring) - 1, requester)
            else:
                ring.append(requester)
        if first:
            lane.appendleft(fut)
        else:
            lane.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # (granted as it was cancelled: not used, so given back)
            else:
                self._forget(requester, fut)
            raise

    def release(self) -> None:
        self.busy -= 1
        self._grant()

    def shrink(self, limit: int) -> bool:
        """Lower the limit (never below 1); whether it changed."""
        limit = max(1, limit)
        if limit >= self.limit:
            return False
        self.limit = limit
        return True

    def reset(self, limit: int) -> None:
        self.limit = limit
        self._grant()

    def _grant(self) -> None:
        ring, lanes = self._ring, self._lanes
        while self.busy < self.limit and ring:
            requester = ring.popleft()
            lane = lanes[requester]
            fut = lane.popleft()
            if lane:
                ring.append(requester)
            else:
                del lanes[requester]
            if not fut.done():
                fut.set_result(None)
                self.busy += 1
                self._last = requester

    def _forget(self, requester: str, fut: asyncio.Future[None]) -> None:
        lane = self._lanes.get(requester)
        if lane is None or fut not in lane:
            return
        lane.remove(fut)
        if not lane:
            del self._lanes[requester]
            self._ring.remove(requester)


@dataclass(slots=True)
class Backoff:
    """Reconnect delays: `initial`, doubling to `cap`; `reset` after a success."""

    initial: float = 0.1
    cap: float = 5.0
    current: float = field(default=0.0)

    def next(self) -> float:
        self.current = self.initial if self.current == 0 else min(self.current * 2, self.cap)
        return self.current

    def reset(self) -> None:
        self.current = 0.0


class Device:
    """One verld socket; see the module docstring."""

    def __init__(
        self,
        name: str,
        socket_path: str,
        topics: Topics,
        outbox: Outbox,
        *,
        status_interval: float,
        on_change: Callable[[Device], None] = lambda _device: None,
    ) -> None:
        self.name, self.socket_path = name, socket_path
        self.topics, self.outbox = topics, outbox
        self.status_interval = status_interval
        self.on_change = on_change
        self.state = DeviceState()
        self.daemon: str | None = None  #: hello's "verld X.Y.Z"
        self.max_payload: int | None = None
        self.pending = 0  #: calls accepted and not yet answered
        self.pending_by: Counter[str] = Counter()  #: the same, by requester (reply topic)
        self.slots = FairSlots(MAX_IN_FLIGHT)
        self.verld_dropped = 0  #: events verld dropped for this client (overflow)
        self._conn: AsyncClient | None = None
        self._reason = "not connected yet"
        self._warned = False
        self._kick = asyncio.Event()

    @property
    def reachable(self) -> bool:
        return self._conn is not None

    # --- the connection loop ---------------------------------------------------------
    async def run(self) -> None:
        """Connect, follow, reconnect: until cancelled."""
        backoff = Backoff()
        while True:
            conn = AsyncClient(self.socket_path, on_event=self._on_event)
            try:  # (closed however this ends, cancelled too)
                await conn.connect()
                hello, status = await self._open(conn)
            except (ClientError, OSError, ValueError, TimeoutError) as exc:
                reason = _reason(exc)
            else:
                backoff.reset()
                await self._follow(conn, hello, status)
                reason = self._reason
            finally:
                await conn.close()
            self._unreachable(reason, backoff.next())
            await asyncio.sleep(backoff.current)

    async def _open(self, conn: AsyncClient) -> tuple[dict[str, Any], dict[str, Any]]:
        async with asyncio.timeout(STATUS_TIMEOUT):
            hello = await conn.hello(CLIENT_NAME)
            await conn.subscribe(["events", "link"])
            status = await conn.status()
        return hello, status

    async def _follow(
        self, conn: AsyncClient, hello: dict[str, Any], status: dict[str, Any]
    ) -> None:
        """Serve one connection until verld closes it, or stops answering `status` (the
        caller closes the connection)."""
        device = hello.get("device")
        window = device.get("window") if isinstance(device, dict) else None
        self.slots.reset(in_flight(window))  # (learned again on each connection)
        daemon = hello.get("daemon")
        self.daemon = daemon if isinstance(daemon, str) else None
        max_payload = device.get("max_payload") if isinstance(device, dict) else None
        self.max_payload = max_payload if type(max_payload) is int else None
        self._reason, self._warned = "verld closed the connection", False
        log.info(
            "verld_connected",
            device=self.name,
            socket=self.socket_path,
            daemon=self.daemon,
            link=_link_state(status),
        )
        self._status(status)
        self._conn = conn  # (reachable before the change is told: entities poll at once)
        self._set(self.state.from_status(status), force=True)
        poller = asyncio.create_task(self._poll(conn))
        lost = asyncio.create_task(conn.wait_closed())
        try:
            await asyncio.wait((lost, poller), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._conn = None
            await conn.close()  # (calls in flight answer link_down)
            lost.cancel()
            poller.cancel()
            try:
                await poller
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # a bug: logged, and the connection starts over
                log.error("device_task_crashed", device=self.name, error=repr(exc), exc_info=exc)
            await asyncio.gather(lost, return_exceptions=True)

    def _unreachable(self, reason: str, retry_in: float) -> None:
        """Logged once per outage (then at DEBUG); the state says `unreachable`."""
        fields = {"device": self.name, "reason": reason, "retry_in": retry_in}
        if not self._warned:
            self._warned = True
            log.warning("verld_unreachable", socket=self.socket_path, **fields)
        else:
            log.debug("verld_unreachable", **fields)
        self._set(self.state.unreachable())

    def _set(self, state: DeviceState, *, force: bool = False) -> None:
        changed = force or state != self.state
        self.state = state
        self.outbox.retain(self.topics.state(self.name), state.payload())
        if changed:
            self.on_change(self)

    def _status(self, reply: dict[str, Any]) -> None:
        self.outbox.retain(self.topics.status(self.name), status_payload(reply))

    # --- events and status -----------------------------------------------------------
    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "device":
            payload = event_payload(event)
            if payload is not None:
                self.outbox.event(self.topics.event(self.name), payload)
        elif kind == "link":
            log.info(
                "verld_link",
                device=self.name,
                state=event.get("state"),
                reason=event.get("reason"),
                generation=event.get("generation"),
            )
            self._set(self.state.from_link_event(event))
            if self.status_interval == 0:
                self._kick.set()  # (a status snapshot on each link change)
        elif kind == "overflow":
            dropped = event.get("dropped")
            self.verld_dropped += dropped if type(dropped) is int else 0
            log.warning("events_dropped", device=self.name, where="verld", dropped=dropped)

    async def _poll(self, conn: AsyncClient) -> None:
        """A status snapshot every status_interval (0: when a link event kicks it);
        returns when verld does not answer one."""
        self._kick.clear()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.status_interval or None):
                    await self._kick.wait()
            self._kick.clear()
            if not await self._fetch(conn):
                return

    async def _fetch(self, conn: AsyncClient) -> bool:
        try:
            async with asyncio.timeout(STATUS_TIMEOUT):
                reply = await conn.status()
        except (ClientError, OSError, TimeoutError) as exc:
            self._reason = f"status failed: {_reason(exc)}"
            return False
        self._status(reply)
        self._set(self.state.from_status(reply))
        return True

    # --- calls -----------------------------------------------------------------------
    async def call(self, fields: dict[str, Any], size: int) -> dict[str, Any]:
        """One call's API reply (a dict with `ok`); never raises for verld's sake."""
        conn = self._conn
        if conn is None:
            return error_reply("link_down", f"verld is unreachable ({self._reason})")
        if self.max_payload is not None and size > self.max_payload:
            return error_reply(
                "bad_request",
                f"{size} bytes of data is more than the device's max_payload ({self.max_payload})",
            )
        try:
            return await conn.send("call", **fields)
        except Unreachable as exc:
            return error_reply("link_down", f"the connection to verld was lost: {exc.message}")
        except ClientError as exc:
            return exc.reply or error_reply(exc.code, exc.message)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return exc.message if isinstance(exc, Unreachable) else f"{exc.code}: {exc.message}"
    if isinstance(exc, TimeoutError):
        return f"no answer within {STATUS_TIMEOUT:g} s"
    return str(exc) or type(exc).__name__


def _link_state(status: dict[str, Any]) -> Any:
    link = status.get("link")
    return link.get("state") if isinstance(link, dict) else None
