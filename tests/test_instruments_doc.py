"""docs/instruments.md: its configs are valid and its command line runs as shown.

Each YAML block of the guide is written to a file and checked with
`verld --check-config` (a real subprocess), and the quick start it shows is parsed
by verld's own command line.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from verld.cmdline import parser, start_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "instruments.md"
pytestmark = pytest.mark.timeout(60)


def blocks(kind: str) -> list[str]:
    """The guide's fenced blocks of one kind (yaml, console)."""
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


@pytest.mark.parametrize("index", range(3))
def test_each_config_in_the_guide_is_valid(tmp_path: Path, index: int) -> None:
    """`verld --check-config` accepts each config of the guide (exit 0)."""
    configs = blocks("yaml")
    assert len(configs) == 3  # the supply, its network port, the modem
    text = configs[index]
    if "device:" not in text:  # the network port: an addition to the supply's config
        text = configs[0] + text
    path = tmp_path / "verld.yaml"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "verld", "--check-config", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr


def test_the_quick_start_in_the_guide_sets_what_the_file_does() -> None:
    """The guide's `verld ...` command gives the same line settings as its config."""
    console = blocks("console")[0]
    command = console.split("$ ", 1)[1].replace("\\\n", " ").strip()
    argv = shlex.split(command)
    assert argv[0] == "verld"
    cfg = start_config(parser().parse_args([*argv[1:], "--socket", "/x.sock"])).cfg
    line = cfg.device.line
    assert (line.no_reply, line.event) == ("^[^?]*$", "^ALARM")
    assert (cfg.heartbeat.payload, cfg.heartbeat.expect) == ("*IDN?", "^ACME,")
