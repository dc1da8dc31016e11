"""Python packaging: `python -m build` makes an sdist and a wheel that pass `twine check`
and install in a fresh venv.

Built once for the module from a copy of the checkout (its tracked and new, not ignored
files), so the work tree stays clean. `python -m build` builds the sdist, then the wheel
from the unpacked sdist, so the wheel's build also proves the sdist complete; the sdist
also holds what a distributor needs beside the package (MANIFEST.in: the tests, docs,
units, configs, completions, man pages, debian/). The wheel is installed with the `mqtt`
extra and its dependencies from the index into a new venv, where every program starts
and `verld sim` answers `verlctl status`; the sdist is installed over it (built again,
--no-deps). About 40 s.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from checkout import copy_checkout
from support import stop_process, wait_for

import verld

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SCRIPTS = set(PYPROJECT["project"]["scripts"])
#: what leaks from the test's own venv or an outer make into the builds and must not
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
#: the Pythons CI runs the suite on, which the classifiers name
PYTHONS = ("3.11", "3.12", "3.13")
#: what the sdist carries beside the package for a distributor (MANIFEST.in): every file
#: of the checkout under these directories, and these files
SDIST_DIRS = ("tests", "docs", "systemd", "configs", "completion", "man", "debian", "tools")
SDIST_FILES = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "Makefile", "PKG-INFO")


def required(ok: bool, why: str) -> None:
    """Skip unless `ok`; under CI=true fail instead (the test extra installs it)."""
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}, and CI=true: `make test` installs the test extra")
    pytest.skip(why)


def clean_env() -> dict[str, str]:
    """The environment without the test venv's or make's traces."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(argv: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`argv` without the test venv's environment; fails the test unless it exits 0."""
    proc = subprocess.run(
        argv, cwd=cwd, env=clean_env(), capture_output=True, text=True, check=False, timeout=240
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def have(module: str) -> bool:
    probe = [sys.executable, "-c", f"import {module}"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout (tracked and new, not ignored files) to build from."""
    return copy_checkout(tmp_path_factory.mktemp("dists") / "src", required)


@pytest.fixture(scope="module")
def dists(src: Path) -> tuple[Path, Path]:
    """(sdist, wheel), built by `python -m build` from a copy of the checkout."""
    for module in ("build", "twine"):
        required(have(module), f"{module} is not installed")
    out = src.parent / "dist"
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


def test_wheel_is_typed_licensed_and_classified(dists: tuple[Path, Path]) -> None:
    """The wheel ships verld/py.typed and LICENSE, and classifies the Pythons tested and Typed."""
    # PEP 561's marker for users' type checkers; the license text in the dist-info (licenses/
    # from setuptools 77, the dist-info itself before); the README as long description.
    _, wheel = dists
    info = f"verld-{verld.__version__}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(f"{info}/METADATA").decode()
        names = set(zf.namelist())
        licenses = [n for n in names if n in (f"{info}/LICENSE", f"{info}/licenses/LICENSE")]
        assert licenses, sorted(n for n in names if n.startswith(info))
        assert zf.read(licenses[0]) == (REPO / "LICENSE").read_bytes()
    assert "verld/py.typed" in names
    classifiers = set(re.findall(r"^Classifier: (.+)$", metadata, re.M))
    assert "Typing :: Typed" in classifiers
    tested = {c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r".+ :: 3\.\d+", c)}
    assert tested == set(PYTHONS), classifiers
    assert re.search(r"^Description-Content-Type: text/markdown", metadata, re.M)
    assert "# verld — a device bridge daemon" in metadata  # the README, as long description


def test_sdist_has_the_sources(dists: tuple[Path, Path], src: Path) -> None:
    """The sdist holds the package, pyproject.toml, README, LICENSE, changelog and Makefile."""
    sdist, _ = dists
    top = f"verld-{verld.__version__}"
    with tarfile.open(sdist) as tf:
        names = set(tf.getnames())
    assert {f"{top}/{n}" for n in SDIST_FILES} <= names
    package = {p.relative_to(src).as_posix() for p in (src / "verld").rglob("*") if p.is_file()}
    assert {f"{top}/{n}" for n in package} <= names
    assert f"{top}/verld/py.typed" in names


def test_sdist_has_what_a_distributor_needs(dists: tuple[Path, Path], src: Path) -> None:
    """The sdist holds all of tests/, docs/, the units, configs, completions, man/ and debian/."""
    # MANIFEST.in grafts them (and tools/, which tests and the Makefile run); no bytecode.
    sdist, _ = dists
    top = f"verld-{verld.__version__}"
    with tarfile.open(sdist) as tf:
        names = {n.removeprefix(f"{top}/") for n in tf.getnames()}
    for directory in SDIST_DIRS:
        files = {p.relative_to(src).as_posix() for p in (src / directory).rglob("*") if p.is_file()}
        assert files, directory
        missing = sorted(files - names)
        assert not missing, f"not in the sdist: {missing}"
    assert {"debian/rules", "systemd/verld-mqtt.service", "man/verld-mqtt.8"} <= names
    assert not [n for n in names if n.endswith((".pyc", ".pyo")) or "__pycache__" in n]


def test_install_in_a_fresh_venv(dists: tuple[Path, Path], tmp_path: Path) -> None:
    """The wheel with [mqtt] installs in a new venv whose programs work, and the sdist over it."""
    # The dependencies come from the index; each program starts (verld --version, the others
    # --help), `verld sim` answers `verlctl status`, the dependencies are consistent (pip check);
    # the sdist installs over it.
    sdist, wheel = dists
    venv = tmp_path / "venv"
    bin_ = venv / "bin"
    run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(bin_ / "python"), "-m", "pip", "install", "-q"]
    run([*pip, f"{wheel}[mqtt]"])
    for script in SCRIPTS:
        assert (bin_ / script).exists(), script
    version = run([str(bin_ / "verld"), "--version"], cwd=tmp_path).stdout.strip()
    assert version == f"verld {verld.__version__} (pure)"  # (no compiler asked: pure)
    for program in ("verlctl", "verld-sim", "verld-mqtt"):
        usage = run([str(bin_ / program), "--help"], cwd=tmp_path).stdout
        assert usage.startswith(f"usage: {program}"), usage
    run([str(bin_ / "python"), "-m", "pip", "check"])
    serve_sim_and_ask_status(bin_, tmp_path)
    run([*pip, "--no-deps", "--force-reinstall", str(sdist)])
    version = run([str(bin_ / "verld"), "--version"], cwd=tmp_path).stdout.strip()
    assert version == f"verld {verld.__version__} (pure)"  # (no compiler asked: pure)


def serve_sim_and_ask_status(bin_: Path, tmp_path: Path) -> None:
    """The venv's `verld sim --socket S` brings the link up, its `verlctl --socket S status`
    says so, and SIGTERM to verld's pid stops it with exit 0 and removes the socket."""
    sock = tmp_path / "verld.sock"
    log_path = tmp_path / "verld.log"
    with log_path.open("wb") as log:
        daemon = subprocess.Popen(
            [str(bin_ / "verld"), "sim", "--socket", str(sock)],
            cwd=tmp_path,
            env=clean_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    status = [str(bin_ / "verlctl"), "--socket", str(sock), "status"]
    seen = ""

    def link_up() -> bool:
        nonlocal seen
        assert daemon.poll() is None, f"verld exited {daemon.returncode}:\n{log_path.read_text()}"
        if not sock.exists():
            return False
        proc = subprocess.run(
            status, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=False
        )
        seen = proc.stdout + proc.stderr
        return proc.returncode == 0 and re.search(r"^link\s+up\b", proc.stdout, re.M) is not None

    try:
        wait_for(link_up, 20, lambda: f"the link up (verlctl status: {seen!r})")
    finally:
        code = stop_process(daemon, signal.SIGTERM, grace=15)
    assert code == 0, log_path.read_text()
    assert not sock.exists()
