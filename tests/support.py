"""Test support: the process helpers of `verld.testing`, under the names the tests import.

The helpers (real verld-sim and verld processes on real ptys and Unix sockets,
the sim's control client, `wait_for`, `write_config`) live in the package so the
tools and third-party tests can use them too; see verld/testing.py.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys

import pytest

from verld.testing import (
    DaemonProc,
    HarnessError,
    SimProc,
    sim_control,
    stop_process,
    wait_for,
    write_config,
)

__all__ = [
    "DaemonProc",
    "HarnessError",
    "SimProc",
    "sim_control",
    "skip_unless_nobody_can_import",
    "stop_process",
    "wait_for",
    "write_config",
]


@functools.cache
def _nobody_cannot_import() -> str | None:
    """Why uid 65534 cannot run this Python and import verld from here (None: it can)."""
    if shutil.which("setpriv") is None:
        return "running as another user needs setpriv"
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
           sys.executable, "-c", "import verld.ctl"]  # fmt: skip
    r = subprocess.run(cmd, cwd="/", capture_output=True, text=True, timeout=60, check=False)
    if r.returncode == 0:
        return None
    last = (r.stderr.strip().splitlines() or ["?"])[-1]
    return (f"uid 65534 cannot import verld from this checkout (a directory on the way, "
            f"such as a 0700 home, is closed to other users): {last}")  # fmt: skip


def skip_unless_nobody_can_import() -> None:
    """Skip (saying why) a test that runs verld's code as nobody where nobody cannot read
    this checkout; the check itself is done once per test process."""
    reason = _nobody_cannot_import()
    if reason is not None:
        pytest.skip(reason)
