"""One version: `verld.__version__`, read by the package metadata, printed by every
program's --version, and the newest release in CHANGELOG.md."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

import verld
from verld import compiled

REPO = Path(__file__).resolve().parent.parent
#: console script → the module that runs it without the script
PROGRAMS = {
    "verld": "verld",
    "verlctl": "verld.ctl",
    "verld-sim": "verld.sim",
    "verld-mqtt": "verld.mqtt",
}
RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\S+))?\s*$", re.M)


def version_of(name: str) -> str:
    script = Path(sysconfig.get_path("scripts")) / name
    argv = [str(script)] if script.exists() else [sys.executable, "-m", PROGRAMS[name]]
    r = subprocess.run(
        [*argv, "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_version_is_semantic() -> None:
    """verld.__version__ is a MAJOR.MINOR.PATCH version."""
    assert re.fullmatch(r"\d+\.\d+\.\d+", verld.__version__)


def test_every_program_prints_the_same_version() -> None:
    """Every program's --version prints its name and verld.__version__ (verld's the build too)."""
    printed = {name: version_of(name) for name in PROGRAMS}
    build = {"verld": f" ({compiled.build()})"}
    assert printed == {
        name: f"{name} {verld.__version__}{build.get(name, '')}" for name in PROGRAMS
    }


def test_package_metadata_is_verld_version() -> None:
    """The installed package's metadata version is verld.__version__."""
    assert importlib.metadata.version("verld") == verld.__version__


def test_pyproject_reads_the_version_from_the_package() -> None:
    """pyproject.toml has no version of its own but reads it from verld.__version__."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "verld.__version__"}


def test_the_version_is_written_once_in_the_package() -> None:
    """Only verld/__init__.py spells the version; everything else imports it."""
    literal = re.compile(rf"['\"]{re.escape(verld.__version__)}['\"]")
    found = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "verld").rglob("*.py"))
        if literal.search(p.read_text(encoding="utf-8"))
    ]
    assert found == ["verld/__init__.py"]


def releases() -> list[tuple[str, str | None]]:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    return [(m["version"], m["date"]) for m in RELEASE.finditer(text)]


def test_changelog_is_keep_a_changelog() -> None:
    """CHANGELOG.md follows Keep a Changelog: Unreleased first, dated releases newest first."""
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n")
    assert "https://keepachangelog.com/en/1.1.0/" in text
    found = releases()
    assert found[0] == ("Unreleased", None), found
    dates = []
    for version, date in found[1:]:
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
        assert date is not None and re.fullmatch(r"\d{4}-\d\d-\d\d", date), (version, date)
        dates.append(date)
    assert dates == sorted(dates, reverse=True), "newest release first"
    kinds = set(re.findall(r"^### (.+)$", text, re.M))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds


def test_newest_release_is_the_package_version() -> None:
    """The newest release in CHANGELOG.md is verld.__version__."""
    released = [v for v, _ in releases() if v != "Unreleased"]
    if not released:
        pytest.fail("CHANGELOG.md has no released version")
    assert released[0] == verld.__version__
