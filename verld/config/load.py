"""Loading: YAML read with line numbers kept and duplicate keys reported, then validated."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import yaml
from yaml.constructor import ConstructorError

from verld.config.model import Config
from verld.config.schema import cross_check, root_config
from verld.config.validate import Context, Item, MarkedMap, MarkedSeq
from verld.errors import ConfigError

T = TypeVar("T")

# ---------------------------------------------------------------------------
# Loading: YAML with line numbers and duplicate keys kept


class _Loader(yaml.SafeLoader):
    """SafeLoader building `MarkedMap`/`MarkedSeq` so validation can point at lines."""

    def fill_map(self, data: MarkedMap, node: yaml.MappingNode) -> None:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self._key(node, key_node)
            line = key_node.start_mark.line + 1
            if key in first:
                data.duplicates.append((key, first[key], line))
            first.setdefault(key, line)
        self.flatten_mapping(node)  # `<<: *anchor` merges; explicit keys override
        for key_node, value_node in node.value:
            key = self._key(node, key_node)
            data[key] = self.construct_object(value_node, deep=False)
            data.key_nodes[key] = key_node
            data.value_nodes[key] = value_node

    def _key(self, node: yaml.Node, key_node: yaml.Node) -> Any:
        key = self.construct_object(key_node, deep=True)
        if isinstance(key, list | dict):
            where = node.start_mark
            raise ConstructorError(
                "while reading a mapping", where, "found an unhashable key", key_node.start_mark
            )
        return key


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> Iterator[MarkedMap]:
    data = MarkedMap()
    yield data
    loader.fill_map(data, node)


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> Iterator[MarkedSeq]:
    data = MarkedSeq(node)
    yield data
    data.extend(loader.construct_object(child, deep=False) for child in node.value)


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def check_file(program: str, path: str, load: Callable[[str], object]) -> int:
    """`PROGRAM --check-config PATH`: "PATH: ok" and 0, or every error on stderr and 2."""
    try:
        load(path)
    except ConfigError as exc:
        print(f"{program}: invalid config:\n{exc}", file=sys.stderr)
        return 2
    print(f"{path}: ok")
    return 0


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file; ConfigError says everything that is wrong."""
    source = os.fspath(path)
    return parse_config(read_text(source), source)


def parse_config(text: str, source: str = "<string>") -> Config:
    """Validate config text; `source` names it in messages and in `Config.source`."""

    def root(item: Item) -> Config:
        config = root_config(item)
        cross_check(config, item.ctx)
        return config

    return replace(parse_with(text, source, root), source=source)


def read_text(source: str) -> str:
    """A config file's text; ConfigError when it cannot be read or is not UTF-8."""
    try:
        with open(source, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text (bad byte at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the config: {exc.strerror or exc}") from None


def parse_with(text: str, source: str, root: Callable[[Item], T]) -> T:
    """Another program's config through the same machinery: the marked YAML tree is
    handed to `root` as an `Item`; every error `root` records on `item.ctx` is raised
    together as one ConfigError (`file:line: key.path: message` per line)."""
    try:
        tree = yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader: no object tags
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error(source, exc)) from None
    except RecursionError:
        raise ConfigError(f"{source}: YAML error: nested too deeply") from None
    ctx = Context(source)
    result = root(Item(ctx, "", tree, None, 1))
    ctx.raise_if_any()
    return result


def _yaml_error(source: str, exc: yaml.YAMLError) -> str:
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return f"{source}: YAML error: {exc}"
    mark = exc.problem_mark
    problem = exc.problem or "error"
    if "'\\t'" in problem:
        problem += " (YAML indents with spaces, not tabs)"
    if exc.context and exc.context_mark and exc.context_mark.line != mark.line:
        problem += f" ({exc.context} on line {exc.context_mark.line + 1})"
    kind = "YAML error" if isinstance(exc, ConstructorError) else "YAML syntax error"
    return f"{source}:{mark.line + 1}: {kind} (column {mark.column + 1}): {problem}"
