"""A copy of the checkout for tests that build from it (the .deb, the sdist and wheel).

Builds run in the copy, so the work tree stays clean whatever they write.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def copy_checkout(dest: Path, required: Callable[[bool, str], None]) -> Path:
    """The checkout's files, tracked and new but not ignored (what `make deb` copies), in
    `dest`; a tracked file deleted in the work tree is left out. `required(ok, why)`
    skips (or fails under CI) when this is not a git checkout."""
    required(shutil.which("git") is not None and (REPO / ".git").exists(), "not a git checkout")
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, names.split("\0")):
        src = REPO / name
        if not src.exists() and not src.is_symlink():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name, follow_symlinks=False)
    return dest
