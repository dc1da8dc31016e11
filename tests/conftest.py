"""Shared fixtures."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, write_config


def _verl_vectors_path() -> Path | None:
    """The frozen verl test vectors: `shared/vectors/` beside the repo, else $VERLD_VECTORS."""
    candidates = [Path(__file__).resolve().parents[2] / "shared" / "vectors" / "verl-frames.json"]
    if env := os.environ.get("VERLD_VECTORS"):
        candidates.append(Path(env))
    return next((path for path in candidates if path.is_file()), None)


@pytest.fixture(scope="session")
def verl_vectors() -> dict[str, Any]:
    """The contents of verl-frames.json (DESIGN.md, "Link codecs")."""
    path = _verl_vectors_path()
    if path is None:
        pytest.skip("verl-frames.json absent: not in ../shared/vectors/, $VERLD_VECTORS unset")
    vectors: dict[str, Any] = json.loads(path.read_text())
    return vectors


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimProc]:
    """A verld-sim on a fresh pty, its link and control socket in tmp_path."""
    s = SimProc(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def daemon(tmp_path: Path, sim: SimProc) -> Iterator[DaemonProc]:
    """A verld serving `sim` with the test defaults of support.write_config, link up."""
    d = DaemonProc(write_config(tmp_path, sim.link))
    yield d
    d.stop()
