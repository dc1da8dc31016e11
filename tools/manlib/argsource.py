"""argparse parsers as man page parts: SYNOPSIS items, OPTIONS, verlctl's COMMANDS.

The parser objects themselves are read (their `_actions`, argument groups,
mutually exclusive groups and subparsers), never their formatted `--help`, so the
pages do not change with the Python version's help layout. An option is written as
`-c, --config FILE` (short flags first), its help text as a sentence, and its
default when the help does not already give one.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator

from manlib import roff

#: argparse's own titles of its two default groups (3.10+ says "options")
_DEFAULT_GROUPS = ("options", "optional arguments", "positional arguments")
_OPTION_WORD = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def flags(action: argparse.Action) -> list[str]:
    """The option strings, short ones first (stable otherwise)."""
    return sorted(action.option_strings, key=lambda s: s.startswith("--"))


def metavar(action: argparse.Action) -> str:
    """The argument's name as argparse would show it, in roff (choices in bold)."""
    if action.metavar is not None:
        name = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
        return roff.italic(name)
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return "{" + ",".join(roff.bold(str(c)) for c in action.choices) + "}"
    return roff.italic(action.dest.upper() if action.option_strings else action.dest)


class _RoffFormatter(argparse.HelpFormatter):
    """argparse's own layout of an argument by its nargs (`[X ...]`, `X [X ...]`), with
    the name in roff (`metavar`)."""

    def _metavar_formatter(
        self, action: argparse.Action, default_metavar: str
    ) -> Callable[[int], tuple[str, ...]]:
        name = metavar(action)
        return lambda size: (name,) * size


def arguments(action: argparse.Action) -> str:
    """What follows the flag (or stands alone, for a positional) by its nargs, as --help
    shows it."""
    return _RoffFormatter("")._format_args(action, "")


def invocation(action: argparse.Action) -> str:
    """A tagged paragraph's tag: `\\fB-c\\fR, \\fB--config\\fR \\fIFILE\\fR`."""
    args = arguments(action)
    if not action.option_strings:
        return args
    names = ", ".join(roff.bold(f) for f in flags(action))
    return f"{names} {args}" if args else names


def _default(action: argparse.Action) -> str:
    """ "Default: X." when the option takes a value, has a showable default and the
    help does not say it already."""
    value = action.default
    if (
        action.nargs == 0
        or value is None
        or value is argparse.SUPPRESS
        or isinstance(value, (bool, bytes, tuple, list))
        or "default" in (action.help or "").lower()
    ):
        return ""
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"Default: {roff.bold(shown)}."


def help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help as a roff sentence (its `%(default)s` fields filled in by the parser's
    own formatter, as --help fills them): options in it in bold, the option's own
    argument name in italics, then its default."""
    text = parser._get_formatter()._expand_help(action).strip() if action.help else ""
    if text and text[0].islower() and not text.startswith("verl"):
        text = text[0].upper() + text[1:]
    if text and not text.endswith("."):
        text += "."
    own = set(metavar_words(action))
    out = []
    for piece in re.split(r"(\s+)", text):
        core = piece.strip("(),.;:")
        if piece and _OPTION_WORD.fullmatch(core):
            left, _, right = piece.partition(core)
            out.append(roff.escape(left) + roff.bold(core) + roff.escape(right))
        elif core and core in own:
            left, _, right = piece.partition(core)
            out.append(roff.escape(left) + roff.italic(core) + roff.escape(right))
        else:
            out.append(roff.escape(piece))
    body = "".join(out)
    default = _default(action)
    return f"{body} {default}".strip()


def metavar_words(action: argparse.Action) -> list[str]:
    if isinstance(action.metavar, str):
        return [w for w in re.split(r"[\s=]+", action.metavar) if w.isupper()]
    if action.option_strings and action.nargs != 0 and action.choices is None:
        return [action.dest.upper()]
    return []


def synopsis(parser: argparse.ArgumentParser, skip: Callable[[argparse.Action], bool]) -> list[str]:
    """The usage as roff lines, one bracketed item a line (an item's flag and
    argument joined by an unbreakable space); mutually exclusive groups as
    `[a | b]`, or `(a | b)` when one is required."""
    group_of = {id(a): g for g in parser._mutually_exclusive_groups for a in g._group_actions}
    done: set[int] = set()
    items = []
    for action in parser._actions:
        if action.help is argparse.SUPPRESS or skip(action):
            continue
        group = group_of.get(id(action))
        if group is None:
            items.append(_usage_item(action, bracket=not action.required))
            continue
        if id(group) in done:
            continue
        done.add(id(group))
        parts = [
            _usage_item(a, bracket=False)
            for a in group._group_actions
            if a.help is not argparse.SUPPRESS and not skip(a)
        ]
        items.append(("({})" if group.required else "[{}]").format(" | ".join(parts)))
    return items


def form(parser: argparse.ArgumentParser, names: list[str], required: set[str]) -> list[str]:
    """One way to run the program, as SYNOPSIS items: the arguments named (an option
    by a flag, a positional by its metavar), in that order; those in `required`
    without brackets. A name the parser does not have stops the build."""
    items = []
    for name in names:
        action = next((a for a in parser._actions if _named(a, name)), None)
        if action is None:
            raise ValueError(f"{parser.prog}: no argument {name}")
        items.append(_usage_item(action, bracket=name not in required))
    return items


def _named(action: argparse.Action, name: str) -> bool:
    """`name` is one of the option's flags, or the positional's metavar (or dest)."""
    if action.option_strings:
        return name in action.option_strings
    return name == (action.metavar or action.dest)


def _usage_item(action: argparse.Action, *, bracket: bool) -> str:
    if isinstance(action, argparse._SubParsersAction):
        return f"{metavar(action)} ..."
    if not action.option_strings:
        item = roff.italic(str(action.metavar or action.dest))
        return (f"[{item}]" if bracket else item) if action.nargs == "?" else arguments(action)
    args = arguments(action)
    item = roff.bold(flags(action)[0]) + (rf"\ {args}" if args else "")
    return f"[{item}]" if bracket else item


def options(
    page: roff.Page,
    parser: argparse.ArgumentParser,
    skip: Callable[[argparse.Action], bool] = lambda _a: False,
) -> int:
    """Every option and positional, by argument group (a group of its own gets a
    subsection titled as in --help); the number written."""
    written = 0
    positional_last = sorted(parser._action_groups, key=lambda g: g.title == "positional arguments")
    for group in positional_last:
        actions = [
            a
            for a in group._group_actions
            if a.help is not argparse.SUPPRESS
            and not isinstance(a, argparse._SubParsersAction)
            and not skip(a)
        ]
        if not actions:
            continue
        if group.title and group.title not in _DEFAULT_GROUPS:
            page.ss(group.title[0].upper() + group.title[1:])
        for action in actions:
            page.tp(invocation(action), help_text(parser, action))
            written += 1
    return written


def subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order of --help."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield choice.dest, choice.help or "", action.choices[choice.dest]


def global_flags(parser: argparse.ArgumentParser) -> Callable[[argparse.Action], bool]:
    """A skip test: an option the top-level parser has too (a subcommand's copy)."""
    top = {s for a in parser._actions for s in a.option_strings}
    return lambda a: bool(a.option_strings) and set(a.option_strings) <= top


def examples(epilog: str | None) -> list[tuple[str, str]]:
    """(command, comment) pairs of an epilog's "examples:" block."""
    found: list[tuple[str, str]] = []
    inside = False
    for line in (epilog or "").splitlines():
        if line.strip() == "examples:":
            inside = True
        elif inside and line.startswith("  ") and line.strip():
            parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            found.append((parts[0], parts[1] if len(parts) > 1 else ""))
        elif inside:
            break
    return found
