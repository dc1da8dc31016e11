"""docs/network.md, the network ports' guide, kept true to the code it shows.

Strategy: the guide is read as text (no daemon runs). Its ```yaml blocks that hold a
`network:` key are whole configs or fragments a reader copies: each must parse with
`verld.config.parse_config` in-process, and pass `verld --check-config` as a file. The
config it shows being refused (`$ cat open.yaml` in a console block) must still be
refused, exit 2, with the very lines it quotes. The socket unit lines it quotes must
be `systemd/verld-network@.socket`'s, and its links must lead to files of the
repository (never outside it) and to headings that exist. Mirrors the last test of
tests/test_ports_programs.py, which does the same for docs/ports.md.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from verld.config import parse_config

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "network.md"
UNIT = REPO / "systemd" / "verld-network@.socket"
#: the lines the guide and docs/deploy.md promise: an entry named after its port, for verld.service
UNIT_CONTRACT = ("ListenStream=127.0.0.1:%i", "FileDescriptorName=net-%i", "Service=verld.service")


def _blocks(lang: str) -> list[str]:
    """The guide's fenced blocks of `lang` (indented ones, inside list items, too)."""
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(rf"^( *)```{lang}\n(.*?)^\1```", text, re.S | re.M)
    return [re.sub(rf"^{indent}", "", body, flags=re.M) for indent, body in found]


def _network_snippets() -> list[str]:
    """The ```yaml blocks that hold a top-level `network:` key."""
    return [block for block in _blocks("yaml") if re.search(r"^network:", block, re.M)]


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to -."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.timeout(30)
def test_the_guides_network_snippets_parse() -> None:
    """Every ```yaml block of docs/network.md with `network:` parses with parse_config."""
    snippets = _network_snippets()
    assert len(snippets) >= 2, "docs/network.md shows no `network:` configs"
    for i, snippet in enumerate(snippets, 1):
        config = parse_config(snippet, f"docs/network.md, yaml block {i}")
        assert config.network, f"yaml block {i} has an empty network list:\n{snippet}"


@pytest.mark.timeout(60)
def test_the_guides_network_snippets_pass_check_config(tmp_path: Path) -> None:
    """Every ```yaml block of docs/network.md with `network:` passes `verld --check-config`."""
    for i, snippet in enumerate(_network_snippets(), 1):
        path = tmp_path / f"snippet{i}.yaml"
        path.write_text(snippet)
        done = subprocess.run(
            [sys.executable, "-m", "verld", "--check-config", str(path)],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert done.returncode == 0, f"docs/network.md, yaml block {i}:\n{snippet}\n{done.stderr}"


@pytest.mark.timeout(60)
def test_the_refused_config_is_refused_with_the_quoted_messages(tmp_path: Path) -> None:
    """The guide's open.yaml still exits 2 from check-config with each message it quotes."""
    # The console block runs `cat open.yaml`, then `verld --check-config open.yaml`.
    (block,) = [b for b in _blocks("console") if b.startswith("$ cat open.yaml\n")]
    config = block.split("\n$ ", 2)[0].split("\n", 1)[1]
    quoted = re.findall(r"^open\.yaml:\d+: .+$", block, re.M)
    assert len(quoted) >= 2, block
    (tmp_path / "open.yaml").write_text(config)
    done = subprocess.run(
        [sys.executable, "-m", "verld", "--check-config", "open.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    for line in quoted:
        assert line in done.stderr.splitlines(), f"{line!r} not in:\n{done.stderr}"


@pytest.mark.timeout(30)
def test_the_quoted_socket_unit_lines_are_the_units() -> None:
    """Each setting of the guide's ```ini blocks with FileDescriptorName is in the socket unit."""
    unit = set(UNIT.read_text(encoding="utf-8").splitlines())
    quoted = [b for b in _blocks("ini") if "FileDescriptorName=" in b]
    assert quoted, "docs/network.md quotes no lines of verld-network@.socket"
    for block in quoted:
        for line in block.splitlines():
            if line and not line.startswith(("#", ";")):
                assert line in unit, f"{line!r} is not a line of {UNIT.name}"
    assert set(UNIT_CONTRACT) <= unit


@pytest.mark.timeout(30)
def test_links_lead_to_files_and_headings_of_the_repository() -> None:
    """Every relative link in docs/network.md names a file in the repository and a heading in it."""
    links = re.findall(r"\]\(([^)\s]+)\)", DOC.read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 10, local
    for link in local:
        target, _, anchor = link.partition("#")
        path = (DOC.parent / target).resolve() if target else DOC
        assert path.is_relative_to(REPO), f"{link} leads outside the repository"
        assert path.is_file(), f"{link}: no such file"
        if anchor:
            assert anchor in _anchors(path), f"{link}: no heading #{anchor} in {path.name}"
