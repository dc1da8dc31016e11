"""Shared fixtures."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest


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
