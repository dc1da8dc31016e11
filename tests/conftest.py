"""Shared fixtures."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, write_config

from verld.testing import running, stop_leftovers

VECTORS = Path(__file__).resolve().parent / "vectors"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each phase's report, kept on the test (`_no_leftover_processes` reads it)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(autouse=True)
def _no_leftover_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """A sim or daemon a failed test started and did not stop (it failed before its
    clean-up) is stopped after it: one failure leaves no process behind."""
    before = running()
    yield
    report = getattr(request.node, "report_call", None)
    if report is None or report.failed:
        stop_leftovers(before)


@pytest.fixture(scope="session")
def verl_vectors() -> dict[str, Any]:
    """The frozen verl test vectors, tests/vectors/verl-frames.json (docs/protocol.md, §3.1)."""
    vectors: dict[str, Any] = json.loads((VECTORS / "verl-frames.json").read_text())
    return vectors


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimProc]:
    """A verld-sim on a fresh pty, its link and control socket in tmp_path."""
    s = SimProc(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def daemon(tmp_path: Path, sim: SimProc) -> Iterator[DaemonProc]:
    """A verld serving `sim` with the test defaults of verld.testing.write_config, link up."""
    d = DaemonProc(write_config(tmp_path, sim.link))
    yield d
    d.stop()


@pytest.fixture
def pubdir() -> Iterator[Path]:
    """A directory every uid may traverse (pytest's tmp_path may be root-only): for
    tests that run a client as another, non-root user."""
    path = Path(tempfile.mkdtemp(prefix="verld-pub-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
