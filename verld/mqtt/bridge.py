"""The MQTT side: one broker connection, its reconnect loop, and the devices behind it.

Strategy: each device's verld connection runs on its own (`verld.mqtt.device`),
putting state, status and events into one `Outbox`; the broker loop connects
(`mqttconn.MqttConnection`: paho-mqtt on the event loop; clean start and no session
expiry on MQTT 5, a clean session on 3.1.1, the retained `offline` state as last
will), subscribes to `<base>/+/call` (`homeassistant/status`, the set topics: below),
then publishes `online`, marks every retained topic due again, and then serves until the
connection breaks. Requests arrive in paho's message callback, which hands each one
to `dispatch.Dispatcher` (it asks `calls.Intake` what the request gets and starts
the calls to run); whatever becomes ready to publish (a call's reply, an event, a
retained topic) wakes `_pump`, which publishes from the outbox at once, with at most
`PUBLISH_WINDOW` publishes unacknowledged and at most `OUT_MAX` bytes unwritten (a
slow broker holds the rest in the outbox, which bounds them). So a reply is
published from its call's completion, with no task in between. A lost connection is
retried with backoff (0.5 s doubling to 30 s, jittered, so a fleet does not
reconnect in step); the devices never notice. Calls keep running across a broker
reconnect: a reply is published if the broker is connected when it is ready, and
dropped (counted) if not.

With `entities:` (device values, `verld.mqtt.entities`) the bridge also subscribes to
the set topics (`<base>/+/value/+/set`, QoS 0) and, with discovery, to the retained
configs (`homeassistant/+/+/+/config`, none of its own publishes back on MQTT 5), so
that it empties the config of an entity no longer configured (`hass.Forgetting`); a
broker that refuses either subscription leaves that part off with a warning. Home
Assistant's `online` (live, not the one the broker kept) republishes the discovery
configs and polls every entity again (`Entities.refresh`).

Every task has an owner that awaits it (`tasks.Tasks`, a TaskGroup that can be
ended): `Bridge.tasks`, for the whole run, holds each device's loop, the drop
reporter, the entities' scheduler and polls, and the calls (which outlive a broker
connection). The broker connection
itself needs no task: its socket is served by the loop's reader callback. `run`
returns with none left.

On SIGTERM the bridge stops taking requests, calls in flight get up to `DRAIN`
seconds to finish and their replies to go out, `offline` is published (retained)
and the connection is closed cleanly (so the will is not needed).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any, TypeVar

import structlog

from verld import systemd
from verld.mqtt.calls import Intake
from verld.mqtt.config import BridgeConfig, Secrets, short_host
from verld.mqtt.device import Backoff, Device
from verld.mqtt.dispatch import Dispatcher
from verld.mqtt.entities import Entities
from verld.mqtt.hass import CONFIGS, Forgetting, config_topic, entity_config
from verld.mqtt.mqttconn import MqttConnection, MqttError
from verld.mqtt.outbox import Outbox, Outgoing
from verld.mqtt.tasks import Tasks
from verld.mqtt.topics import (
    HA_PREFIX,
    HA_STATUS,
    Topics,
    bridge_state,
    device_block,
    discovery,
)

log = structlog.get_logger("verld.mqtt.bridge")
T = TypeVar("T")

#: publishes awaiting their acknowledgement at once
PUBLISH_WINDOW = 20
#: bytes handed to the connection and not yet written, beyond which publishing waits
OUT_MAX = 1 << 18
#: seconds to wait for the broker's CONNACK
CONNECT_TIMEOUT = 10.0
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
            name: Device(
                name,
                path,
                self.topics,
                self.outbox,
                status_interval=cfg.status_interval,
                on_change=self._device_changed,
            )
            for name, path in cfg.devices.items()
        }
        self.intake = Intake(self.topics, self.devices.keys(), calls=cfg.calls)
        self.tasks = Tasks()  #: the bridge's owner, entered by `run` (module docstring)
        self.dispatch = Dispatcher(self.intake, self.devices, self.outbox, self.tasks)
        self.entities = Entities(cfg.entities, self.devices, self.topics, self.outbox, self.tasks)
        configs = [config_topic(self.host, e) for e in cfg.entities]
        self.forgetting = Forgetting(self.host, self.devices, configs)
        self.stopping = asyncio.Event()
        self.connected = False
        self._conn: MqttConnection | None = None  #: while connected
        self._taking = False  #: requests are taken (not while stopping)
        self._flying: dict[int, Outgoing] = {}  #: publishes not yet acknowledged, by mid
        self._pumping = False
        self.outbox.wakeup = self._pump
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
            if self.entities:
                self.tasks.start(self.entities.run(), name="entities")
                self.tasks.start(
                    self.entities.report_every(self.cfg.status_interval), name="entities report"
                )
            self.status_line()
            await self._broker_loop()
            self.tasks.cancel()  # (devices and reporter run until cancelled; so may a call)
        c = self.intake.counters
        log.info(
            "stopped",
            requests=c.requests,
            replies=c.replies,
            bad_requests=c.bad_requests,
            refused=c.refused,
            expired=c.expired,
            duplicates=c.duplicates,
            events_dropped=self.outbox.events_dropped,
            replies_dropped=self.outbox.replies_dropped,
            values_dropped=self.outbox.values_dropped,
        )

    def status_line(self) -> None:
        broker = f"{self.cfg.broker.host}:{self.cfg.broker.port}"
        devices = ", ".join(f"{d.name} {d.state.state}" for d in self.devices.values())
        word = "connected to" if self.connected else "waiting for"
        systemd.notify(f"STATUS=broker: {word} {broker}; devices: {devices or 'none'}")

    def _device_changed(self, device: Device) -> None:
        if self.cfg.homeassistant:
            self._discovery(device)
        if self.entities:
            if device.reachable and device.state.state == "up":
                self.entities.catch_up(device.name)
            if not self.cfg.status_interval:
                self.entities.publish_report()
        self.status_line()

    def _discovery(self, device: Device) -> None:
        """The device's link/calls/errors configs and its entities' (same device block)."""
        codec, daemon = device.state.codec, device.daemon
        info = self.cfg.device_info.get(device.name)
        configs = discovery(self.topics, self.host, device.name, codec, daemon, info)
        for topic, payload in configs.items():
            self.outbox.retain(topic, payload)
        block = device_block(self.host, device.name, codec, daemon, info)
        for live in self.entities.all:
            if live.entity.device == device.name:
                payload = entity_config(self.topics, self.host, live.entity, block)
                self.outbox.retain(config_topic(self.host, live.entity), payload)

    async def _report_drops(self) -> None:
        """Events dropped while the broker was slow or away: one warning per period."""
        while True:
            await asyncio.sleep(DROP_REPORT_SECONDS)
            dropped = self.outbox.drops_to_report()
            if dropped:
                log.warning(
                    "events_dropped",
                    where="bridge",
                    dropped=dropped,
                    total=self.outbox.events_dropped,
                    connected=self.connected,
                )

    # --- the broker connection ---------------------------------------------------------
    async def _broker_loop(self) -> None:
        backoff = Backoff(initial=0.5, cap=30.0)
        while not self.stopping.is_set():
            since: float | None = None
            conn = self._connection()
            try:
                if not await self._connect(conn):
                    return
                since = self._loop.time()
                await self._session(conn)
                return  # (a session ends without an error only when the bridge stops)
            except* MqttError as lost:  # (in a group when it comes from the connect race)
                reason = str(lost.exceptions[0])
            finally:
                conn.close()
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

    def _connection(self) -> MqttConnection:
        b, cfg = self.cfg.broker, self.cfg
        return MqttConnection(
            host=b.host,
            port=b.port,
            client_id=cfg.client_id,
            mqtt5=b.mqtt5,
            keepalive=b.keepalive,
            will=(self.topics.bridge_state, bridge_state(False), cfg.qos, True),
            username=b.username,
            password=self.secrets.password,
            tls=self.secrets.tls,
            on_message=self._on_message,
            on_published=self._published,
        )

    async def _connect(self, conn: MqttConnection) -> bool:
        """Connect unless `stopping` comes first (False); MqttError if it fails."""
        async with Tasks() as race:
            connecting = race.start(conn.connect(CONNECT_TIMEOUT), name="mqtt connect")
            stop = race.start(self.stopping.wait(), name="mqtt connect: stop")
            try:
                await asyncio.wait((connecting, stop), return_when=asyncio.FIRST_COMPLETED)
            finally:
                race.cancel()
        return not connecting.cancelled() and not self.stopping.is_set()

    async def _session(self, conn: MqttConnection) -> None:
        """One connection, until it breaks (MqttError) or the bridge stops (a return)."""
        qos = self.cfg.qos
        # A request may come in the very read that brings the SUBACK: it is taken from
        # now, and its reply waits in the outbox until the subscriptions are made (then
        # the retained topics go out: Home Assistant's status is followed by then).
        self._taking = True
        try:
            self.outbox.connect()
            await conn.subscribe(self.topics.call_filter, qos)
            if self.cfg.homeassistant:
                await conn.subscribe(HA_STATUS, qos)
            await self._subscribe_entities(conn)
            # `online` once every subscription is made: a command published on seeing it
            # (a set topic, a call) reaches the bridge
            conn.publish(self.topics.bridge_state, bridge_state(True), qos, True, None)
            self.connected, self._conn = True, conn
            self._pump()
            self.entities.catch_up()
            b = self.cfg.broker
            log.info(
                "mqtt_connected",
                host=b.host,
                port=b.port,
                protocol=b.protocol,
                client_id=self.cfg.client_id,
                base=self.topics.base,
            )
            self.status_line()
            async with Tasks() as race:
                stop = race.start(self.stopping.wait(), name="mqtt session: stop")
                try:
                    await asyncio.wait((stop, conn.lost), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    race.cancel()
            if conn.lost.done():
                raise MqttError(conn.lost.result())
            self._taking = False
            await self._goodbye(conn)
        finally:
            self.connected, self._conn, self._taking = False, None, False
            self.outbox.disconnect()
            for item in self._flying.values():
                self.outbox.lost(item)
            self._flying.clear()

    async def _subscribe_entities(self, conn: MqttConnection) -> None:
        """The set topics (QoS 0: a command runs at most once; retain as published: a
        retained one is seen as such) and, with discovery, the retained configs (not
        our own publishes back). A broker that refuses either leaves that part off."""
        wanted = []
        if self.entities:
            wanted.append((self.topics.set_filter, 0, "commands on set topics are not run"))
        if self.cfg.homeassistant:
            wanted.append((CONFIGS, self.cfg.qos, "removed entities' configs are not emptied"))
        for topic, qos, then in wanted:
            try:
                await conn.subscribe(topic, qos, as_sent=True)
            except MqttError as exc:
                if conn.lost.done():
                    raise  # (the connection is gone; a refusal leaves it up)
                log.warning("mqtt_subscribe_refused", topic=topic, reason=str(exc), then=then)

    def _lost(self, reason: str, retry_in: float, *, first: bool) -> None:
        """Logged as a warning once per outage, then at INFO for each failed retry."""
        b = self.cfg.broker
        (log.warning if first else log.info)(
            "mqtt_disconnected",
            host=b.host,
            port=b.port,
            reason=reason,
            retry_in=round(retry_in, 2),
        )
        self.status_line()

    async def _goodbye(self, conn: MqttConnection) -> None:
        """A clean stop: calls in flight finish (at most DRAIN s), replies go out,
        then the retained `offline`."""
        deadline = self._loop.time() + DRAIN
        await self.dispatch.drain(deadline)
        # replies go out first; a few ms see them handed to the connection
        while self.outbox.pending_replies and self._loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        try:
            mid = conn.publish(
                self.topics.bridge_state, bridge_state(False), self.cfg.qos, True, None
            )
            async with asyncio.timeout(GOODBYE_TIMEOUT):
                await conn.published(mid)
        except (MqttError, TimeoutError) as exc:
            log.warning("mqtt_offline_not_sent", reason=str(exc) or "no acknowledgement")
        await conn.disconnect()

    # --- publishing ----------------------------------------------------------------------
    def _pump(self) -> None:
        """Publish what the outbox holds, while the window and the socket allow; called
        whenever something is ready or a publish was acknowledged (re-entry is a no-op:
        the outer call goes on popping)."""
        conn = self._conn
        if conn is None or self._pumping:
            return
        self._pumping = True
        qos, flying, outbox = self.cfg.qos, self._flying, self.outbox
        try:
            while len(flying) < PUBLISH_WINDOW and conn.pending < OUT_MAX:
                item = outbox.pop()
                if item is None:
                    return
                try:
                    mid = conn.publish(item.topic, item.payload, qos, item.retain, item.correlation)
                except (MqttError, ValueError) as exc:
                    outbox.lost(item)
                    log.debug("publish_failed", topic=item.topic, error=str(exc))
                    continue
                flying[mid] = item
        finally:
            self._pumping = False

    def _published(self, mid: int) -> None:
        """Publish `mid` was acknowledged (QoS 0: written): its slot is free."""
        if self._flying.pop(mid, None) is not None:
            self._pump()

    # --- requests --------------------------------------------------------------------------
    def _on_message(self, message: Any) -> None:
        """One message from the broker (paho's callback): a request goes to the dispatcher."""
        topic = message.topic
        payload = message.payload if isinstance(message.payload, bytes) else b""
        if topic == HA_STATUS:
            if payload.strip() == b"online":
                self.outbox.resend(f"{HA_PREFIX}/")
                if not message.retain:  # (a restart now, not the status kept on the broker:
                    # at connect every entity is polled anyway)
                    self.entities.refresh()
            return
        if topic.startswith(f"{HA_PREFIX}/"):
            if self.forgetting.stale(topic, payload):
                log.info("ha_config_removed", topic=topic, reason="no such entity any more")
                self.outbox.clear(topic)
            return
        entity = self.topics.entity_of_set(topic)
        if entity is not None:
            if self._taking:
                self.entities.command(*entity, payload, retained=bool(message.retain))
            return
        device = self.topics.device_of_call(topic)
        if device is None or not self._taking:
            return
        if message.retain:  # a stale request kept by the broker: never run it again
            log.warning("call_refused", device=device, reason="a retained request")
            return
        props = getattr(message, "properties", None)
        self.dispatch.receive(
            device,
            payload,
            response_topic=_prop(props, "ResponseTopic", str),
            correlation=_prop(props, "CorrelationData", bytes),
            expiry=_prop(props, "MessageExpiryInterval", int),
        )


def _prop(props: Any, name: str, kind: type[T]) -> T | None:
    """An MQTT 5 property of a received message, when it is there and of its type."""
    value = getattr(props, name, None) if props is not None else None
    return value if isinstance(value, kind) else None
