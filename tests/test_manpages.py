"""The man pages in man/: what tools/manpages generates, complete against --help and
the config schema, and rendered by groff without a warning."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from verld import __version__
from verld.config.sections import CONFIG, SECTION_KEYS
from verld.config.validate import Section
from verld.ctl.cli import SPEC

REPO = Path(__file__).resolve().parent.parent
MAN = REPO / "man"
TOOL = REPO / "tools" / "manpages"

#: console script → its page, and how to run it without the script installed
PROGRAMS = {
    "verld": ("verld.8", "verld"),
    "verlctl": ("verlctl.1", "verld.ctl"),
    "verld-sim": ("verld-sim.1", "verld.sim"),
    "verld-mqtt": ("verld-mqtt.8", "verld.mqtt"),
}
PAGES = ["verld.8", "verlctl.1", "verld-sim.1", "verld-mqtt.8", "verld.yaml.5"]
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


@contextlib.contextmanager
def tools_on_path() -> Iterator[None]:
    """tools/ importable for a moment (manlib lives there, as benchlib does)."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        yield
    finally:
        sys.path.remove(str(REPO / "tools"))


def program(name: str) -> list[str]:
    """The installed console script (what an admin runs), else its module."""
    script = Path(sysconfig.get_path("scripts")) / name
    return [str(script)] if script.exists() else [sys.executable, "-m", PROGRAMS[name][1]]


def run_help(*argv: str) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def page_text(name: str) -> str:
    """A page's text as a reader sees it: comments, font changes and escapes gone."""
    lines = [
        ln
        for ln in (MAN / name).read_text(encoding="utf-8").splitlines()
        if not ln.startswith('.\\"')
    ]
    text = "\n".join(lines)
    for roff, plain in (
        (r"\-", "-"),
        (r"\(aq", "'"),
        (r"\(ga", "`"),
        (r"\ ", " "),
        (r"\&", ""),
        (r"\e", "\\"),
    ):
        text = text.replace(roff, plain)
    return re.sub(r"\\f[BIRP]", "", text)


def mentions(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def options_in(help_text: str) -> set[str]:
    return set(OPTION.findall(help_text))


# --- (a) the committed pages are the generated ones -------------------------------------


def test_check_passes_on_the_committed_pages() -> None:
    """`tools/manpages --check` (what CI runs through this test) finds man/ current."""
    r = subprocess.run(
        [sys.executable, str(TOOL), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr + "\nrun `make man` and commit man/"


def test_regenerating_gives_the_committed_files() -> None:
    """Regenerating the man pages gives exactly the committed files in man/."""
    with tools_on_path():
        from manlib import pages
    built = pages.build_all(REPO)
    assert sorted(built) == sorted(PAGES)
    assert sorted(p.name for p in MAN.iterdir()) == sorted(PAGES)
    for name, text in built.items():
        assert (MAN / name).read_text(encoding="utf-8") == text, f"man/{name} is stale"


def test_check_names_a_stale_page(tmp_path: Path) -> None:
    """tools/manpages --check exits 1 naming a stale page and a missing one, not a good one."""
    for name in PAGES:
        shutil.copy(MAN / name, tmp_path / name)
    (tmp_path / "verld.8").write_text(".TH VERLD 8\n", encoding="utf-8")
    (tmp_path / "verld.yaml.5").unlink()
    r = subprocess.run(
        [sys.executable, str(TOOL), "--check", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 1
    assert "verld.8: differs from what tools/manpages generates" in r.stderr
    assert "verld.yaml.5: missing" in r.stderr
    assert "verlctl.1" not in r.stderr


def test_pages_carry_the_version() -> None:
    """Every man page's .TH line carries "verld X.Y.Z", the package's version."""
    for name in PAGES:
        th = (MAN / name).read_text(encoding="utf-8").splitlines()[0]
        assert th.startswith(".TH ") and f'"verld {__version__}"' in th, th


# --- (b) every option of --help is in its page --------------------------------------------


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_help_option_is_in_the_page(name: str) -> None:
    """Every option a program's --help shows is in its man page, -h, --help and --version too."""
    page = page_text(PROGRAMS[name][0])
    shown = options_in(run_help(*program(name), "--help"))
    assert {"-h", "--help", "--version"} <= shown
    missing = sorted(o for o in shown if not mentions(page, o))
    assert not missing, f"{name} --help has {missing}, man/{PROGRAMS[name][0]} does not"


@pytest.mark.parametrize("command", list(SPEC))
def test_every_verlctl_command_and_its_options_are_in_the_page(command: str) -> None:
    """Each verlctl command has a COMMANDS entry in verlctl.1 and all its --help options there."""
    page = page_text("verlctl.1")
    assert mentions(run_help(*program("verlctl"), "--help"), command)
    assert re.search(rf"^{command}\b", page, re.M), f"no COMMANDS entry for {command}"
    shown = options_in(run_help(*program("verlctl"), command, "--help"))
    missing = sorted(o for o in shown if not mentions(page, o))
    assert not missing, f"verlctl {command} --help has {missing}, man/verlctl.1 does not"


# --- (c) every config key is in verld.yaml(5) ----------------------------------------------


def config_paths(section: Section = CONFIG, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every key the loader accepts (a list's entries as NAME[].KEY)."""
    for name, check in section.keys.items():
        path = f"{prefix}{name}"
        if isinstance(check, Section):
            if prefix:
                yield path
            yield from config_paths(check, path + ".")
        elif prefix or name not in SECTION_KEYS:
            yield path
        else:
            yield from (f"{path}[].{key}" for key in SECTION_KEYS[name])


def test_every_config_key_is_in_the_config_page() -> None:
    """Every config key path, nested and list ones too, has an entry in verld.yaml.5."""
    raw = (MAN / "verld.yaml.5").read_text(encoding="utf-8")
    paths = list(config_paths())
    assert "device.line.terminator" in paths and "ports[].link" in paths
    assert "api.roles.admin.gids" in paths and len(paths) > 50
    missing = [p for p in paths if rf"\fB{p}\fR" not in raw]
    assert not missing, f"man/verld.yaml.5 has no entry for {missing}"


def test_every_config_section_is_a_subsection() -> None:
    """Every top-level config section is a .SS subsection of verld.yaml.5."""
    raw = (MAN / "verld.yaml.5").read_text(encoding="utf-8")
    for name in CONFIG.keys:
        assert re.search(rf'^\.SS "{name}\b', raw, re.M), name


def test_a_key_missing_from_the_docs_stops_the_generator() -> None:
    """Each mismatch of schema and doc rows stops the generator with an error naming it."""
    # A schema key without a row, a default the model does not have, a row for a key the schema
    # does not have.
    with tools_on_path():
        from manlib import configpage, markdown
    docs = (REPO / "docs" / "config.md").read_text(encoding="utf-8")

    def check(text: str) -> None:
        configpage.check(markdown.parse(text, "docs/config.md"))

    check(docs)
    no_row = "\n".join(ln for ln in docs.splitlines() if not ln.startswith("| `max_backlog`"))
    with pytest.raises(markdown.DocError, match=r"`api` has no row for max_backlog"):
        check(no_row)
    wrong = docs.replace("| `misses` | int ≥ 1 | `3` |", "| `misses` | int ≥ 1 | `4` |")
    assert wrong != docs
    with pytest.raises(markdown.DocError, match=r"heartbeat.misses: the docs' default is 4"):
        check(wrong)
    stale = docs.replace("| `drain` |", "| `drainage` |")
    with pytest.raises(markdown.DocError, match=r"documents drainage"):
        check(stale)
    no_roles = docs.replace("controller", "operator")
    with pytest.raises(markdown.DocError, match=r"`api.roles` does not mention controller"):
        check(no_roles)


def test_config_page_defaults_are_the_models() -> None:
    """verld.yaml.5 states the config model's defaults and types, per codec where they differ."""
    page = page_text("verld.yaml.5")
    assert "device.timeout (seconds > 0; default 5.0, on modbus-rtu and modbus-tcp 0.5)" in page
    assert 'api.mode (octal string or YAML octal int; default "0660")' in page
    assert "ports[].link (absolute path; required)" in page


# --- (d) groff renders every page without a warning --------------------------------------


def groff() -> str:
    path = shutil.which("groff")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("groff is missing under CI (.ci/run installs groff-base)")
        pytest.skip("groff is not installed")
    return path


@pytest.mark.parametrize("name", PAGES)
def test_groff_renders_without_warnings(name: str) -> None:
    """groff renders each man page with all warnings on and says nothing."""
    r = subprocess.run(
        [groff(), "-man", "-Tutf8", "-ww", "-z", str(MAN / name)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (r.returncode, r.stderr) == (0, "")


@pytest.mark.parametrize("name", PAGES)
def test_page_is_ascii_roff_with_the_standard_sections(name: str) -> None:
    """Each page is ASCII roff with the standard sections, no leading spaces, no unescaped '-'."""
    raw = (MAN / name).read_bytes()
    raw.decode("ascii")  # glyphs are written as roff escapes
    text = raw.decode()
    sections = re.findall(r'^\.SH "([^"]+)"', text, re.M)
    assert sections[:3] == ["NAME", "SYNOPSIS", "DESCRIPTION"], sections
    assert "SEE ALSO" in sections
    if name != "verld.yaml.5":
        assert {"OPTIONS", "EXIT STATUS"} <= set(sections)
    literal = False
    for n, line in enumerate(text.splitlines(), 1):
        literal = {".nf": True, ".fi": False}.get(line, literal)
        if not literal:
            assert not re.match(r"\s", line), f"{name}:{n}: leading space (a break)"
        if not line.startswith("."):
            bare = re.sub(r"\\\(..", "", line)  # glyphs: \(-> is an arrow
            assert not re.search(r"(?<!\\)-", bare), f"{name}:{n}: unescaped '-': {line}"


def test_man_renders_the_daemon_page() -> None:
    """`man -l` (what an admin runs on an installed page) shows the options and codes."""
    man = shutil.which("man")
    if man is None:
        pytest.skip("man is not installed")
    r = subprocess.run(
        [man, "-l", str(MAN / "verld.8")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "MANWIDTH": "80"},
    )
    assert r.returncode == 0, r.stderr
    out = re.sub(r".\x08", "", r.stdout)
    for needle in (
        "VERLD(8)",
        "--check-config FILE",
        "EXIT STATUS",
        "VERLD_EVENT_LOOP",
        "/etc/verld/verld.yaml",
        f"verld {__version__}",
    ):
        assert needle in out, needle


# --- (e) the pages describe the installed system ------------------------------------------


def shipped_pages() -> list[str]:
    """The pages the Debian package ships (debian/verld.manpages)."""
    text = (REPO / "debian" / "verld.manpages").read_text(encoding="utf-8")
    return [Path(line.strip()).name for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("name", PAGES)
def test_no_checkout_only_paths(name: str) -> None:
    """No page sends an installed system's reader to the checkout's files or make run."""
    text = page_text(name)
    for word in ("configs/verld.yaml", "configs/demo_config.yaml", "make run", "PREFIX/"):
        assert word not in text, f"man/{name} mentions {word}"


def test_shipped_pages_name_only_shipped_pages() -> None:
    """The Debian package's pages refer only to pages it ships, others only as from elsewhere."""
    shipped = shipped_pages()
    assert {"verld.8", "verld-mqtt.8"} <= set(shipped)
    ours = {p.rsplit(".", 1)[0] for p in PAGES}
    for name in shipped:
        for sentence in re.split(r"(?<=[.;])\s+", " ".join(page_text(name).split())):
            for ref, section in re.findall(r"([\w.-]+)\((\d)\)", sentence):
                if ref in ours and f"{ref}.{section}" not in shipped:
                    assert "make install" in sentence, f"man/{name}: {sentence}"


def test_daemon_page_has_the_quick_start_and_no_argument_behaviour() -> None:
    """verld(8): the quick-start synopsis, the default config and exit 2 without it."""
    text = " ".join(page_text("verld.8").split())
    assert "verld PORT [--codec CODEC] [--baudrate N] [--socket PATH]" in text
    assert "verld --check-config FILE" in text
    assert "it prints its usage and exits 2" in text
    assert "$XDG_RUNTIME_DIR/verld.sock" in text and "VERLD_DEFAULT_CONFIG" in text


def test_verlctl_page_has_the_runtime_dir_default_and_the_permission_message() -> None:
    """verlctl(1): the $XDG_RUNTIME_DIR default and what a refused socket says."""
    text = " ".join(page_text("verlctl.1").split())
    assert "$XDG_RUNTIME_DIR/verld.sock when only that one exists" in text
    assert "join group 'verld'" in text


def test_a_synopsis_form_naming_an_unknown_argument_stops_the_build() -> None:
    """argsource.form refuses a name the parser does not have (a renamed option)."""
    with tools_on_path():
        from manlib import argsource
    from verld.cmdline import parser

    assert argsource.form(parser(), ["PORT"], {"PORT"}) == [r"\fIPORT\fR"]
    with pytest.raises(ValueError, match="no argument --device"):
        argsource.form(parser(), ["--device"], set())


def test_a_table_row_with_a_cell_too_many_stops_the_reader() -> None:
    """A docs table row whose cell count is not its header's is an error naming its line."""
    with tools_on_path():
        from manlib import markdown
    text = "# t\n\n| key | meaning |\n|---|---|\n| `a` | one |\n| `b` | two | three |\n"
    with pytest.raises(markdown.DocError, match=r"^doc\.md:6: 3 cells, the header has 2$"):
        markdown.parse(text, "doc.md")
