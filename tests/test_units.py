"""The shipped units, udev rule, sysusers/tmpfiles files and `make install`.

Checked with systemd's own tools offline (no systemd runs here):
`systemd-analyze security --offline=true` scores verld's units in one run beside
two peers' units written like the ones gpsd and ser2net ship (a plain ExecStart,
no sandboxing: about 9.6), `systemd-analyze verify` must be silent, and
systemd-sysusers / systemd-tmpfiles apply our files to a scratch root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
UNITS = REPO / "systemd"
#: the issue's ceilings; a change that raises a score fails here
TARGETS = {"verld.service": 0.6, "verld@bench1.service": 0.5}

GPSD_LIKE = """\
[Unit]
Description=GPS daemon (written like gpsd's unit: no sandboxing)
Requires=gpsd.socket

[Service]
Type=forking
EnvironmentFile=-/etc/default/gpsd
ExecStart=/usr/sbin/gpsd $GPSD_OPTIONS $DEVICES

[Install]
WantedBy=multi-user.target
"""

SER2NET_LIKE = """\
[Unit]
Description=Serial to network proxy (written like ser2net's unit: no sandboxing)
After=network.target

[Service]
Type=exec
EnvironmentFile=-/etc/default/ser2net
ExecStart=/usr/sbin/ser2net -n -c /etc/ser2net.yaml
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

PEERS = {"gpsd.service": GPSD_LIKE, "ser2net.service": SER2NET_LIKE}


def offline(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a systemd-analyze command; as root, in a mount namespace with a scratch
    /run/systemd, because it stamps /run/systemd/systemd-units-load on the host."""
    if os.geteuid() == 0 and shutil.which("unshare"):
        wrap = 'mount -t tmpfs tmpfs /run/systemd 2>/dev/null; exec "$@"'
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", wrap, "sh", *argv]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=60)


def _verld_binary() -> Path | None:
    candidates = [Path(sys.executable).with_name("verld"), shutil.which("verld")]
    return next((Path(c) for c in candidates if c and os.access(c, os.X_OK)), None)


@pytest.fixture(scope="module")
def unit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """verld's units beside the peers', ExecStart= pointing at a verld that exists."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed (package systemd): units not checked")
    d = tmp_path_factory.mktemp("units")
    binary = _verld_binary()
    for name in ("verld.service", "verld.socket", "verld@.service"):
        text = (UNITS / name).read_text()
        if binary is not None:
            text = text.replace("/usr/bin/verld", str(binary))
        (d / name).write_text(text)
    for name, text in PEERS.items():
        (d / name).write_text(text)
    return d


def parse_unit(path: Path) -> dict[str, list[str]]:
    """`Section.Key` → every value assigned (systemd units repeat keys)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return out


class TestExposure:
    def test_scores_at_or_below_target_beside_peers(self, unit_dir: Path) -> None:
        """One security run: verld.service <= 0.6, verld@.service <= 0.5, peers ~9.6."""
        units = [*TARGETS, *PEERS]
        run = offline(["systemd-analyze", "security", "--offline=true", *units], unit_dir)
        scores = {
            m[1]: float(m[2])
            for m in re.finditer(r"Overall exposure level for (\S+): (\d+\.\d+)", run.stdout)
        }
        table = "\n".join(f"{u:<24} {scores.get(u)}" for u in units)
        print(f"\nsystemd-analyze security --offline=true\n{table}")
        assert set(scores) == set(units), run.stdout + run.stderr
        for unit, ceiling in TARGETS.items():
            assert scores[unit] <= ceiling, table
        for unit in PEERS:
            assert scores[unit] >= 9.0, table

    def test_verify_is_clean(self, unit_dir: Path) -> None:
        """systemd-analyze verify has nothing to say about the three units."""
        if _verld_binary() is None:
            pytest.skip("no verld executable to stand in for ExecStart's /usr/bin/verld")
        units = ["verld.service", "verld.socket", "verld@bench1.service"]
        run = offline(["systemd-analyze", "verify", *units], unit_dir)
        assert (run.returncode, run.stdout + run.stderr) == (0, "")


class TestUnitFiles:
    def test_service_is_notify_with_watchdog_and_serial_access(self) -> None:
        """verld.service: notify + watchdog, static user with dialout, tty majors only."""
        u = parse_unit(UNITS / "verld.service")
        assert u["Service.Type"] == ["notify"]
        assert u["Service.NotifyAccess"] == ["main"]
        assert u["Service.WatchdogSec"] and u["Service.Restart"] == ["on-failure"]
        assert u["Service.ExecReload"] == ["/bin/kill -HUP $MAINPID"]
        assert (u["Service.User"], u["Service.SupplementaryGroups"]) == (["verld"], ["dialout"])
        assert u["Service.RuntimeDirectory"] == ["verld"]
        assert u["Service.RuntimeDirectoryPreserve"] == ["yes"]
        assert u["Service.UMask"] == ["0077"]
        assert u["Service.DevicePolicy"] == ["closed"]
        assert u["Service.DeviceAllow"] == ["char-ttyUSB rw", "char-ttyACM rw"]
        modprobe = "modprobe@usbserial.service modprobe@cdc_acm.service"
        assert u["Unit.Wants"] == u["Unit.After"] == [modprobe]
        assert "PrivateDevices" not in u and "PrivateUsers" not in u
        assert int(u["Service.LimitNOFILE"][0]) > 1024  # max_clients 1024 + a few

    def test_socket_is_group_verld_0660(self) -> None:
        """verld.socket: /run/verld/verld.sock, mode 0660, owned by the service's user."""
        u = parse_unit(UNITS / "verld.socket")
        assert u["Socket.ListenStream"] == ["/run/verld/verld.sock"]
        assert u["Socket.SocketMode"] == ["0660"]
        assert (u["Socket.SocketUser"], u["Socket.SocketGroup"]) == (["verld"], ["verld"])

    def test_template_is_bound_to_its_device(self) -> None:
        """verld@.service: /etc/verld/%i.yaml, /run/verld/%i/verld.sock, bound to the device."""
        u = parse_unit(UNITS / "verld@.service")
        assert u["Unit.BindsTo"] == u["Unit.After"] == ["dev-verld-%i.device"]
        start = u["Service.ExecStart"][0].split()
        assert start[1:] == [
            "--config",
            "/etc/verld/%i.yaml",
            "--socket",
            "/run/verld/%i/verld.sock",
        ]
        assert u["Service.RuntimeDirectory"] == ["verld/%i"]
        assert u["Service.DeviceAllow"] == ["/dev/verld/%i rw"]

    def test_udev_rule_names_ignores_and_wants(self) -> None:
        """70-verld.rules: /dev/verld/NAME, systemd tag, verld@NAME wanted, ModemManager off."""
        rules = (UNITS / "70-verld.rules").read_text()
        for needle in (
            'SYMLINK+="verld/$env{VERLD_NAME}"',
            'TAG+="systemd"',
            'ENV{SYSTEMD_WANTS}+="verld@$env{VERLD_NAME}.service"',
            'ENV{ID_MM_DEVICE_IGNORE}="1"',
            'OWNER="verld"',
        ):
            assert needle in rules


@pytest.fixture
def scratch_root(tmp_path: Path) -> Path:
    """A root with the host's users and groups minus any verld (for --root runs)."""
    etc = tmp_path / "etc"
    etc.mkdir()
    for name in ("passwd", "group"):
        lines = Path("/etc", name).read_text().splitlines(keepends=True)
        (etc / name).write_text("".join(x for x in lines if not x.startswith("verld:")))
    return tmp_path


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (package systemd)")
    return path


class TestSysusersTmpfiles:
    def test_sysusers_creates_verld_in_dialout(self, scratch_root: Path) -> None:
        """systemd-sysusers makes a system user verld, group verld, member of dialout."""
        sysusers = _tool("systemd-sysusers")
        subprocess.run(
            [sysusers, f"--root={scratch_root}", str(UNITS / "verld.sysusers")],
            check=True,
            capture_output=True,
            timeout=30,
        )
        passwd = (scratch_root / "etc/passwd").read_text()
        group = (scratch_root / "etc/group").read_text().splitlines()
        (user,) = [x for x in passwd.splitlines() if x.startswith("verld:")]
        assert int(user.split(":")[2]) < 1000 and user.endswith("nologin")
        assert any(x.startswith("verld:") for x in group)
        (dialout,) = [x for x in group if x.startswith("dialout:")]
        assert "verld" in dialout.split(":")[3].split(",")

    def test_tmpfiles_creates_the_runtime_dir(self, scratch_root: Path) -> None:
        """systemd-tmpfiles makes /run/verld, mode 0755, owned by verld."""
        sysusers, tmpfiles = _tool("systemd-sysusers"), _tool("systemd-tmpfiles")
        for argv in (
            [sysusers, f"--root={scratch_root}", str(UNITS / "verld.sysusers")],
            [tmpfiles, f"--root={scratch_root}", "--create", str(UNITS / "verld.tmpfiles")],
        ):
            subprocess.run(argv, check=True, capture_output=True, timeout=30)
        passwd = (scratch_root / "etc/passwd").read_text().splitlines()
        uid = int(next(x for x in passwd if x.startswith("verld:")).split(":")[2])
        st = (scratch_root / "run/verld").stat()
        assert (st.st_uid, st.st_mode & 0o7777) == (uid, 0o755)


# --- make install ---------------------------------------------------------------------
def make_install(destdir: Path, *extra: str) -> None:
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    run = subprocess.run(
        ["make", "-s", "install", f"DESTDIR={destdir}", f"PYTHON={sys.executable}", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=110,
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    destdir = tmp_path_factory.mktemp("destdir")
    make_install(destdir)
    return destdir


class TestMakeInstall:
    def test_tree_has_everything_under_prefix(self, installed: Path) -> None:
        """PREFIX=/usr/local: scripts, units, udev rule, sysusers, tmpfiles, docs, config."""
        prefix = installed / "usr/local"
        for rel in (
            "bin/verld",
            "bin/verlctl",
            "bin/verld-sim",
            "lib/systemd/system/verld.service",
            "lib/systemd/system/verld.socket",
            "lib/systemd/system/verld@.service",
            "lib/udev/rules.d/70-verld.rules",
            "lib/sysusers.d/verld.conf",
            "lib/tmpfiles.d/verld.conf",
            "share/doc/verld/deploy.md",
            "share/doc/verld/verld.yaml",
        ):
            assert (prefix / rel).is_file(), rel
        assert os.access(prefix / "bin/verld", os.X_OK)
        assert (installed / "etc/verld/verld.yaml").read_text() == (
            REPO / "configs/verld.yaml"
        ).read_text()

    def test_units_start_the_installed_binary(self, installed: Path) -> None:
        """ExecStart= is rewritten to $(PREFIX)/bin/verld."""
        for name in ("verld.service", "verld@.service"):
            u = parse_unit(installed / "usr/local/lib/systemd/system" / name)
            assert u["Service.ExecStart"][0].startswith("/usr/local/bin/verld --config ")

    def test_package_is_importable_from_the_tree(self, installed: Path) -> None:
        """The pip-installed package imports from $(DESTDIR)$(PREFIX)'s site-packages."""
        scheme = sysconfig.get_paths(vars={"base": "/usr/local", "platbase": "/usr/local"})
        site = installed / scheme["purelib"].lstrip("/")
        run = subprocess.run(
            [sys.executable, "-s", "-c", "import verld; print(verld.__file__)"],
            env={"PYTHONPATH": str(site)},
            cwd=installed,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        assert run.stdout.startswith(str(site)), run.stdout + run.stderr

    def test_existing_config_is_kept(self, tmp_path: Path) -> None:
        """An /etc/verld/verld.yaml already there is not overwritten."""
        config = tmp_path / "etc/verld/verld.yaml"
        config.parent.mkdir(parents=True)
        config.write_text("device: {port: /dev/ttyACM0}\n")
        make_install(tmp_path, "PREFIX=/usr")
        assert config.read_text() == "device: {port: /dev/ttyACM0}\n"
        assert (tmp_path / "usr/lib/systemd/system/verld.service").is_file()
