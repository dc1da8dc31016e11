"""verld-mqtt's grouped reads, device mappings, retained values and Home Assistant's return,
end to end: a real mosquitto, verld on `modbus-rtu` against pymodbus's slave (tests/
modbus_slave.py, which logs every request it gets: the reads are counted where they
arrive), and the bridge.

Strategy: one rig for the module. Unit 1's holding registers are 100, 101, 102, ...; three
entities read registers 0, 1 and 2 of one poll (`010300000004`, every 0.5 s), one of them
retained; a fourth reads an input register every hour, so after its first value only
Home Assistant's `online` makes it publish again. The meter is a `devices:` mapping with
a name, model, manufacturer and area.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from modbusrig import PtyCable, PymodbusSlave
from mqttrig import HOST, BridgeProc, Broker, Mqtt, topic

from verld.mqtt.topics import ha_host
from verld.testing import DaemonProc, wait_for, write_config

pytestmark = pytest.mark.timeout(60)

NODE = f"verld_{ha_host(HOST)}_meter"
BLOCK = {"hex": "010300000004"}  #: holding registers 0..3 of unit 1
READ = "fc=3 address=0 count=4"  #: how the slave logs that read
EVERY = 0.5


def _sensor(name: str, register: int, **more: Any) -> dict[str, Any]:
    value = {"register": register, "type": "uint16", **more.pop("value", {})}
    return {
        "device": "meter",
        "name": name,
        "kind": "sensor",
        "poll": BLOCK,
        "every": EVERY,
        "value": value,
        **more,
    }


ENTITIES = [
    _sensor("first", 0),
    _sensor("second", 1, retain=True),
    _sensor("third", 2, value={"scale": 0.1, "round": 1}),
    {
        "device": "meter",
        "name": "hourly",
        "kind": "sensor",
        "poll": {"hex": "010400050001"},
        "every": 3600,
        "value": {"register": 0, "type": "uint16"},
    },
]
METER = {
    "name": "Main meter",
    "model": "SDM630",
    "manufacturer": "Eastron",
    "area": "Garage",
}


class Rig:
    """The broker, the pty cable with the slave, verld on it, the bridge, a client on `#`."""

    def __init__(self, tmp: Path) -> None:
        self.broker = Broker(tmp)
        self.cable: PtyCable | None = None
        self.slave: PymodbusSlave | None = None
        self.daemon: DaemonProc | None = None
        self.bridge: BridgeProc | None = None
        self.mqtt: Mqtt | None = None
        try:
            self._start(tmp)
        except BaseException:
            self.stop()
            raise

    def _start(self, tmp: Path) -> None:
        self.cable = PtyCable(tmp)
        self.slave = PymodbusSlave(self.cable.device_path, log_requests=True)
        device = {"codec": "modbus-rtu", "timeout": 0.5, "retry": 1}
        config = write_config(
            tmp, self.cable.host_path, {"device": device, "heartbeat": {"interval": 0}}
        )
        self.daemon = DaemonProc(config)
        self.mqtt = Mqtt(self.broker)
        self.mqtt.subscribe("#")
        self.bridge = BridgeProc(
            tmp,
            self.broker,
            cast(Any, {"meter": {"socket": self.daemon.socket, **METER}}),  # (a mapping entry)
            entities=ENTITIES,
            homeassistant=True,
            status_interval=1,
        )

    def reads(self, what: str = READ) -> int:
        """The requests `what` the slave got so far."""
        assert self.slave is not None
        return self.slave.log().count(what)

    def values(self, name: str, since: float = 0.0) -> list[Any]:
        assert self.mqtt is not None
        got = self.mqtt.on(topic("meter", f"value/{name}"), lambda m: m.json["ts"] >= since)
        return [m.json["value"] for m in got]

    def stop(self) -> None:
        if self.mqtt is not None:
            self.mqtt.close()
        if self.bridge is not None:
            self.bridge.stop()
        if self.daemon is not None and self.daemon.proc.poll() is None:
            self.daemon.stop()
        if self.slave is not None:
            self.slave.stop()
        if self.cable is not None:
            self.cable.close()
        self.broker.stop()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    r = Rig(tmp_path_factory.mktemp("groups"))
    yield r
    r.stop()


def test_entities_of_one_register_block_share_one_read(rig: Rig) -> None:
    """Three entities on one poll: one read at the slave per period, each value right."""
    wait_for(lambda: bool(rig.values("first")), 15, "a value of the first entity")
    values, reads = len(rig.values("first")), rig.reads()
    time.sleep(4 * EVERY)
    reads = rig.reads() - reads
    time.sleep(EVERY / 2)  # (the last read's value on its way)
    values = len(rig.values("first")) - values
    assert values >= 3 and reads <= values + 1, (reads, values)  # (apart: 3 reads a value)
    assert set(rig.values("first")) == {100}
    assert set(rig.values("second")) == {101}
    assert set(rig.values("third")) == {10.2}


def test_the_discovery_device_block_is_the_devices_mapping(rig: Rig) -> None:
    """name, model, manufacturer and suggested_area: in the entities' and the link's configs."""
    assert rig.mqtt is not None
    for config in (
        f"homeassistant/sensor/{NODE}/value_first/config",
        f"homeassistant/binary_sensor/{NODE}/link/config",
    ):
        block = rig.mqtt.wait(config, lambda m: bool(m.json))[-1].json["device"]
        assert block["identifiers"] == [NODE]
        assert (block["name"], block["model"], block["manufacturer"]) == (
            "Main meter",
            "SDM630",
            "Eastron",
        )
        assert block["suggested_area"] == "Garage"


def test_a_retained_value_reaches_a_late_subscriber(rig: Rig) -> None:
    """retain: true: a client subscribing after the value was published gets it; others no."""
    wait_for(lambda: bool(rig.values("second")), 15, "a value of the second entity")
    late = Mqtt(rig.broker)
    try:
        late.subscribe(topic("meter", "value/+"))
        got = late.wait(topic("meter", "value/second"), lambda m: m.retain, timeout=2)
        assert got[0].json["value"] == 101
        assert not late.on(topic("meter", "value/first"), lambda m: m.retain)
    finally:
        late.close()


def test_home_assistant_back_online_polls_every_entity(rig: Rig) -> None:
    """homeassistant/status online: every entity publishes within seconds, every: 3600 too."""
    assert rig.mqtt is not None
    wait_for(lambda: bool(rig.values("hourly")), 15, "the hourly entity's first value")
    hourly_reads = rig.reads("fc=4 address=5 count=1")
    since = time.time()
    rig.mqtt.publish("homeassistant/status", b"online")
    names = ("first", "second", "third", "hourly")
    wait_for(lambda: all(rig.values(n, since) for n in names), 5, "a new value of each")
    assert rig.values("hourly", since) == [1005]
    assert rig.reads("fc=4 address=5 count=1") == hourly_reads + 1
