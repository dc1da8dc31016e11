"""The suite's codec plugins (tests/plugins/), installed as a user installs a plugin.

`install(target, *names)` runs `pip install --no-deps --target TARGET` on the named
packages: each lands in TARGET with its dist-info, where `importlib.metadata` finds its
entry points once TARGET is on sys.path (PYTHONPATH for a verld subprocess), and never
in the shared venv.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: the packages under tests/plugins/
PLUGINS = Path(__file__).parent / "plugins"
#: Dynamixel Protocol 2.0: the plugin docs/codecs.md walks through
DYNAMIXEL = "verld-dynamixel"
#: a codec with `commands`: verld-sim plays its device
TAG8 = "verld-tag8"
#: plugins that cannot be used: one fails to import, one is not a spec, one is named
#: otherwise, one takes a built-in's name
ODD = "verld-odd-codecs"


def install(target: Path, *names: str) -> Path:
    """`target`, holding the packages `names` installed from tests/plugins/ (built from
    a copy: a build leaves its `build/` and `*.egg-info` beside the sources)."""
    with tempfile.TemporaryDirectory() as sources:
        packages = [shutil.copytree(PLUGINS / name, Path(sources, name)) for name in names]
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
        subprocess.run([*command, str(target), *map(str, packages)], check=True, timeout=300)
    return target
