"""verld-mqtt at fleet scale and over TLS: many verlds, one bridge, a secured broker.

A fleet on one host: N verld daemons on N simulated devices behind one bridge,
calls spread over all of them with unique payloads, from several MQTT clients at
once: every reply from the right device, none lost, none duplicated. And the
bridge on a mosquitto that wants TLS with client certificates and a password.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from mqttrig import BASE, Broker, Certs, Fleet, Mqtt, topic

from verld.client import Client
from verld.testing import wait_for

pytestmark = pytest.mark.timeout(120)


def test_a_fleet_of_six_devices_answers_every_call_from_the_right_device(tmp_path: Path) -> None:
    """Every call over a fleet of six devices is answered with its own echo by the right device."""
    # 6 devices, 3 callers, 40 calls each spread over the devices: 120 replies, each the echo of
    # its own unique payload, from the device it was sent to.
    names = tuple(f"d{i}" for i in range(6))
    fleet = Fleet(tmp_path, names)
    callers = [Mqtt(fleet.broker, client_id=f"caller{i}") for i in range(3)]
    try:
        watch = Mqtt(fleet.broker)
        watch.subscribe(f"{BASE}/+/state")
        for name in names:
            watch.wait(topic(name, "state"), lambda m: m.json["state"] == "up", timeout=20)
        watch.close()
        for i, caller in enumerate(callers):
            caller.subscribe(f"test/c{i}/#")

        def run(i: int, caller: Mqtt) -> None:
            for j in range(40):
                name = names[(i + j) % len(names)]
                payload = f"\x01c{i}-{j}-{name}"
                caller.publish(
                    topic(name, "call"),
                    {"text": payload, "transaction": [i, j, name]},
                    response_topic=f"test/c{i}/{name}",
                    correlation=f"{i}-{j}".encode(),
                )

        threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for i, caller in enumerate(callers):
            wait_for(_has(caller, 40), 30, f"caller {i}'s 40 replies")
            got = {}
            for msg in caller.messages:
                i2, j, name = msg.json["transaction"]
                assert msg.topic == f"test/c{i}/{name}" and i2 == i
                assert base64.b64decode(msg.json["data"]) == f"c{i}-{j}-{name}".encode()
                assert msg.correlation == f"{i}-{j}".encode()
                assert (i, j) not in got
                got[(i, j)] = msg
            assert len(got) == 40
        assert sum(d.status()["counters"]["calls"] for d in fleet.daemons.values()) == 120
    finally:
        for caller in callers:
            caller.close()
        fleet.stop()


def _has(client: Mqtt, count: int) -> Callable[[], bool]:
    return lambda: len(client.messages) >= count


def test_the_bridge_connects_over_tls_with_a_client_certificate_and_password(
    tmp_path: Path,
) -> None:
    """The bridge connects to a mosquitto demanding TLS, a client certificate and a password."""
    # The certificate is from mosquitto's CA; the bridge's config names the CA, its certificate
    # and key, and a password file.
    certs = Certs(tmp_path)
    broker = Broker(tmp_path, certs=certs, users={"bridge": "s3cret"})
    pw = tmp_path / "bridge.pw"
    pw.write_text("s3cret\n")
    pw.chmod(0o600)
    tls = {
        "tls": True,
        "ca": str(certs.ca),
        "cert": str(certs.client),
        "key": str(certs.client_key),
        "username": "bridge",
        "password_file": str(pw),
    }
    fleet = Fleet(tmp_path, ("dev",), server=broker, bridge=False)
    try:
        from mqttrig import BridgeProc

        bridge = BridgeProc(tmp_path, broker, fleet.sockets(), broker=tls)
        fleet.bridge = bridge
        log = tmp_path / "verld-mqtt.log"
        wait_for(
            lambda: "mqtt_connected" in log.read_text(errors="replace"),
            20,
            lambda: f"a TLS connection; log: {log.read_text()[-2000:]}",
        )
        assert "s3cret" not in log.read_text()
    finally:
        fleet.stop()


def test_a_wrong_password_is_refused_and_retried_without_a_crash(tmp_path: Path) -> None:
    """A bad password: the broker refuses, the bridge logs it and keeps retrying."""
    broker = Broker(tmp_path, users={"bridge": "right"})
    pw = tmp_path / "bridge.pw"
    pw.write_text("wrong\n")
    fleet = Fleet(tmp_path, ("dev",), server=broker, bridge=False)
    try:
        from mqttrig import BridgeProc

        bridge = BridgeProc(
            tmp_path,
            broker,
            fleet.sockets(),
            broker={"username": "bridge", "password_file": str(pw)},
        )
        fleet.bridge = bridge
        log = tmp_path / "verld-mqtt.log"
        wait_for(
            lambda: log.read_text(errors="replace").count("mqtt_disconnected") >= 2,
            20,
            "two refused attempts",
        )
        assert bridge.proc is not None and bridge.proc.poll() is None
    finally:
        fleet.stop()


def test_events_while_the_broker_is_away_are_dropped_and_counted_not_queued(
    tmp_path: Path,
) -> None:
    """Events while the broker is away are dropped and counted in a bounded queue, not queued."""
    # The broker stops; the device emits 20000 events: the bridge keeps a bounded queue (drops
    # counted in its log), its memory does not follow, and after the broker is back the retained
    # state is there again.
    broker = Broker(tmp_path)
    fleet = Fleet(tmp_path, ("dev",), server=broker)
    try:
        watch = Mqtt(broker)
        watch.subscribe(f"{BASE}/#")
        watch.wait(topic("dev", "state"), lambda m: m.json["state"] == "up")
        watch.close()
        broker.stop()
        assert fleet.bridge is not None and fleet.bridge.proc is not None
        pid = fleet.bridge.proc.pid
        with Client(fleet.daemons["dev"].socket) as c:
            for _ in range(4):
                assert c.call(b"\x06\x13\x88", timeout=30).status == 0  # 5000 events each
        wait_for(lambda: "events_dropped" in fleet.bridge.log(), 20, "a drop report")  # type: ignore[union-attr]
        assert _rss_mib(pid) < 100
        broker.start()
        late = Mqtt(broker)
        late.subscribe(f"{BASE}/#")
        late.wait(topic("dev", "state"), lambda m: m.json["state"] == "up", timeout=30)
        late.close()
    finally:
        fleet.stop()


def _rss_mib(pid: int) -> float:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line.split()[1] for line in lines if line.startswith("VmRSS"))) / 1024
