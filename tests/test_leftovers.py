"""The suite's safety net for processes a failed test left: verld.testing's registry."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import SimProc

from verld.testing import running, stop_leftovers

pytestmark = pytest.mark.timeout(60)


def test_a_process_started_since_a_snapshot_is_stopped_as_a_leftover(tmp_path: Path) -> None:
    """stop_leftovers(before) stops a sim started after `before` and never stopped."""
    before = running()
    sim = SimProc(tmp_path)
    assert sim.pid in running()
    assert stop_leftovers(before) == [sim.pid]
    assert sim.proc.poll() is not None and sim.pid not in running()


def test_a_stopped_process_leaves_the_registry(tmp_path: Path) -> None:
    """A sim stopped by its owner is no leftover any more."""
    before = running()
    SimProc(tmp_path).stop()
    assert running() == before and stop_leftovers(before) == []


def test_a_shared_process_is_never_a_leftover(tmp_path: Path) -> None:
    """A sim started `shared` (a pool's, kept across tests) is left to its owner."""
    before = running()
    sim = SimProc(tmp_path, shared=True)
    try:
        assert stop_leftovers(before) == [] and sim.proc.poll() is None
    finally:
        sim.stop()
