"""The MQTT side: one broker connection, its reconnect loop, and the devices behind it.

Strategy: `Bridge.run` owns every task. Each device's verld connection runs on its
own (`verld.mqtt.device`), putting state, status and events into one `Outbox`; the
broker loop connects (clean start and no session expiry on MQTT 5, a clean session
on 3.1.1, the retained `offline` state as last will), publishes `online`,
subscribes to `<base>/+/call` (and `homeassistant/status` with discovery on), marks
every retained topic due again, and then runs two tasks until the connection
breaks: the reader, which hands each request to `calls.Intake` and starts the
calls it says to run, and the writer, which drains the outbox with a bounded
number of publishes in flight. A lost connection is retried with backoff (0.5 s
doubling to 30 s, jittered, so a fleet does not reconnect in step); the devices
never notice. Calls keep running across a broker reconnect: a reply is published
if the broker is connected when it is ready, and dropped (counted) if not.

On SIGTERM the reader stops taking requests, calls in flight get up to `DRAIN`
seconds to finish and their replies to go out, `offline` is published (retained)
and the connection is closed cleanly (so the will is not needed).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from typing import Any, TypeVar

import aiomqtt
import structlog
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from verld import systemd
from verld.mqtt.calls import Answer, Drop, Intake, Joined, Run, error_reply
from verld.mqtt.config import BridgeConfig, Secrets, short_host
from verld.mqtt.device import MAX_PENDING, MAX_PENDING_EACH, Backoff, Device, share_full
from verld.mqtt.outbox import Outbox, Outgoing
from verld.mqtt.topics import HA_PREFIX, HA_STATUS, Topics, bridge_state, discovery

log = structlog.get_logger("verld.mqtt.bridge")
T = TypeVar("T")

#: publishes awaiting their acknowledgement at once (paho's own in-flight window)
PUBLISH_WINDOW = 20
#: seconds calls in flight may take to finish at a clean stop
DRAIN = 2.0
DROP_REPORT_SECONDS = 5.0
#: seconds a broker session must last before the reconnect backoff starts over
STEADY = 10.0
#: seconds to wait for a publish's acknowledgement at stop
GOODBYE_TIMEOUT = 2.0
#: times one call waits for another turn after verld said the bridge's share was full
SHARE_RETRIES = 64


class Bridge:
    """verld sockets ↔ one broker; see the module docstring."""

    def __init__(self, cfg: BridgeConfig, secrets: Secrets | None = None) -> None:
        self.cfg, self.secrets = cfg, secrets or Secrets()
        self.host = short_host()
        self.topics = Topics(cfg.topic_base)
        self.outbox = Outbox()
        self.devices = {
            name: Device(name, path, self.topics, self.outbox,
                         status_interval=cfg.status_interval, on_change=self._device_changed)
            for name, path in cfg.devices.items()
        }  # fmt: skip
        self.intake = Intake(self.topics, self.devices.keys(), calls=cfg.calls)
        self.stopping = asyncio.Event()
        self.connected = False
        self._wake = asyncio.Event()
        self.outbox.wakeup = self._wake.set
        self._calls: set[asyncio.Task[None]] = set()
        self._loop = asyncio.get_running_loop()

    # --- the whole bridge ------------------------------------------------------------
    async def run(self) -> None:
        """Serve until `stopping` is set; then say offline and close."""
        if self.cfg.homeassistant:
            for device in self.devices.values():
                self._discovery(device)
        async with asyncio.TaskGroup() as tasks:
            helpers = [tasks.create_task(d.run(), name=f"device {d.name}")
                       for d in self.devices.values()]  # fmt: skip
            helpers.append(tasks.create_task(self._report_drops(), name="drops"))
            self.status_line()
            try:
                await self._broker_loop()
            finally:
                calls = list(self._calls)
                for task in [*helpers, *calls]:
                    task.cancel()
                await asyncio.gather(*calls, return_exceptions=True)
        c = self.intake.counters
        log.info("stopped", requests=c.requests, replies=c.replies, bad_requests=c.bad_requests,
                 refused=c.refused, expired=c.expired, duplicates=c.duplicates,
                 events_dropped=self.outbox.events_dropped,
                 replies_dropped=self.outbox.replies_dropped)  # fmt: skip

    def status_line(self) -> None:
        broker = f"{self.cfg.broker.host}:{self.cfg.broker.port}"
        devices = ", ".join(f"{d.name} {d.state.state}" for d in self.devices.values())
        word = "connected to" if self.connected else "waiting for"
        systemd.notify(f"STATUS=broker: {word} {broker}; devices: {devices or 'none'}")

    def _device_changed(self, device: Device) -> None:
        if self.cfg.homeassistant:
            self._discovery(device)
        self.status_line()

    def _discovery(self, device: Device) -> None:
        configs = discovery(self.topics, self.host, device.name, device.state.codec, device.daemon)
        for topic, payload in configs.items():
            self.outbox.retain(topic, payload)

    async def _report_drops(self) -> None:
        """Events dropped while the broker was slow or away: one warning per period."""
        while True:
            await asyncio.sleep(DROP_REPORT_SECONDS)
            dropped = self.outbox.drops_to_report()
            if dropped:
                log.warning("events_dropped", where="bridge", dropped=dropped,
                            total=self.outbox.events_dropped, connected=self.connected)  # fmt: skip

    # --- the broker connection ---------------------------------------------------------
    async def _broker_loop(self) -> None:
        backoff = Backoff(initial=0.5, cap=30.0)
        while not self.stopping.is_set():
            since: float | None = None
            client = self._client()
            try:
                if not await self._connect(client):
                    return
                since = self._loop.time()
                try:
                    await self._session(client)
                finally:
                    with contextlib.suppress(aiomqtt.MqttError):
                        await client.__aexit__(None, None, None)
                if self.stopping.is_set():
                    return
                reason = "the session ended"
            except aiomqtt.MqttError as exc:
                reason = _why(exc)
            if since is not None and self._loop.time() - since >= STEADY:
                backoff.reset()  # (a session that ends at once, e.g. kicked by a bridge
                # with the same client id, keeps backing off instead of flapping)
            delay = backoff.next() * random.uniform(0.5, 1.0)  # (jitter)
            self._lost(reason, delay, first=backoff.current == backoff.initial)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self.stopping.wait()

    def _client(self) -> aiomqtt.Client:
        b, cfg = self.cfg.broker, self.cfg
        will = aiomqtt.Will(self.topics.bridge_state, bridge_state(False), cfg.qos, retain=True)
        # A fresh session each time, ended with the connection (MQTT 5: clean start and
        # no Session Expiry Interval; 3.1.1: clean session), so requests published while
        # the bridge was away are never run late.
        if b.mqtt5:
            session: dict[str, Any] = {"protocol": aiomqtt.ProtocolVersion.V5, "clean_start": True}
        else:
            session = {"protocol": aiomqtt.ProtocolVersion.V311, "clean_session": True}
        return aiomqtt.Client(
            b.host,
            b.port,
            username=b.username,
            password=self.secrets.password,
            identifier=cfg.client_id,
            will=will,
            keepalive=b.keepalive,
            tls_context=self.secrets.tls,
            max_inflight_messages=PUBLISH_WINDOW,
            # No Nagle: a reply PUBLISH right after a PUBACK would otherwise wait for the
            # broker's delayed ACK, about 40 ms a call (measured by tools/bench-fleet).
            socket_options=((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),),
            **session,
        )

    async def _connect(self, client: aiomqtt.Client) -> bool:
        """Connect unless `stopping` comes first (False)."""
        connecting = asyncio.ensure_future(client.__aenter__())
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((connecting, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not connecting.done():
                connecting.cancel()
                # (a cancelled attempt must end before its result is asked for)
                with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                    await connecting
        if connecting.cancelled() or self.stopping.is_set():
            return False
        connecting.result()  # (raises MqttError when the attempt failed)
        return True

    async def _session(self, client: aiomqtt.Client) -> None:
        """One connection, until it breaks (MqttError) or the bridge stops."""
        qos = self.cfg.qos
        await client.publish(self.topics.bridge_state, bridge_state(True), qos, retain=True)
        await client.subscribe(self.topics.call_filter, qos)
        if self.cfg.homeassistant:
            await client.subscribe(HA_STATUS, qos)
        self.connected = True
        self.outbox.connect()
        b = self.cfg.broker
        log.info("mqtt_connected", host=b.host, port=b.port, protocol=b.protocol,
                 client_id=self.cfg.client_id, base=self.topics.base)  # fmt: skip
        self.status_line()
        reader = asyncio.create_task(self._read(client))
        writer = asyncio.create_task(self._write(client))
        stop = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait((reader, writer, stop), return_when=asyncio.FIRST_COMPLETED)
            if self.stopping.is_set():
                reader.cancel()
                await self._goodbye(client)
                return
            for task in (reader, writer):
                if task.done():
                    task.result()  # (MqttError: the connection broke)
            raise aiomqtt.MqttError("the connection ended")
        finally:
            self.connected = False
            self.outbox.disconnect()
            for task in (reader, writer):
                task.cancel()
            stop.cancel()
            await asyncio.gather(reader, writer, stop, return_exceptions=True)

    def _lost(self, reason: str, retry_in: float, *, first: bool) -> None:
        """Logged as a warning once per outage, then at INFO for each failed retry."""
        b = self.cfg.broker
        (log.warning if first else log.info)(
            "mqtt_disconnected", host=b.host, port=b.port, reason=reason,
            retry_in=round(retry_in, 2))  # fmt: skip
        self.status_line()

    async def _goodbye(self, client: aiomqtt.Client) -> None:
        """A clean stop: calls in flight finish (at most DRAIN s), replies go out,
        then the retained `offline`."""
        deadline = self._loop.time() + DRAIN
        if self._calls:
            await asyncio.wait(list(self._calls), timeout=DRAIN)
        # the writer takes replies first; a few ms see them handed to the connection
        while self.outbox.pending_replies and self._loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        try:
            await client.publish(self.topics.bridge_state, bridge_state(False), self.cfg.qos,
                                 retain=True, timeout=GOODBYE_TIMEOUT)  # fmt: skip
        except aiomqtt.MqttError as exc:
            log.warning("mqtt_offline_not_sent", reason=str(exc))

    # --- publishing ----------------------------------------------------------------------
    async def _write(self, client: aiomqtt.Client) -> None:
        """Drain the outbox: at most PUBLISH_WINDOW publishes unacknowledged at once."""
        window = asyncio.Semaphore(PUBLISH_WINDOW)
        flying: set[asyncio.Task[None]] = set()
        try:
            while True:
                self._wake.clear()  # (before pop: a wakeup after it is not missed)
                item = self.outbox.pop()
                if item is None:
                    await self._wake.wait()
                    continue
                await window.acquire()
                task = asyncio.create_task(self._publish(client, item, window))
                flying.add(task)
                task.add_done_callback(flying.discard)
        finally:
            for task in flying:
                task.cancel()
            await asyncio.gather(*flying, return_exceptions=True)

    async def _publish(
        self, client: aiomqtt.Client, item: Outgoing, window: asyncio.Semaphore
    ) -> None:
        properties = None
        if item.correlation is not None and self.cfg.broker.mqtt5:
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.CorrelationData = item.correlation
        try:
            await client.publish(item.topic, item.payload, self.cfg.qos, item.retain, properties)
        except (aiomqtt.MqttError, ValueError) as exc:
            self.outbox.lost(item)
            log.debug("publish_failed", topic=item.topic, error=str(exc))
        except asyncio.CancelledError:
            self.outbox.lost(item)
            raise
        finally:
            window.release()

    # --- requests --------------------------------------------------------------------------
    async def _read(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            topic = message.topic.value
            payload = message.payload if isinstance(message.payload, bytes) else b""
            if topic == HA_STATUS:
                if payload.strip() == b"online":
                    self.outbox.resend(f"{HA_PREFIX}/")
                continue
            device = self.topics.device_of_call(topic)
            if device is None:
                continue
            if message.retain:  # a stale request kept by the broker: never run it again
                log.warning("call_refused", device=device, reason="a retained request")
                continue
            self._request(device, payload, message.properties)

    def _request(self, device: str, payload: bytes, props: Properties | None) -> None:
        action = self.intake.receive(
            device,
            payload,
            self._loop.time(),
            response_topic=_prop(props, "ResponseTopic", str),
            correlation=_prop(props, "CorrelationData", bytes),
            expiry=_prop(props, "MessageExpiryInterval", int),
        )
        if isinstance(action, Answer):
            self._send(action, device)
        elif isinstance(action, Run):
            self._start(action)
        elif isinstance(action, Drop):
            log.info("call_dropped", device=device, reason=action.reason)
        elif isinstance(action, Joined):
            log.debug("call_redelivered", device=device, reply_to=action.route.topic)

    def _start(self, run: Run) -> None:
        device = self.devices[run.device]
        requester = run.route.topic
        if device.pending >= MAX_PENDING:
            busy = error_reply("busy", f"{device.pending} requests already wait for this device")
            self._send(self.intake.finish(run, busy, self._loop.time()), run.device)
            return
        if device.pending_by[requester] >= MAX_PENDING_EACH:
            busy = error_reply("busy", f"{MAX_PENDING_EACH} requests replied to on {requester} "
                               "already wait for this device")  # fmt: skip
            self._send(self.intake.finish(run, busy, self._loop.time()), run.device)
            return
        device.pending += 1
        device.pending_by[requester] += 1
        task = asyncio.create_task(self._call(device, run))
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
                    log.info("call_dropped", device=device.name, reason="it expired while "
                             "waiting in the bridge")  # fmt: skip
                    return None
                reply = await device.call(run.request.fields, run.request.size)
                if turn >= SHARE_RETRIES or not share_full(reply) or slots.busy <= 1:
                    return reply
                if slots.shrink(slots.busy - 1):
                    log.debug("calls_in_flight_limited", device=device.name, limit=slots.limit,
                              reason="verld's share for the bridge is full")  # fmt: skip
            finally:
                slots.release()
            turn += 1

    def _send(self, answer: Answer, device: str) -> None:
        if answer.code == "forbidden":
            log.warning("call_refused", device=device, reply_to=answer.routes[0].topic)
        for route in answer.routes:
            if not self.outbox.reply(route.topic, answer.reply, route.correlation):
                log.debug("reply_dropped", device=device, reason="the broker is not connected")


def _why(exc: BaseException) -> str:
    """An MqttError's words, with the cause aiomqtt wraps ("the connection was lost")."""
    reason = str(exc) or type(exc).__name__
    cause = exc.__cause__
    return f"{reason}: {cause}" if cause is not None and str(cause) else reason


def _prop(props: Properties | None, name: str, kind: type[T]) -> T | None:
    """An MQTT 5 property of a received message, when it is there and of its type."""
    value = getattr(props, name, None) if props is not None else None
    return value if isinstance(value, kind) else None
