"""A real broker, verld daemons on simulated devices, verld-mqtt, and MQTT clients.

`Broker` is mosquitto on a free loopback port (optionally a TLS listener with a CA
and certificates made with openssl by tests/pki.py, and a password file made with
mosquitto_passwd); `BridgeProc` is `python -m verld.mqtt` on a config written to
tmp; `Mqtt` is a paho-mqtt client (MQTT 5 or 3.1.1) that records what it receives,
so a test can wait for a topic's message. Every process is stopped by pid.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import support
import yaml
from paho.mqtt import client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions
from pki import Pki
from support import free_port

from verld.testing import DaemonProc, SimProc, stop_process, wait_for, write_config

HOST = socket.gethostname().split(".")[0]
BASE = "verld/test"


def need(program: str) -> str:
    """The program's path; a skip (a failure under CI=true) when it is missing."""
    return support.need(program, "mosquitto, mosquitto-clients, openssl")


class Certs:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate
    (tests/pki.py: the extensions strict verification wants), or `made` elsewhere
    (`ca`, `server`, `server_key`, `client`, `client_key`: docs/fleet.md's recipe)."""

    def __init__(self, tmp: Path, made: dict[str, Path] | None = None) -> None:
        if made is None:
            need("openssl")
            pki = Pki(tmp / "pki", "verld test CA")
            (server, server_key), (client, client_key) = pki.server(), pki.client(cn="verld-mqtt")
            made = {
                "ca": pki.ca,
                "server": server,
                "server_key": server_key,
                "client": client,
                "client_key": client_key,
            }
        self.ca, self.server, self.server_key = made["ca"], made["server"], made["server_key"]
        self.client, self.client_key = made["client"], made["client_key"]


class Broker:
    """mosquitto on 127.0.0.1:`port` (a free one unless given: restarts keep it)."""

    def __init__(
        self,
        tmp: Path,
        *,
        port: int | None = None,
        certs: Certs | None = None,
        users: dict[str, str] | None = None,
    ) -> None:
        self.exe = need("mosquitto")
        self.tmp, self.certs, self.users = tmp, certs, users
        self.port = port or free_port()
        self.conf = tmp / f"mosquitto-{self.port}.conf"
        # as root, mosquitto would switch to its own user, who cannot read tmp's files
        lines = [
            f"listener {self.port} 127.0.0.1",
            "persistence false",
            f"user {getpass.getuser()}",
        ]
        if certs is not None:
            lines += [
                f"cafile {certs.ca}",
                f"certfile {certs.server}",
                f"keyfile {certs.server_key}",
                "require_certificate true",
                "use_identity_as_username false",
            ]
        if users:
            pw = tmp / "passwd"
            pw.write_text("")
            for user, password in users.items():
                subprocess.run(
                    [need("mosquitto_passwd"), "-b", str(pw), user, password],
                    check=True,
                    capture_output=True,
                )
            os.chmod(pw, 0o600)
            lines += ["allow_anonymous false", f"password_file {pw}"]
        else:
            lines.append("allow_anonymous true")
        self.conf.write_text("\n".join(lines) + "\n")
        self.log_path = tmp / f"mosquitto-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([self.exe, "-c", str(self.conf)], stdout=log, stderr=log)
        wait_for(self._listening, 10.0, f"mosquitto on {self.port}")

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"mosquitto exited:\n{self.log_path.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGTERM, grace=5.0)
            self.proc = None


class Message:
    """One received message: topic, JSON payload (or raw), retain flag, properties."""

    def __init__(self, msg: Any) -> None:
        self.topic: str = msg.topic
        self.raw: bytes = msg.payload
        self.retain: bool = bool(msg.retain)
        props = getattr(msg, "properties", None)
        self.correlation: bytes | None = getattr(props, "CorrelationData", None)
        try:
            self.json: Any = json.loads(self.raw) if self.raw else None
        except ValueError:
            self.json = None

    def __repr__(self) -> str:
        return f"Message({self.topic!r}, {self.raw[:200]!r}, retain={self.retain})"


class Mqtt:
    """A paho client that records every message on its subscriptions."""

    def __init__(self, broker: Broker, *, v5: bool = True, client_id: str = "") -> None:
        protocol = paho.MQTTv5 if v5 else paho.MQTTv311
        self.v5 = v5
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol
        )
        self.messages: list[Message] = []
        self._lock = threading.Lock()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()
        wait_for(self.client.is_connected, 5.0, "the test client connected")

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self._lock:
            self.messages.append(Message(msg))

    def subscribe(self, topic: str, qos: int = 1) -> None:
        done = threading.Event()
        self.client.on_subscribe = lambda *a: done.set()
        if self.v5:  # retain as published: a live message keeps its retain flag
            self.client.subscribe(topic, options=SubscribeOptions(qos=qos, retainAsPublished=True))
        else:
            self.client.subscribe(topic, qos)
        assert done.wait(5), f"subscribe {topic}"

    def publish(
        self,
        topic: str,
        payload: Any,
        *,
        response_topic: str | None = None,
        correlation: bytes | None = None,
        expiry: int | None = None,
        qos: int = 1,
    ) -> None:
        props = None
        if self.v5 and (response_topic or correlation or expiry is not None):
            props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            if response_topic:
                props.ResponseTopic = response_topic
            if correlation:
                props.CorrelationData = correlation
            if expiry is not None:
                props.MessageExpiryInterval = expiry
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.client.publish(topic, data, qos=qos, properties=props).wait_for_publish(5)

    def on(self, topic: str, pred: Callable[[Message], bool] = lambda m: True) -> list[Message]:
        with self._lock:
            return [m for m in self.messages if m.topic == topic and pred(m)]

    def wait(
        self,
        topic: str,
        pred: Callable[[Message], bool] = lambda m: True,
        timeout: float = 10.0,
        count: int = 1,
    ) -> list[Message]:
        """The messages on `topic` matching `pred`, once there are `count` of them."""
        wait_for(
            lambda: len(self.on(topic, pred)) >= count,
            timeout,
            lambda: f"{count} message(s) on {topic}; got {self.messages[-5:]}",
        )
        return self.on(topic, pred)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


#: a directory holding another paho-mqtt (1.6.1, Debian 12's) for the bridge alone: the
#: test process and its own MQTT clients stay on the venv's (noxfile.py, `mqtt_paho16`)
BRIDGE_PAHO = "VERLD_BRIDGE_PAHO"


def bridge_env() -> dict[str, str]:
    """verld-mqtt's environment: this one, with $VERLD_BRIDGE_PAHO first on its path."""
    env = dict(os.environ)
    paho = env.get(BRIDGE_PAHO)
    if paho:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (paho, env.get("PYTHONPATH")) if p)
    return env


class BridgeProc:
    """verld-mqtt as a subprocess on a config written to tmp/mqtt.yaml."""

    def __init__(self, tmp: Path, server: Broker, devices: dict[str, str], **config: Any) -> None:
        broker_cfg = {"host": "127.0.0.1", "port": server.port, **config.pop("broker", {})}
        cfg = {
            "broker": broker_cfg,
            "base": BASE,
            "devices": devices,
            "log": {"level": "DEBUG", "format": "json"},
            **config,
        }
        self.config = tmp / "mqtt.yaml"
        self.config.write_text(yaml.safe_dump(cfg))
        self.log_path = tmp / "verld-mqtt.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "verld.mqtt", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=bridge_env(),
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc is None:
            return 0
        code = stop_process(self.proc, sig, grace=10.0)
        self.proc = None
        return code


class Fleet:
    """N verld daemons on N sims (codec verl), a broker and one bridge over them."""

    def __init__(
        self,
        tmp: Path,
        names: tuple[str, ...] = ("dev",),
        *,
        bridge: bool = True,
        server: Broker | None = None,
        sim_args: tuple[str, ...] = (),
        **bridge_config: Any,
    ) -> None:
        self.tmp = tmp
        self.broker = server or Broker(tmp)
        self.sims: dict[str, SimProc] = {}
        self.daemons: dict[str, DaemonProc] = {}
        self.bridge: BridgeProc | None = None
        try:
            for name in names:
                d = tmp / name
                d.mkdir()
                self.sims[name] = SimProc(d, *sim_args)
                self.daemons[name] = DaemonProc(
                    write_config(d, self.sims[name].link, {"heartbeat": {"interval": 0}})
                )
            if bridge:
                self.bridge = BridgeProc(tmp, self.broker, self.sockets(), **bridge_config)
        except BaseException:
            self.stop()
            raise

    def sockets(self) -> dict[str, str]:
        return {name: d.socket for name, d in self.daemons.items()}

    def restart_daemon(self, name: str) -> None:
        d = self.tmp / name
        self.daemons[name] = DaemonProc(d / "verld.yaml", shared=True)  # (the fleet's)

    def stop(self) -> None:
        if self.bridge is not None:
            self.bridge.stop()
        for daemon in self.daemons.values():
            if daemon.proc.poll() is None:
                daemon.stop()
        for sim in self.sims.values():
            sim.stop()
        self.broker.stop()


def topic(device: str, leaf: str) -> str:
    return f"{BASE}/{device}/{leaf}"


class Pair:
    """One verld-sim of any codec (`sim_args` as verld-sim takes them) and one verld on its
    pty, in `tmp/name/`; `overrides` go to the verld config (`write_config`)."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        *sim_args: str,
        codec: str = "verl",
        overrides: dict[str, Any] | None = None,
    ) -> None:
        d = tmp / name
        d.mkdir()
        self.sim = SimProc(d, *sim_args, codec=codec)
        try:
            device = {"codec": codec, **(overrides or {}).get("device", {})}
            cfg = {"heartbeat": {"interval": 0}, **(overrides or {}), "device": device}
            self.daemon = DaemonProc(write_config(d, self.sim.link, cfg))
        except BaseException:
            self.sim.stop()
            raise

    @property
    def socket(self) -> str:
        return self.daemon.socket

    def stop(self) -> None:
        if self.daemon.proc.poll() is None:
            self.daemon.stop()
        self.sim.stop()
