"""Python packaging: `python -m build` makes an sdist and a wheel that pass `twine check`
and install in a fresh venv.

Built once for the module from a copy of the checkout (its tracked and new, not ignored
files), so the work tree stays clean. `python -m build` builds the sdist, then the wheel
from the unpacked sdist, so the wheel's build also proves the sdist complete. The wheel
is installed with its dependencies from the index into a new venv, where the programs
start; the sdist is installed over it (built again, --no-deps). About 30 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from checkout import copy_checkout

import verld

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SCRIPTS = set(PYPROJECT["project"]["scripts"])
#: what leaks from the test's own venv or an outer make into the builds and must not
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")


def required(ok: bool, why: str) -> None:
    """Skip unless `ok`; under CI=true fail instead (the test extra installs it)."""
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}, and CI=true: `make test` installs the test extra")
    pytest.skip(why)


def run(argv: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`argv` without the test venv's environment; fails the test unless it exits 0."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=240
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def have(module: str) -> bool:
    probe = [sys.executable, "-c", f"import {module}"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel), built by `python -m build` from a copy of the checkout."""
    for module in ("build", "twine"):
        required(have(module), f"{module} is not installed")
    top = tmp_path_factory.mktemp("dists")
    src = copy_checkout(top / "src", required)
    out = top / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(out), str(src)])
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


def test_names_carry_verlds_version(dists: tuple[Path, Path]) -> None:
    """The sdist and wheel file names carry verld's version."""
    sdist, wheel = dists
    assert sdist.name == f"verld-{verld.__version__}.tar.gz"
    assert wheel.name == f"verld-{verld.__version__}-py3-none-any.whl"


def test_twine_check_passes(dists: tuple[Path, Path]) -> None:
    """twine check --strict passes: valid metadata and a README that renders as long description."""
    out = run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dists)]).stdout
    assert out.count("PASSED") == 2, out


def test_wheel_metadata(dists: tuple[Path, Path]) -> None:
    """The wheel's metadata has verld's version, MIT, pyproject's dependencies and every script."""
    # The dependencies with their floors; every console script, verld-mqtt too (pip users get the
    # bridge).
    _, wheel = dists
    info = f"verld-{verld.__version__}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(f"{info}/METADATA").decode()
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        names = set(zf.namelist())
    assert re.search(rf"^Version: {re.escape(verld.__version__)}$", metadata, re.M)
    assert re.search(r"^License: MIT$", metadata, re.M), metadata[:800]
    requires = set(re.findall(r"^Requires-Dist: (.+)$", metadata, re.M))
    for dependency in PYPROJECT["project"]["dependencies"]:
        match = re.match(r"[A-Za-z0-9_.-]+>=[0-9.]+", dependency)
        assert match, dependency
        assert any(r.startswith(match[0]) for r in requires), (dependency, requires)
    assert set(re.findall(r"^([a-z-]+) = ", entry_points, re.M)) == SCRIPTS
    assert {"verld/__init__.py", "verld/daemon.py", "verld/mqtt/__init__.py"} <= names
    assert not [n for n in names if n.startswith(("tests/", "debian/", "tools/"))]


def test_sdist_has_the_sources(dists: tuple[Path, Path]) -> None:
    """The sdist holds pyproject.toml, README.md, PKG-INFO and the verld package."""
    sdist, _ = dists
    top = f"verld-{verld.__version__}"
    with tarfile.open(sdist) as tf:
        names = set(tf.getnames())
    assert {f"{top}/{n}" for n in ("pyproject.toml", "README.md", "PKG-INFO")} <= names
    assert f"{top}/verld/__init__.py" in names


def test_install_in_a_fresh_venv(dists: tuple[Path, Path], tmp_path: Path) -> None:
    """The wheel installs with its dependencies in a new venv that works, and the sdist over it."""
    # The dependencies come from the index; the venv's programs start and its dependencies are
    # consistent (pip check); the sdist installs over it.
    sdist, wheel = dists
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q"]
    run([*pip, str(wheel)])
    for script in SCRIPTS:
        assert (venv / "bin" / script).exists(), script
    version = run([str(venv / "bin/verld"), "--version"], cwd=tmp_path).stdout.strip()
    assert version == f"verld {verld.__version__}"
    for program in ("verlctl", "verld-sim"):
        usage = run([str(venv / "bin" / program), "--help"], cwd=tmp_path).stdout
        assert usage.startswith(f"usage: {program}"), usage
    run([str(venv / "bin/python"), "-m", "pip", "check"])
    run([*pip, "--no-deps", "--force-reinstall", str(sdist)])
    version = run([str(venv / "bin/verld"), "--version"], cwd=tmp_path).stdout.strip()
    assert version == f"verld {verld.__version__}"
