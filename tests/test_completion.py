"""Shell completion (completion/): bash, zsh and fish complete what verlctl's parser takes.

Every expected command, option, choice and value kind is read from the parser itself
(verld.ctl.cli._parser), so a command or option added there without its completion, or
one left in a script after the parser dropped it, fails here. bash is driven as readline
would (COMP_WORDS, COMP_CWORD, COMP_LINE, COMP_POINT, then `_verlctl`), with and without
bash-completion; zsh through a pseudo-terminal (zsh/zpty) pressing Tab; fish with
`complete -C`. A missing zsh or bash-completion skips its tests, except under CI=true
(.ci/run installs both); a missing fish always skips.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from verld.ctl.cli import _parser

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent
COMPLETION = REPO / "completion"
BASH_SCRIPT = COMPLETION / "verlctl.bash"
ZSH_SCRIPT = COMPLETION / "_verlctl"
FISH_SCRIPT = COMPLETION / "verlctl.fish"
BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")
#: an executable the tests put on PATH: the COMMAND of `inhibit -- COMMAND`
FLASHER = "verld-test-flasher"


def _required(ok: bool, why: str) -> None:
    """Skip unless `ok`; under CI=true fail instead (.ci/run installs what is missing)."""
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}, and CI=true: .ci/run installs it")
    pytest.skip(why)


# --- what the parser takes ------------------------------------------------------------
PARSER = _parser()
(SUBPARSERS,) = (a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
COMMANDS: dict[str, argparse.ArgumentParser] = dict(SUBPARSERS.choices)
HELP = {a.dest: a.help or "" for a in SUBPARSERS._choices_actions}
#: the options whose value is a socket, and those whose value is any file
SOCKET_DESTS = {"socket"}
FILE_DESTS = {"config", "file"}


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings]


def _takes_command(parser: argparse.ArgumentParser) -> bool:
    """The command runs `-- COMMAND ARG...` (a positional whose metavar starts with --)."""
    return any(
        not a.option_strings and str(a.metavar or "").startswith("-- ") for a in parser._actions
    )


def _option_words(parser: argparse.ArgumentParser, prefix: str) -> frozenset[str]:
    """The options of `parser` that start with `prefix`."""
    words = {s for a in _options(parser) for s in a.option_strings}
    return frozenset(w for w in words if w.startswith(prefix))


@dataclass(frozen=True)
class Case:
    """Completing `line` (the cursor at its end) offers all of `expect`, and maybe some of
    `optional` (what one shell offers and another leaves out), nothing else; with `paths`,
    compared by base name (zsh's file completion offers those)."""

    line: str
    expect: frozenset[str]
    optional: frozenset[str] = frozenset()
    paths: bool = False
    #: the shells that complete it the same way (fish offers options for any "-" token)
    fish: bool = True

    def __str__(self) -> str:
        return self.line


def _value_cases(head: str, parser: argparse.ArgumentParser) -> Iterator[Case]:
    """For each option of `parser` (in the place `head` leaves), what follows it."""
    long_opts = _option_words(parser, "--")
    dashes = frozenset({"--"} if _takes_command(parser) else ())
    for a in _options(parser):
        for flag in a.option_strings:
            if a.nargs == 0:
                # zsh leaves out the options given already, and offers nothing after
                # --help or --version (they exit)
                if not isinstance(a, argparse._HelpAction | argparse._VersionAction):
                    given = frozenset(a.option_strings)
                    yield Case(f"{head}{flag} --", long_opts - given, optional=given | dashes)
            elif a.choices is not None:
                choices = frozenset(str(c) for c in a.choices)
                yield Case(f"{head}{flag} ", choices)
                if flag.startswith("--"):
                    first = sorted(choices)[0][0]
                    some = frozenset(c for c in choices if c.startswith(first))
                    yield Case(f"{head}{flag}={first}", some)
            elif a.dest in SOCKET_DESTS:
                yield Case(f"{head}{flag} d/", frozenset({"a.sock", "sub"}), paths=True)
                if flag.startswith("--"):
                    yield Case(f"{head}{flag}=d/", frozenset({"a.sock", "sub"}), paths=True)
            elif a.dest in FILE_DESTS:
                every = frozenset({"a.sock", "plain", "sub"})
                yield Case(f"{head}{flag} d/", every, paths=True)
            else:  # free-form: a value, not an option
                yield Case(f"{head}{flag} -", frozenset(), fish=False)


def cases() -> list[Case]:
    out = [
        Case("verlctl ", frozenset(COMMANDS)),
        Case("verlctl -", _option_words(PARSER, "-")),
        Case("verlctl --", _option_words(PARSER, "--")),
        *_value_cases("verlctl ", PARSER),
    ]
    for name, sub in COMMANDS.items():
        # `-- COMMAND`: bash and fish offer `--` with the options, zsh for "-" only
        dashes = frozenset({"--"} if _takes_command(sub) else ())
        long_opts = _option_words(sub, "--")
        out += [
            Case(f"verlctl {name} -", _option_words(sub, "-"), optional=dashes),
            Case(f"verlctl {name} --", long_opts, optional=dashes),
            Case(f"verlctl --json {name} --", long_opts, optional=dashes),
            Case(f"verlctl -s x.sock {name} --", long_opts, optional=dashes),
            *_value_cases(f"verlctl {name} ", sub),
        ]
        if _takes_command(sub):
            out += [
                # zsh offers the options too
                Case(f"verlctl {name} ", dashes, optional=_option_words(sub, "-")),
                Case(f"verlctl {name} -- {FLASHER[:-4]}", frozenset({FLASHER})),
                Case(f"verlctl --json {name} -- {FLASHER} d/p", frozenset({"plain"}), paths=True),
                Case(f"verlctl {name} -- {FLASHER} --", frozenset()),
            ]
    return out


CASES = cases()


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A working directory: d/ with a socket, a plain file and a directory; bin/FLASHER."""
    root = tmp_path_factory.mktemp("completion")
    (root / "d/sub").mkdir(parents=True)
    (root / "d/plain").write_text("")
    flasher = root / "bin" / FLASHER
    flasher.parent.mkdir()
    flasher.write_text("#!/bin/sh\n")
    flasher.chmod(0o755)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(root / "d/a.sock"))
        assert stat.S_ISSOCK((root / "d/a.sock").stat().st_mode)
        yield root


def _env(tree: Path) -> dict[str, str]:
    return {
        "PATH": f"{tree / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tree),
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
    }


def _normalized(case: Case, offered: list[str]) -> set[str]:
    words = {w for w in offered if w}
    if case.paths:
        return {os.path.basename(w.rstrip("/")) for w in words}
    return words


def _matches(case: Case, got: set[str]) -> bool:
    return case.expect <= got <= case.expect | case.optional


def _mismatches(results: dict[Case, set[str]]) -> list[str]:
    return [
        f"{c.line!r}: offered {sorted(got)}, the parser takes {sorted(c.expect)}"
        + (f" (and maybe {sorted(c.optional)})" if c.optional else "")
        for c, got in results.items()
        if not _matches(c, got)
    ]


# --- bash -----------------------------------------------------------------------------
def _readline_words(line: str) -> list[str]:
    """COMP_WORDS as readline splits `line` (at blanks; `=` a word of its own)."""
    words: list[str] = []
    for token in [*line.split(), *([""] if line.endswith(" ") else [])]:
        words += [w for w in re.split("(=)", token) if w] or [""]
    return words


BASH_SIMULATE = """
if [ "$WITH_BASH_COMPLETION" = 1 ]; then
    source /usr/share/bash-completion/bash_completion
    declare -F _init_completion >/dev/null || exit 3
fi
source "$SCRIPT"
declare -F _init_completion >/dev/null && [ "$WITH_BASH_COMPLETION" != 1 ] && exit 4
COMP_WORDS=("$@")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_POINT=${#COMP_LINE}
_verlctl verlctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
for w in "${COMPREPLY[@]}"; do printf '%s\\0' "$w"; done
"""


def bash_complete(tree: Path, line: str, *, bash_completion: bool) -> list[str]:
    """COMPREPLY after `_verlctl` for `line`, as bash would call it on Tab."""
    env = _env(tree) | {
        "SCRIPT": str(BASH_SCRIPT),
        "COMP_LINE": line,
        "WITH_BASH_COMPLETION": "1" if bash_completion else "0",
    }
    words = _readline_words(line)
    run = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", BASH_SIMULATE, "bash", *words],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, f"{line!r}: exit {run.returncode}: {run.stderr}"
    return run.stdout.split("\0")


@pytest.fixture(params=[False, True], ids=["plain-bash", "bash-completion"])
def bash_completion(request: pytest.FixtureRequest) -> bool:
    with_it = bool(request.param)
    if with_it:
        _required(
            BASH_COMPLETION.is_file(), f"bash-completion is not installed ({BASH_COMPLETION})"
        )
    return with_it


def test_bash_script_registers_the_completion() -> None:
    """Sourcing the script registers `_verlctl` for verlctl."""
    run = subprocess.run(
        [
            "bash",
            "--norc",
            "--noprofile",
            "-c",
            "source completion/verlctl.bash; complete -p verlctl",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "complete -F _verlctl verlctl"
    assert run.stderr == ""


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bash_completes_what_the_parser_takes(
    tree: Path, bash_completion: bool, case: Case
) -> None:
    """bash completes every command, option and option value the parser takes, and `inhibit --`."""
    # Commands, each command's options (global ones before and after the command), option values
    # (choices, sockets, files; nothing for free-form ones), and `inhibit --`.
    got = _normalized(case, bash_complete(tree, case.line, bash_completion=bash_completion))
    assert not _mismatches({case: got})


def test_bash_socket_completion_leaves_out_other_files(tree: Path, bash_completion: bool) -> None:
    """--socket offers sockets and directories, --config every file, by full path."""
    socket_words = bash_complete(tree, "verlctl --socket d/", bash_completion=bash_completion)
    assert set(socket_words) - {""} == {"d/a.sock", "d/sub"}
    config_words = bash_complete(tree, "verlctl --config d/", bash_completion=bash_completion)
    assert set(config_words) - {""} == {"d/a.sock", "d/plain", "d/sub"}


# --- zsh ------------------------------------------------------------------------------
#: zsh ZSH_CAPTURE FPATH_DIR OUTDIR LINE...: presses Tab after each LINE in an interactive
#: zsh on a pty and writes what completion offers to OUTDIR/N, one word a line (compadd
#: wrapped: a call with -O/-A/-D only computes, so passes through). comppostfuncs
#: run once: _capdone, set again before each Tab, marks the end.
ZSH_CAPTURE = r"""
zmodload zsh/zpty zsh/zselect
local fdir=$1 out=$2 junk
shift 2
zpty z 'zsh -f -i'
zpty -w z "PS1=''; unsetopt autolist listambiguous beep; bindkey -e; bindkey '^I' complete-word"
zpty -w z "fpath=(${(q)fdir} \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z 'compadd() {
  if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi
  local -a hits; builtin compadd -A hits "$@"; (( $#hits )) && print -rl -- $hits >> $CAPOUT
  builtin compadd "$@"
}'
zpty -w z '_capdone() { print -r -- "<<done>>" >> $CAPOUT }'
await() {  # until file $1 has line $2 (10 s)
  repeat 400; do
    [[ -e $1 ]] && grep -qxF -- $2 $1 && return 0
    while zpty -rt z junk 2>/dev/null; do :; done
    zselect -t 2
  done
  print -r -- "zsh capture: timed out on $1" >&2; exit 2
}
integer n=0
for line; do
  (( n++ ))
  zpty -w z "CAPOUT=${(q)out}/$n; comppostfuncs=(_capdone); print ready > \$CAPOUT.ready"
  await $out/$n.ready ready
  zpty -w -n z "$line"$'\t'
  await $out/$n '<<done>>'
  zpty -w -n z $'\C-u'
done
zpty -d z
"""


@pytest.fixture(scope="module")
def zsh() -> str:
    path = shutil.which("zsh")
    _required(path is not None, "zsh is not installed")
    assert path is not None
    return path


def test_zsh_script_loads_and_registers(zsh: str, tmp_path: Path) -> None:
    """`source completion/_verlctl` after compinit: no error, verlctl completed by _verlctl."""
    run = subprocess.run(
        [
            zsh,
            "-c",
            "autoload -U compinit; compinit -u; source completion/_verlctl; "
            "print -r -- $_comps[verlctl]",
        ],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert run.stdout.strip() == "_verlctl"


def test_zsh_script_describes_every_command_with_its_help() -> None:
    """Each command is listed as `NAME:HELP`, the help the parser gives (`verlctl -h`)."""
    text = ZSH_SCRIPT.read_text()
    assert text.startswith("#compdef verlctl\n")
    block = re.search(r"^  commands=\(\n(.*?)^  \)", text, re.MULTILINE | re.DOTALL)
    assert block, "no commands=( ... ) in _verlctl_commands"
    listed = re.findall(r"^\s+['\"](\w+):", block[1], re.MULTILINE)
    assert sorted(listed) == sorted(COMMANDS)
    for name, help_text in HELP.items():
        assert f"{name}:{help_text}" in text, name


def test_zsh_completes_what_the_parser_takes(zsh: str, tree: Path, tmp_path: Path) -> None:
    """The bash cases, completed by zsh from $fpath (as installed) on Tab."""
    fdir = tmp_path / "fpath"
    fdir.mkdir()
    shutil.copy(ZSH_SCRIPT, fdir / "_verlctl")
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run(
        [zsh, "-f", "-c", ZSH_CAPTURE, "zsh", str(fdir), str(out), *(c.line for c in CASES)],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    results = {}
    for n, case in enumerate(CASES, 1):
        lines = (out / str(n)).read_text().splitlines()
        assert lines[-1] == "<<done>>"
        results[case] = _normalized(case, lines[:-1])
    assert not _mismatches(results), "\n".join(_mismatches(results))


# --- fish -----------------------------------------------------------------------------
FISH_CAPTURE = """
source $argv[1]
for line in $argv[2..-1]
    complete -C $line
    echo '<<done>>'
end
"""


def fish_complete(tree: Path, lines: list[str]) -> list[list[str]]:
    """`complete -C LINE` for each line: the candidates, `WORD<TAB>DESCRIPTION` each."""
    fish = shutil.which("fish")
    if fish is None:
        pytest.skip("fish is not installed")
    run = subprocess.run(
        [fish, "--no-config", "-c", FISH_CAPTURE, str(FISH_SCRIPT), *lines],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    blocks = run.stdout.split("<<done>>\n")
    assert blocks[-1] == ""
    return [b.splitlines() for b in blocks[:-1]]


def test_fish_completes_what_the_parser_takes(tree: Path) -> None:
    """The bash cases (but free-form values: fish offers options after any `-`)."""
    chosen = [c for c in CASES if c.fish]
    results = {}
    for case, offered in zip(chosen, fish_complete(tree, [c.line for c in chosen]), strict=True):
        words = [w.split("\t", 1)[0] for w in offered]
        if "=" in case.line.split()[-1]:  # --opt=VALUE: fish offers the whole word
            words = [w.split("=", 1)[1] for w in words]
        results[case] = _normalized(case, words)
    assert not _mismatches(results), "\n".join(_mismatches(results))


def test_fish_describes_every_command_with_its_help(tree: Path) -> None:
    """`verlctl <TAB>` in fish lists each command with the parser's help."""
    (offered,) = fish_complete(tree, ["verlctl "])
    assert dict(w.split("\t", 1) for w in offered) == HELP


# --- make install ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make install PREFIX=/usr DESTDIR=...` (a distribution's layout)."""
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    destdir = tmp_path_factory.mktemp("destdir")
    run = subprocess.run(
        ["make", "-s", "install", f"DESTDIR={destdir}", "PREFIX=/usr", f"PYTHON={sys.executable}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=110,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return destdir


@pytest.mark.parametrize(
    ("script", "where"),
    [
        (BASH_SCRIPT, "usr/share/bash-completion/completions/verlctl"),
        (ZSH_SCRIPT, "usr/share/zsh/vendor-completions/_verlctl"),
        (FISH_SCRIPT, "usr/share/fish/vendor_completions.d/verlctl.fish"),
    ],
    ids=["bash", "zsh", "fish"],
)
def test_make_install_installs_the_scripts(installed: Path, script: Path, where: str) -> None:
    """Each script, unchanged, mode 0644, where its shell's packages put theirs."""
    path = installed / where
    assert path.read_bytes() == script.read_bytes()
    assert path.stat().st_mode & 0o777 == 0o644


def test_bash_completion_loads_the_installed_script(installed: Path) -> None:
    """bash-completion's on-demand loader finds the installed script through XDG_DATA_DIRS."""
    # Its -D function finds it as it finds /usr/share/bash-completion/completions/*.
    _required(BASH_COMPLETION.is_file(), f"bash-completion is not installed ({BASH_COMPLETION})")
    script = (
        f"source {BASH_COMPLETION}; loader=$(complete -p -D); loader=${{loader#*-F }}; "
        "${loader%% *} verlctl; complete -p verlctl"
    )
    run = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        env=_env(installed) | {"XDG_DATA_DIRS": str(installed / "usr/share")},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.stdout.strip() == "complete -F _verlctl verlctl", run.stderr


def test_zsh_finds_the_installed_script(zsh: str, installed: Path) -> None:
    """zsh's compinit registers _verlctl for verlctl from its own $fpath under DESTDIR."""
    # zsh's own $fpath is Debian's zsh's /usr/share/zsh/vendor-completions.
    where = "/usr/share/zsh/vendor-completions"
    fpath = subprocess.run(
        [zsh, "-f", "-c", "print -rl -- $fpath"], capture_output=True, text=True, check=True
    ).stdout.split()
    if where not in fpath:
        pytest.skip(f"this zsh does not read {where} (not Debian's): ZSH_COMPLETIONS=... there")
    script = (
        f"fpath=({installed}{where} $fpath); autoload -U compinit; compinit -u -D; "
        "print -r -- $_comps[verlctl]"
    )
    run = subprocess.run(
        [zsh, "-f", "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert run.stdout.strip() == "_verlctl", run.stderr


def test_fish_finds_the_installed_script(installed: Path) -> None:
    """fish loads the installed completion from vendor_completions.d on first use of verlctl."""
    # vendor_completions.d under XDG_DATA_DIRS; the installed verlctl, since fish completes
    # commands it finds on PATH.
    fish = shutil.which("fish")
    if fish is None:
        pytest.skip("fish is not installed")
    env = _env(installed) | {"XDG_DATA_DIRS": str(installed / "usr/share")}
    env["PATH"] = f"{installed / 'usr/bin'}:{env['PATH']}"
    run = subprocess.run(
        [fish, "-c", "complete -C 'verlctl '"],
        cwd=installed,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert {line.split("\t", 1)[0] for line in run.stdout.splitlines()} == set(COMMANDS)
