"""verld-mqtt against a real mosquitto: every topic, calls, and the safety rules.

Strategy: each test starts a broker on a free loopback port, verld on a verld-sim
pty and the bridge (tests/mqttrig.py); what the bridge publishes is read with a
paho client and with mosquitto's own clients (`mosquitto_sub`, `mosquitto_rr`).
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mqttrig import BASE, BridgeProc, Broker, Fleet, Mqtt, Pair, need, topic

from verld.client import Client
from verld.testing import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path, ("dev",), status_interval=1)
    yield f
    f.stop()


@pytest.fixture
def mqtt(fleet: Fleet) -> Iterator[Mqtt]:
    client = Mqtt(fleet.broker)
    client.subscribe(f"{BASE}/#")
    yield client
    client.close()


def _up(m: Mqtt) -> None:
    m.wait(topic("dev", "state"), lambda msg: msg.json and msg.json.get("state") == "up")


def _sub(fleet: Fleet, filt: str, count: int = 1, *, retained_only: bool = False) -> list[str]:
    """mosquitto_sub's view: `count` messages on `filt` (-v: topic and payload)."""
    args = [
        need("mosquitto_sub"),
        "-h",
        "127.0.0.1",
        "-p",
        str(fleet.broker.port),
        "-t",
        filt,
        "-C",
        str(count),
        "-v",
        "-W",
        "10",
    ]
    if retained_only:
        args.append("--retained-only")
    out = subprocess.run(args, capture_output=True, text=True, timeout=15, check=True).stdout
    return out.splitlines()


def _rr(
    fleet: Fleet, request: dict[str, object], response_topic: str = "test/reply"
) -> dict[str, Any]:
    """One request/response with mosquitto_rr (MQTT 5: Response Topic + Correlation Data)."""
    out = subprocess.run(
        [
            need("mosquitto_rr"),
            "-h",
            "127.0.0.1",
            "-p",
            str(fleet.broker.port),
            "-V",
            "mqttv5",
            "-t",
            topic("dev", "call"),
            "-e",
            response_topic,
            "-m",
            json.dumps(request),
            "-W",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    ).stdout
    return dict(json.loads(out))


# --- retained state ---------------------------------------------------------------------------


def test_bridge_state_is_online_and_retained(fleet: Fleet) -> None:
    """A late subscriber (mosquitto_sub) reads the retained {"state": "online"}."""
    wait_for(lambda: bool(_sub(fleet, f"{BASE}/bridge/state", retained_only=True)), 15, "online")
    line = _sub(fleet, f"{BASE}/bridge/state", retained_only=True)[0]
    assert line == f'{BASE}/bridge/state {{"state": "online"}}' or json.loads(
        line.split(" ", 1)[1]
    ) == {"state": "online"}


def test_device_state_is_retained_with_generation_port_and_codec(fleet: Fleet, mqtt: Mqtt) -> None:
    """<base>/dev/state: state up, the link's generation, port and codec, retained."""
    _up(mqtt)
    late = Mqtt(fleet.broker)
    try:
        late.subscribe(topic("dev", "state"))
        msg = late.wait(topic("dev", "state"))[-1]
        assert msg.retain
        assert msg.json == {
            "state": "up",
            "generation": 1,
            "port": fleet.sims["dev"].link,
            "codec": "verl",
        }
    finally:
        late.close()


def test_sigterm_publishes_offline(fleet: Fleet, mqtt: Mqtt) -> None:
    """A clean stop publishes {"state": "offline"} retained and exits 0."""
    mqtt.wait(f"{BASE}/bridge/state", lambda m: m.json == {"state": "online"})
    assert fleet.bridge is not None and fleet.bridge.stop(signal.SIGTERM) == 0
    mqtt.wait(f"{BASE}/bridge/state", lambda m: m.json == {"state": "offline"})
    assert _sub(fleet, f"{BASE}/bridge/state", retained_only=True)[0].endswith('"offline"}')


def test_the_last_will_says_offline_when_the_bridge_is_killed(fleet: Fleet, mqtt: Mqtt) -> None:
    """SIGKILL: the broker publishes the bridge's last will, offline, retained."""
    mqtt.wait(f"{BASE}/bridge/state", lambda m: m.json == {"state": "online"})
    assert fleet.bridge is not None
    fleet.bridge.stop(signal.SIGKILL)
    mqtt.wait(f"{BASE}/bridge/state", lambda m: m.json == {"state": "offline"}, timeout=20)


def test_status_is_published_retained_every_interval(fleet: Fleet, mqtt: Mqtt) -> None:
    """status_interval 1: verld's status reply, retained, at least twice in 3 s."""
    msgs = mqtt.wait(topic("dev", "status"), count=2, timeout=5)
    assert msgs[-1].retain and msgs[-1].json["link"]["state"] == "up"
    assert "counters" in msgs[-1].json


# --- events ---------------------------------------------------------------------------------------


def test_device_events_are_published_with_base64_hex_and_generation(
    fleet: Fleet, mqtt: Mqtt
) -> None:
    """Two events from the sim: two messages, data in base64 and hex, generation 1."""
    _up(mqtt)
    with Client(fleet.daemons["dev"].socket) as c:
        assert c.call(b"\x06\x00\x02").status == 0
    msgs = mqtt.wait(topic("dev", "event"), count=2)
    first = msgs[0].json
    assert base64.b64decode(first["data"]) == bytes.fromhex(first["hex"]) == b"evt\0\0\0\0"
    assert first["generation"] == 1 and not msgs[0].retain


# --- calls --------------------------------------------------------------------------------


def test_mosquitto_rr_call_gets_the_reply_on_its_response_topic(fleet: Fleet, mqtt: Mqtt) -> None:
    """MQTT 5 request/response with mosquitto_rr: the echo's reply with transaction."""
    _up(mqtt)
    reply = _rr(fleet, {"hex": "01aabb", "transaction": 7})
    assert reply["ok"] is True and reply["status"] == 0 and reply["transaction"] == 7
    assert base64.b64decode(reply["data"]) == b"\xaa\xbb" and reply["generation"] == 1


def test_correlation_data_comes_back_with_the_reply(fleet: Fleet, mqtt: Mqtt) -> None:
    """A paho request with Response Topic and Correlation Data: the reply has both."""
    _up(mqtt)
    mqtt.subscribe("test/replies/#")
    mqtt.publish(
        topic("dev", "call"),
        {"text": "\x01hi"},
        response_topic="test/replies/1",
        correlation=b"corr-1",
    )
    msg = mqtt.wait("test/replies/1")[0]
    assert msg.correlation == b"corr-1" and base64.b64decode(msg.json["data"]) == b"hi"


def test_a_call_without_response_topic_is_answered_on_call_response(
    fleet: Fleet, mqtt: Mqtt
) -> None:
    """No Response Topic: the reply goes to <base>/dev/call/response, with transaction."""
    _up(mqtt)
    mqtt.publish(
        topic("dev", "call"), {"data": base64.b64encode(b"\x01xy").decode(), "transaction": "t-1"}
    )
    msg = mqtt.wait(topic("dev", "call/response"))[0]
    assert msg.json["transaction"] == "t-1" and base64.b64decode(msg.json["data"]) == b"xy"


@pytest.mark.parametrize(
    "bad", ["verld/other/dev/call", f"{BASE}/x", "homeassistant/x", "a/b/call"]
)
def test_a_response_topic_that_could_become_a_request_is_refused(
    fleet: Fleet, mqtt: Mqtt, bad: str
) -> None:
    """A Response Topic that could become a request is refused with forbidden and not run."""
    # A Response Topic ending in /call or under <base>/ or homeassistant/: forbidden on
    # call/response, and the call is not run.
    _up(mqtt)
    mqtt.publish(
        topic("dev", "call"), {"hex": "01", "transaction": 1}, response_topic=bad, correlation=b"c"
    )
    msg = mqtt.wait(topic("dev", "call/response"))[0]
    assert msg.json["ok"] is False and msg.json["error"]["code"] == "forbidden"
    assert fleet.daemons["dev"].status()["counters"]["calls"] == 0


def test_a_redelivered_request_is_answered_again_and_not_run_twice(
    fleet: Fleet, mqtt: Mqtt
) -> None:
    """A redelivered request gets two identical replies from a single call on the device."""
    # A QoS 1 redelivery.
    _up(mqtt)
    mqtt.subscribe("test/rd")
    for _ in range(2):
        mqtt.publish(
            topic("dev", "call"),
            {"hex": "0142", "transaction": 9},
            response_topic="test/rd",
            correlation=b"same",
        )
    msgs = mqtt.wait("test/rd", count=2)
    assert msgs[0].json == msgs[1].json and msgs[0].json["ok"] is True
    assert fleet.daemons["dev"].status()["counters"]["calls"] == 1


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1,2]",
        b'{"hex": "zz"}',
        b'{"hex": "01", "data": "AQ=="}',
        b'{"hex": "01", "bogus": 1}',
        b'{"hex": "01", "timeout": -1}',
    ],
)
def test_a_malformed_request_gets_bad_request(fleet: Fleet, mqtt: Mqtt, payload: bytes) -> None:
    """Malformed JSON, a non-object, bad or conflicting fields: bad_request, no crash."""
    _up(mqtt)
    mqtt.publish(topic("dev", "call"), payload)
    msg = mqtt.wait(topic("dev", "call/response"))[0]
    assert msg.json["ok"] is False and msg.json["error"]["code"] == "bad_request"
    reply = _rr(fleet, {"hex": "01ab"})  # the bridge is still there
    assert reply["ok"] is True


def test_calls_false_refuses_every_call(tmp_path: Path) -> None:
    """A read-only bridge: a call gets forbidden and never reaches verld."""
    fleet = Fleet(tmp_path, ("dev",), calls=False)
    m = Mqtt(fleet.broker)
    try:
        m.subscribe(f"{BASE}/#")
        _up(m)
        m.publish(topic("dev", "call"), {"hex": "01", "transaction": 3})
        msg = m.wait(topic("dev", "call/response"))[0]
        assert msg.json["error"]["code"] == "forbidden" and msg.json["transaction"] == 3
        assert fleet.daemons["dev"].status()["counters"]["calls"] == 0
    finally:
        m.close()
        fleet.stop()


def test_mqtt_3_1_1_bridge_answers_on_call_response_by_transaction(tmp_path: Path) -> None:
    """On MQTT 3.1.1 (no properties) replies on call/response carry the transaction."""
    fleet = Fleet(tmp_path, ("dev",), broker={"protocol": "3.1.1"})
    m = Mqtt(fleet.broker, v5=False)
    try:
        m.subscribe(f"{BASE}/#")
        _up(m)
        m.publish(topic("dev", "call"), {"text": "\x01ok", "transaction": [1, "a"]})
        msg = m.wait(topic("dev", "call/response"))[0]
        assert msg.json["transaction"] == [1, "a"] and base64.b64decode(msg.json["data"]) == b"ok"
    finally:
        m.close()
        fleet.stop()


def test_a_request_published_while_the_bridge_was_away_is_never_run(tmp_path: Path) -> None:
    """A call published while the bridge was stopped is not run when it comes back."""
    # Clean start, no session.
    fleet = Fleet(tmp_path, ("dev",))
    m = Mqtt(fleet.broker)
    try:
        m.subscribe(f"{BASE}/#")
        _up(m)
        assert fleet.bridge is not None
        fleet.bridge.stop()
        m.publish(topic("dev", "call"), {"hex": "01", "transaction": "late"})
        fleet.bridge.start()
        m.wait(f"{BASE}/bridge/state", lambda msg: msg.json == {"state": "online"}, count=2)
        _rr(fleet, {"hex": "0101"})  # the bridge is answering again
        assert not m.on(topic("dev", "call/response"), lambda x: x.json["transaction"] == "late")
        assert fleet.daemons["dev"].status()["counters"]["calls"] == 1
    finally:
        m.close()
        fleet.stop()


def test_an_unknown_device_in_the_topic_gets_bad_request(fleet: Fleet, mqtt: Mqtt) -> None:
    """<base>/nosuch/call: bad_request on <base>/nosuch/call/response."""
    _up(mqtt)
    mqtt.publish(f"{BASE}/nosuch/call", {"hex": "01"})
    msg = mqtt.wait(f"{BASE}/nosuch/call/response")[0]
    assert msg.json["error"]["code"] == "bad_request"


def test_a_call_with_reply_false_is_written_once_and_its_reply_says_so(tmp_path: Path) -> None:
    """reply: false on line: ok, empty, "reply": false, sent once; verl refuses it (bad_request)."""
    broker = Broker(tmp_path)
    pairs = {"scope": Pair(tmp_path, "scope", codec="line"), "dev": Pair(tmp_path, "dev")}
    bridge = BridgeProc(tmp_path, broker, {name: p.socket for name, p in pairs.items()})
    m = Mqtt(broker)
    try:
        m.subscribe(f"{BASE}/#")
        for name in pairs:
            m.wait(topic(name, "state"), lambda msg: (msg.json or {}).get("state") == "up")
        scope = pairs["scope"]
        before = scope.sim.counters()["requests"]
        m.publish(topic("scope", "call"), {"text": "ECHO x", "reply": False, "transaction": 1})
        got = m.wait(topic("scope", "call/response"))[0].json
        assert (got["ok"], got["status"], got["data"], got["reply"]) == (True, 0, "", False)
        assert got["transaction"] == 1
        wait_for(lambda: scope.daemon.status()["link"]["unexpected"] == 1, 5, "x dropped")
        assert scope.sim.counters()["requests"] == before + 1
        m.publish(topic("scope", "call"), {"text": "ECHO y", "reply": True, "transaction": 2})
        got = m.wait(topic("scope", "call/response"), lambda msg: msg.json["transaction"] == 2)
        assert got[0].json["text"] == "y" and "reply" not in got[0].json
        before = pairs["dev"].sim.counters()["requests"]  # (its handshake's)
        m.publish(topic("dev", "call"), {"hex": "01aa", "reply": False, "transaction": 3})
        got = m.wait(topic("dev", "call/response"))[0].json
        assert got["ok"] is False and got["error"]["code"] == "bad_request"
        assert pairs["dev"].sim.counters()["requests"] == before
    finally:
        m.close()
        bridge.stop()
        for pair in pairs.values():
            pair.stop()
        broker.stop()


# --- when things go away -------------------------------------------------------------------


def test_a_stopped_verld_is_unreachable_and_its_calls_get_link_down(
    fleet: Fleet, mqtt: Mqtt
) -> None:
    """A stopped verld is unreachable and its calls link_down; restarted, its state is up again."""
    # The state keeps the last generation while unreachable.
    _up(mqtt)
    fleet.daemons["dev"].stop()
    mqtt.wait(topic("dev", "state"), lambda m: m.json["state"] == "unreachable")
    last = mqtt.on(topic("dev", "state"))[-1].json
    assert last["generation"] == 1 and last["codec"] == "verl"
    reply = _rr(fleet, {"hex": "01"})
    assert reply["ok"] is False and reply["error"]["code"] == "link_down"
    fleet.restart_daemon("dev")
    mqtt.wait(topic("dev", "state"), lambda m: m.json["state"] == "up", count=2, timeout=20)
    assert _rr(fleet, {"hex": "0155"})["ok"] is True


def test_link_down_and_up_are_published(fleet: Fleet, mqtt: Mqtt) -> None:
    """A briefly unplugged sim is published as down (or connecting), then up at generation 2."""
    _up(mqtt)
    fleet.sims["dev"].control("unplug 0.5")
    mqtt.wait(topic("dev", "state"), lambda m: m.json["state"] in ("down", "connecting"))
    mqtt.wait(
        topic("dev", "state"),
        lambda m: m.json == {**m.json, "state": "up", "generation": 2},
        timeout=20,
    )


def test_after_a_broker_restart_the_retained_state_is_back(tmp_path: Path) -> None:
    """After a broker restart the bridge reconnects and republishes its retained topics."""
    # It republishes its retained topics.
    broker = Broker(tmp_path)
    fleet = Fleet(tmp_path, ("dev",), server=broker)
    try:
        m = Mqtt(broker)
        m.subscribe(f"{BASE}/#")
        _up(m)
        m.close()
        broker.stop()
        broker.start()
        late = Mqtt(broker)
        late.subscribe(f"{BASE}/#")
        late.wait(f"{BASE}/bridge/state", lambda msg: msg.json == {"state": "online"}, timeout=20)
        late.wait(topic("dev", "state"), lambda msg: msg.json["state"] == "up", timeout=20)
        late.close()
    finally:
        fleet.stop()


def test_the_bridge_survives_bad_config_with_exit_2(tmp_path: Path) -> None:
    """--check-config on a config with a typo exits 2 and names file, line and key."""
    broker = Broker(tmp_path)
    try:
        cfg = tmp_path / "bad.yaml"
        cfg.write_text("broker:\n  hots: x\ndevices: {bridge: /tmp/x.sock}\n")
        out = subprocess.run(
            [sys.executable, "-m", "verld.mqtt", "--check-config", str(cfg)],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert out.returncode == 2
        assert f"{cfg}:2" in out.stderr and "host" in out.stderr and "bridge" in out.stderr
    finally:
        broker.stop()


def test_home_assistant_discovery_is_retained_and_republished(tmp_path: Path) -> None:
    """Home Assistant discovery is retained and republished when homeassistant goes online."""
    # homeassistant: true: a connectivity binary_sensor config per device, retained, and again
    # after homeassistant/status says online.
    fleet = Fleet(tmp_path, ("dev",), homeassistant=True)
    m = Mqtt(fleet.broker)
    try:
        m.subscribe("homeassistant/#")
        found = m.wait("homeassistant/binary_sensor/verld_" + _host() + "_dev/link/config")
        config = found[0].json
        assert found[0].retain and config["device_class"] == "connectivity"
        assert config["state_topic"] == topic("dev", "state") and config["unique_id"]
        m.publish("homeassistant/status", b"online")
        m.wait("homeassistant/binary_sensor/verld_" + _host() + "_dev/link/config", count=2)
    finally:
        m.close()
        fleet.stop()


def _host() -> str:
    import re
    import socket

    return re.sub(r"[^a-z0-9_]", "_", socket.gethostname().split(".")[0].lower())


def test_bridge_proc_is_stopped_cleanly(tmp_path: Path) -> None:
    """A bridge with no devices starts, says online, and stops with exit 0."""
    broker = Broker(tmp_path)
    bridge = BridgeProc(tmp_path, broker, {})
    m = Mqtt(broker)
    try:
        m.subscribe(f"{BASE}/bridge/state")
        m.wait(f"{BASE}/bridge/state", lambda msg: msg.json == {"state": "online"})
        assert bridge.stop() == 0
    finally:
        m.close()
        broker.stop()


def test_sigterm_while_the_broker_never_answers_the_connect_exits_0(tmp_path: Path) -> None:
    """SIGTERM during a connect the broker never answers is a clean stop with exit 0."""
    # The broker address accepts TCP and says nothing.
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    broker = type("Silent", (), {"port": silent.getsockname()[1]})()
    try:
        bridge = BridgeProc(tmp_path, broker, {})
        wait_for(lambda: (tmp_path / "verld-mqtt.log").stat().st_size > 0, 10, "a log line")
        import time

        time.sleep(1.0)
        assert bridge.stop(signal.SIGTERM) == 0, bridge.log()[-2000:]
        assert "Traceback" not in bridge.log()
    finally:
        silent.close()
