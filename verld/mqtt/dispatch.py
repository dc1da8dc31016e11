"""Requests from the broker to calls on the devices, and their answers back to the outbox.

Strategy: the broker reader hands each call request to `Dispatcher.receive`, which
asks `calls.Intake` what it gets and does that: an `Answer` goes into the outbox at
once, a `Drop` or a `Joined` is only logged, and a `Run` becomes one task of the
bridge's owner (`Tasks`: calls outlive a broker connection). A device takes at most
`MAX_PENDING` requests (`MAX_PENDING_EACH` per requester, the topic the reply goes
to); beyond, the answer is `busy` at once. A call then waits its turn for one of the
device's slots (`device.FairSlots`, in turns by requester) and goes to verld; a
`busy` for the bridge's own full share at verld lowers the slots to the calls then
in flight, and the call waits for its next turn (at most `SHARE_RETRIES` times). Its
answer goes into the outbox, which publishes it if the broker is connected and drops
it (counted) if not. At a clean stop `drain` lets the calls in flight finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import structlog

from verld.mqtt.calls import Answer, Drop, Intake, Joined, Run, error_reply
from verld.mqtt.device import MAX_PENDING, MAX_PENDING_EACH, Device, share_full
from verld.mqtt.outbox import Outbox
from verld.mqtt.tasks import Tasks

log = structlog.get_logger("verld.mqtt.bridge")  # (these are the bridge's events)

#: times one call waits for another turn after verld said the bridge's share was full
SHARE_RETRIES = 64


class Dispatcher:
    """Carries out `Intake`'s verdict on each request; see the module docstring."""

    def __init__(
        self, intake: Intake, devices: Mapping[str, Device], outbox: Outbox, tasks: Tasks
    ) -> None:
        self.intake, self.devices, self.outbox = intake, devices, outbox
        self._tasks = tasks  #: the bridge's owner, where calls run
        self._calls: set[asyncio.Task[None]] = set()  #: the calls running, for `drain`
        self._loop = asyncio.get_running_loop()

    def receive(
        self,
        device: str,
        payload: bytes,
        *,
        response_topic: str | None,
        correlation: bytes | None,
        expiry: int | None,
    ) -> None:
        """One request published on `<base>/<device>/call`, with its MQTT 5 properties."""
        action = self.intake.receive(
            device,
            payload,
            self._loop.time(),
            response_topic=response_topic,
            correlation=correlation,
            expiry=expiry,
        )
        if isinstance(action, Answer):
            self._send(action, device)
        elif isinstance(action, Run):
            self._start(action)
        elif isinstance(action, Drop):
            log.info("call_dropped", device=device, reason=action.reason)
        elif isinstance(action, Joined):
            log.debug("call_redelivered", device=device, reply_to=action.route.topic)

    async def drain(self, deadline: float) -> None:
        """Wait for the calls running now to finish, until `deadline` (the loop's time)."""
        if self._calls:
            await asyncio.wait(list(self._calls), timeout=max(0.0, deadline - self._loop.time()))

    def _start(self, run: Run) -> None:
        device = self.devices[run.device]
        requester = run.route.topic
        if device.pending >= MAX_PENDING:
            busy = error_reply("busy", f"{device.pending} requests already wait for this device")
            self._send(self.intake.finish(run, busy, self._loop.time()), run.device)
            return
        if device.pending_by[requester] >= MAX_PENDING_EACH:
            busy = error_reply(
                "busy",
                f"{MAX_PENDING_EACH} requests replied to on {requester} "
                "already wait for this device",
            )
            self._send(self.intake.finish(run, busy, self._loop.time()), run.device)
            return
        device.pending += 1
        device.pending_by[requester] += 1
        task = self._tasks.start(self._call(device, run))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _call(self, device: Device, run: Run) -> None:
        requester = run.route.topic
        try:
            reply = await self._run(device, run, requester)
        finally:
            device.pending -= 1
            device.pending_by[requester] -= 1
            if not device.pending_by[requester]:
                del device.pending_by[requester]
        if reply is not None:
            self._send(self.intake.finish(run, reply, self._loop.time()), device.name)

    async def _run(self, device: Device, run: Run, requester: str) -> dict[str, Any] | None:
        """The call's reply once a slot is had (in turn with the other requesters); None
        when it expired while waiting. A `busy` for the bridge's own full share at verld
        lowers the slots to the calls then in flight, and the call waits for its next turn."""
        slots = device.slots
        turn = 0
        while True:
            await slots.acquire(requester, first=turn > 0)
            try:
                if run.deadline is not None and self._loop.time() > run.deadline:
                    self.intake.expire(run)
                    log.info(
                        "call_dropped",
                        device=device.name,
                        reason="it expired while waiting in the bridge",
                    )
                    return None
                reply = await device.call(run.request.fields, run.request.size)
                if turn >= SHARE_RETRIES or not share_full(reply) or slots.busy <= 1:
                    return reply
                if slots.shrink(slots.busy - 1):
                    log.debug(
                        "calls_in_flight_limited",
                        device=device.name,
                        limit=slots.limit,
                        reason="verld's share for the bridge is full",
                    )
            finally:
                slots.release()
            turn += 1

    def _send(self, answer: Answer, device: str) -> None:
        if answer.code == "forbidden":
            log.warning("call_refused", device=device, reply_to=answer.routes[0].topic)
        for route in answer.routes:
            if not self.outbox.reply(route.topic, answer.reply, route.correlation):
                log.debug("reply_dropped", device=device, reason="the broker is not connected")
