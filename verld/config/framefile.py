"""A `frame` declaration in a file of its own: `verld --frame FILE`, `verld-sim --frame FILE`.

The file holds the `device.frame` mapping (start, header, length, ...) at its top
level; it is checked key by key as `device.frame` is (`verld.config.frame`), and as
a whole by the codec's rules that need no other setting, each message naming the
file, the line and the key as written there. `dump_declaration` writes one back in
the same form (the daemon hands its built-in simulator the declaration that way).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from verld.codec.frame.declaration import FrameDeclaration
from verld.codec.frame.rules import problems
from verld.config.frame import frame
from verld.config.load import parse_with, read_text
from verld.config.validate import BadValue, Item

__all__ = ["dump_declaration", "load_declaration"]


def load_declaration(path: str) -> FrameDeclaration:
    """A YAML file holding a `frame` mapping (`verld --frame FILE`, `verld-sim --frame
    FILE`), checked as `device.frame` is, keys named as in the file; ConfigError saying
    everything that is wrong, with file:line. The rules that involve other settings
    (the window, the ping) are the config's, checked with it."""

    def root(item: Item) -> FrameDeclaration | None:
        try:
            declaration: FrameDeclaration | None = frame(item)
        except BadValue as exc:
            item.ctx.error(item, str(exc))
            return None
        if declaration is not None:
            for problem in problems(declaration, window=1, max_payload=1 << 20, ping=None):
                paths = tuple(p.removeprefix("device.frame.") for p in problem.paths)
                item.ctx.error_at((*paths, ""), problem.message)
        return declaration

    result = parse_with(read_text(path), path, root)
    assert result is not None  # (else an error was raised)
    return result


def dump_declaration(declaration: FrameDeclaration) -> str:
    """`declaration` as the YAML text `load_declaration` reads back."""
    return yaml.safe_dump(_plain(dataclasses.asdict(declaration)), sort_keys=False)


def _plain(value: Any) -> Any:
    """Bytes as hex strings, byte values (event values, ok) as two hex digits."""
    if isinstance(value, dict):
        return {
            key: [f"{v:02x}" for v in item] if key in ("values", "ok") else _plain(item)
            for key, item in value.items()
        }
    if isinstance(value, bytes):
        return value.hex(" ")
    if isinstance(value, tuple):
        return list(value)
    return value
