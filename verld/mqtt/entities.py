"""Device values as entities, at run time: polls, values, commands and their counters.

Strategy: entities of one device with the same poll (its call and options) and the same
`every` are one `Group`: one read per period, from whose reply each member decodes its own
value (a meter's voltage, current and power from one read of its register block).
`Entities.run` is one task for the whole bridge that sleeps until the next
poll is due (`schedule.Schedule`: each group every `every` seconds, groups with the
same period at phases spread over it, each device's in turn with the others') and
starts what is due (within `GRAIN`: polls a few ms apart share one wake-up). A poll is skipped, not
counted, while its device's link is not `up` (or verld is unreachable), and skipped
when the group's previous poll still runs: polls are never doubled. A poll counts on each
member (`polls`); a failed call is an error of each member, a reply one member cannot
decode an error of that member only. A poll is a task
of the bridge's owner (`tasks.Tasks`) that takes a turn in the device's `FairSlots`
(requester `entities`, so polls and MQTT calls take turns) and sends the poll's call on
the bridge's one verld connection, through verld's fair queue like any client's call.
A group whose poll was skipped while the link was not up, or a value of which the broker
could not take (not connected), and every group at start, is polled as soon as both
are back, so a slow `every` does not leave it without a value for that long; its slots
stay where they were. When Home Assistant comes back (`homeassistant/status`: `online`),
`refresh` polls every group once more, spread over `REFRESH_SPREAD` seconds after
`REFRESH_AFTER` (its discovery configs, republished then, are taken first): its
entities show a value again without waiting for their `every`.
The reply is decoded (`decode.Decoder`; on a binary kind, then made `ON`/`OFF`) and the
value goes to the outbox (latest value per topic: never a backlog on the broker).

Whatever keeps a poll from giving a value (the call failed, the reply does not decode,
verld awaited no answer (`line.no_reply` matched the poll), the decoder does not fit the
device's codec) is counted on the entity (`errors`,
`last_error`) and logged once per run of failures (a misfit once per codec). A set
topic runs only the entity's own call (`turn_on`, `turn_off`, `press`), for `ON`/`OFF`
on a switch and `PRESS` on a button (with the call's `reply`: false for a command the
device does not answer); anything else published there, and anything
delivered retained, is counted (`ignored`) and runs nothing. A setpoint (`number`,
`select`) takes a value or a label there and runs its `set` with it (`setpoint.request`
builds the call, or refuses the payload: counted as `ignored`, nothing sent; a `set`
that does not fit the device's codec is an error, logged once); a select's polled value
is published as its label. After a switch's or a setpoint's command, its state is
polled at once (after the poll running, if one is), and so are the other members of its
group. An entity with `retain: true` publishes its values retained.
"""

from __future__ import annotations

import asyncio
import binascii
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from verld.mqtt import setpoint
from verld.mqtt.decode import DecodeError, Decoder, fits, state
from verld.mqtt.device import Device, share_full
from verld.mqtt.entityconfig import Entity
from verld.mqtt.outbox import Outbox
from verld.mqtt.schedule import Schedule
from verld.mqtt.tasks import Tasks
from verld.mqtt.topics import Topics, encode
from verld.mqtt.valueconfig import Command

log = structlog.get_logger("verld.mqtt.entities")
P = TypeVar("P", "Live", "Group")

#: the requester polls and commands take turns as, among the MQTT callers
REQUESTER = "entities"
#: polls due within this many seconds start together (one wake-up for them, not one each)
GRAIN = 0.005
#: payload on a set topic → (the kind it is for, the call it runs)
WORDS = {
    b"ON": ("switch", "turn_on"),
    b"OFF": ("switch", "turn_off"),
    b"PRESS": ("button", "press"),
}
#: after Home Assistant's `online`, the polls of every group start this many seconds later,
#: spread over the next REFRESH_SPREAD seconds
REFRESH_AFTER, REFRESH_SPREAD = 0.5, 1.5


@dataclass(slots=True)
class Counts:
    """One entity's counters, as `<base>/bridge/entities` shows them."""

    polls: int = 0  #: polls started
    errors: int = 0  #: polls (and commands) that gave no value or failed
    ignored: int = 0  #: messages on its set topic that ran nothing
    last_error: str | None = None
    last_ts: float | None = None  #: when its last value was published (unix time)


class Live:
    """One entity at run time: its decoder, topic, counters, and its poll's group."""

    __slots__ = (
        "counts",
        "decoder",
        "entity",
        "failing",
        "group",
        "misfit",
        "poll",
        "size",
        "topic",
    )

    def __init__(self, entity: Entity, topics: Topics) -> None:
        self.entity = entity
        self.decoder = Decoder(entity.value) if entity.value is not None else None
        self.topic = topics.value(entity.device, entity.name)
        self.poll = entity.poll.fields() if entity.poll is not None else None
        self.size = len(entity.poll.data) if entity.poll is not None else 0
        self.counts = Counts()
        self.group: Group | None = None  #: the entities polled with it (None: not polled)
        self.failing = False  #: the current run of failures was logged
        self.misfit: str | None = None  #: the misfit logged


class Group:
    """The polled entities of one device with the same poll and `every`: one call per
    period for all of them, and its poll state."""

    __slots__ = ("again", "device", "every", "members", "missed", "poll", "running", "size")

    def __init__(self, first: Live) -> None:
        assert first.poll is not None
        self.device, self.every = first.entity.device, first.entity.every
        self.poll, self.size = first.poll, first.size
        self.members: list[Live] = []
        self.running = False  #: a poll is on its way
        self.again = False  #: poll again as soon as the running poll ends
        self.missed = True  #: a poll or a value was lost to an outage (or none yet)


def _grouped(lives: Sequence[Live]) -> list[Group]:
    """The polled entities' groups, in the order of their first member; each `live.group`
    set."""
    groups: dict[tuple[Any, ...], Group] = {}
    for live in lives:
        entity = live.entity
        if entity.poll is None:
            continue
        key = (entity.device, entity.poll, entity.every)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(live)
        group.members.append(live)
        live.group = group
    return list(groups.values())


class Entities:
    """Every configured entity of the bridge; see the module docstring."""

    def __init__(
        self,
        entities: Sequence[Entity],
        devices: Mapping[str, Device],
        topics: Topics,
        outbox: Outbox,
        tasks: Tasks,
    ) -> None:
        self.devices, self.topics, self.outbox, self.tasks = devices, topics, outbox, tasks
        self.all = [Live(e, topics) for e in entities]
        self.by_key = {(live.entity.device, live.entity.name): live for live in self.all}
        self.polled = _interleaved([live for live in self.all if live.poll is not None])
        self.groups = _interleaved(_grouped(self.all))
        self._refreshing: asyncio.Task[None] | None = None
        self.set_misfits: set[Live] = set()  #: setpoints whose `set` misfit was logged

    def __bool__(self) -> bool:
        return bool(self.all)

    # --- polls ------------------------------------------------------------------------
    async def run(self) -> None:
        """Start each group's poll when it is due, until cancelled."""
        loop = asyncio.get_running_loop()
        schedule = Schedule([group.every for group in self.groups], loop.time())
        while (at := schedule.next_at) is not None:
            await asyncio.sleep(max(0.0, at - loop.time()))
            for job in schedule.due(loop.time() + GRAIN):
                self._due(self.groups[job])

    def _due(self, group: Group) -> None:
        if not _up(self.devices[group.device]):
            group.missed = True  # (not an error: the link's own state says why)
            return
        if group.running:
            log.debug(
                "poll_skipped",
                device=group.device,
                entities=",".join(live.entity.name for live in group.members),
                reason="the previous poll still runs",
            )
            return
        self._start(group)

    def catch_up(self, device: str | None = None) -> None:
        """`device`'s link is up (again), or (None) the broker is: the groups that missed
        a poll or a value are polled now."""
        for group in self.groups:
            if group.missed and device in (None, group.device):
                self._poll_group_now(group)

    def refresh(self) -> None:
        """Home Assistant is back: every group is polled once more, soon, spread out (a
        refresh still under way starts over)."""
        if self._refreshing is not None:
            self._refreshing.cancel()
        if self.groups:
            self._refreshing = self.tasks.start(self._refresh(), name="entities refresh")

    async def _refresh(self) -> None:
        step = REFRESH_SPREAD / len(self.groups)
        await asyncio.sleep(REFRESH_AFTER)
        for group in self.groups:
            if not group.running:
                self._poll_group_now(group)
            await asyncio.sleep(step)

    def _start(self, group: Group) -> None:
        group.running, group.missed = True, False
        for live in group.members:
            live.counts.polls += 1
        self.tasks.start(self._poll(group))

    async def _poll(self, group: Group) -> None:
        try:
            await self._poll_once(group)
        finally:
            group.running = False
            if group.again:
                group.again = False
                self._poll_group_now(group)

    async def _poll_once(self, group: Group) -> None:
        """One call for the group; each member that fits the device's codec decodes its
        value from the reply."""
        device, fitting = self.devices[group.device], []
        for live in group.members:
            assert live.decoder is not None
            misfit = fits(live.decoder.spec, device.state.codec)
            if misfit is not None:
                self._misfit(live, misfit)
            else:
                fitting.append(live)
        if not fitting:
            return
        reply = await self._call(device, group.poll, group.size)
        if not reply.get("ok"):
            why = _why(reply)
        elif reply.get("reply") is False:  # (verld's device.line.no_reply matched the poll)
            why = (
                "verld awaited no answer: the device's line.no_reply matches "
                "the poll; give the poll reply: true"
            )
        else:
            generation = reply.get("generation")
            if type(generation) is not int:
                generation = device.state.generation
            for live in fitting:
                self._value(live, reply, generation)
            return
        for live in fitting:
            self._fail(live, why)

    def _value(self, live: Live, reply: dict[str, Any], generation: Any) -> None:
        """`live`'s value decoded from its group's reply, published (or its error counted)."""
        decoder = live.decoder
        assert decoder is not None and live.group is not None
        try:
            value: Any = decoder.decode(_data(reply), reply.get("text"))
            if live.entity.options is not None:
                value = setpoint.label(live.entity.options, value)
        except DecodeError as exc:
            self._fail(live, str(exc))
            return
        if live.entity.binary:
            value = state(decoder.spec, value)
        now = round(time.time(), 3)
        payload = encode({"value": value, "ts": now, "generation": generation})
        if not self.outbox.value(live.topic, payload, retain=live.entity.retain):
            live.group.missed = True  # (the broker is away: polled again once it is back)
            return
        live.counts.last_ts = now
        if live.failing:
            live.failing = False
            log.info("entity_recovered", device=live.entity.device, entity=live.entity.name)

    def poll_now(self, live: Live) -> None:
        """Poll `live` (its group) at once (after its running poll, if one runs)."""
        if live.group is not None:
            self._poll_group_now(live.group)

    def _poll_group_now(self, group: Group) -> None:
        if group.running:
            group.again = True
        elif _up(self.devices[group.device]):
            self._start(group)

    async def _call(self, device: Device, fields: dict[str, Any], size: int) -> dict[str, Any]:
        """One call in the bridge's turns for the device (`FairSlots`); its API reply."""
        slots = device.slots
        await slots.acquire(REQUESTER)
        try:
            return await device.call(fields, size)
        finally:
            slots.release()

    # --- failures -----------------------------------------------------------------------
    def _fail(self, live: Live, why: str) -> None:
        counts = live.counts
        counts.errors += 1
        counts.last_error = why
        fields = {"device": live.entity.device, "entity": live.entity.name, "error": why}
        if live.failing:
            log.debug("entity_error", **fields)
        else:
            live.failing = True
            log.warning("entity_error", **fields)

    def _misfit(self, live: Live, why: str) -> None:
        """A decoder that does not fit the device's codec: an error each poll, logged once."""
        live.counts.errors += 1
        live.counts.last_error = why
        if live.misfit != why:
            live.misfit = why
            log.warning(
                "entity_misfit", device=live.entity.device, entity=live.entity.name, error=why
            )

    # --- commands -----------------------------------------------------------------------
    def command(self, device: str, name: str, payload: bytes, *, retained: bool) -> None:
        """A message on `<base>/<device>/value/<name>/set`: the entity's own call, or
        nothing (counted)."""
        live = self.by_key.get((device, name))
        if live is None:
            log.debug("entity_set_ignored", device=device, entity=name, reason="no such entity")
            return
        if live.entity.set is not None:
            self._set(live, payload, retained=retained)
            return
        kind, key = WORDS.get(payload.strip(), (None, ""))
        call: Command | None = getattr(live.entity, key, None) if kind else None
        if retained or kind != live.entity.kind or call is None:
            self._ignored(
                live, payload, "a retained message" if retained else _takes(live.entity.kind)
            )
            return
        log.info("entity_command", device=device, entity=name, call=key)
        self.tasks.start(self._command(live, key, call))

    def _set(self, live: Live, payload: bytes, *, retained: bool) -> None:
        """A setpoint's value (or label): its `set` call with it, or nothing (counted)."""
        e = live.entity
        assert e.set is not None
        try:
            if retained:
                raise setpoint.Refused("a retained message")
            call = setpoint.request(e, payload)
        except setpoint.Refused as exc:
            self._ignored(live, payload, str(exc))
            return
        misfit = setpoint.fits(e.set, self.devices[e.device].state.codec)
        if misfit is not None:  # (an error each time, logged once: apart from the poll's)
            live.counts.errors += 1
            live.counts.last_error = misfit
            if live not in self.set_misfits:
                self.set_misfits.add(live)
                log.warning("entity_misfit", device=e.device, entity=e.name, error=misfit)
            return
        log.info(
            "entity_command", device=e.device, entity=e.name, call="set", payload=_shown(payload)
        )
        self.tasks.start(self._command(live, "set", call))

    def _ignored(self, live: Live, payload: bytes, reason: str) -> None:
        live.counts.ignored += 1
        (log.info if live.counts.ignored == 1 else log.debug)(
            "entity_set_ignored",
            device=live.entity.device,
            entity=live.entity.name,
            payload=_shown(payload),
            reason=reason,
        )

    async def _command(self, live: Live, key: str, call: Command) -> None:
        reply = await self._call(self.devices[live.entity.device], call.fields(), len(call.data))
        if not reply.get("ok"):
            self._fail(live, f"{key}: {_why(reply)}")
        if live.entity.kind != "button":
            self.poll_now(live)

    # --- counters -----------------------------------------------------------------------
    def report(self) -> bytes:
        """`<base>/bridge/entities`: {DEVICE: {NAME: {polls, errors, ignored, last_error,
        last_ts}}}."""
        out: dict[str, dict[str, Any]] = {}
        for live in self.all:
            c = live.counts
            out.setdefault(live.entity.device, {})[live.entity.name] = {
                "polls": c.polls,
                "errors": c.errors,
                "ignored": c.ignored,
                "last_error": c.last_error,
                "last_ts": c.last_ts,
            }
        return encode(out)

    def publish_report(self) -> None:
        self.outbox.retain(self.topics.entities, self.report())

    async def report_every(self, interval: float) -> None:
        """The counters, retained, every `interval` seconds (0: now only; the bridge
        publishes them again on each link change)."""
        while True:
            self.publish_report()
            if not interval:
                return
            await asyncio.sleep(interval)


def _interleaved(items: list[P]) -> list[P]:
    """Each device's entities (or groups) in turn with the other devices' (d1's first, d2's
    first, ..., d1's second, ...): in the schedule a device's polls are then spread over
    the period, not in a row."""
    devices: dict[str, int] = {}
    place: Counter[str] = Counter()
    keyed = []
    for item in items:
        device = item.entity.device if isinstance(item, Live) else item.device
        keyed.append((place[device], devices.setdefault(device, len(devices)), item))
        place[device] += 1
    return [item for *_, item in sorted(keyed, key=lambda k: k[:2])]


def _up(device: Device) -> bool:
    return device.reachable and device.state.state == "up"


def _why(reply: dict[str, Any]) -> str:
    """A failed call's reply, in a few words."""
    error = reply.get("error")
    if isinstance(error, dict):
        if share_full(reply):
            return "busy: the bridge's share of verld's queue is full"
        return f"{error.get('code')}: {error.get('message')}"
    return "the call failed"


def _data(reply: dict[str, Any]) -> bytes:
    data = reply.get("data")
    if not isinstance(data, str):
        return b""
    try:
        return binascii.a2b_base64(data.encode("ascii"))
    except (binascii.Error, ValueError):
        return b""


def _shown(payload: bytes) -> str:
    text = payload[:40].decode("utf-8", "replace")
    return text + ("..." if len(payload) > 40 else "")


def _takes(kind: str) -> str:
    words = [word.decode() for word, (k, _) in WORDS.items() if k == kind]
    return f"a {kind} takes {' or '.join(words)}" if words else f"a {kind} takes no commands"
