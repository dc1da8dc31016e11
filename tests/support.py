"""Test support: real verld-sim and verld processes on real ptys and Unix sockets.

Everything started here is stopped by pid in `stop()` (the fixtures call it), so
no test leaks processes or fds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from verld.client import Client


def wait_for(pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll `pred` until true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


class SimProc:
    """verld-sim as a subprocess with a stable link path and a control socket."""

    def __init__(self, tmp: Path, *args: str, codec: str = "verl") -> None:
        self.link = str(tmp / "dev.tty")
        self.control_path = str(tmp / "sim.ctl")
        where = [] if "--tcp" in args else ["--link", self.link]
        cmd = [
            sys.executable,
            "-m",
            "verld.sim",
            *where,
            "--codec",
            codec,
            "--control",
            self.control_path,
            *args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.ready = line.decode().strip()  # "READY <link>" or "READY tcp://127.0.0.1:PORT"
        if not line.startswith(b"READY"):
            self.stop()
            raise AssertionError(f"verld-sim did not start: {line!r}")

    def control(self, command: str) -> dict[str, Any]:
        """One control command; its JSON answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(self.control_path)
            s.sendall(command.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        result: dict[str, Any] = json.loads(buf)
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def write_config(tmp: Path, port: str, overrides: Mapping[str, Any] | None = None) -> Path:
    """A config for a test daemon: socket in tmp, quick heartbeat and reconnect."""
    cfg: dict[str, Any] = {
        "device": {"port": port, "timeout": 1.0, "retry": 0},
        "heartbeat": {"interval": 1.0, "misses": 3, "timeout": 0.5},
        "reconnect": {"initial": 0.05, "max": 0.5},
        "api": {"socket": str(tmp / "verld.sock")},
        "log": {"level": "DEBUG", "format": "json"},
    }
    for section, values in (overrides or {}).items():
        if isinstance(values, dict):
            cfg.setdefault(section, {}).update(values)
        else:
            cfg[section] = values
    path = tmp / "verld.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class DaemonProc:
    """verld as a subprocess; `client()` gives connected blocking clients."""

    def __init__(
        self, config: Path, *, wait_up: bool = True, env: Mapping[str, str] | None = None
    ) -> None:
        self.config = config
        self.socket = yaml.safe_load(config.read_text())["api"]["socket"]
        self.log_path = config.parent / "verld.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "verld", "--config", str(config)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        self._clients: list[Client] = []
        try:
            wait_for(self._listening, 15, "verld to listen")
            if wait_up:
                self.wait_state("up")
        except BaseException:
            self.stop()
            raise

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"verld exited {self.proc.returncode}:\n{self.log()}")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(self.socket)
        except OSError:
            return False
        return True

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, **kw: Any) -> Client:
        c = Client(self.socket, timeout=10.0, **kw).connect()
        self._clients.append(c)
        return c

    def status(self) -> dict[str, Any]:
        with Client(self.socket, timeout=5.0) as c:
            return c.status()

    def wait_state(
        self, state: str, timeout: float = 10.0, min_generation: int = 0
    ) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def check() -> bool:
            nonlocal seen
            seen = self.status()["link"]
            return bool(seen["state"] == state and seen["generation"] >= min_generation)

        wait_for(check, timeout, f"link {state} (last seen {seen})")
        return seen

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        for c in self._clients:
            c.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
