"""The processes of a soak: verld-sim and verld, their RSS and fds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

# The daemon config of a soak: short everything, so faults turn over quickly.
CONFIG: dict[str, Any] = {
    "device": {"timeout": 0.5, "retry": 2, "window": 8},
    "heartbeat": {"interval": 0.5, "misses": 3, "timeout": 0.3},
    "reconnect": {"initial": 0.05, "max": 1.0},
    "log": {"level": "INFO", "format": "json"},
}


def rss_kb(pid: int) -> int:
    """VmRSS of a process in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def start_sim(workdir: Path, seed: int) -> tuple[subprocess.Popen[bytes], str, str]:
    """verld-sim on a pty with a control socket: (process, link path, control path)."""
    link, control = str(workdir / "dev.tty"), str(workdir / "sim.ctl")
    cmd = [sys.executable, "-m", "verld.sim", "--link", link, "--control", control]
    proc = subprocess.Popen(
        [*cmd, "--seed", str(seed)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(b"READY"):
        stop(proc)
        raise RuntimeError(f"verld-sim did not start: {line!r}")
    return proc, link, control


def start_daemon(workdir: Path, link: str) -> tuple[subprocess.Popen[bytes], str]:
    """verld on the sim's link: (process, API socket path); its log goes to workdir."""
    sock = str(workdir / "verld.sock")
    cfg = json.loads(json.dumps(CONFIG))
    cfg["device"]["port"] = link
    cfg["api"] = {"socket": sock}
    path = workdir / "verld.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    with open(workdir / "verld.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "verld", "--config", str(path)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc, sock


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after `timeout`; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode
