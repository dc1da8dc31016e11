"""verld-mqtt's setpoints end to end: a real mosquitto, a real pymodbus slave behind verld
(modbus-rtu on a pty cable), the SCPI supply fake (tests/instrument.py) behind verld (line),
and the bridge.

Strategy: one rig for the module. The slave logs every request it gets (`--log-requests`),
so a test sees the function code, address and register values a set wrote, and that a
refused value wrote nothing; the supply records every line. Each setpoint polls only every
30 s: a value seen soon after a set comes from the poll the set starts at once. The slave's
holding register k starts as 100 + k (unit 1): the select `range` (register 50, 150) reads
no option's value until it is set. Each test uses entities of its own.
"""

from __future__ import annotations

import json
import re
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from instrument import Instrument
from modbusrig import PtyCable, PymodbusSlave
from mqttrig import BASE, HOST, BridgeProc, Broker, Mqtt, topic
from paho.mqtt.enums import CallbackAPIVersion

from verld.mqtt.topics import ha_host
from verld.testing import DaemonProc, wait_for, write_config

pytestmark = pytest.mark.timeout(90)

NODE = f"verld_{ha_host(HOST)}"
SLOW = 30  #: seconds between polls: a value seen soon after a set comes from its re-poll


def _number(device: str, name: str, **more: Any) -> dict[str, Any]:
    return {"device": device, "name": name, "kind": "number", "every": SLOW, **more}


ENTITIES = [
    _number(
        "meter",
        "limit",
        poll={"hex": "0103000a0001"},
        value={"register": 0, "type": "int16", "scale": 0.1, "round": 1},
        min=-50,
        max=50,
        step=0.1,
        unit="A",
        set={"unit": 1, "register": 10, "type": "int16", "scale": 0.1},
    ),
    _number(
        "meter",
        "fbig",
        poll={"hex": "010300140002"},
        value={"register": 0, "type": "float32"},
        min=0,
        max=1000,
        step=0.5,
        set={"unit": 1, "register": 20, "type": "float32"},
    ),
    _number(
        "meter",
        "flittle",
        poll={"hex": "0103001e0002"},
        value={"register": 0, "type": "float32", "word_order": "little"},
        min=0,
        max=100,
        step=0.25,
        set={"unit": 1, "register": 30, "type": "float32", "word_order": "little"},
    ),
    _number(
        "meter",
        "word",
        poll={"hex": "010300280001"},
        value={"register": 0, "type": "uint16"},
        min=0,
        max=100000,
        set={"unit": 1, "register": 40, "type": "uint16"},
    ),
    {
        "device": "meter",
        "name": "range",
        "kind": "select",
        "every": SLOW,
        "poll": {"hex": "010300320001"},
        "value": {"register": 0, "type": "uint16"},
        "options": {"low": 1, "mid": 2, "high": 3},
        "set": {"unit": 1, "register": 50, "type": "uint16"},
    },
    _number(
        "psu",
        "volt",
        poll={"text": "VOLT?"},
        value={"pattern": "([-0-9.]+)", "type": "float"},
        min=0,
        max=30,
        step=0.01,
        unit="V",
        set={"text": "VOLT {value}", "reply": False},
    ),
    {
        "device": "psu",
        "name": "output",
        "kind": "select",
        "every": SLOW,
        "poll": {"text": "OUTP?"},
        "value": {"pattern": "([01])", "type": "int"},
        "options": {"off": 0, "on": 1},
        "set": {"text": "OUTP {value}", "reply": False},
    },
    _number(
        "psu",
        "wrong",
        poll={"hex": "010300000001"},
        value={"register": 0, "type": "uint16"},
        min=0,
        max=10,
        set={"unit": 1, "register": 0, "type": "uint16"},
    ),
]


class Rig:
    """The broker, the slave and the supply each behind a verld, the bridge, a client."""

    def __init__(self, tmp: Path) -> None:
        self.broker = Broker(tmp)
        self.cable: PtyCable | None = None
        self.slave: PymodbusSlave | None = None
        self.inst: Instrument | None = None
        self.daemons: dict[str, DaemonProc] = {}
        self.bridge: BridgeProc | None = None
        self.mqtt: Mqtt | None = None
        try:
            self._start(tmp)
        except BaseException:
            self.stop()
            raise

    def _start(self, tmp: Path) -> None:
        early = Mqtt(self.broker)
        retained = early.client.publish(topic("meter", "value/word/set"), b"7", qos=1, retain=True)
        retained.wait_for_publish(5)
        early.close()
        (tmp / "meter").mkdir()
        (tmp / "psu").mkdir()
        self.cable = PtyCable(tmp / "meter")
        self.slave = PymodbusSlave(self.cable.device_path, units=(1,), log_requests=True)
        self.daemons["meter"] = DaemonProc(
            write_config(
                tmp / "meter",
                self.cable.host_path,
                {"device": {"codec": "modbus-rtu"}, "heartbeat": {"interval": 0}},
            )
        )
        self.inst = Instrument(tmp / "psu")
        self.daemons["psu"] = DaemonProc(
            write_config(
                tmp / "psu",
                self.inst.link,
                {"device": {"codec": "line"}, "heartbeat": {"interval": 0}},
            )
        )
        self.mqtt = Mqtt(self.broker)
        self.mqtt.subscribe("#")
        sockets = {name: d.socket for name, d in self.daemons.items()}
        self.bridge = BridgeProc(
            tmp, self.broker, sockets, entities=ENTITIES, homeassistant=True, status_interval=1
        )
        for device, name in (("meter", "limit"), ("psu", "volt")):
            self.value(device, name)

    # --- what the tests read -----------------------------------------------------------
    def value(self, device: str, name: str, since: float = 0.0) -> Any:
        """The first value of an entity published at `since` or later."""
        assert self.mqtt is not None
        found = self.mqtt.wait(topic(device, f"value/{name}"), lambda m: m.json["ts"] >= since)
        return found[0].json["value"]

    def polled(self, device: str, name: str, value: Any, since: float) -> None:
        """Wait for `value` to be published for the entity at `since` or later (a poll
        running when the set came may publish the old value first)."""
        assert self.mqtt is not None
        self.mqtt.wait(
            topic(device, f"value/{name}"),
            lambda m: m.json["ts"] >= since and m.json["value"] == value,
        )

    def set(self, device: str, name: str, payload: str) -> float:
        """Publish `payload` on the entity's set topic; the time just before."""
        assert self.mqtt is not None
        since = round(time.time(), 3) - 0.01
        self.mqtt.publish(topic(device, f"value/{name}/set"), payload.encode())
        return since

    def counts(self, device: str, name: str) -> dict[str, Any]:
        """The entity's latest counters on <base>/bridge/entities."""
        assert self.mqtt is not None
        reports = self.mqtt.on(f"{BASE}/bridge/entities")
        return dict(reports[-1].json[device][name]) if reports else {}

    def wait_counts(self, device: str, name: str, key: str, at_least: int) -> dict[str, Any]:
        wait_for(
            lambda: self.counts(device, name).get(key, -1) >= at_least,
            10,
            lambda: f"{name}'s {key} to reach {at_least}: {self.counts(device, name)}",
        )
        return self.counts(device, name)

    def writes(self, fc: int, address: int) -> list[str]:
        """The slave's logged requests of function code `fc` at `address`."""
        assert self.slave is not None
        return re.findall(rf"request unit=1 fc={fc} address={address} .*", self.slave.log())

    def read(self, address: int, count: int) -> list[int]:
        """Holding registers read through verld."""
        reply = self.daemons["meter"].client().call(bytes([1, 3, 0, address, 0, count]))
        return list(struct.unpack(f">{count}H", reply.data[3:]))

    def stop(self) -> None:
        if self.mqtt is not None:
            self.mqtt.close()
        if self.bridge is not None:
            self.bridge.stop()
        for daemon in self.daemons.values():
            daemon.stop()
        if self.inst is not None:
            self.inst.stop()
        if self.slave is not None:
            self.slave.stop()
        if self.cable is not None:
            self.cable.close()
        self.broker.stop()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    r = Rig(tmp_path_factory.mktemp("setp"))
    try:
        yield r
    finally:
        r.stop()


class TestModbus:
    def test_an_int16_number_is_written_with_fc6_scaled(self, rig: Rig) -> None:
        """-12.3 at scale 0.1: fc 6 writes raw -123 (0xff85) to register 10; re-polled: -12.3."""
        since = rig.set("meter", "limit", "-12.3")
        rig.polled("meter", "limit", -12.3, since)
        assert any("registers=[65413]" in w for w in rig.writes(6, 10)), rig.writes(6, 10)
        assert rig.read(10, 1) == [0xFF85]

    def test_a_float32_number_is_written_with_fc16_big_word_order(self, rig: Rig) -> None:
        """230.5: fc 16 writes 0x4366, 0x8000 to registers 20, 21."""
        since = rig.set("meter", "fbig", "230.5")
        rig.polled("meter", "fbig", 230.5, since)
        assert rig.read(20, 2) == [0x4366, 0x8000]
        assert any("registers=[17254, 32768]" in w for w in rig.writes(16, 20))

    def test_a_float32_number_in_little_word_order(self, rig: Rig) -> None:
        """49.75 with word_order little: registers 30, 31 hold 0x0000, 0x4247 (CD AB)."""
        since = rig.set("meter", "flittle", "49.75")
        rig.polled("meter", "flittle", 49.75, since)
        assert rig.read(30, 2) == [0x0000, 0x4247]
        assert rig.writes(16, 30)

    def test_refused_values_are_counted_and_never_written(self, rig: Rig) -> None:
        """Out of range, off the step, not a number: ignored (counted); the slave sees no write."""
        before = rig.wait_counts("meter", "limit", "ignored", 0)["ignored"]
        writes = len(rig.writes(6, 10))
        for payload in ("50.5", "-60", "12.34", "abc", "nan"):
            rig.set("meter", "limit", payload)
        rig.wait_counts("meter", "limit", "ignored", before + 5)
        rig.set("meter", "limit", "1.5")  # (then a good one: it runs, after those)
        wait_for(lambda: rig.read(10, 1) == [15], 10, "the good value written")
        assert len(rig.writes(6, 10)) == writes + 1

    def test_a_value_too_big_for_the_type_is_refused(self, rig: Rig) -> None:
        """70000 is within min..max but no uint16: ignored, register 40 never written."""
        before = rig.wait_counts("meter", "word", "ignored", 0)["ignored"]
        rig.set("meter", "word", "70000")
        rig.wait_counts("meter", "word", "ignored", before + 1)
        assert rig.writes(6, 40) == [] and rig.read(40, 1) == [140]

    def test_a_retained_set_waiting_on_the_broker_is_ignored(self, rig: Rig) -> None:
        """The retained `7` on word's set topic at start: counted, never written."""
        counts = rig.wait_counts("meter", "word", "ignored", 1)
        assert counts["ignored"] >= 1 and rig.writes(6, 40) == []

    def test_a_select_writes_its_value_and_reads_back_its_label(self, rig: Rig) -> None:
        """Register 50 starts at 150 (no option: an error); `mid` writes 2, published as `mid`."""
        counts = rig.wait_counts("meter", "range", "errors", 1)
        assert "150 is not the value of any option" in counts["last_error"]
        since = rig.set("meter", "range", "mid")
        rig.polled("meter", "range", "mid", since)
        assert rig.read(50, 1) == [2] and rig.writes(6, 50)


class TestLine:
    def test_a_number_sends_its_text_and_polls_it_back(self, rig: Rig) -> None:
        """12.5 on volt: the supply gets `VOLT 12.5`; the re-poll publishes 12.5."""
        assert rig.inst is not None
        since = rig.set("psu", "volt", "12.5")
        rig.polled("psu", "volt", 12.5, since)
        assert rig.inst.count("VOLT 12.5") == 1 and rig.inst.state()["volt"] == 12.5

    def test_a_select_sends_its_mapped_text_and_reads_back_its_label(self, rig: Rig) -> None:
        """`on` sends `OUTP 1`; OUTP? answers 1, published as `on`; `off` then `OUTP 0`."""
        assert rig.inst is not None
        since = rig.set("psu", "output", "on")
        rig.polled("psu", "output", "on", since)
        assert rig.inst.count("OUTP 1") == 1
        since = rig.set("psu", "output", "off")
        rig.polled("psu", "output", "off", since)
        assert rig.inst.count("OUTP 0") == 1

    def test_an_unknown_label_is_ignored(self, rig: Rig) -> None:
        """`ON` is not a label (`on` is): counted, nothing sent."""
        assert rig.inst is not None
        before = rig.wait_counts("psu", "output", "ignored", 0)["ignored"]
        rig.set("psu", "output", "ON")
        rig.wait_counts("psu", "output", "ignored", before + 1)
        assert not [line for line in rig.inst.received() if line.startswith("OUTP O")]

    def test_a_set_that_does_not_fit_the_codec_is_an_error(self, rig: Rig) -> None:
        """A register set on the line device: an error on the entity, nothing sent."""
        assert rig.inst is not None
        before = rig.wait_counts("psu", "wrong", "errors", 0)["errors"]
        rig.set("psu", "wrong", "5")
        wait_for(
            lambda: (
                "Modbus register write does not fit the device's codec line"
                in str(rig.counts("psu", "wrong").get("last_error"))
            ),
            10,
            "the misfit counted",
        )
        assert rig.counts("psu", "wrong")["errors"] > before
        assert rig.counts("psu", "wrong")["ignored"] == 0


class TestDiscovery:
    def test_number_and_select_configs(self, rig: Rig) -> None:
        """The retained configs carry min, max, step, mode, options and the command topic."""
        assert rig.mqtt is not None
        number = rig.mqtt.wait(f"homeassistant/number/{NODE}_psu/value_volt/config")[0].json
        assert (number["min"], number["max"], number["step"], number["mode"]) == (
            0,
            30,
            0.01,
            "box",
        )
        assert number["command_topic"] == topic("psu", "value/volt/set")
        assert number["unit_of_measurement"] == "V"
        select = rig.mqtt.wait(f"homeassistant/select/{NODE}_meter/value_range/config")[0].json
        assert select["options"] == ["high", "low", "mid"]  # (BridgeProc sorts the keys)
        assert select["command_topic"] == topic("meter", "value/range/set")
        assert select["state_topic"] == topic("meter", "value/range")


class TestOnline:
    def test_a_set_published_on_seeing_online_runs(self, rig: Rig) -> None:
        """The bridge subscribes to its set topics before `online`: a set sent on it runs."""
        assert rig.bridge is not None
        rig.bridge.stop()
        sent, subscribed = threading.Event(), threading.Event()

        def on_message(client: Any, _userdata: Any, msg: Any) -> None:
            if json.loads(msg.payload) == {"state": "online"} and not sent.is_set():
                sent.set()
                client.publish(topic("meter", "value/fbig/set"), b"42.5", qos=1)

        client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        client.on_message = on_message
        client.on_subscribe = lambda *_: subscribed.set()
        client.connect("127.0.0.1", rig.broker.port)
        client.loop_start()
        try:
            wait_for(client.is_connected, 5, "the client connected")
            client.subscribe(f"{BASE}/bridge/state", qos=1)
            assert subscribed.wait(5)
            rig.bridge.start()
            wait_for(sent.is_set, 20, "online")
            wait_for(lambda: rig.read(20, 2) == [0x422A, 0x0000], 10, "42.5 written")
        finally:
            client.loop_stop()
            client.disconnect()
