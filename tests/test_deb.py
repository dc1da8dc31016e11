"""The Debian package (debian/, `make deb`), built with Debian 12's own tools and checked
as an admin meets it.

The module builds the package once, from a copy of the checkout (its tracked and new,
not ignored files, as `make deb` copies them) in a temporary directory, so the work tree
stays clean: `dpkg-buildpackage -us -uc -b` with Debian's PATH (/usr/bin/python3 and
Debian's python3-* packages, never the venv's or pyenv's python), a fast subset of the
suite running at build time. Then: lintian reports no error; the files are where Debian
puts them (units, sysusers, tmpfiles, udev rule, conffiles, docs, man pages, completions),
the MQTT bridge verld-mqtt among them; Depends and Recommends are Debian's names with
uvloop recommended only and python3-paho-mqtt required; the maintainer scripts create the
users and /run/verld, give /etc/verld/mqtt.yaml to group verld-mqtt and enable nothing.
The package runs without being installed (nothing under /usr is touched): `dpkg -x` into
a temporary root, then Debian's /usr/bin/python3 with PYTHONPATH on that root checks the
shipped configs (verld's and verld-mqtt's) and runs the packaged verld on the simulated
device, asked by the packaged verlctl. Last, `make install PREFIX=/usr` leaves the
dependencies to the distribution (--no-deps by default).

A missing build tool skips, except under CI=true (.ci/run installs them with apt).
The build takes about 20 s; the module about 40 s.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from checkout import copy_checkout
from support import free_port, need, stop_process, wait_for

import verld

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parent.parent
#: Debian's own PATH for the build: its python3, debhelper, dh-python
DEB_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_PYTHON = "/usr/bin/python3"
#: what leaks from a venv, pyenv or an outer make into the build and must not
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
UNITS = (
    "verld.service",
    "verld@.service",
    "verld.socket",
    "verld-modbus.socket",
    "verld-modbus@.socket",
    "verld-network@.socket",
    "verld-mqtt.service",
)
#: the units with an [Install] section: the ones the package could enable (and must not)
ENABLEABLE = ("verld.service", "verld.socket", "verld-modbus.socket", "verld-mqtt.service")
MAN_PAGES = (
    "man8/verld.8",
    "man1/verlctl.1",
    "man1/verld-sim.1",
    "man8/verld-mqtt.8",
    "man5/verld.yaml.5",
)
PROGRAMS = ("verld", "verlctl", "verld-sim", "verld-mqtt")
#: verld-mqtt's config: a conffile, root:verld-mqtt 0640 once postinst has run
MQTT_CONFIG = "/etc/verld/mqtt.yaml"


def required(ok: bool, why: str) -> None:
    """Skip unless `ok`; under CI=true fail instead (.ci/run installs what is missing)."""
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}, and CI=true: .ci/run installs it")
    pytest.skip(why)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without a venv's, pyenv's or make's traces; PATH is Debian's."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PATH"] = DEB_PATH
    env.update(extra)
    return env


def run(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`argv` (by default with `clean_env()`), its output captured; fails the test unless it
    exits 0."""
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=clean_env() if env is None else env,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def changelog_version() -> str:
    """The package version: debian/changelog's first entry."""
    first = (REPO / "debian/changelog").read_text().splitlines()[0]
    match = re.match(r"verld \((?P<version>[^)]+)\)", first)
    assert match, first
    return match["version"]


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """verld_VERSION_all.deb, built once for the module from a copy of the checkout."""
    for tool in ("dpkg-buildpackage", "dpkg-checkbuilddeps", "dh", "lintian"):
        required(shutil.which(tool, path=DEB_PATH) is not None, f"{tool} is not installed")
    top = tmp_path_factory.mktemp("deb")
    src = copy_checkout(top / "verld", required)
    deps = subprocess.run(
        ["dpkg-checkbuilddeps"],
        cwd=src,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    required(deps.returncode == 0, f"build dependencies missing: {deps.stderr.strip()}")
    build = subprocess.run(
        ["dpkg-buildpackage", "-us", "-uc", "-b"],
        check=False,
        cwd=src,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=240,
    )
    log = build.stdout
    assert build.returncode == 0, f"dpkg-buildpackage exited {build.returncode}:\n{log[-6000:]}"
    path = top / f"verld_{changelog_version()}_all.deb"
    assert path.is_file(), f"no {path.name} beside the source tree:\n{log[-3000:]}"
    return path


@pytest.fixture(scope="module")
def contents(deb: Path) -> dict[str, str]:
    """`dpkg-deb -c`: each path (absolute, directories with a trailing /) -> its mode."""
    listing: dict[str, str] = {}
    for line in run(["dpkg-deb", "-c", str(deb)]).stdout.splitlines():
        mode, _owner, _size, _date, _time, name = line.split(maxsplit=5)
        listing[name.split(" -> ")[0].removeprefix(".")] = mode
    return listing


@pytest.fixture(scope="module")
def control(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The control archive (control, conffiles, maintainer scripts), unpacked."""
    path = tmp_path_factory.mktemp("control")
    run(["dpkg-deb", "-e", str(deb), str(path)])
    return path


def extract(deb: Path, root: Path) -> Path:
    """The package's files under `root` (`dpkg -x`: no database, no scripts, no /usr)."""
    run(["dpkg", "-x", str(deb), str(root)])
    return root


@pytest.fixture(scope="module")
def root(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package unpacked into a temporary root."""
    return extract(deb, tmp_path_factory.mktemp("root"))


def field(deb: Path, name: str) -> str:
    return run(["dpkg-deb", "-f", str(deb), name]).stdout.strip()


def relations(value: str) -> dict[str, str]:
    """A Depends-style field: each package named (in any alternative) -> its version clause."""
    found: dict[str, str] = {}
    for group in filter(None, (g.strip() for g in value.split(","))):
        for alternative in group.split("|"):
            match = re.fullmatch(r"\s*([a-z0-9.+-]+)(?::any)?\s*(?:\((.+)\))?\s*", alternative)
            assert match, f"unparsable relation {alternative!r} in {value!r}"
            found[match[1]] = match[2] or ""
    return found


def system_python(*args: str) -> list[str]:
    """Debian's python3 (without the user's site-packages) running `args`."""
    return [SYSTEM_PYTHON, "-s", *args]


def root_env(root: Path) -> dict[str, str]:
    """Debian's python3 importing verld from the unpacked package only (run it in a
    directory without verld/: `-c`, and `-m`, which verld uses for its verld-sim child,
    put the current directory first on sys.path)."""
    return clean_env(
        PYTHONPATH=str(root / "usr/lib/python3/dist-packages"), PYTHONDONTWRITEBYTECODE="1"
    )


@pytest.fixture(scope="module")
def system_libs() -> None:
    """Debian's python3 has the package's Depends (python3-serial, -yaml, -structlog,
    -paho-mqtt)."""
    probe = subprocess.run(
        [SYSTEM_PYTHON, "-s", "-c", "import paho.mqtt.client, serial, structlog, yaml"],
        check=False,
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    required(
        probe.returncode == 0,
        f"{SYSTEM_PYTHON} lacks a Depends (python3-serial, -yaml, -structlog, -paho-mqtt): "
        + probe.stderr.strip(),
    )


# --- lintian ---------------------------------------------------------------------------


def test_lintian_reports_no_error(deb: Path) -> None:
    """lintian finds no error in the .deb."""
    # debian/verld.lintian-overrides explains the tags it keeps; `make deb` fails on warnings too.
    proc = subprocess.run(
        ["lintian", "--fail-on", "none", str(deb)],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in proc.stdout.splitlines() if line.startswith("E:")]
    assert not errors, proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- what is where ---------------------------------------------------------------------


def test_programs_in_usr_bin(contents: dict[str, str]) -> None:
    """The .deb puts verld, verlctl, verld-sim and verld-mqtt in /usr/bin, and no other program."""
    # All four executable; neither pip's nor pyserial's scripts.
    programs = {p for p in contents if p.startswith("/usr/bin/") and not p.endswith("/")}
    assert programs == {f"/usr/bin/{program}" for program in PROGRAMS}
    assert all(contents[p] == "-rwxr-xr-x" for p in programs)


def test_units_sysusers_tmpfiles_udev_under_usr_lib(contents: dict[str, str]) -> None:
    """The units, sysusers, tmpfiles and udev rule are under /usr/lib and nothing under /lib."""
    # The units in /usr/lib/systemd/system (verld-mqtt.service too); nothing under the unmerged
    # /lib.
    units = {p for p in contents if p.startswith("/usr/lib/systemd/system/") and p[-1] != "/"}
    assert units == {f"/usr/lib/systemd/system/{unit}" for unit in UNITS}
    for path in (
        "/usr/lib/sysusers.d/verld.conf",
        "/usr/lib/tmpfiles.d/verld.conf",
        "/usr/lib/udev/rules.d/70-verld.rules",
    ):
        assert contents.get(path) == "-rw-r--r--", path
    assert not [p for p in contents if p.startswith(("/lib/", "/bin/", "/sbin/"))]


def test_unit_files_are_the_repositorys(root: Path) -> None:
    """The packaged units, sysusers, tmpfiles and udev files are systemd/'s, byte for byte."""
    # Their ExecStart=/usr/bin/verld is where the package puts verld.
    pairs = {f"usr/lib/systemd/system/{unit}": f"systemd/{unit}" for unit in UNITS}
    pairs |= {
        "usr/lib/sysusers.d/verld.conf": "systemd/verld.sysusers",
        "usr/lib/tmpfiles.d/verld.conf": "systemd/verld.tmpfiles",
        "usr/lib/udev/rules.d/70-verld.rules": "systemd/70-verld.rules",
        "usr/share/doc/verld/verld.service.d/ports.conf": "systemd/verld.service.d/ports.conf",
        "etc/verld/verld.yaml": "configs/verld.yaml",
        "etc/verld/mqtt.yaml": "configs/mqtt.yaml",
    }
    for installed, source in pairs.items():
        assert (root / installed).read_bytes() == (REPO / source).read_bytes(), installed
    assert (
        "ExecStart=/usr/bin/verld " in (root / "usr/lib/systemd/system/verld.service").read_text()
    )
    mqtt_unit = (root / "usr/lib/systemd/system/verld-mqtt.service").read_text()
    assert f"ExecStart=/usr/bin/verld-mqtt --config {MQTT_CONFIG}\n" in mqtt_unit


def test_config_docs_man_pages_completions(contents: dict[str, str]) -> None:
    """The .deb ships the configs, docs, ports drop-in example, man pages and shell completions."""
    # /etc/verld/verld.yaml and mqtt.yaml; README and docs (compressed), the ports drop-in
    # example (uncompressed, to be copied), the man pages and bash, zsh and fish completion.
    expected = [
        "/etc/verld/verld.yaml",
        MQTT_CONFIG,
        "/usr/share/doc/verld/copyright",
        "/usr/share/doc/verld/changelog.Debian.gz",
        "/usr/share/doc/verld/README.md.gz",
        "/usr/share/doc/verld/deploy.md.gz",
        "/usr/share/doc/verld/config.md.gz",
        "/usr/share/doc/verld/verld.service.d/ports.conf",
        "/usr/share/doc/verld/examples/mqtt.yaml",
        "/usr/share/bash-completion/completions/verlctl",
        "/usr/share/zsh/vendor-completions/_verlctl",
        "/usr/share/fish/vendor_completions.d/verlctl.fish",
        *(f"/usr/share/man/{page}.gz" for page in MAN_PAGES),
    ]
    missing = [path for path in expected if path not in contents]
    assert not missing, missing
    docs = {Path(p).name for p in contents if p.startswith("/usr/share/doc/verld/")}
    assert {f"{doc.name}.gz" for doc in (REPO / "docs").glob("*.md")} <= docs
    if (REPO / "CHANGELOG.md").exists():  # dh_installchangelogs: the upstream changelog
        assert "changelog.gz" in docs


def test_mqtt_bridge_packaged_and_no_bytecode(contents: dict[str, str], root: Path) -> None:
    """The .deb packages verld/, verld/mqtt/ whole (the bridge), and no compiled bytecode."""
    # Every module of the checkout's verld/mqtt/; py3compile makes the compiled files at
    # installation.
    site = "/usr/lib/python3/dist-packages/"
    assert f"{site}verld/__init__.py" in contents
    assert f"{site}verld/daemon.py" in contents
    modules = {
        f"{site}{p.relative_to(REPO).as_posix()}" for p in (REPO / "verld/mqtt").glob("*.py")
    }
    assert f"{site}verld/mqtt/main.py" in modules
    assert not modules - contents.keys(), sorted(modules - contents.keys())
    assert not [p for p in contents if "__pycache__" in p or p.endswith(".pyc")]
    (entry_points,) = (p for p in contents if p.endswith(".dist-info/entry_points.txt"))
    assert entry_points.startswith(f"{site}verld-{verld.__version__}.dist-info/")


def test_dist_info_names_the_packaged_programs(root: Path) -> None:
    """The dist-info's console scripts are the four in /usr/bin, verld-mqtt's files in RECORD."""
    (info,) = root.glob("usr/lib/python3/dist-packages/verld-*.dist-info")
    entry_points = (info / "entry_points.txt").read_text().splitlines()
    scripts = {line.split("=")[0].strip() for line in entry_points}
    assert scripts - {"", "[console_scripts]"} == set(PROGRAMS)
    record = (info / "RECORD").read_text()
    assert "verld/__init__.py," in record
    assert "verld/mqtt/main.py," in record


def test_conffiles(control: Path) -> None:
    """/etc/verld/verld.yaml and mqtt.yaml are conffiles, so an admin's edits survive upgrades."""
    # debhelper marks what the package puts in /etc.
    assert sorted((control / "conffiles").read_text().split()) == [
        MQTT_CONFIG,
        "/etc/verld/verld.yaml",
    ]


# --- control fields --------------------------------------------------------------------


def test_version_is_verlds(deb: Path) -> None:
    """The package version is debian/changelog's, whose upstream part is verld.__version__."""
    version = field(deb, "Version")
    assert version == changelog_version()
    assert version.rsplit("-", 1)[0] == verld.__version__


def test_depends_and_recommends(deb: Path) -> None:
    """Depends: serial, yaml, structlog, paho-mqtt at pyproject's floors; uvloop recommended."""
    # Depends: python3-serial, python3-yaml and python3-structlog at pyproject's floors and
    # python3-paho-mqtt at the mqtt extra's, not python3-uvloop, which is recommended with
    # python3-systemd.
    depends = relations(field(deb, "Depends"))
    recommends = relations(field(deb, "Recommends"))
    assert {"python3-serial", "python3-yaml", "python3-structlog", "python3"} <= depends.keys()
    # verld-mqtt's paho-mqtt, at the `mqtt` extra's floor (1.6: Debian 12's 1.6.1)
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (paho,) = (r for r in extras["mqtt"] if r.startswith("paho-mqtt"))
    floor = re.search(r">=([0-9.]+)", paho)
    assert floor, paho
    assert depends.get("python3-paho-mqtt") == f">= {floor[1]}", depends
    assert "python3-uvloop" not in depends
    assert {"python3-systemd", "python3-uvloop"} <= recommends.keys()
    floors = {}
    for req in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        match = re.match(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", req)
        assert match, req
        floors[match[1]] = match[2]
    for dist, package in (
        ("pyserial", "python3-serial"),
        ("PyYAML", "python3-yaml"),
        ("structlog", "python3-structlog"),
    ):
        assert depends[package] == f">= {floors[dist]}", (package, depends[package])


def test_architecture_and_section(deb: Path) -> None:
    """The .deb is package verld for architecture all."""
    assert field(deb, "Architecture") == "all"
    assert field(deb, "Package") == "verld"


# --- maintainer scripts ------------------------------------------------------------------


def test_postinst_creates_user_and_runtime_dir_and_enables_nothing(control: Path) -> None:
    """postinst runs systemd-sysusers and systemd-tmpfiles --create and enables no unit."""
    # `deb-systemd-helper enable` only under `debian-installed` (an upgrade keeps what the admin
    # enabled), never `systemctl enable`.
    postinst = (control / "postinst").read_text()
    assert re.search(r"^\s*systemd-sysusers .*\bverld\.conf$", postinst, re.M), postinst
    assert re.search(r"^\s*systemd-tmpfiles .*--create verld\.conf\b", postinst, re.M), postinst
    assert "systemctl enable" not in postinst
    for unit in ENABLEABLE:
        enable = f"deb-systemd-helper enable '{unit}'"
        at = postinst.find(enable)
        assert at > 0, (unit, postinst)
        block = postinst[postinst.rfind("if [", 0, at) : at]
        assert f"deb-systemd-helper debian-installed '{unit}'" in block, (unit, block)


def test_units_stopped_on_removal(control: Path) -> None:
    """prerm stops the units on removal (the postinst starts only enabled ones)."""
    prerm = (control / "prerm").read_text()
    assert re.search(r'"\$1" = remove', prerm), prerm
    for unit in ENABLEABLE:
        assert f"'{unit}'" in prerm


def run_script(control: Path, script: str, arg: str, tmp_path: Path, *, listed: bool) -> list[str]:
    """`sh <script> <arg>` from the control archive with every command it runs a stub that
    logs its arguments; `dpkg-statoverride --list` finds an override if `listed`. The
    commands run, in order."""
    stubs = tmp_path / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    log = tmp_path / f"{script}-{arg}.log"
    stub = (
        '#!/bin/sh\necho "${0##*/} $*" >>"$STUB_LOG"\n'
        'if [ "${0##*/} $1" = "dpkg-statoverride --list" ]; then exit "$STUB_LIST_RC"; fi\n'
    )
    for command in (
        "systemd-sysusers",
        "systemd-tmpfiles",
        "py3compile",
        "pypy3compile",
        "py3clean",
        "deb-systemd-helper",
        "deb-systemd-invoke",
        "systemctl",
        "dpkg",
        "find",
        "dpkg-statoverride",
    ):
        (stubs / command).write_text(stub)
        (stubs / command).chmod(0o755)
    env = {"PATH": str(stubs), "STUB_LOG": str(log), "STUB_LIST_RC": "0" if listed else "1"}
    run(["/bin/sh", "-e", str(control / script), arg], env=env)
    return log.read_text().splitlines() if log.exists() else []


def test_postinst_gives_the_mqtt_config_to_its_group(control: Path, tmp_path: Path) -> None:
    """postinst makes /etc/verld/mqtt.yaml root:verld-mqtt 0640 once sysusers made the group."""
    # With a statoverride (dpkg keeps it through upgrades), unless one is there already.
    calls = run_script(control, "postinst", "configure", tmp_path, listed=False)
    add = f"dpkg-statoverride --update --add root verld-mqtt 0640 {MQTT_CONFIG}"
    assert add in calls, calls
    sysusers = next(i for i, c in enumerate(calls) if re.match(r"systemd-sysusers .*verld", c))
    assert sysusers < calls.index(f"dpkg-statoverride --list {MQTT_CONFIG}") < calls.index(add)
    kept = run_script(control, "postinst", "configure", tmp_path / "kept", listed=True)
    assert not [c for c in kept if "--add" in c], kept


def test_postrm_purge_drops_the_mqtt_config_override(control: Path, tmp_path: Path) -> None:
    """postrm purge removes the statoverride of /etc/verld/mqtt.yaml; remove leaves it."""
    purge = run_script(control, "postrm", "purge", tmp_path, listed=True)
    assert f"dpkg-statoverride --remove {MQTT_CONFIG}" in purge, purge
    remove = run_script(control, "postrm", "remove", tmp_path, listed=True)
    assert not [c for c in remove if c.startswith("dpkg-statoverride")], remove


def test_sysusers_and_tmpfiles_work_in_a_root(deb: Path, tmp_path: Path) -> None:
    """In a root of its own, what postinst runs makes verld and verld-mqtt and /run/verld."""
    # systemd-sysusers makes users verld (in dialout) and verld-mqtt, systemd-tmpfiles then
    # /run/verld owned by verld.
    for tool in ("systemd-sysusers", "systemd-tmpfiles"):
        required(shutil.which(tool, path=DEB_PATH) is not None, f"{tool} is not installed")
    if os.geteuid() != 0:
        pytest.skip("systemd-tmpfiles chowns /run/verld: needs root")
    root = extract(deb, tmp_path / "root")
    run(["systemd-sysusers", f"--root={root}", "verld.conf"])
    users = {line.split(":")[0]: line.split(":") for line in (root / "etc/passwd").open()}
    groups = {line.split(":")[0]: line.split(":") for line in (root / "etc/group").open()}
    assert {"verld", "verld-mqtt"} <= users.keys()
    assert "verld" in groups["dialout"][3].strip().split(",")
    run(["systemd-tmpfiles", f"--root={root}", "--create", "verld.conf"])
    runtime = (root / "run/verld").stat()
    assert (runtime.st_uid, runtime.st_mode & 0o7777) == (int(users["verld"][2]), 0o755)


# --- the package runs --------------------------------------------------------------------


@pytest.mark.usefixtures("system_libs")
def test_packaged_verld_imports_from_the_package_and_debian(root: Path) -> None:
    """Debian's python3 imports verld from the unpacked package and its libraries from Debian's."""
    # Its libraries come from Debian's python3-* packages.
    code = "import serial, structlog, verld, yaml; print(verld.__file__, structlog.__file__)"
    probe = run(system_python("-c", code), env=root_env(root), cwd=root).stdout.split()
    assert probe[0] == str(root / "usr/lib/python3/dist-packages/verld/__init__.py")
    assert probe[1].startswith("/usr/lib/python3/dist-packages/")


@pytest.mark.usefixtures("system_libs")
def test_packaged_programs_start(root: Path) -> None:
    """The packaged verld and verld-mqtt check their configs and tell their version; all help."""
    # verld checks /etc/verld/verld.yaml, verld-mqtt /etc/verld/mqtt.yaml (as shipped);
    # --version is verld's; verlctl, verld-sim and verld-mqtt answer --help.
    env = root_env(root)
    for program, config in (("verld", "verld.yaml"), ("verld-mqtt", "mqtt.yaml")):
        path = str(root / "usr/bin" / program)
        argv = system_python(path, "--check-config", str(root / "etc/verld" / config))
        checked = run(argv, env=env, cwd=root)
        assert checked.stdout.strip().endswith(f"{config}: ok"), checked.stdout
        version = run(system_python(path, "--version"), env=env, cwd=root).stdout
        build = " (pure)" if program == "verld" else ""  # (the package is never compiled)
        assert version.strip() == f"{program} {verld.__version__}{build}"
    for program in ("verlctl", "verld-sim", "verld-mqtt"):
        argv = system_python(str(root / "usr/bin" / program), "--help")
        usage = run(argv, env=env, cwd=root).stdout
        assert usage.startswith(f"usage: {program}"), usage


@pytest.mark.usefixtures("system_libs")
def test_packaged_bridge_runs_on_debians_paho(root: Path) -> None:
    """The packaged verld.mqtt imports Debian's python3-paho-mqtt (1.6.1 on Debian 12)."""
    code = (
        "import paho.mqtt, verld.mqtt.bridge, verld.mqtt.mqttconn as m;"
        "print(paho.mqtt.__version__, paho.mqtt.__file__, m.__file__)"
    )
    probe = run(system_python("-c", code), env=root_env(root), cwd=root).stdout
    version, paho_file, conn_file = probe.split()
    assert paho_file.startswith("/usr/lib/python3/dist-packages/paho/"), paho_file
    assert conn_file == str(root / "usr/lib/python3/dist-packages/verld/mqtt/mqttconn.py")
    assert re.fullmatch(r"[12]\.\d+(\.\d+)?", version), version


@contextmanager
def packaged_verld(root: Path, tmp_path: Path) -> Iterator[Path]:
    """The packaged verld on `port: sim` with its link up (its verld-sim child is the
    package's too, asked by the packaged verlctl); its socket. SIGTERM stops it with exit
    0 and removes the socket."""
    sock = tmp_path / "verld.sock"
    config = tmp_path / "verld.yaml"
    config.write_text(
        yaml.safe_dump(
            {"device": {"port": "sim"}, "api": {"socket": str(sock)}, "log": {"format": "json"}}
        )
    )
    env = root_env(root)
    log_path = tmp_path / "verld.log"
    with log_path.open("wb") as log:
        daemon = subprocess.Popen(
            system_python(str(root / "usr/bin/verld"), "--config", str(config)),
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    status = system_python(str(root / "usr/bin/verlctl"), "--socket", str(sock), "status")
    seen = ""

    def link_up() -> bool:
        nonlocal seen
        assert daemon.poll() is None, f"verld exited {daemon.returncode}:\n{log_path.read_text()}"
        if not sock.exists():
            return False
        proc = subprocess.run(
            status, env=env, cwd=tmp_path, capture_output=True, text=True, check=False
        )
        seen = proc.stdout + proc.stderr
        return proc.returncode == 0 and re.search(r"^link\s+up\b", proc.stdout, re.M) is not None

    try:
        wait_for(link_up, 20, lambda: f"the link up (verlctl status: {seen!r})")
        yield sock
    finally:
        code = stop_process(daemon, signal.SIGTERM, grace=15)
    assert code == 0, log_path.read_text()
    assert not sock.exists()


@pytest.mark.usefixtures("system_libs")
def test_packaged_daemon_serves_the_simulated_device(root: Path, tmp_path: Path) -> None:
    """The packaged verld brings the link up on `port: sim` and SIGTERM stops it with exit 0."""
    with packaged_verld(root, tmp_path) as sock:
        assert sock.is_socket()


@pytest.mark.usefixtures("system_libs")
def test_packaged_bridge_publishes_the_device(root: Path, tmp_path: Path) -> None:
    """The packaged verld-mqtt, on Debian's paho-mqtt, puts the packaged verld on mosquitto."""
    # The device's retained state says its link is up; SIGTERM stops the bridge with exit 0.
    mosquitto, sub = need("mosquitto", "mosquitto"), need("mosquitto_sub", "mosquitto-clients")
    port = free_port()
    broker_conf = tmp_path / "mosquitto.conf"
    # as root, mosquitto would switch to its own user: stay this one
    user = pwd.getpwuid(os.getuid()).pw_name
    broker_conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nuser {user}\n"
    )
    broker_log = tmp_path / "mosquitto.log"
    with broker_log.open("wb") as log:
        broker = subprocess.Popen([mosquitto, "-c", str(broker_conf)], stdout=log, stderr=log)
    base = "verld/debtest"
    try:
        with packaged_verld(root, tmp_path) as sock:
            config = tmp_path / "mqtt.yaml"
            bridge_config = {
                "broker": {"host": "127.0.0.1", "port": port},
                "base": base,
                "devices": {"dev": str(sock)},
                "log": {"format": "json"},
            }
            config.write_text(yaml.safe_dump(bridge_config))
            log_path = tmp_path / "verld-mqtt.log"
            with log_path.open("wb") as log:
                bridge = subprocess.Popen(
                    system_python(str(root / "usr/bin/verld-mqtt"), "--config", str(config)),
                    env=root_env(root),
                    cwd=tmp_path,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            seen = ""

            def device_up() -> bool:
                nonlocal seen
                assert bridge.poll() is None, f"verld-mqtt exited:\n{log_path.read_text()}"
                argv = [sub, "-h", "127.0.0.1", "-p", str(port), "-t", f"{base}/dev/state"]
                got = subprocess.run(
                    [*argv, "-C", "1", "-W", "2"],
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=10,
                )
                seen = got.stdout.strip() or got.stderr.strip()
                try:
                    return got.returncode == 0 and json.loads(seen)["state"] == "up"
                except ValueError:
                    return False

            try:
                wait_for(device_up, 30, lambda: f"{base}/dev/state up (last: {seen!r})")
            finally:
                code = stop_process(bridge, signal.SIGTERM, grace=15)
            assert code == 0, log_path.read_text()
            assert "mqtt_connected" in log_path.read_text()
    finally:
        stop_process(broker, signal.SIGTERM, grace=5)


# --- make install PREFIX=/usr --------------------------------------------------------------


@pytest.fixture
def staged(tmp_path: Path) -> Iterator[Path]:
    """`make install DESTDIR=stage PREFIX=/usr` from a copy of the checkout; the stage."""
    required(shutil.which("make") is not None, "make is not installed")
    src = copy_checkout(tmp_path / "src", required)
    stage = tmp_path / "stage"
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    run(
        ["make", "install", f"DESTDIR={stage}", "PREFIX=/usr", f"PYTHON={sys.executable}"],
        cwd=src,
        env=env,
        timeout=240,
    )
    yield stage


def test_make_install_for_usr_leaves_dependencies_to_the_distribution(staged: Path) -> None:
    """`make install` with PREFIX=/usr installs verld without its dependencies (pip --no-deps)."""
    # verld's programs and package, but neither pyserial's scripts (pyserial-miniterm,
    # pyserial-ports) nor its dependencies' packages.
    programs = {p.name for p in (staged / "usr/bin").iterdir()}
    assert {"verld", "verlctl", "verld-sim"} <= programs
    assert not programs & {"pyserial-miniterm", "pyserial-ports"}
    (site,) = staged.glob("usr/lib/python3*/site-packages")
    installed = {p.name.split("-")[0].lower() for p in site.iterdir()}
    assert "verld" in installed
    assert not installed & {"serial", "pyserial", "yaml", "pyyaml", "structlog", "uvloop"}
