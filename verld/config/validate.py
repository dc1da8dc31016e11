"""Validation machinery: values with their YAML marks, error collection, building sections.

Strategy: the loader hands over `MarkedMap`/`MarkedSeq` containers that still know
the YAML nodes they came from. Validation walks them as `Item`s (a value, its dotted
key path and its line), so any checker can say where a problem is and quote what was
literally written. A checker signals one bad value by raising `BadValue`; whoever
walks the tree catches it, records it on the shared `Context` and carries on, so one
run reports every problem rather than the first. `Section` ties a dataclass to the
checker for each of its keys, and `build` walks one mapping against it.

This module knows nothing about particular keys: the leaf checkers live in
`leaves`, the section tables in `sections`, and the wording for unknown keys in
`suggest`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from verld.config.suggest import unknown_key
from verld.errors import ConfigError, VerldError


class MarkedMap(dict[Any, Any]):
    """A YAML mapping that remembers its nodes, and the keys it saw twice."""

    def __init__(self) -> None:
        super().__init__()
        self.key_nodes: dict[Any, yaml.Node] = {}
        self.value_nodes: dict[Any, yaml.Node] = {}
        self.duplicates: list[tuple[Any, int, int]] = []  # key, first line, repeated line


class MarkedSeq(list[Any]):
    """A YAML sequence that remembers its item nodes."""

    def __init__(self, node: yaml.SequenceNode) -> None:
        super().__init__()
        self.nodes: list[yaml.Node] = list(node.value)


class BadValue(VerldError):
    """One value is wrong; the message says what was expected and what was given."""


class Context:
    """Collects errors, and where each key path was seen (for cross-field checks)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[tuple[int, str]] = []
        self.lines: dict[str, int] = {}
        self.bad: set[str] = set()

    def error(self, item: Item, message: str) -> None:
        self.errors.append((item.line, f"{item.path}: {message}" if item.path else message))
        self.bad.add(item.path)

    def error_at(self, paths: tuple[str, ...], message: str) -> None:
        line = next((self.lines[p] for p in paths if p in self.lines), 0)
        self.errors.append((line, f"{paths[0]}: {message}"))

    def ok(self, *paths: str) -> bool:
        return not any(p in self.bad for p in paths)

    def raise_if_any(self) -> None:
        if self.errors:
            ordered = sorted(self.errors, key=lambda e: e[0])  # stable: file order per line
            raise ConfigError("\n".join(self._where(n) + m for n, m in ordered))

    def _where(self, line: int) -> str:
        return f"{self.source}:{line}: " if line else f"{self.source}: "


@dataclass(frozen=True, slots=True)
class Item:
    """A value at a key path, with the YAML nodes it came from."""

    ctx: Context
    path: str
    value: Any
    node: yaml.Node | None
    line: int

    @property
    def raw(self) -> str | None:
        """What was literally written, for scalars."""
        return self.node.value if isinstance(self.node, yaml.ScalarNode) else None

    @property
    def plain(self) -> bool:
        """True for an unquoted scalar (the kind YAML turns into numbers and booleans)."""
        return isinstance(self.node, yaml.ScalarNode) and self.node.style is None

    def children(self) -> Iterator[tuple[Any, Item]]:
        """(key, item) for each entry of a mapping (null counts as empty); reports duplicates."""
        if self.value is None:
            return
        if not isinstance(self.value, MarkedMap):
            raise BadValue(f"expected a mapping of keys, got {given(self)}")
        data = self.value
        for key, first, line in data.duplicates:
            dup = replace(self._child(data, key), line=line)
            self.ctx.error(dup, f"duplicate key (first on line {first})")
        for key in data:
            child = self._child(data, key)
            self.ctx.lines.setdefault(child.path, child.line)
            yield key, child

    def _child(self, data: MarkedMap, key: Any) -> Item:
        key_node = data.key_nodes[key]
        # the key as written: YAML may have turned it into a number or boolean
        name = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key)
        name = name or "''"
        path = f"{self.path}.{name}" if self.path else name
        line = key_node.start_mark.line + 1
        return Item(self.ctx, path, data[key], data.value_nodes[key], line)

    def items(self) -> Iterator[Item]:
        """The items of a list (null counts as empty)."""
        if self.value is None:
            return
        if not isinstance(self.value, MarkedSeq):
            raise BadValue(f"expected a list, got {given(self)}")
        for i, (value, node) in enumerate(zip(self.value, self.value.nodes, strict=True)):
            yield Item(self.ctx, f"{self.path}[{i}]", value, node, node.start_mark.line + 1)


def given(item: Item) -> str:
    """How a value reads in a message, with what YAML made of it where that surprises."""
    value, raw = item.value, item.raw
    if value is None:
        return "null" if raw else "an empty value"
    if isinstance(value, bool):
        word = str(value).lower()
        return f"{raw} (YAML reads it as {word})" if raw and raw != word else word
    if isinstance(value, int | float):
        return f"{raw} (YAML reads it as {value})" if raw and raw != str(value) else str(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, MarkedMap):
        return "a mapping"
    if isinstance(value, MarkedSeq):
        return "a list"
    return f"{raw} (a {type(value).__name__})"


def expected(item: Item, expect: str) -> BadValue:
    """The usual complaint: what was wanted, what was given (to raise)."""
    hint = ""
    if isinstance(item.value, str) and is_number(item.value):
        hint = " (a quoted string: remove the quotes)"
    return BadValue(f"expected {expect}, got {given(item)}{hint}")


def is_number(text: str) -> bool:
    """True when `float()` accepts `text`: a quoted number is then worth pointing out."""
    try:
        float(text)
    except ValueError:
        return False
    return True


#: a checker: the validated value of one item, or BadValue
Check = Callable[[Item], Any]


@dataclass(frozen=True, slots=True)
class Section:
    """A mapping of known keys, built into `cls`; `unknown` words the message for a key
    that is none of them (given the key and the valid names)."""

    cls: Callable[..., Any]
    keys: Mapping[str, Check | Section]
    unknown: Callable[[Any, Collection[str]], str] = unknown_key


def entries(
    item: Item, section: Section, *, noun: str, key: str, example: str, needs: str
) -> Iterator[tuple[Item, Any]]:
    """Each entry of a list of `section` mappings (`- KEY: EXAMPLE`), built, with its
    required `key` set (`needs` says so when it is not). A mapping in place of the list,
    a bare string in place of an entry and a bad entry are reported (the mapping raises)."""
    if isinstance(item.value, dict):
        raise BadValue(
            f"expected a list of {noun}s (- {key}: {example}), got a mapping; "
            "put a '- ' before the entry"
        )
    for child in item.items():
        if isinstance(child.value, str):
            item.ctx.error(
                child, f"expected a {noun} entry, got {child.value!r}; write - {key}: {child.value}"
            )
            continue
        try:
            entry = build(child, section)
        except BadValue as exc:
            item.ctx.error(child, str(exc))
            continue
        if not getattr(entry, key):
            if f"{child.path}.{key}" not in item.ctx.bad:
                item.ctx.error(child, needs)
            continue
        yield child, entry


def build(item: Item, section: Section) -> Any:
    """`section.cls` from the keys that check out; every bad or unknown key is reported."""
    kwargs: dict[str, Any] = {}
    for key, child in item.children():
        check = section.keys.get(key) if isinstance(key, str) else None
        if check is None:
            item.ctx.error(child, section.unknown(key, section.keys))
            continue
        try:
            kwargs[key] = build(child, check) if isinstance(check, Section) else check(child)
        except BadValue as exc:
            item.ctx.error(child, str(exc))
    return section.cls(**kwargs)
