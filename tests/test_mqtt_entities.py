"""verld-mqtt's `entities:` end to end: a real mosquitto, real verlds on verld-sims, the bridge.

Strategy: one rig for the module (starting five devices and a bridge takes seconds, the
tests then take fractions of one each): a `line` probe whose reply is decoded by a regex,
a Modbus RTU meter (verld-sim as the slave, its registers written at start: a float32 in
each word order and an int16 to scale), a `verl` device decoded by byte offset, a
`verl` device that is made to stop answering, and a `line` panel whose commands get no
answer (`reply: false`, or verld's `line.no_reply: "^SET "`; the sim answers anyway, and
verld drops those lines). Before the bridge starts, the broker holds
a retained `ON` on the relay's set topic (never to run) and retained discovery configs of
an entity that is no longer configured (to be emptied) and of another host's (to stay).
Each test uses entities of its own, so they do not depend on their order.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mqttrig import BASE, HOST, BridgeProc, Broker, Message, Mqtt, Pair, topic

from verld.client import Client
from verld.mqtt.topics import ha_host
from verld.testing import wait_for

pytestmark = pytest.mark.timeout(60)

NODE = f"verld_{ha_host(HOST)}"
STALE = f"homeassistant/sensor/{NODE}_meter/value_gone/config"
OTHERS = "homeassistant/sensor/verld_elsewhere_meter/value_gone/config"
FAST = 0.3  #: seconds between polls of the values the tests read
SLOW = 30  #: the switch: a state seen quickly after a command comes from the re-poll


def _sensor(
    device: str, name: str, poll: dict[str, str], value: dict[str, Any], **more: Any
) -> dict[str, Any]:
    return {
        "device": device,
        "name": name,
        "kind": "sensor",
        "poll": poll,
        "every": FAST,
        "value": value,
        **more,
    }


REGISTERS = {"hex": "010300000005"}  #: holding registers 0..4 of unit 1
ENTITIES = [
    _sensor(
        "probe",
        "temperature",
        {"text": "ECHO T=21.5C"},
        {"pattern": "T=([-0-9.]+)", "type": "float"},
        unit="°C",
        device_class="temperature",
        state_class="measurement",
    ),
    _sensor(
        "meter",
        "voltage",
        REGISTERS,
        {"register": 0, "type": "float32"},
        unit="V",
        device_class="voltage",
        state_class="measurement",
    ),
    _sensor(
        "meter",
        "frequency",
        REGISTERS,
        {"register": 2, "type": "float32", "word_order": "little"},
        unit="Hz",
    ),
    _sensor("meter", "temp", REGISTERS, {"register": 4, "type": "int16", "scale": 0.1, "round": 1}),
    _sensor(
        "plain",
        "counter",
        {"hex": "012a000000"},
        {"offset": 0, "type": "uint32", "byte_order": "little"},
    ),
    _sensor("plain", "word", {"hex": "010102"}, {"offset": 0, "type": "int16"}),
    _sensor("flaky", "echo", {"hex": "010007"}, {"offset": 0, "type": "uint16"}),
    _sensor("probe", "misfit", {"hex": "010300000001"}, {"register": 0, "type": "uint16"}),
    {
        "device": "meter",
        "name": "door",
        "kind": "binary_sensor",
        "poll": {"hex": "010100010001"},
        "every": FAST,
        "value": {"bit": 0},
        "device_class": "door",
    },
    {
        "device": "meter",
        "name": "window",
        "kind": "binary_sensor",
        "every": FAST,
        "poll": {"hex": "010200000001"},
        "value": {"bit": 0},
    },
    {
        "device": "meter",
        "name": "relay",
        "kind": "switch",
        "poll": {"hex": "0101000a0001"},
        "every": SLOW,
        "value": {"bit": 0},
        "turn_on": {"hex": "0105000aff00"},
        "turn_off": {"hex": "0105000a0000"},
    },
    {
        "device": "meter",
        "name": "reset",
        "kind": "button",
        "press": {"hex": "010600140000"},
        "device_class": "restart",
    },
    {
        "device": "panel",
        "name": "beep",
        "kind": "button",
        "press": {"text": "ECHO beep", "reply": False},
    },
    {"device": "panel", "name": "arm", "kind": "button", "press": {"text": "SET ARM"}},
    _sensor("panel", "quiet", {"text": "SET Q"}, {"pattern": "(.*)", "type": "str"}, every=SLOW),
]


class Rig:
    """The broker, the five devices, the bridge and a client that saw everything."""

    def __init__(self, tmp: Path) -> None:
        self.broker = Broker(tmp)
        self.pairs: dict[str, Pair] = {}
        self.bridge: BridgeProc | None = None
        self.mqtt: Mqtt | None = None
        try:
            self._start(tmp)
        except BaseException:
            self.stop()
            raise

    def _start(self, tmp: Path) -> None:
        early = Mqtt(self.broker)
        for retained, payload in (
            (STALE, b'{"name": "Gone"}'),
            (OTHERS, b'{"name": "Gone"}'),
            (topic("meter", "value/relay/set"), b"ON"),
        ):
            early.client.publish(retained, payload, qos=1, retain=True).wait_for_publish(5)
        early.close()
        self.pairs["probe"] = Pair(tmp, "probe", codec="line")
        self.pairs["panel"] = Pair(
            tmp, "panel", codec="line", overrides={"device": {"line": {"no_reply": "^SET "}}}
        )
        self.pairs["meter"] = Pair(tmp, "meter", codec="modbus-rtu")
        self.pairs["plain"] = Pair(tmp, "plain")
        heartbeat = {"interval": 0.3, "misses": 2, "timeout": 0.3}
        self.pairs["flaky"] = Pair(tmp, "flaky", overrides={"heartbeat": heartbeat})
        regs = struct.pack(">f", 230.1) + _swapped(struct.pack(">f", 49.95)) + b"\xff\x85"
        assert self.call("meter", bytes([1, 16, 0, 0, 0, 5, 10]) + regs).status == 0
        self.mqtt = Mqtt(self.broker)
        self.mqtt.subscribe("#")
        sockets = {name: pair.socket for name, pair in self.pairs.items()}
        self.bridge = BridgeProc(
            tmp, self.broker, sockets, entities=ENTITIES, homeassistant=True, status_interval=1
        )
        # (`online` comes once the set topics are subscribed: a command sent now runs)
        self.mqtt.wait(f"{BASE}/bridge/state", lambda m: m.json == {"state": "online"}, 20)

    def call(self, device: str, data: bytes) -> Any:
        with Client(self.pairs[device].socket, timeout=5.0) as c:
            return c.call(data)

    def values(self, device: str, name: str, since: float = 0.0) -> list[Message]:
        assert self.mqtt is not None
        return self.mqtt.on(topic(device, f"value/{name}"), lambda m: m.json["ts"] >= since)

    def value(self, device: str, name: str, since: float = 0.0, timeout: float = 10.0) -> Any:
        """The first value of an entity published at `since` or later."""
        wait_for(lambda: bool(self.values(device, name, since)), timeout, f"a value of {name}")
        return self.values(device, name, since)[0].json["value"]

    def counts(self, device: str, name: str) -> dict[str, Any]:
        """The entity's latest counters on <base>/bridge/entities."""
        assert self.mqtt is not None
        reports = self.mqtt.on(f"{BASE}/bridge/entities")
        return dict(reports[-1].json[device][name]) if reports else {}

    def stop(self) -> None:
        if self.mqtt is not None:
            self.mqtt.close()
        if self.bridge is not None:
            self.bridge.stop()
        for pair in self.pairs.values():
            pair.stop()
        self.broker.stop()


def _swapped(words: bytes) -> bytes:
    """The registers of a 32-bit value in the other word order (CD AB)."""
    return words[2:] + words[:2]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    r = Rig(tmp_path_factory.mktemp("ent"))
    yield r
    r.stop()


# --- values -------------------------------------------------------------------------------


def test_a_line_reply_is_decoded_by_its_regex(rig: Rig) -> None:
    """ECHO T=21.5C through the line codec: the pattern's group, as a float, not retained."""
    rig.value("probe", "temperature")
    msg = rig.values("probe", "temperature")[0]
    assert msg.json["value"] == 21.5 and msg.json["generation"] == 1 and not msg.retain
    assert abs(msg.json["ts"] - time.time()) < 30


@pytest.mark.parametrize(
    ("name", "expected"),
    [("voltage", 230.1), ("frequency", 49.95), ("temp", -12.3)],
    ids=["float32-big", "float32-little", "int16-scaled"],
)
def test_modbus_registers_decode(rig: Rig, name: str, expected: float) -> None:
    """Registers read from the RTU slave: float32 in both word orders, int16 × 0.1."""
    assert rig.value("meter", name) == expected


def test_bytes_of_a_binary_reply_decode_at_an_offset(rig: Rig) -> None:
    """On verl, offset + byte_order: uint32 little-endian 42, int16 big-endian 0x0102."""
    assert (rig.value("plain", "counter"), rig.value("plain", "word")) == (42, 258)


def test_binary_sensors_are_on_or_off_from_their_bit(rig: Rig) -> None:
    """Coil 1 (set in the sim) is ON, discrete input 0 (clear) is OFF."""
    assert (rig.value("meter", "door"), rig.value("meter", "window")) == ("ON", "OFF")


def test_polls_are_counted_and_reported_retained(rig: Rig) -> None:
    """<base>/bridge/entities: polls grow, no errors, last_ts of the last value, retained."""
    wait_for(lambda: rig.counts("probe", "temperature").get("polls", 0) >= 3, 10, "3 polls")
    counts = rig.counts("probe", "temperature")
    assert counts["errors"] == 0 and counts["last_error"] is None
    assert counts["last_ts"] is not None and counts["last_ts"] <= time.time()
    assert rig.mqtt is not None and rig.mqtt.on(f"{BASE}/bridge/entities")[-1].retain


# --- commands ------------------------------------------------------------------------------


def test_a_switch_runs_its_calls_and_its_state_is_polled_back(rig: Rig) -> None:
    """ON and OFF run turn_on and turn_off; each new state is published at once (every 30 s)."""
    assert rig.value("meter", "relay") == "OFF"  # (the retained ON ran nothing)
    assert rig.mqtt is not None
    for word in ("ON", "OFF"):
        since = time.time()
        rig.mqtt.publish(topic("meter", "value/relay/set"), word.encode(), qos=0)
        assert rig.value("meter", "relay", since, timeout=5) == word
        coil = rig.call("meter", bytes.fromhex("0101000a0001")).data
        assert coil[3] == (word == "ON")


def test_a_button_press_runs_its_call(rig: Rig) -> None:
    """PRESS on reset/set writes holding register 20 to 0 (it held 20)."""
    read = bytes.fromhex("010300140001")
    assert rig.call("meter", read).data[3:] == b"\x00\x14"
    assert rig.mqtt is not None
    rig.mqtt.publish(topic("meter", "value/reset/set"), b"PRESS", qos=0)
    wait_for(lambda: rig.call("meter", read).data[3:] == b"\x00\x00", 5, "register 20 at 0")


def test_a_set_topic_runs_no_other_call_and_counts_what_it_ignored(rig: Rig) -> None:
    """A call, OFF to a button and ON to a sensor on set topics: nothing runs; each is ignored."""
    assert rig.mqtt is not None
    wait_for(lambda: rig.counts("meter", "relay").get("ignored") == 1, 10, "the retained ON")
    for name, payload in (
        ("relay", b'{"hex": "0105000aff00"}'),
        ("reset", b"OFF"),
        ("voltage", b"ON"),
    ):
        rig.mqtt.publish(topic("meter", f"value/{name}/set"), payload, qos=0)
    wait_for(
        lambda: (
            [rig.counts("meter", n).get("ignored") for n in ("relay", "reset", "voltage")]
            == [2, 1, 1]
        ),
        10,
        "three more ignored",
    )
    assert rig.call("meter", bytes.fromhex("0101000a0001")).data[3] == 0  # (the relay: off)


def test_commands_with_no_answer_are_sent_once_and_not_awaited(rig: Rig) -> None:
    """press with reply: false, and one verld's no_reply matches: each written once, no error."""
    panel, mqtt = rig.pairs["panel"], rig.mqtt
    assert mqtt is not None
    wait_for(lambda: rig.counts("panel", "quiet").get("errors") == 1, 10, "the first poll")
    before = {"sent": panel.sim.counters()["requests"], **panel.daemon.status()["link"]}
    for name in ("beep", "arm"):
        mqtt.publish(topic("panel", f"value/{name}/set"), b"PRESS", qos=0)
    wait_for(
        lambda: panel.daemon.status()["link"]["unexpected"] == before["unexpected"] + 2,
        5,
        "both answers dropped",
    )
    reports = len(mqtt.on(f"{BASE}/bridge/entities"))
    wait_for(lambda: len(mqtt.on(f"{BASE}/bridge/entities")) > reports, 5, "a later report")
    assert panel.sim.counters()["requests"] == before["sent"] + 2  # (never retried)
    assert panel.daemon.status()["link"]["late"] == before["late"]
    assert [rig.counts("panel", n)["errors"] for n in ("beep", "arm")] == [0, 0]


def test_a_poll_that_no_reply_matches_is_an_error_saying_so(rig: Rig) -> None:
    """A poll verld does not await (no_reply matches it) gives no value and names reply: true."""
    wait_for(lambda: rig.counts("panel", "quiet").get("errors") == 1, 10, "the first poll")
    assert "line.no_reply matches the poll" in rig.counts("panel", "quiet")["last_error"]
    assert not rig.values("panel", "quiet")


# --- failures ------------------------------------------------------------------------------


def test_a_device_that_stops_answering_publishes_nothing_and_counts_errors(rig: Rig) -> None:
    """A hung device: no value, errors with the timeout, state down; values resume after."""
    rig.value("flaky", "echo")
    rig.pairs["flaky"].sim.control("hang")
    hung = time.time()
    try:
        wait_for(lambda: rig.counts("flaky", "echo").get("errors", 0) >= 1, 10, "an error")
        assert rig.counts("flaky", "echo")["last_error"].startswith(("timeout", "link_down"))
        assert rig.mqtt is not None
        rig.mqtt.wait(topic("flaky", "state"), lambda m: m.json["state"] != "up", timeout=10)
        assert not rig.values("flaky", "echo", hung + 0.05)
        polls = rig.counts("flaky", "echo")["polls"]
        time.sleep(1.2)  # (polls while the link is not up are skipped, not errors)
        assert rig.counts("flaky", "echo")["polls"] - polls <= 1
    finally:
        rig.pairs["flaky"].sim.control("unhang")
    assert rig.value("flaky", "echo", time.time(), timeout=15) == 7


def test_a_decoder_that_does_not_fit_the_codec_is_an_error_logged_once(rig: Rig) -> None:
    """A register decoder on the line device: an error every poll, one warning in the log."""
    wait_for(lambda: rig.counts("probe", "misfit").get("errors", 0) >= 3, 10, "3 errors")
    counts = rig.counts("probe", "misfit")
    assert "codec line" in counts["last_error"] and counts["last_ts"] is None
    assert not rig.values("probe", "misfit")
    assert rig.bridge is not None and rig.bridge.log().count('"entity_misfit"') == 1


# --- Home Assistant ------------------------------------------------------------------------


def _config(rig: Rig, component: str, device: str, name: str) -> dict[str, Any]:
    assert rig.mqtt is not None
    found = rig.mqtt.wait(
        f"homeassistant/{component}/{NODE}_{device}/value_{name}/config",
        lambda m: "model" in (m.json or {}).get("device", {}),
    )
    assert found[-1].retain
    return dict(found[-1].json)


def test_discovery_configs_carry_topics_classes_and_availability(rig: Rig) -> None:
    """The voltage sensor's config: ids, state topic, template, unit, classes, availability all."""
    config = _config(rig, "sensor", "meter", "voltage")
    assert config["unique_id"] == f"{NODE}_meter_value_voltage"
    assert config["state_topic"] == topic("meter", "value/voltage")
    assert config["value_template"] == "{{ value_json.value }}"
    assert (config["unit_of_measurement"], config["device_class"], config["state_class"]) == (
        "V",
        "voltage",
        "measurement",
    )
    assert [a["topic"] for a in config["availability"]] == [
        f"{BASE}/bridge/state",
        topic("meter", "state"),
    ]
    assert config["availability_mode"] == "all" and "command_topic" not in config
    assert config["device"]["identifiers"] == [f"{NODE}_meter"]
    assert config["device"]["model"] == "modbus-rtu"


def test_discovery_of_a_switch_and_a_button_has_their_command_topics(rig: Rig) -> None:
    """Switch: command topic, ON/OFF payloads; button: PRESS and no state topic."""
    switch = _config(rig, "switch", "meter", "relay")
    assert switch["command_topic"] == topic("meter", "value/relay/set")
    assert (switch["payload_on"], switch["payload_off"]) == ("ON", "OFF")
    button = _config(rig, "button", "meter", "reset")
    assert button["payload_press"] == "PRESS" and "state_topic" not in button
    assert button["command_topic"] == topic("meter", "value/reset/set")


def test_a_removed_entity_config_is_emptied_and_another_hosts_kept(rig: Rig) -> None:
    """The retained config of a value_ object no longer configured is emptied; others stay."""
    assert rig.mqtt is not None
    rig.mqtt.wait(STALE, lambda m: m.raw == b"")
    late = Mqtt(rig.broker)
    try:
        late.subscribe("homeassistant/+/+/+/config")
        late.wait(OTHERS)
        time.sleep(0.3)
        assert not late.on(STALE)  # (an empty retained message clears the topic)
    finally:
        late.close()
