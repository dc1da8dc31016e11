"""The MQTT side: one broker connection, its reconnect loop, and the devices behind it.

Strategy: each device's verld connection runs on its own (`verld.mqtt.device`),
putting state, status and events into one `Outbox`; the broker loop connects (clean
start and no session expiry on MQTT 5, a clean session on 3.1.1, the retained
`offline` state as last will), publishes `online`, subscribes to `<base>/+/call`
(and `homeassistant/status` with discovery on), marks every retained topic due
again, and then runs two tasks until the connection breaks: the reader, which hands
each request to `dispatch.Dispatcher` (it asks `calls.Intake` what the request gets
and starts the calls to run), and the writer, which drains the outbox with a bounded
number of publishes in flight. A lost connection is retried with backoff (0.5 s
doubling to 30 s, jittered, so a fleet does not reconnect in step); the devices
never notice. Calls keep running across a broker reconnect: a reply is published
if the broker is connected when it is ready, and dropped (counted) if not.

Every task has an owner that awaits it (`tasks.Tasks`, a TaskGroup that can be
ended), and the owners nest: `Bridge.tasks`, for the whole run, holds each device's
loop, the drop reporter and the calls (which outlive a broker connection); inside
it, a connect attempt's owner holds the attempt and the wait for a stop, and each
connection's holds its reader, its writer and the writer's publishes, ending them
when the connection breaks or the bridge stops. `run` returns with none left.

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
from verld.mqtt.calls import Intake
from verld.mqtt.config import BridgeConfig, Secrets, short_host
from verld.mqtt.device import Backoff, Device
from verld.mqtt.dispatch import Dispatcher
from verld.mqtt.outbox import Outbox, Outgoing
from verld.mqtt.tasks import Tasks
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
        self.tasks = Tasks()  #: the bridge's owner, entered by `run` (module docstring)
        self.dispatch = Dispatcher(self.intake, self.devices, self.outbox, self.tasks)
        self.stopping = asyncio.Event()
        self.connected = False
        self._wake = asyncio.Event()
        self.outbox.wakeup = self._wake.set
        self._loop = asyncio.get_running_loop()

    # --- the whole bridge ------------------------------------------------------------
    async def run(self) -> None:
        """Serve until `stopping` is set; then say offline and close."""
        if self.cfg.homeassistant:
            for device in self.devices.values():
                self._discovery(device)
        async with self.tasks:
            for device in self.devices.values():
                self.tasks.start(device.run(), name=f"device {device.name}")
            self.tasks.start(self._report_drops(), name="drops")
            self.status_line()
            await self._broker_loop()
            self.tasks.cancel()  # (devices and reporter run until cancelled; so may a call)
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
                    return  # (a session ends without an error only when the bridge stops)
                finally:
                    with contextlib.suppress(aiomqtt.MqttError):
                        await client.__aexit__(None, None, None)
            except* aiomqtt.MqttError as lost:  # (a connection's tasks raise it in a group)
                reason = _why(lost.exceptions[0])
            if self.stopping.is_set():
                return  # (it broke as the bridge stopped: nothing to retry)
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
        """Connect unless `stopping` comes first (False); a failed attempt's MqttError
        comes in a group."""
        async with Tasks() as race:
            connecting = race.start(client.__aenter__(), name="mqtt connect")
            stop = race.start(self.stopping.wait(), name="mqtt connect: stop")
            await asyncio.wait((connecting, stop), return_when=asyncio.FIRST_COMPLETED)
            race.cancel()
        return not connecting.cancelled() and not self.stopping.is_set()

    async def _session(self, client: aiomqtt.Client) -> None:
        """One connection, until it breaks (MqttError, in a group from its tasks) or the
        bridge stops (a return)."""
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
        try:
            # (the reader's MqttError, when the connection breaks, ends all of them)
            async with Tasks() as tasks:
                reader = tasks.start(self._read(client), name="mqtt reader")
                tasks.start(self._write(client, tasks), name="mqtt writer")
                await self.stopping.wait()
                reader.cancel()
                await self._goodbye(client)
                tasks.cancel()
        finally:
            self.connected = False
            self.outbox.disconnect()

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
        await self.dispatch.drain(deadline)
        # the writer takes replies first; a few ms see them handed to the connection
        while self.outbox.pending_replies and self._loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        try:
            await client.publish(self.topics.bridge_state, bridge_state(False), self.cfg.qos,
                                 retain=True, timeout=GOODBYE_TIMEOUT)  # fmt: skip
        except aiomqtt.MqttError as exc:
            log.warning("mqtt_offline_not_sent", reason=str(exc))

    # --- publishing ----------------------------------------------------------------------
    async def _write(self, client: aiomqtt.Client, tasks: Tasks) -> None:
        """Drain the outbox: at most PUBLISH_WINDOW publishes unacknowledged at once, each
        a task of the connection's owner `tasks`."""
        window = asyncio.Semaphore(PUBLISH_WINDOW)
        while True:
            self._wake.clear()  # (before pop: a wakeup after it is not missed)
            item = self.outbox.pop()
            if item is None:
                await self._wake.wait()
                continue
            await window.acquire()
            tasks.start(self._publish(client, item, window))

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
        """Hand each request to the dispatcher until the connection ends (MqttError)."""
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
            props = message.properties
            self.dispatch.receive(
                device,
                payload,
                response_topic=_prop(props, "ResponseTopic", str),
                correlation=_prop(props, "CorrelationData", bytes),
                expiry=_prop(props, "MessageExpiryInterval", int),
            )
        raise aiomqtt.MqttError("the connection ended")


def _why(exc: BaseException) -> str:
    """An MqttError's words, with the cause aiomqtt wraps ("the connection was lost")."""
    reason = str(exc) or type(exc).__name__
    cause = exc.__cause__
    return f"{reason}: {cause}" if cause is not None and str(cause) else reason


def _prop(props: Properties | None, name: str, kind: type[T]) -> T | None:
    """An MQTT 5 property of a received message, when it is there and of its type."""
    value = getattr(props, name, None) if props is not None else None
    return value if isinstance(value, kind) else None
