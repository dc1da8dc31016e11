"""verld-mqtt's entities without a broker: the poll schedule, values in the outbox, discovery
configs and forgetting, and `Entities` on stand-in devices (never doubled, skipped while the
link is down, only the configured calls on set topics)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from verld.mqtt.config import parse_bridge_config
from verld.mqtt.device import FairSlots
from verld.mqtt.entities import REFRESH_AFTER, REFRESH_SPREAD, Entities
from verld.mqtt.entityconfig import Entity
from verld.mqtt.hass import Forgetting, config_topic, entity_config
from verld.mqtt.outbox import Outbox, Outgoing
from verld.mqtt.schedule import Schedule
from verld.mqtt.tasks import Tasks
from verld.mqtt.topics import DeviceState, Topics, device_block

T = Topics("verld/h")


class TestSchedule:
    def test_same_periods_start_spread_over_the_period(self) -> None:
        """Four jobs every 1 s start at 0, 0.25, 0.5 and 0.75; a 2 s job at 0."""
        s = Schedule([1.0, 1.0, 2.0, 1.0, 1.0], start=10.0)
        assert [s.due(t) for t in (10.0, 10.25, 10.5, 10.75)] == [[0, 2], [1], [3], [4]]
        assert s.next_at == 11.0

    def test_due_times_stay_on_their_grid(self) -> None:
        """A job due late is next due one period after its slot, not after the late call."""
        s = Schedule([0.5], start=0.0)
        assert s.due(0.1) == [0] and s.next_at == 0.5

    def test_missed_slots_are_skipped_not_made_up(self) -> None:
        """Coming back 10 periods late: each job is due once, then at its next slot ahead."""
        s = Schedule([1.0, 1.0], start=0.0)
        assert s.due(10.2) == [0, 1]
        assert s.due(10.2) == [] and s.next_at == 10.5

    def test_no_jobs(self) -> None:
        """No entity polled: nothing is ever due."""
        assert Schedule([], start=0.0).next_at is None


class TestOutbox:
    def _connected(self) -> Outbox:
        out = Outbox()
        out.connect()
        return out

    def test_only_the_latest_value_of_a_topic_waits(self) -> None:
        """Two values on one topic before a publish: the last goes out, the first is dropped."""
        out = self._connected()
        out.value("a", b"1")
        out.value("a", b"2")
        assert out.pop() == Outgoing("a", b"2", kind="value") and out.pop() is None
        assert out.values_dropped == 1

    def test_values_are_not_kept_for_a_later_connection(self) -> None:
        """A value made while away, or waiting when the connection goes, is dropped."""
        out = Outbox()
        assert out.value("a", b"1") is False
        out.connect()
        out.value("b", b"2")
        out.disconnect()
        out.connect()
        assert out.pop() is None and out.values_dropped == 2

    def test_a_clear_goes_out_once_after_retained_before_values(self) -> None:
        """An empty retained message once; retained state first, values and events after."""
        out = self._connected()
        out.event("e", b"ev")
        out.value("v", b"1")
        out.clear("c")
        out.retain("r", b"x")
        kinds = [item.kind for item in iter(out.pop, None)]
        assert kinds == ["retained", "clear", "value", "event"]
        out.disconnect()
        out.connect()
        assert [item.topic for item in iter(out.pop, None)] == ["r"]


def _entities(text: str, devices: str = "{m: /run/m.sock}") -> tuple[Entity, ...]:
    return parse_bridge_config(f"devices: {devices}\nentities:\n{text}").entities


SENSOR, SWITCH, BUTTON, BINARY = _entities("""\
  - {device: m, name: volts, kind: sensor, poll: {hex: '010300000002'}, every: 2,
     value: {register: 0, type: float32}, unit: V, device_class: voltage,
     state_class: measurement}
  - {device: m, name: relay, kind: switch, poll: {hex: '010100000001'}, every: 600,
     value: {bit: 0}, turn_on: {hex: '01050000ff00'}, turn_off: {hex: '010500000000'}}
  - {device: m, name: reset, kind: button, press: {hex: '010600010000'}, icon: 'mdi:restart'}
  - {device: m, name: door_open, kind: binary_sensor, poll: {hex: '010200000001'},
     value: {bit: 0}, device_class: door}
""")


class TestDiscovery:
    def _config(self, entity: Entity) -> dict[str, Any]:
        block = device_block("vm", "m", "modbus-rtu", "verld 0.1.0")
        return dict(json.loads(entity_config(T, "vm", entity, block)))

    def test_a_sensor(self) -> None:
        """Topic, ids, state topic and template, unit and classes, expiry, both availabilities."""
        c = self._config(SENSOR)
        assert config_topic("vm", SENSOR) == "homeassistant/sensor/verld_vm_m/value_volts/config"
        assert (c["name"], c["unique_id"]) == ("Volts", "verld_vm_m_value_volts")
        assert (c["state_topic"], c["value_template"]) == (
            "verld/h/m/value/volts",
            "{{ value_json.value }}",
        )
        assert (c["unit_of_measurement"], c["device_class"], c["state_class"]) == (
            "V",
            "voltage",
            "measurement",
        )
        assert c["expire_after"] == 60 and c["availability_mode"] == "all"
        assert [a["topic"] for a in c["availability"]] == [
            "verld/h/bridge/state",
            "verld/h/m/state",
        ]
        assert c["availability"][1]["value_template"] == (
            "{{ 'online' if value_json.state == 'up' else 'offline' }}"
        )
        assert c["device"]["identifiers"] == ["verld_vm_m"] and c["device"]["model"] == "modbus-rtu"

    def test_a_switch_a_button_and_a_binary_sensor(self) -> None:
        """Command topics and payloads; a button has no state; expiry from every (600 s: no)."""
        switch, button, binary = map(self._config, (SWITCH, BUTTON, BINARY))
        assert (switch["command_topic"], switch["payload_on"], switch["payload_off"]) == (
            "verld/h/m/value/relay/set",
            "ON",
            "OFF",
        )
        assert "expire_after" not in switch and "unit_of_measurement" not in switch
        assert button["payload_press"] == "PRESS" and "state_topic" not in button
        assert button["icon"] == "mdi:restart"
        assert (binary["name"], binary["payload_on"], binary["expire_after"]) == (
            "Door open",
            "ON",
            60,
        )

    @pytest.mark.parametrize(
        ("topic", "payload", "stale"),
        [
            ("homeassistant/sensor/verld_vm_m/value_old/config", b"{}", True),
            ("homeassistant/switch/verld_vm_m/value_volts/config", b"{}", True),
            ("homeassistant/sensor/verld_vm_m/value_volts/config", b"{}", False),
            ("homeassistant/sensor/verld_vm_m/value_old/config", b"", False),
            ("homeassistant/sensor/verld_vm_m/link/config", b"{}", False),
            ("homeassistant/sensor/verld_other_m/value_old/config", b"{}", False),
            ("homeassistant/sensor/verld_vm_x/value_old/config", b"{}", False),
            ("homeassistant/sensor/verld_vm_m/value_old/state", b"{}", False),
        ],
    )
    def test_which_configs_read_back_are_forgotten(
        self, topic: str, payload: bytes, stale: bool
    ) -> None:
        """Only a value_* config of one of this bridge's node ids, no longer configured."""
        forgetting = Forgetting("vm", ["m"], [config_topic("vm", SENSOR)])
        assert forgetting.stale(topic, payload) is stale


@pytest.mark.parametrize(
    ("topic", "found"),
    [
        ("verld/h/m/value/x/set", ("m", "x")),
        ("verld/h/m/value/x", None),
        ("verld/h/m/value/x/y/set", None),
        ("verld/h/m/other/x/set", None),
        ("verld/h//value/x/set", None),
        ("verld/other/m/value/x/set", None),
    ],
)
def test_set_topics_are_told_apart(topic: str, found: tuple[str, str] | None) -> None:
    """<base>/<device>/value/<name>/set gives (device, name); nothing else does."""
    assert T.entity_of_set(topic) == found


# --- Entities on stand-in devices ---------------------------------------------------------------


class StandIn:
    """What Entities uses of a Device: state, reachable, slots, call (held until released)."""

    def __init__(self) -> None:
        self.state = DeviceState("up", 4, "/dev/x", "modbus-rtu")
        self.reachable = True
        self.slots = FairSlots(4)
        self.calls: list[bytes] = []
        self.gate = asyncio.Event()
        self.reply: dict[str, Any] = {
            "ok": True,
            "status": 0,
            "generation": 4,
            "data": base64.b64encode(b"\x01\x01\x01\x01").decode(),
        }

    async def call(self, fields: dict[str, Any], size: int) -> dict[str, Any]:
        self.calls.append(base64.b64decode(fields["data"]))
        await self.gate.wait()
        return self.reply


def run(test: Callable[[Entities, StandIn, Outbox], Awaitable[None]], *entities: Entity) -> None:
    async def main() -> None:
        device, outbox = StandIn(), Outbox()
        outbox.connect()
        async with Tasks() as tasks:
            subject = Entities(entities, cast(Any, {"m": device}), T, outbox, tasks)
            await test(subject, device, outbox)
            tasks.cancel()

    asyncio.run(main())


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def values(outbox: Outbox) -> list[Any]:
    return [
        json.loads(item.payload)["value"] for item in iter(outbox.pop, None) if item.kind == "value"
    ]


def test_a_poll_still_running_is_not_doubled() -> None:
    """Due again while its poll waits for the device: skipped; one call, one poll counted."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        group = e.groups[0]
        e._due(group)
        await turns()
        e._due(group)
        await turns()
        assert (len(device.calls), group.members[0].counts.polls) == (1, 1)
        device.gate.set()
        await turns()
        assert values(outbox) == ["ON"] and not group.running

    run(test, SWITCH)


def test_polls_wait_while_the_link_is_not_up_and_come_when_it_is() -> None:
    """A poll due while the link is down is skipped and not counted; link up: polled at once."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        device.gate.set()
        live = e.polled[0]
        device.state = DeviceState("connecting")
        e._due(e.groups[0])
        await turns()
        assert (device.calls, live.counts.polls, live.counts.errors) == ([], 0, 0)
        device.state = DeviceState("up", 5, "/dev/x", "modbus-rtu")
        e.catch_up("m")
        await turns()
        assert live.counts.polls == 1 and values(outbox) == ["ON"]

    run(test, SWITCH)


def test_a_switch_command_runs_its_call_then_polls_its_state() -> None:
    """OFF runs turn_off, then the state is polled (after the poll running, if one runs)."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        e._due(e.groups[0])
        await turns()
        e.command("m", "relay", b"OFF", retained=False)
        device.gate.set()
        await turns(10)
        assert device.calls == [
            bytes.fromhex(h) for h in ("010100000001", "010500000000", "010100000001")
        ]
        assert e.polled[0].counts.polls == 2

    run(test, SWITCH)


def test_only_the_configured_words_run_anything() -> None:
    """A retained PRESS, ON to a button, a call's JSON, an unknown entity: nothing runs."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        device.gate.set()
        e.command("m", "reset", b"PRESS", retained=True)
        e.command("m", "reset", b"ON", retained=False)
        e.command("m", "reset", b'{"hex": "0105"}', retained=False)
        e.command("m", "nosuch", b"PRESS", retained=False)
        await turns()
        assert device.calls == [] and e.by_key[("m", "reset")].counts.ignored == 3
        e.command("m", "reset", b"PRESS\n", retained=False)
        await turns()
        assert device.calls == [bytes.fromhex("010600010000")]

    run(test, BUTTON)


def test_failures_are_counted_with_the_last_error_and_no_value() -> None:
    """A failed call and a reply that does not decode: two errors, the last one kept."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        device.gate.set()
        live = e.polled[0]
        device.reply = {"ok": False, "error": {"code": "timeout", "message": "no reply"}}
        e._due(e.groups[0])
        await turns()
        device.reply = {"ok": True, "status": 0, "data": "AQM=", "generation": 4}
        e._due(e.groups[0])
        await turns()
        assert (live.counts.errors, live.counts.polls, values(outbox)) == (2, 2, [])
        assert live.counts.last_error == "a reply of 2 bytes is not a Modbus read reply"
        report = json.loads(e.report())["m"]["volts"]
        assert report == {
            "polls": 2,
            "errors": 2,
            "ignored": 0,
            "last_error": live.counts.last_error,
            "last_ts": None,
        }

    run(test, SENSOR)


def test_a_value_the_broker_cannot_take_is_polled_again_when_it_is_back() -> None:
    """While the broker is away a value is not kept; once it is back the entity is polled."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        device.gate.set()
        live = e.polled[0]
        outbox.disconnect()
        e._due(e.groups[0])
        await turns()
        assert e.groups[0].missed and live.counts.last_ts is None and outbox.values_dropped == 1
        outbox.connect()
        e.catch_up()
        await turns()
        assert values(outbox) == ["ON"] and live.counts.polls == 2 and not e.groups[0].missed

    run(test, SWITCH)


def test_each_devices_entities_take_turns_in_the_schedule() -> None:
    """Polled in the order a1, b1, a2, b2, a3: a device's polls are spread, not in a row."""
    listed = _entities(
        """\
  - {device: m, name: a1, kind: sensor, poll: {hex: '01'}, value: {offset: 0, type: uint16}}
  - {device: m, name: a2, kind: sensor, poll: {hex: '02'}, value: {offset: 0, type: uint16}}
  - {device: n, name: b1, kind: sensor, poll: {hex: '01'}, value: {offset: 0, type: uint16}}
  - {device: m, name: a3, kind: sensor, poll: {hex: '03'}, value: {offset: 0, type: uint16}}
  - {device: n, name: b2, kind: sensor, poll: {hex: '02'}, value: {offset: 0, type: uint16}}
""",
        "{m: /run/m.sock, n: /run/n.sock}",
    )

    async def main() -> list[str]:
        async with Tasks() as tasks:
            e = Entities(listed, cast(Any, {}), T, Outbox(), tasks)
            return [group.members[0].entity.name for group in e.groups]

    assert asyncio.run(main()) == ["a1", "b1", "a2", "b2", "a3"]


# --- one read, many values ----------------------------------------------------------------------

BLOCK = _entities("""\
  - {device: m, name: a, kind: sensor, poll: {hex: '010300000004'}, every: 5,
     value: {register: 0, type: uint16}}
  - {device: m, name: b, kind: sensor, poll: {hex: '010300000004'}, every: 5,
     value: {register: 1, type: uint16}, retain: true}
  - {device: m, name: c, kind: sensor, poll: {hex: '010300000004'}, every: 5,
     value: {register: 2, type: int32}}
  - {device: m, name: other, kind: sensor, poll: {hex: '010300000004'}, every: 6,
     value: {register: 0, type: uint16}}
""")
#: fc 3 reply of 3 registers: 100, 101, 102 (c's int32 needs a 4th, which this short reply lacks)
REPLY = base64.b64encode(bytes.fromhex("010306006400650066")).decode()


def test_entities_with_one_poll_and_every_are_one_group() -> None:
    """Same poll and every: one group; another every: a group of its own."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        assert [[m.entity.name for m in g.members] for g in e.groups] == [
            ["a", "b", "c"],
            ["other"],
        ]
        assert all(live.group is e.groups[0] for live in e.all[:3])

    run(test, *BLOCK)


def test_a_group_makes_one_call_and_each_member_decodes_its_value() -> None:
    """One call; a and b publish their registers (b retained); c's decode fails on c only."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        device.reply = {"ok": True, "status": 0, "generation": 4, "data": REPLY}
        device.gate.set()
        e._due(e.groups[0])
        await turns()
        assert device.calls == [bytes.fromhex("010300000004")]
        out = {item.topic: item for item in iter(outbox.pop, None)}
        assert {t: json.loads(i.payload)["value"] for t, i in out.items()} == {
            "verld/h/m/value/a": 100,
            "verld/h/m/value/b": 101,
        }
        assert [out[t].retain for t in ("verld/h/m/value/a", "verld/h/m/value/b")] == [False, True]
        counts = {live.entity.name: (live.counts.polls, live.counts.errors) for live in e.all}
        assert counts == {"a": (1, 0), "b": (1, 0), "c": (1, 1), "other": (0, 0)}

    run(test, *BLOCK)


def test_a_failed_group_call_is_an_error_of_each_member() -> None:
    """The call fails: a, b and c each count a poll and an error, with the call's reason."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        device.reply = {"ok": False, "error": {"code": "timeout", "message": "no reply"}}
        device.gate.set()
        e._due(e.groups[0])
        await turns()
        assert len(device.calls) == 1 and values(outbox) == []
        for live in e.all[:3]:
            assert (live.counts.polls, live.counts.errors) == (1, 1)
            assert live.counts.last_error == "timeout: no reply"

    run(test, *BLOCK)


def test_a_switch_command_polls_its_whole_group() -> None:
    """After a switch's command its group is polled once, and every member publishes."""
    relay, mirror = _entities("""\
  - {device: m, name: relay, kind: switch, poll: {hex: '010100000001'}, every: 600,
     value: {bit: 0}, turn_on: {hex: '01050000ff00'}, turn_off: {hex: '010500000000'}}
  - {device: m, name: relay_seen, kind: binary_sensor, poll: {hex: '010100000001'},
     every: 600, value: {bit: 0}}
""")

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        device.gate.set()
        e.command("m", "relay", b"ON", retained=False)
        await turns(10)
        assert device.calls == [bytes.fromhex(h) for h in ("01050000ff00", "010100000001")]
        assert values(outbox) == ["ON", "ON"]

    run(test, relay, mirror)


def test_home_assistant_back_polls_every_group_soon_spread_out() -> None:
    """refresh: each group polled once within REFRESH_AFTER + REFRESH_SPREAD, not at once."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        device.gate.set()
        loop = asyncio.get_running_loop()
        started = loop.time()
        e.refresh()
        await asyncio.sleep(0)
        assert device.calls == []  # (Home Assistant takes its configs first)
        await asyncio.sleep(REFRESH_AFTER + REFRESH_SPREAD + 0.2)
        assert device.calls == [bytes.fromhex("010300000004")] * 2
        assert loop.time() - started < REFRESH_AFTER + REFRESH_SPREAD + 1

    run(test, *BLOCK)


def test_a_retained_value_is_published_retained() -> None:
    """outbox.value(retain=True): the publish carries the retain flag."""
    out = Outbox()
    out.connect()
    out.value("a", b"1", retain=True)
    assert out.pop() == Outgoing("a", b"1", retain=True, kind="value")
