"""The processes of a soak: verld-sim and verld (from verld.testing), their RSS and fds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from soaklib.modbus import PING, UNITS
from verld.testing import DaemonProc, SimProc, write_config

# The daemon config of a soak: short everything, so faults turn over quickly.
CONFIG: dict[str, Any] = {
    "device": {"timeout": 0.5, "retry": 2, "window": 8},
    "heartbeat": {"interval": 0.5, "misses": 3, "timeout": 0.3},
    "reconnect": {"initial": 0.05, "max": 1.0},
    "log": {"level": "INFO", "format": "json"},
}


def modbus_config(codec: str) -> dict[str, Any]:
    """The daemon config of a Modbus soak: the same, on `codec`, with a heartbeat (unit 1
    reads an input register: `modbus.PING`) and a quick turnover of offline units."""
    return {
        **CONFIG,
        "device": {**CONFIG["device"], "codec": codec},
        "heartbeat": {**CONFIG["heartbeat"], "payload": PING.hex()},
        "modbus": {"offline_after": 3, "offline_backoff": 2.0},
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


def start_sim(workdir: Path, seed: int, codec: str = "verl") -> SimProc:
    """verld-sim with a control socket, its log in workdir (sim.log): on a pty, or for
    modbus-tcp on TCP (a free port); a Modbus slave for units `modbus.UNITS`."""
    if codec == "verl":
        return SimProc(workdir, "--seed", str(seed))
    units = ",".join(map(str, UNITS))
    return SimProc(
        workdir, "--seed", str(seed), "--units", units, codec=codec, tcp=codec == "modbus-tcp"
    )


def start_daemon(workdir: Path, link: str, codec: str = "verl") -> DaemonProc:
    """verld on the sim's link, listening (the link may not be up yet); its log: verld.log."""
    config = CONFIG if codec == "verl" else modbus_config(codec)
    return DaemonProc(write_config(workdir, link, config), wait_up=False, timeout=20)
