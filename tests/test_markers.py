"""The `slow` marker: `-m slow` and `-m "not slow"` split the suite.

tests/conftest.py marks every test of the modules in its SLOW_MODULES table `slow`, so
`python -m pytest -m "not slow"` runs the core in under a minute. The test collects the
suite twice in subprocesses (collect-only, side by side), once per half, and checks that
every test is in exactly one half and that every module the table names is a test module
with tests (a renamed slow module would otherwise fall silently into the fast half).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SLOW_MODULES

ROOT = Path(__file__).resolve().parent.parent

# `-q --collect-only`'s last line: "1200/3187 tests collected (1987 deselected) in 6.9s"
# or, nothing deselected, "3187 tests collected in 6.9s".
SUMMARY = re.compile(r"^(?:(\d+)/)?(\d+) tests? collected")


def collect(marker: str) -> subprocess.Popen[str]:
    """`pytest --collect-only -q -m MARKER` on the whole suite, started (not awaited)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    return subprocess.Popen(
        [*argv, "-m", marker],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def selected(proc: subprocess.Popen[str]) -> tuple[set[str], int]:
    """The node ids a `collect` run selected, and the size of the whole collection."""
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, f"pytest --collect-only exited {proc.returncode}:\n{out}{err}"
    lines = out.splitlines()
    ids = [line for line in lines if "::" in line]
    assert len(ids) == len(set(ids)), "a node id is listed twice"
    totals = [m for line in lines if (m := SUMMARY.match(line.strip()))]
    assert totals, f"no 'tests collected' line in:\n{out[-2000:]}"
    picked, total = totals[-1].group(1, 2)
    assert int(picked or total) == len(ids)
    return set(ids), int(total)


@pytest.mark.timeout(180)
def test_slow_and_not_slow_select_every_test_exactly_once() -> None:
    """`-m slow` and `-m "not slow"` select disjoint halves that together are the suite."""
    slow_run, fast_run = collect("slow"), collect("not slow")
    slow, total = selected(slow_run)
    fast, total_again = selected(fast_run)
    assert total == total_again > 1000
    assert slow and fast
    assert not slow & fast, f"in both halves: {sorted(slow & fast)[:10]}"
    assert len(slow) + len(fast) == total, f"{len(slow)} + {len(fast)} of {total} tests"
    assert {node.split("::")[0].rsplit("/", 1)[-1] for node in slow} == SLOW_MODULES
