"""The fleet family's processes: mosquitto, N verld-sim + verld pairs, verld-mqtt, the echo.

Everything goes through `benchlib.procs.Procs` (own session, SIGTERM when the bench
dies, stopped by pid at the end). Devices start in batches — every sim of a batch
spawned, then each waited for; then every daemon — so 64 of them take seconds, not a
minute, on 2 cores. The daemons run the bench's verl settings (window 8, no retries)
with the heartbeat off: 64 idle daemons stay idle. `Watcher` is a paho client on its
own thread that follows the bridge's retained `<base>/+/state` topics, to wait until
every device is `up` behind a bridge.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from paho.mqtt import client as paho
from paho.mqtt.enums import CallbackAPIVersion

from benchlib.engine import BENCH
from benchlib.host import which
from benchlib.procs import (
    BenchError,
    LineReader,
    Procs,
    Server,
    free_port,
    verl_config,
    verld_command,
)
from verld.client import Client, ClientError
from verld.sim.launch import SimError, sim_command, wait_ready

BATCH = 8  #: devices started at once
COUNTERS = ("calls", "calls_ok", "calls_failed", "timeouts")


def mosquitto(procs: Procs, tmp: Path, *, nodelay: bool = True) -> tuple[Server, str]:
    """mosquitto on 127.0.0.1 (a free port), no persistence, anonymous clients; its version."""
    exe = which("mosquitto")
    if exe is None:
        raise BenchError("mosquitto is not installed (apt: mosquitto)")
    port = free_port()
    conf = tmp / "mosquitto.conf"
    # as root, mosquitto would switch to its own user, who cannot read tmp's files
    conf.write_text(
        f"listener {port} 127.0.0.1\npersistence false\nuser {getpass.getuser()}\n"
        f"allow_anonymous true\nset_tcp_nodelay {str(nodelay).lower()}\n"
    )
    out = subprocess.run([exe, "-h"], check=False, capture_output=True, text=True, timeout=5)
    words = out.stdout.split()
    version = words[2] if words[:2] == ["mosquitto", "version"] else "?"
    return Server(procs, [exe, "-c", str(conf)], tmp / "mosquitto.log", port=port), version


class Device:
    """One verld-sim (verl) and one verld on its pty, in `tmp/NAME/`."""

    def __init__(self, name: str, tmp: Path) -> None:
        self.name = name
        self.dir = tmp / name
        self.dir.mkdir(exist_ok=True)
        self.link = str(self.dir / "dev.tty")
        self.socket = str(self.dir / "verld.sock")
        self.sim: subprocess.Popen[bytes] | None = None
        self.daemon: subprocess.Popen[bytes] | None = None

    @property
    def pids(self) -> tuple[int, int]:
        assert self.sim is not None and self.daemon is not None
        return self.sim.pid, self.daemon.pid

    def spawn_sim(self, procs: Procs) -> None:
        args = sim_command(link=self.link, control=str(self.dir / "sim.ctl"))
        with open(self.dir / "sim.log", "ab") as log:
            self.sim = procs.spawn(args, stdout=subprocess.PIPE, stderr=log)

    def spawn_daemon(self, procs: Procs) -> None:
        cfg = verl_config(self.link, 8, heartbeat=0)
        cfg["api"]["socket"] = self.socket
        path = self.dir / "verld.yaml"
        path.write_text(yaml.safe_dump(cfg))
        with open(self.dir / "verld.log", "wb") as log:
            self.daemon = procs.spawn(
                [sys.executable, "-m", "verld", "--config", str(path)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def status(self) -> dict[str, Any]:
        with Client(self.socket, timeout=10.0) as c:
            return c.status()

    def wait_up(self, deadline: float) -> None:
        assert self.daemon is not None
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise BenchError(
                    f"verld of {self.name} exited {self.daemon.returncode}:\n"
                    f"{(self.dir / 'verld.log').read_text()[-2000:]}"
                )
            with contextlib.suppress(ClientError, OSError):
                if self.status()["link"]["state"] == "up":
                    return
            time.sleep(0.02)
        raise BenchError(f"verld of {self.name}: the link did not come up")

    def counters(self) -> dict[str, int]:
        c = self.status()["counters"]
        return {key: int(c[key]) for key in COUNTERS}


class Devices:
    """The fleet's devices, by name (`d00`, `d01`, ...), started in batches."""

    def __init__(self, procs: Procs, tmp: Path) -> None:
        self.procs, self.tmp = procs, tmp
        self.all: dict[str, Device] = {}

    @staticmethod
    def names(n: int) -> list[str]:
        return [f"d{i:02d}" for i in range(n)]

    def grow(self, n: int, timeout: float = 60.0) -> None:
        """Start devices until there are `n` (BenchError, with those up kept, if not)."""
        for start in range(len(self.all), n, BATCH):
            batch = [Device(name, self.tmp) for name in self.names(n)[start : start + BATCH]]
            for dev in batch:
                dev.spawn_sim(self.procs)
            for dev in batch:
                assert dev.sim is not None
                try:
                    wait_ready(dev.sim, timeout)
                except SimError as exc:
                    raise BenchError(f"verld-sim of {dev.name}: {exc}") from None
                dev.spawn_daemon(self.procs)
            deadline = time.monotonic() + timeout
            for dev in batch:
                dev.wait_up(deadline)
                self.all[dev.name] = dev

    def first(self, n: int) -> list[Device]:
        return [self.all[name] for name in self.names(n)]

    def counters(self, names: list[str]) -> dict[str, dict[str, int]]:
        return {name: self.all[name].counters() for name in names}

    def pids(self) -> tuple[list[int], list[int]]:
        """(sim pids, daemon pids)."""
        pairs = [d.pids for d in self.all.values()]
        return [s for s, _ in pairs], [v for _, v in pairs]


class Bridge:
    """verld-mqtt (`python -m verld.mqtt --config`) on the devices, under `base`."""

    def __init__(
        self,
        procs: Procs,
        tmp: Path,
        port: int,
        base: str,
        devices: list[Device],
        checkout: Path | None = None,
    ) -> None:
        self.procs, self.base = procs, base
        name = base.replace("/", "-")
        cfg = {
            "broker": {"host": "127.0.0.1", "port": port, "client_id": f"bench-{name}"},
            "base": base,
            "devices": {d.name: d.socket for d in devices},
            "log": {"level": "INFO", "format": "json"},
        }
        self.config = tmp / f"{name}.yaml"
        self.config.write_text(yaml.safe_dump(cfg))
        self.log_path = tmp / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.proc = procs.spawn(
                [*verld_command(checkout, "verld.mqtt"), "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid

    def log_tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> int:
        return self.procs.stop(self.proc)


class Echo:
    """The bare MQTT 5 echo responder (`benchlib.mqttecho`), answering `<base>/+/call`."""

    def __init__(self, procs: Procs, tmp: Path, port: int, base: str) -> None:
        spec = json.dumps({"port": port, "base": base, "qos": 1})
        with open(tmp / "echo.log", "ab") as log:
            self.proc = procs.spawn(
                [sys.executable, BENCH, "--gen", "echo", spec], stdout=subprocess.PIPE, stderr=log
            )
        self.pid = self.proc.pid
        LineReader(self.proc, "the echo responder").expect("READY", 30)


class Watcher:
    """A paho client (its own thread) keeping the last retained state of each device."""

    def __init__(self, port: int, base: str) -> None:
        self.states: dict[str, str] = {}
        self._lock = threading.Lock()
        self.client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, *a: c.subscribe(f"{base}/+/state", qos=1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        try:
            state = json.loads(msg.payload)["state"]
        except (ValueError, KeyError, TypeError):
            return
        with self._lock:
            self.states[msg.topic.split("/")[-2]] = state

    def wait_up(self, names: list[str], timeout: float, bridge: Bridge) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if bridge.proc.poll() is not None:
                raise BenchError(
                    f"verld-mqtt exited {bridge.proc.returncode}:\n{bridge.log_tail()}"
                )
            with self._lock:
                if all(self.states.get(n) == "up" for n in names):
                    return
            time.sleep(0.05)
        with self._lock:
            down = [n for n in names if self.states.get(n) != "up"]
        raise BenchError(
            f"not up behind the bridge within {timeout:g} s: {down[:8]}\n{bridge.log_tail()}"
        )

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()
