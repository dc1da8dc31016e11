"""Test support: the process helpers of `verld.testing`, under the names the tests import.

The helpers (real verld-sim and verld processes on real ptys and Unix sockets,
the sim's control client, `wait_for`, `write_config`) live in the package so the
tools and third-party tests can use them too; see verld/testing.py.
"""

from __future__ import annotations

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
    "stop_process",
    "wait_for",
    "write_config",
]
