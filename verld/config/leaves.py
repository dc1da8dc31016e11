"""Leaf checkers: one value each (a number in range, a mode, a regex, a device port, ...).

Strategy: every checker takes an `Item` and returns the value to store, or raises
`BadValue` with a message that names what was expected and quotes what was given.
Several checks exist because YAML's reading of a scalar surprises people: an
unquoted `660` is the decimal number 660, `on` is true, and a backslash is only an
escape inside double quotes. Those get their own wording, saying how to write the
value instead. Factories (`integer`, `seconds`, `choice`, `ids`, `optional`) build a
checker from parameters so the section tables read as a list of rules.

Checkers that look inside a container (`actions`, `ids`) report each bad entry on
the context themselves and keep the good ones, so one bad opcode does not hide the
next.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType
from typing import Any

import yaml

from verld.config.model import host_port
from verld.config.suggest import closest
from verld.config.validate import BadValue, Check, Item, expected, given

# pyserial's serial_for_url schemes (tcp:// is verld's own TCP link)
_URL_SCHEMES = ("tcp", "rfc2217", "socket", "loop", "hwgrep", "spy", "alt", "cp2110")
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the final NUL


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # bool subclasses int


# ---------------------------------------------------------------------------
# Generic values: numbers, booleans, strings, choices


def integer(lo: int, hi: int | None = None, what: str = "an integer") -> Check:
    """An integer in lo..hi (no upper bound when `hi` is None)."""
    if hi is not None:
        expect = f"{what} {lo}..{hi}"
    else:
        expect = f"{what} > 0" if lo == 1 else f"{what} >= {lo}"

    def check(item: Item) -> int:
        v = item.value
        if not _is_int(v) or v < lo or (hi is not None and v > hi):
            raise expected(item, expect)
        return int(v)

    return check


def seconds(*, zero_ok: bool) -> Check:
    """A finite, non-negative number of seconds; 0 only when `zero_ok` (it turns a feature off)."""
    expect = "a number of seconds " + (">= 0" if zero_ok else "> 0")

    def check(item: Item) -> float:
        v = item.value
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            raise expected(item, expect)
        if v < 0 or (v == 0 and not zero_ok):
            raise expected(item, expect)
        return float(v)

    return check


def boolean(item: Item) -> bool:
    if not isinstance(item.value, bool):
        raise expected(item, "true or false")
    return item.value


def string(item: Item, expect: str = "a string") -> str:
    """A string; an unquoted scalar that YAML made a number or boolean is told to quote it."""
    v = item.value
    if isinstance(v, str):
        return v
    if item.plain and isinstance(v, bool | int | float) and item.raw:
        raise BadValue(f'expected {expect}, got {given(item)}; quote it: "{item.raw}"')
    raise expected(item, expect)


def _nonempty(item: Item, expect: str) -> str:
    text = string(item, expect)
    if not text.strip():
        raise expected(item, expect)
    if text != text.strip():
        raise BadValue(f"{text!r} has spaces around it; remove them")
    return text


def choice(options: Collection[str], case: Callable[[str], str] = str.lower) -> Check:
    """One of `options`, compared after `case`; a near miss gets a suggestion. The
    options are read at each check: a live view (the codec registry's names) stays
    live."""

    def check(item: Item) -> str:
        expect = "one of " + ", ".join(options)
        text = string(item, expect)
        if case(text) in options:
            return case(text)
        near = closest(case(text), options)
        hint = f"; did you mean '{near}'?" if near is not None else ""
        raise BadValue(f"expected {expect}, got {given(item)}{hint}")

    return check


def optional(check: Check) -> Check:
    """`check`, or None for null."""

    def optional(item: Item) -> Any:
        return None if item.value is None else check(item)

    return optional


# ---------------------------------------------------------------------------
# The device link


def port(item: Item) -> str:
    """A serial device path or URL; URLs are checked as far as can be done without opening."""
    text = _nonempty(item, "a serial device path, tcp://HOST:PORT, a pyserial URL or sim")
    scheme, sep, rest = text.partition("://")
    if sep:
        _check_url(text, scheme, rest)
    return text


def _check_url(url: str, scheme: str, rest: str) -> None:
    if scheme == "tcp":
        try:
            host_port(rest)
        except ValueError as exc:
            raise BadValue(f"expected tcp://HOST:PORT, got {url!r}: {exc}") from None
    elif scheme not in _URL_SCHEMES:
        near = closest(scheme, _URL_SCHEMES)
        hint = f"; did you mean '{near}://'?" if near is not None else ""
        raise BadValue(f"unknown URL scheme '{scheme}://' (known: {', '.join(_URL_SCHEMES)}){hint}")


def stopbits(item: Item) -> float:
    v = item.value
    if isinstance(v, bool) or v not in (1, 1.5, 2):
        raise expected(item, "1, 1.5 or 2")
    return 1.5 if v == 1.5 else int(v)


def actions(item: Item) -> Mapping[str, int]:
    """Action name → opcode; each bad entry is reported and skipped."""
    opcode = integer(0, 255, "an opcode")
    table: dict[str, int] = {}
    for name, child in item.children():
        if not isinstance(name, str) or not name.strip():
            item.ctx.error(child, f"action names must be non-empty strings, got {name!r}")
            continue
        try:
            table[name] = opcode(child)
        except BadValue as exc:
            item.ctx.error(child, str(exc))
    return MappingProxyType(table)


# ---------------------------------------------------------------------------
# Text lines (codec line)


def terminator(item: Item) -> str:
    text = string(item, "a non-empty string")
    if not text:
        raise expected(item, "a non-empty string")
    style = item.node.style if isinstance(item.node, yaml.ScalarNode) else None
    # '\r\n' or \r\n is four characters; the user almost always meant the two control bytes
    if "\\" in text and style != '"':
        raise BadValue(f'{text} outside double quotes is a literal backslash; write "{text}"')
    return text


def encoding(item: Item) -> str:
    name = _nonempty(item, "a text encoding such as utf-8 or ascii")
    try:
        "".encode(name)
    except LookupError as exc:
        raise BadValue(
            f"expected a text encoding such as utf-8 or ascii, got {name!r}: {exc}"
        ) from None
    return name


def regex(item: Item) -> str:
    pattern = string(item, "a regular expression (a string)")
    if not pattern:
        raise BadValue("an empty pattern matches every line; use null to leave it unset")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise BadValue(f"{pattern!r} is not a valid regular expression: {exc}") from None
    return pattern


# ---------------------------------------------------------------------------
# The API socket, roles and metrics


def mode(item: Item) -> int:
    """A permission mode: octal digits in a string ("0660", "0o660"), or an integer."""
    v, expect = item.value, 'a file mode such as "0660"'
    if isinstance(v, str):
        digits = v.strip().lower().removeprefix("0o")
        if not digits or any(c not in "01234567" for c in digits):
            raise BadValue(f"expected {expect} (octal digits), got {v!r}")
        bits = int(digits, 8)
    elif _is_int(v):
        bits = v
    else:
        raise expected(item, expect)
    if not 0 <= bits <= 0o777:
        raise BadValue(f"expected {expect} (at most 0o777), got {_mode_given(item, bits)}")
    return bits


def _mode_given(item: Item, bits: int) -> str:
    """An unquoted 660 is the decimal number 660: say so, and how to write it."""
    raw = item.raw or str(item.value)
    if bits < 0:
        return raw
    decimal = _is_int(item.value) and item.plain and raw.isdigit() and not raw.startswith("0")
    if not decimal:
        return raw if raw.lower() == f"0o{bits:o}" else f"{raw} (0o{bits:o})"
    octal = set(raw) <= set("01234567") and int(raw, 8) <= 0o777
    fix = f'; quote it: mode: "0{raw}"' if octal else ""
    return f"{raw}, which YAML reads as the decimal number {bits} (0o{bits:o}){fix}"


def group(item: Item) -> str | int | None:
    v = item.value
    if v is None or (_is_int(v) and v >= 0):
        return v  # type: ignore[no-any-return]
    if isinstance(v, str) and v.strip():
        return v
    raise expected(item, "a group name, a gid (an integer >= 0) or null")


def socket_path(item: Item) -> str:
    path = _nonempty(item, "a socket path")
    if "\0" in path:
        raise BadValue("a socket path cannot contain a NUL byte")
    # said here, with a line number, instead of bind()'s "AF_UNIX path too long" at start-up
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        raise BadValue(
            f"Unix socket paths are limited to {_SUN_PATH_MAX} bytes; this one is longer"
        )
    return path


def link_path(item: Item) -> str:
    """An absolute path for a virtual port's symlink (its directory is checked at start)."""
    path = _nonempty(item, "an absolute path such as /run/verld/ttyV0")
    if "\0" in path:
        raise BadValue("a path cannot contain a NUL byte")
    if not path.startswith("/"):
        raise BadValue(
            f"expected an absolute path such as /run/verld/ttyV0, got {path!r} "
            "(programs open it from anywhere)"
        )
    if path.endswith("/"):
        raise BadValue(
            f"{path!r} names a directory; give the link's own name, e.g. /run/verld/ttyV0"
        )
    return os.path.normpath(path)


def ids(kind: str) -> Check:
    """A list of numeric uids or gids (`kind`); names are refused, not looked up."""

    def check(item: Item) -> tuple[int, ...]:
        if _is_int(item.value) or isinstance(item.value, str):
            raise BadValue(f"expected a list of {kind}s like [1000], got {given(item)}")
        found: list[int] = []
        for child in item.items():
            if _is_int(child.value) and child.value >= 0:
                found.append(child.value)
            else:
                item.ctx.error(child, _bad_id(child, kind))
        return tuple(found)

    return check


def _bad_id(child: Item, kind: str) -> str:
    if isinstance(child.value, str):
        tool = "id -u" if kind == "uid" else "getent group"
        return (
            f"expected a numeric {kind}, got {child.value!r}; "
            f"names are not looked up (find the number with {tool})"
        )
    return str(expected(child, f"a {kind} (an integer >= 0)"))


def listener(example: str) -> Check:
    """A "HOST:PORT" to listen on; `example` is shown in the messages."""

    def listen(item: Item) -> str:
        v = item.value
        if isinstance(v, int) and not isinstance(v, bool):  # a port alone: say where the host goes
            raise BadValue(
                f'expected HOST:PORT such as "{example}", got the number {v}; '
                f'write the host too: "127.0.0.1:{v}"'
            )
        text = string(item, f'HOST:PORT such as "{example}"')
        try:
            host_port(text)
        except ValueError as exc:
            raise BadValue(f'expected HOST:PORT such as "{example}", got {text!r}: {exc}') from None
        return text

    return listen


listen = listener("127.0.0.1:9108")


def host(item: Item) -> str:
    name = _nonempty(item, "a host name or address")
    if any(c.isspace() for c in name) or "/" in name:
        raise expected(item, "a host name or address")
    return name
