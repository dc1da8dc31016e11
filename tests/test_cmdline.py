"""verld's command line (verld/cmdline.py): the quick start `verld PORT`, no arguments,
the socket a quick start picks, and PORT and its options on top of --config.

The parsing and the config it gives are tested in-process; the daemon itself as a
real process: `verld sim --socket ...` comes up and verlctl reaches it, `verld` with
no config exits 2 creating nothing, a non-root quick start listens in its
$XDG_RUNTIME_DIR (run as `nobody` through setpriv when the tests run as root).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support import SimProc, nobody_python, stop_process, wait_for, write_config

from verld.client import Client, Unreachable
from verld.cmdline import (
    DEFAULT_CONFIG,
    Options,
    Usage,
    announce,
    default_config_path,
    parser,
    quick_socket,
    start_config,
    verlctl_command,
)
from verld.codec.registry import retry_of
from verld.config import Config
from verld.errors import ConfigError

NOBODY = "nobody"


def start(*argv: str, euid: int = 0, env: dict[str, str] | None = None) -> Any:
    """start_config on `argv` as `euid` with `env` (no $VERLD_DEFAULT_CONFIG unless given)."""
    return start_config(parser().parse_args(list(argv)), euid=euid, env=env or {})


def usage_of(*argv: str, euid: int = 0, env: dict[str, str] | None = None) -> str:
    """The message of the Usage that `argv` raises."""
    with pytest.raises(Usage) as info:
        start(*argv, euid=euid, env=env)
    return str(info.value)


# --- in-process: what the command line starts on ----------------------------------------


class TestQuickStart:
    def test_port_alone_is_every_other_key_at_its_default(self) -> None:
        """`verld sim --socket S`: device.port and api.socket set, the rest Config()'s."""
        s = start("sim", "--socket", "/srv/v/x.sock")
        assert s.quick and s.config_path is None
        default = Config()
        expected = replace(
            default,
            device=replace(default.device, port="sim"),
            api=replace(default.api, socket="/srv/v/x.sock"),
        )
        assert replace(s.cfg, source=None) == expected

    def test_reads_no_config_file(self, tmp_path: Path) -> None:
        """With PORT no file is read: not the default one, even when it is broken."""
        broken = tmp_path / "verld.yaml"
        broken.write_text("device: [\n")
        s = start("sim", "--socket", "/x.sock", env={"VERLD_DEFAULT_CONFIG": str(broken)})
        assert s.cfg.device.port == "sim"

    def test_codec_and_baudrate(self) -> None:
        """--codec and --baudrate set device.codec and device.baudrate."""
        s = start("/dev/ttyUSB0", "--codec", "line", "--baudrate", "9600", "--socket", "/x.sock")
        assert (s.cfg.device.port, s.cfg.device.codec, s.cfg.device.baudrate) == (
            "/dev/ttyUSB0",
            "line",
            9600,
        )

    @pytest.mark.parametrize("port", ["tcp://10.0.0.5:4001", "rfc2217://10.0.0.5:2217"])
    def test_network_ports(self, port: str) -> None:
        """PORT may be a tcp:// or rfc2217:// URL."""
        assert start(port, "--socket", "/x.sock").cfg.device.port == port

    def test_modbus_codec_brings_its_defaults(self) -> None:
        """--codec modbus-rtu gets Modbus's timeout 0.5 s and retry 1, as in a file."""
        cfg = start("/dev/ttyUSB0", "--codec", "modbus-rtu", "--socket", "/x.sock").cfg
        assert (cfg.device.timeout, retry_of(cfg)) == (0.5, 1)


class TestLineOptions:
    def test_each_line_option_sets_its_key(self) -> None:
        """--end, --event, --no-reply, --ping and --expect set their config keys."""
        s = start(
            "/dev/ttyACM0",
            "--codec",
            "line",
            "--end",
            "^(OK|ERROR)$",
            "--event",
            "^ALARM",
            "--no-reply",
            "^[^?]*$",
            "--ping",
            "*IDN?",
            "--expect",
            "^ACME,",
            "--socket",
            "/x.sock",
        )
        line, hb = s.cfg.device.line, s.cfg.heartbeat
        assert (line.end, line.event, line.no_reply) == ("^(OK|ERROR)$", "^ALARM", "^[^?]*$")
        assert (hb.payload, hb.expect) == ("*IDN?", "^ACME,")
        assert retry_of(s.cfg) == 0  # (line: a retry would send the command twice)

    def test_a_bad_pattern_names_the_option(self) -> None:
        """A pattern that does not compile is a usage error naming the option."""
        message = usage_of("/dev/x", "--codec", "line", "--no-reply", "(", "--socket", "/x.sock")
        assert message.startswith("--no-reply: ")

    def test_line_options_need_the_line_codec(self) -> None:
        """A line option on another codec is a usage error that says to add --codec line."""
        message = usage_of("/dev/x", "--event", "^A", "--socket", "/x.sock")
        assert "--event: for line devices; add --codec line (codec is verl)" in message

    def test_expect_without_a_ping_is_refused(self) -> None:
        """--expect without --ping (or heartbeat.payload) is a config error."""
        needs = "heartbeat.expect: needs heartbeat.payload"
        with pytest.raises(ConfigError, match=needs):
            start("/dev/x", "--codec", "line", "--expect", "^A", "--socket", "/x.sock")

    def test_they_apply_on_top_of_a_file(self, tmp_path: Path) -> None:
        """With --config the line options win over the file's keys, the rest kept."""
        path = tmp_path / "v.yaml"
        path.write_text("device: {port: /dev/x, codec: line, line: {event: '^OLD', end: '^OK$'}}\n")
        line = start("-c", str(path), "--event", "^NEW").cfg.device.line
        assert (line.event, line.end) == ("^NEW", "^OK$")


class TestQuickStartSocket:
    def test_root_serves_the_system_socket(self) -> None:
        """As root the quick start's socket is /run/verld/verld.sock."""
        assert quick_socket(0, {"XDG_RUNTIME_DIR": "/run/user/0"}) == "/run/verld/verld.sock"
        assert start("sim", euid=0).cfg.api.socket == "/run/verld/verld.sock"

    def test_user_serves_in_xdg_runtime_dir(self) -> None:
        """Another user's quick start listens in $XDG_RUNTIME_DIR."""
        env = {"XDG_RUNTIME_DIR": "/run/user/1000"}
        assert start("sim", euid=1000, env=env).cfg.api.socket == "/run/user/1000/verld.sock"

    @pytest.mark.parametrize("env", [{}, {"XDG_RUNTIME_DIR": ""}, {"XDG_RUNTIME_DIR": "run"}])
    def test_user_without_runtime_dir_must_say_where(self, env: dict[str, str]) -> None:
        """No absolute $XDG_RUNTIME_DIR and no --socket: a usage error asking for --socket."""
        # Never a made-up shared directory.
        message = usage_of("sim", euid=1000, env=env)
        assert "--socket PATH" in message and "not a shared one such as /tmp" in message

    def test_socket_option_wins(self) -> None:
        """--socket needs no $XDG_RUNTIME_DIR."""
        assert start("sim", "--socket", "/srv/s.sock", euid=1000).cfg.api.socket == "/srv/s.sock"


class TestNoArguments:
    def test_default_config_path(self) -> None:
        """/etc/verld/verld.yaml, unless $VERLD_DEFAULT_CONFIG names another."""
        assert default_config_path({}) == DEFAULT_CONFIG == "/etc/verld/verld.yaml"
        assert default_config_path({"VERLD_DEFAULT_CONFIG": "/t/v.yaml"}) == "/t/v.yaml"

    def test_missing_default_config_is_a_usage_error(self, tmp_path: Path) -> None:
        """No --config, no PORT, no default file: usage error naming the file and PORT."""
        missing = tmp_path / "verld.yaml"
        message = usage_of(env={"VERLD_DEFAULT_CONFIG": str(missing)})
        assert f"{missing} does not exist" in message
        assert "verld /dev/ttyUSB0" in message and "--config FILE" in message

    def test_default_config_is_read(self, tmp_path: Path) -> None:
        """An existing default file is read as if given with --config (and re-read on reload)."""
        path = write_config(tmp_path, "/dev/ttyS3")
        s = start(env={"VERLD_DEFAULT_CONFIG": str(path)})
        assert (s.config_path, s.cfg.device.port, s.quick) == (str(path), "/dev/ttyS3", False)

    def test_options_apply_to_the_default_config(self, tmp_path: Path) -> None:
        """`verld --codec line` alone: the default file with the codec on top."""
        path = write_config(tmp_path, "/dev/ttyS3")
        s = start("--codec", "line", env={"VERLD_DEFAULT_CONFIG": str(path)})
        assert (s.cfg.device.port, s.cfg.device.codec) == ("/dev/ttyS3", "line")


class TestOnTopOfConfig:
    def test_command_line_wins(self, tmp_path: Path) -> None:
        """PORT, --codec, --baudrate and --socket replace the file's; its other keys stay."""
        path = write_config(tmp_path, "/dev/ttyS3", {"device": {"baudrate": 19200}})
        s = start(
            "--config",
            str(path),
            "sim",
            "--codec",
            "length",
            "--baudrate",
            "9600",
            "--socket",
            "/srv/other.sock",
        )
        device = s.cfg.device
        assert (device.port, device.codec, device.baudrate) == ("sim", "length", 9600)
        assert s.cfg.api.socket == "/srv/other.sock"
        assert (device.timeout, device.retry, s.cfg.heartbeat.interval) == (1.0, 0, 1.0)
        assert s.config_path == str(path) and not s.quick

    def test_file_keys_stay_without_options(self, tmp_path: Path) -> None:
        """--config alone is the file as it is."""
        path = write_config(tmp_path, "/dev/ttyS3")
        s = start("--config", str(path))
        assert (s.cfg.device.port, s.cfg.api.socket) == ("/dev/ttyS3", str(tmp_path / "verld.sock"))

    def test_codec_defaults_follow_the_command_lines_codec(self, tmp_path: Path) -> None:
        """A command-line codec brings its timeout/retry defaults only where the file sets none."""
        # The file's values are kept where it does set them.
        bare = tmp_path / "bare.yaml"
        bare.write_text("device: {port: /dev/ttyS3, codec: modbus-rtu}\n")
        assert (start("-c", str(bare)).cfg.device.timeout) == 0.5
        cfg = start("-c", str(bare), "--codec", "verl").cfg
        assert (cfg.device.timeout, retry_of(cfg)) == (5.0, 3)
        set_ = tmp_path / "set.yaml"
        set_.write_text("device: {port: /dev/ttyS3, timeout: 2.0, retry: 2}\n")
        cfg = start("-c", str(set_), "--codec", "modbus-tcp").cfg
        assert (cfg.device.timeout, retry_of(cfg)) == (2.0, 2)
        cfg = start("-c", str(set_), "--codec", "line").cfg
        assert (cfg.device.timeout, retry_of(cfg)) == (2.0, 2)

    def test_checks_across_fields_see_the_command_line(self, tmp_path: Path) -> None:
        """The file's Modbus TCP server with --codec verl is refused like the same file."""
        path = tmp_path / "m.yaml"
        path.write_text(
            "device: {port: /dev/ttyS3, codec: modbus-rtu}\nmodbus: {listen: '127.0.0.1:1502'}\n"
        )
        with pytest.raises(ConfigError, match=r"m.yaml:2: modbus.listen: .*needs device.codec"):
            start("-c", str(path), "--codec", "verl")

    def test_reference_flat_file_with_a_port(self, tmp_path: Path) -> None:
        """The reference flat format takes PORT too: its TCP target replaced, the rest kept."""
        path = tmp_path / "old.yaml"
        path.write_text("host: 10.0.0.2\nport: 4001\ntimeout: 2\n")
        device = start("-c", str(path), "/dev/ttyS3").cfg.device
        assert (device.port, device.codec, device.timeout) == ("/dev/ttyS3", "length", 2.0)

    def test_bad_file_is_a_config_error(self, tmp_path: Path) -> None:
        """A bad file stays a ConfigError with file:line, options or not."""
        path = tmp_path / "bad.yaml"
        path.write_text("device:\n  timout: 2\n")
        with pytest.raises(ConfigError, match=r"bad.yaml:2: device.timout: .*'timeout'"):
            start("-c", str(path), "sim")

    def test_reread_keeps_the_command_line(self, tmp_path: Path) -> None:
        """A reload reads the edited file with PORT and the options on top again."""
        path = write_config(tmp_path, "/dev/ttyS3")
        s = start("-c", str(path), "sim", "--baudrate", "9600")
        path.write_text(path.read_text().replace("timeout: 1.0", "timeout: 3.0", 1))
        device = s.reread(str(path)).device
        assert (device.port, device.baudrate, device.timeout) == ("sim", 9600, 3.0)
        assert s.options == Options(port="sim", baudrate=9600)


class TestBadValues:
    @pytest.mark.parametrize(
        ("argv", "words"),
        [
            (
                ["sim", "--codec", "verll", "--socket", "/x.sock"],
                "--codec: expected one of verl, length, line, modbus-rtu, modbus-tcp, frame, "
                "got 'verll'; did you mean 'verl'?",
            ),
            (["sim", "--baudrate", "fast"], "--baudrate: expected a baud rate > 0, got 'fast'"),
            (["sim", "--baudrate", "0"], "--baudrate: expected a baud rate > 0, got 0"),
            (["sim", "--baudrate", "9600.5"], "--baudrate: expected a baud rate > 0, got 9600.5"),
            (
                ["tcp://host", "--socket", "/x.sock"],
                "PORT: expected tcp://HOST:PORT, got 'tcp://host'",
            ),
            (["", "--socket", "/x.sock"], "PORT: expected a serial device path, tcp://HOST:PORT"),
            (["sim", "--socket", "/" + "s" * 120], "--socket: Unix socket paths are limited"),
        ],
    )
    def test_checked_like_a_files_values(self, argv: list[str], words: str) -> None:
        """Option values go through the config's checkers: the same words, the option named."""
        assert words in usage_of(*argv)

    def test_bad_option_beside_config_is_checked_before_the_file(self, tmp_path: Path) -> None:
        """A bad option is a usage error even with a (valid) file."""
        path = write_config(tmp_path, "/dev/ttyS3")
        assert "--codec" in usage_of("-c", str(path), "--codec", "cobs")


class TestAnnounce:
    def test_console_quick_start_says_where_and_how(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """On a console a quick start's first lines name the socket and verlctl commands."""
        announce(start("sim", "--socket", "/srv/v/x.sock"), "console", env={})
        lines = capsys.readouterr().err.splitlines()
        assert lines[0] == (
            "verld: quick start on the simulated device (codec verl, no config "
            "file), listening on /srv/v/x.sock; in another shell try:"
        )
        assert lines[1].endswith(" --socket /srv/v/x.sock status")
        assert lines[2].endswith(" --socket /srv/v/x.sock call --hex 01aabb")

    def test_real_device_gets_no_sim_call(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A real device is named; no example call (the sim's echo means nothing to it)."""
        announce(start("/dev/ttyUSB0", "--socket", "/x.sock"), "console", env={})
        err = capsys.readouterr().err
        assert err.startswith("verld: quick start on /dev/ttyUSB0 (codec verl")
        assert " call " not in err

    def test_quiet_under_socket_activation(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Under socket activation the socket is systemd's: nothing is said."""
        announce(start("sim", "--socket", "/x.sock"), "console", env={"LISTEN_FDS": "1"})
        assert capsys.readouterr().err == ""


class TestVerlctlCommand:
    def test_on_path(self) -> None:
        """`verlctl` when it is on $PATH."""
        assert verlctl_command(lambda _name: "/usr/bin/verlctl") == "verlctl"

    def test_beside_the_python(self, tmp_path: Path) -> None:
        """The venv's verlctl beside this Python when the venv is not activated."""
        (tmp_path / "verlctl").touch()
        found = verlctl_command(lambda _name: None, str(tmp_path / "python"))
        assert found == str(tmp_path / "verlctl")

    def test_module(self, tmp_path: Path) -> None:
        """Else the module, run by this Python."""
        python = str(tmp_path / "python")
        assert verlctl_command(lambda _name: None, python) == f"{python} -m verld.ctl"


# --- real processes -----------------------------------------------------------------------


def verld_cmd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "verld", *argv]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without the variables that steer verld and verlctl."""
    drop = {"VERLD_SOCKET", "VERLD_DEFAULT_CONFIG", "XDG_RUNTIME_DIR", "LISTEN_FDS", "LISTEN_PID"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def link_up(proc: subprocess.Popen[bytes], sock: str, err: Path) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"verld exited {proc.returncode}:\n{err.read_text()}")
    try:
        with Client(sock, timeout=2.0) as c:
            return bool(c.status()["link"]["state"] == "up")
    except (OSError, Unreachable):
        return False


class Daemon:
    """verld started from a command line, stderr in `err`; stopped by `stop()`."""

    def __init__(
        self, argv: list[str], err: Path, sock: str, *, env: dict[str, str], cwd: Path | None = None
    ) -> None:
        self.err, self.sock = err, sock
        with open(err, "wb") as f:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=f, env=env, cwd=cwd
            )
        try:
            wait_for(lambda: link_up(self.proc, sock, err), 20, "the quick start's link")
        except BaseException:
            self.stop()
            raise

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.err.read_text().splitlines() if line.strip()]

    def stop(self) -> int:
        return stop_process(self.proc)


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short private directory for sockets (tmp_path may be too long for AF_UNIX)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="verld-cl-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(60)
def test_quick_start_on_the_simulated_device(sockdir: Path) -> None:
    """`verld sim --socket DIR/x.sock` serves the built-in sim with no config, stops cleanly."""
    # `verlctl --socket DIR/x.sock status` shows the link up; its first log record says where it
    # listens and the verlctl command; SIGTERM: exit 0, socket removed.
    sock = str(sockdir / "x.sock")
    d = Daemon(verld_cmd("sim", "--socket", sock), sockdir / "err", sock, env=clean_env())
    try:
        r = subprocess.run(
            [sys.executable, "-m", "verld.ctl", "--socket", sock, "status"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert r.returncode == 0, r.stderr
        assert "link        up (connected)" in r.stdout
        first = d.records()[0]
        assert (first["event"], first["socket"], first["port"]) == ("listening", sock, "sim")
        assert first["verlctl"].endswith(f" --socket {sock} status")
    finally:
        assert d.stop() == 0, d.err.read_text()
    assert not os.path.exists(sock)


@pytest.mark.timeout(30)
def test_no_arguments_and_no_default_config_exits_2_creating_nothing(tmp_path: Path) -> None:
    """`verld` without its default config prints usage, exits 2 and creates nothing."""
    # No socket, no directory, no file (here, in $XDG_RUNTIME_DIR, nor /run/verld).
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    missing = tmp_path / "etc" / "verld.yaml"
    run_verld_existed = os.path.exists("/run/verld")
    env = clean_env(VERLD_DEFAULT_CONFIG=str(missing), XDG_RUNTIME_DIR=str(xdg))
    r = subprocess.run(
        verld_cmd(), capture_output=True, text=True, timeout=20, env=env, cwd=tmp_path, check=False
    )
    assert r.returncode == 2
    assert r.stderr.startswith("usage: verld PORT ")
    assert f"verld: no config: {missing} does not exist" in r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["xdg"]
    assert list(xdg.iterdir()) == []
    assert os.path.exists("/run/verld") == run_verld_existed


@pytest.mark.timeout(30)
def test_bad_option_value_exits_2_with_usage() -> None:
    """`verld sim --codec verll`: usage, the option's complaint with a suggestion, exit 2."""
    r = subprocess.run(
        verld_cmd("sim", "--codec", "verll", "--socket", "/nonexistent/x.sock"),
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("usage: verld ")
    assert "verld: --codec: " in r.stderr and "did you mean 'verl'?" in r.stderr


@pytest.mark.timeout(30)
def test_version_still_works() -> None:
    """`verld --version` prints the version and exits 0 (no config needed)."""
    env = clean_env(VERLD_DEFAULT_CONFIG="/nonexistent.yaml")
    r = subprocess.run(
        verld_cmd("--version"), capture_output=True, text=True, timeout=20, env=env, check=False
    )
    assert r.returncode == 0 and r.stdout.startswith("verld ")


@pytest.mark.timeout(30)
def test_version_says_which_build_runs() -> None:
    """`verld --version` names the build that runs (noxfile.py's compiled session says which)."""
    expect = os.environ.get("VERLD_EXPECT_BUILD", "pure")
    r = subprocess.run(
        verld_cmd("--version"), capture_output=True, text=True, timeout=20, check=False
    )
    assert r.returncode == 0
    assert r.stdout.strip().endswith(f"({expect})")


@pytest.mark.timeout(60)
def test_port_on_top_of_config_survives_a_reload(sockdir: Path) -> None:
    """A command-line PORT overrides the config file's device and stays on top after a reload."""
    # `verld --config FILE sim`: the file names a device that does not exist, PORT wins (the link
    # comes up on the sim), and a reload re-reads the file with PORT on top.
    config = write_config(sockdir, "/dev/verld-test-no-such-port")
    sock = str(sockdir / "verld.sock")
    d = Daemon(verld_cmd("--config", str(config), "sim"), sockdir / "err", sock, env=clean_env())
    try:
        r = subprocess.run(
            [sys.executable, "-m", "verld.ctl", "--socket", sock, "reload"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "reload: ok (changed: nothing)"
        with Client(sock, timeout=5.0) as c:
            link = c.status()["link"]
        assert (link["state"], link["generation"]) == ("up", 1)
    finally:
        assert d.stop() == 0


# --- not root: the quick start in $XDG_RUNTIME_DIR ------------------------------------------


def as_nobody() -> list[str]:
    """The Python command that runs as a non-root user: this Python when not root, else
    setpriv to nobody and a Python nobody may run verld with (support.nobody_python: a
    readable copy of verld where nobody cannot read this checkout; skips when none)."""
    if os.geteuid() != 0:
        return [sys.executable]
    if shutil.which("setpriv") is None:
        pytest.skip("running as another user needs setpriv")
    return ["setpriv", f"--reuid={NOBODY}", "--regid=nogroup", "--clear-groups", *nobody_python()]


@pytest.fixture
def runtime_dir(pubdir: Path) -> Path:
    """A $XDG_RUNTIME_DIR of the user the non-root tests run as (nobody under root)."""
    xdg = pubdir / "xdg"
    xdg.mkdir(mode=0o700)
    if os.geteuid() == 0:
        nobody = pwd.getpwnam(NOBODY)
        os.chown(xdg, nobody.pw_uid, nobody.pw_gid)
    return xdg


@pytest.mark.timeout(60)
def test_user_quick_start_listens_in_xdg_runtime_dir_and_verlctl_finds_it(
    runtime_dir: Path,
) -> None:
    """A non-root verld listens in $XDG_RUNTIME_DIR/verld.sock and verlctl finds it there."""
    # Not root, `verld tcp://...` listens on $XDG_RUNTIME_DIR/verld.sock; verlctl with no --socket
    # and no $VERLD_SOCKET finds it there (no /run/verld/verld.sock here).
    #
    # The device is verld-sim on TCP, started here: a user's verld reaches it without starting a
    # child (the venv's Python may not be executable by nobody for a child).
    if os.path.lexists("/run/verld/verld.sock"):
        pytest.skip("a system verld socket exists: verlctl would take that one")
    python = as_nobody()
    env = clean_env(XDG_RUNTIME_DIR=str(runtime_dir))
    sock = str(runtime_dir / "verld.sock")
    simdir = runtime_dir.parent / "sim"
    simdir.mkdir()
    sim = SimProc(simdir, tcp=True)
    try:
        d = Daemon(
            [*python, "-m", "verld", sim.address],
            runtime_dir.parent / "err",
            sock,
            env=env,
            cwd=Path("/"),
        )
    except BaseException:
        sim.stop()
        raise
    try:
        r = subprocess.run(
            [*python, "-m", "verld.ctl", "status"],
            capture_output=True,
            text=True,
            timeout=20,
            env=env,
            cwd="/",
            check=False,
        )
        assert r.returncode == 0, r.stderr
        assert "link        up (connected)" in r.stdout
        assert d.records()[0]["socket"] == sock
    finally:
        code = d.stop()
        sim.stop()
    assert code == 0
    assert not os.path.lexists(sock)


@pytest.mark.timeout(60)  # nobody_python may copy verld first
def test_user_without_runtime_dir_is_asked_for_a_socket(pubdir: Path) -> None:
    """Not root, no $XDG_RUNTIME_DIR, no --socket: exit 2 asking for --socket, nothing made."""
    r = subprocess.run(
        [*as_nobody(), "-m", "verld", "sim"],
        capture_output=True,
        text=True,
        timeout=20,
        env=clean_env(),
        cwd=pubdir,
        check=False,
    )
    assert r.returncode == 2
    assert "give one with --socket PATH" in r.stderr
    assert list(pubdir.iterdir()) == []
