"""What the machine has: a program's path, a line of a program's output, the run's machine.

Families ask it for the versions they report (socat, ser2net, mosquitto) and whether a
path's program is installed; `cli` for the description a run's JSON carries (`machine`).
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

import verld

ROOT = Path(__file__).resolve().parent.parent.parent  #: the checkout the bench runs from


def which(program: str) -> str | None:
    """`program`'s path, looked up in /usr/sbin and /sbin too (ser2net lives there)."""
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")


def output(cmd: list[str], line_with: str = "") -> str:
    """The first line of `cmd`'s output that holds `line_with` ("?" if none)."""
    try:
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return next((line.strip() for line in text.splitlines() if line_with in line), "?")


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages ("?" where /proc has none)."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def machine() -> dict[str, Any]:
    """The date, CPUs, Python, kernel, verld version and checkout a run's meta names."""
    cpu = output(["grep", "-m1", "model name", "/proc/cpuinfo"]).partition(":")[2].strip()
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu or "unknown CPU",
        "python": platform.python_version(),
        "kernel": platform.release(),
        "verld": verld.__version__,
        "git": output(
            ["git", "--no-optional-locks", "-C", str(ROOT), "describe", "--always", "--dirty"]
        ),
    }
