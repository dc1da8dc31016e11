"""Codec plugins: how verld finds, loads and refuses them, lists them and takes one
in a config (tests/plugins/, installed by tests/codec_plugins.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint, distributions
from pathlib import Path

import pytest
from codec_plugins import DYNAMIXEL, ODD, TAG8, install

from verld.codec.api import GROUP
from verld.codec.registry import CODECS, Codecs, PluginError
from verld.testing import DaemonProc, write_config

# --- finding and loading plugins ------------------------------------------------------------


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Dynamixel plugin and the odd ones installed in a directory of their own."""
    return install(tmp_path_factory.mktemp("plugins"), DYNAMIXEL, TAG8, ODD)


def installed_in(*directories: Path) -> Codecs:
    """A registry over the built-ins and the plugins installed in `directories`."""

    def found() -> list[EntryPoint]:
        dists = distributions(path=[str(d) for d in directories])
        return [point for dist in dists for point in dist.entry_points if point.group == GROUP]

    return Codecs(CODECS.builtins(), found)


@pytest.fixture
def codecs(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Codecs]:
    """A registry over the installed plugins, their directory on sys.path; none imported."""
    monkeypatch.syspath_prepend(str(plugin_dir))
    for module in ("verld_dynamixel", "verld_odd", "verld_odd_broken"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    yield installed_in(plugin_dir)


def test_a_plugin_is_a_codec_after_the_builtins(codecs: Codecs) -> None:
    """An installed plugin's name is a codec, listed after the built-ins, its spec loaded."""
    names = list(codecs)
    assert names[: len(CODECS.builtins())] == [codec.name for codec in CODECS.builtins()]
    assert "dynamixel" in names and "verl" not in names[len(CODECS.builtins()) :]
    assert codecs["dynamixel"].name == "dynamixel"
    assert codecs["dynamixel"].events is False


def test_only_the_codec_asked_for_is_imported(codecs: Codecs) -> None:
    """Naming one plugin imports it alone: a broken one beside it stays unimported."""
    assert "broken" in codecs  # known from the metadata
    codecs["dynamixel"]
    assert "verld_dynamixel" in sys.modules
    assert "verld_odd_broken" not in sys.modules and "verld_odd" not in sys.modules


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("broken", "failed to load: ModuleNotFoundError: No module named"),
        ("notaspec", "verld_odd:NOT_A_SPEC is a dict, not a verld.codec.api.CodecSpec"),
        ("misnamed", "its CodecSpec is named 'other', not 'misnamed'"),
    ],
)
def test_an_unusable_plugin_says_which_package_and_why(codecs: Codecs, name: str, why: str) -> None:
    """A plugin that cannot be used raises PluginError naming it, its package and why."""
    with pytest.raises(PluginError) as caught:
        codecs[name]
    assert str(caught.value).startswith(
        f"codec plugin {name!r} from package verld-odd-codecs 0.1: "
    )
    assert why in str(caught.value)


def test_a_plugin_with_a_builtins_name_never_replaces_it(codecs: Codecs) -> None:
    """A plugin named `verl` leaves the built-in in place and is a clash, found unimported."""
    assert codecs["verl"] is CODECS["verl"]
    (clash,) = codecs.clashes()
    assert (clash.name, clash.package) == ("verl", "verld-odd-codecs 0.1")
    assert "verld_odd" not in sys.modules


def test_a_name_two_packages_take_is_refused_naming_both(
    plugin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same codec name from two installed packages is refused, naming the other too."""
    monkeypatch.syspath_prepend(str(plugin_dir))
    codecs = installed_in(plugin_dir, install(tmp_path, DYNAMIXEL))
    with pytest.raises(PluginError, match=r"the name is taken by package verld-dynamixel 1\.0 too"):
        codecs["dynamixel"]
    assert any(clash.name == "dynamixel" for clash in codecs.clashes())


def test_listing_shows_every_codec_with_its_origin(codecs: Codecs) -> None:
    """The listing: built-ins, then each plugin with its package and, if unusable, why."""
    listed = {(item.name, item.origin): item.error for item in codecs.listing()}
    assert listed[("verl", "built-in")] is None
    assert listed[("dynamixel", "verld-dynamixel 1.0")] is None
    assert listed[("verl", "verld-odd-codecs 0.1")] == "the name is taken by the built-in codec"
    assert "ModuleNotFoundError" in (listed[("broken", "verld-odd-codecs 0.1")] or "")


# --- the command line: verld with the plugins on PYTHONPATH -------------------------------


def verld(plugin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`verld ARGS` with the plugins on its PYTHONPATH."""
    env = {"PYTHONPATH": str(plugin_dir), "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "verld", *args]
    return subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=60)


def config(tmp_path: Path, codec: str) -> str:
    path = tmp_path / "verld.yaml"
    path.write_text(
        f"device: {{port: /dev/null, codec: {codec}}}\napi: {{socket: {tmp_path}/v.sock}}\n"
    )
    return str(path)


def test_list_codecs_names_builtins_and_plugins_with_where_from(plugin_dir: Path) -> None:
    """`verld --list-codecs`: every codec and where it comes from, an unusable one with why."""
    run = verld(plugin_dir, "--list-codecs")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["verl", "built-in"]
    assert "dynamixel   verld-dynamixel 1.0" in lines
    broken = next(line for line in lines if line.startswith("broken"))
    assert "verld-odd-codecs 0.1 (unusable: failed to load: ModuleNotFoundError" in broken


def test_a_config_naming_an_installed_plugin_is_valid(plugin_dir: Path, tmp_path: Path) -> None:
    """`device.codec: dynamixel` passes --check-config once the plugin is installed."""
    run = verld(plugin_dir, "--check-config", config(tmp_path, "dynamixel"))
    assert run.returncode == 0, run.stderr


def test_the_guides_config_passes_check_config(plugin_dir: Path, tmp_path: Path) -> None:
    """docs/codecs.md's config for the Dynamixel plugin passes `verld --check-config`."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "codecs.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "dynamixel" in b]
    path = tmp_path / "dxl.yaml"
    path.write_text(block + f"api:\n  socket: {tmp_path}/v.sock\n")
    run = verld(plugin_dir, "--check-config", str(path))
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("option", ["--check-config", "--config"])
def test_a_config_naming_a_broken_plugin_exits_2_naming_its_package(
    plugin_dir: Path, tmp_path: Path, option: str
) -> None:
    """A config naming a plugin that fails to import: exit 2, its package named, no traceback."""
    run = verld(plugin_dir, option, config(tmp_path, "broken"))
    assert run.returncode == 2
    assert "device.codec: codec plugin 'broken' from package verld-odd-codecs 0.1:" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_plugin_the_config_does_not_name_cannot_stop_verld(
    plugin_dir: Path, tmp_path: Path
) -> None:
    """Unusable plugins the config does not name leave it valid (verld only logs a clash)."""
    run = verld(plugin_dir, "--check-config", config(tmp_path, "verl"))
    assert run.returncode == 0, run.stderr


def test_verlds_codec_option_refuses_a_broken_plugin_naming_its_package(
    plugin_dir: Path, tmp_path: Path
) -> None:
    """`verld PORT --codec broken` exits 2 naming the option and the plugin's package."""
    run = verld(plugin_dir, "/dev/null", "--codec", "broken", "--socket", str(tmp_path / "v.sock"))
    assert run.returncode == 2
    assert "--codec: codec plugin 'broken' from package verld-odd-codecs 0.1:" in run.stderr


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("broken", "codec plugin 'broken' from package verld-odd-codecs 0.1"),
        ("dynamixel", "--codec dynamixel: the simulator plays binary commands"),
    ],
)
def test_verld_sim_refuses_a_plugin_it_cannot_play(
    plugin_dir: Path, tmp_path: Path, name: str, said: str
) -> None:
    """`verld-sim --codec` with a broken plugin, or one without commands, exits 2 saying why."""
    sim = [sys.executable, "-m", "verld.sim", "--link", str(tmp_path / "tty"), "--codec", name]
    env = {"PYTHONPATH": str(plugin_dir), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(sim, check=False, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert said in run.stderr and "Traceback" not in run.stderr


@pytest.mark.timeout(60)
def test_the_simulator_plays_a_plugin_with_commands(plugin_dir: Path, tmp_path: Path) -> None:
    """`port: sim` with a plugin that has `commands`: verld-sim runs its command set over it."""
    cfg = write_config(tmp_path, "sim", {"device": {"codec": "tag8"}})
    daemon = DaemonProc(cfg, env={"PYTHONPATH": str(plugin_dir)})
    try:
        with daemon.client() as c:
            reply = c.call(b"\x01hi")  # the sim's echo command
        assert (reply.status, reply.data) == (0, b"hi")
    finally:
        daemon.stop()
