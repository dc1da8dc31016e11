"""The little markdown the docs are written in: headings, paragraphs, fenced code,
bullet lists and pipe tables, read into sections of blocks, and written as roff.

Not a general markdown parser: just enough for docs/config.md, docs/verlctl.md,
docs/sim.md and the README, and strict about tables (a row whose cell count differs
from its header's is an error), since the man pages are built from them. That
strictness is why this is not markdown-it-py (its GFM tables, measured with 4.3, drop
a row's cell past the header's count and pad a short row, both silently).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from manlib import roff

_HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


class DocError(Exception):
    """The docs are not what the generator needs (a missing table, row or key)."""


@dataclass
class Block:
    """A paragraph ("para", one string), code ("code", its lines), a list ("list",
    one string per item) or a table ("table": header cells, then rows of cells)."""

    kind: str
    items: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    line: int = 0

    @property
    def text(self) -> str:
        return " ".join(self.items)


@dataclass
class Section:
    level: int
    title: str  #: as written (markdown inline markup kept)
    blocks: list[Block] = field(default_factory=list)
    line: int = 0

    def tables(self) -> list[Block]:
        return [b for b in self.blocks if b.kind == "table"]

    def all_text(self) -> str:
        """Every word of the section, code included (to check a key is mentioned)."""
        parts = [self.title]
        for b in self.blocks:
            parts += b.items
            parts += [" ".join(r) for r in b.rows]
        return "\n".join(parts)


def cells(line: str) -> list[str]:
    """A table row's cells, `\\|` turned back into `|`."""
    body = line.strip()
    body = body.removeprefix("|")
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(body)]


def parse(text: str, source: str) -> list[Section]:
    """`text` as sections; the part before the first heading is a level-0 section."""
    sections = [Section(0, "", line=1)]
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        here = sections[-1]
        heading = _HEADING.fullmatch(line)
        if line.startswith("```"):
            end = i + 1
            while end < len(lines) and not lines[end].startswith("```"):
                end += 1
            if end == len(lines):
                raise DocError(f"{source}:{i + 1}: unterminated code block")
            here.blocks.append(Block("code", lines[i + 1 : end], line=i + 1))
            i = end + 1
        elif heading:
            sections.append(Section(len(heading[1]), heading[2], line=i + 1))
            i += 1
        elif line.startswith("|"):
            start = i
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            if len(rows) < 2 or not all(set(c) <= set("-: ") for c in rows[1]):
                raise DocError(f"{source}:{start + 1}: a table needs a header and a |---| row")
            header, body = rows[0], rows[2:]
            for n, row in enumerate(body):
                if len(row) != len(header):
                    raise DocError(
                        f"{source}:{start + 3 + n}: {len(row)} cells, the header has {len(header)}"
                    )
            here.blocks.append(Block("table", header, body, line=start + 1))
        elif re.match(r"[-*] ", line):
            items: list[str] = []
            start = i
            while i < len(lines) and (
                re.match(r"[-*] ", lines[i]) or (lines[i].startswith("  ") and items)
            ):
                if re.match(r"[-*] ", lines[i]):
                    items.append(lines[i][2:].strip())
                else:
                    items[-1] += " " + lines[i].strip()
                i += 1
            here.blocks.append(Block("list", items, line=start + 1))
        elif line.strip():
            start = i
            para = []
            while (
                i < len(lines)
                and lines[i].strip()
                and not lines[i].startswith(("```", "|", "#"))
                and not re.match(r"[-*] ", lines[i])
            ):
                para.append(lines[i].strip())
                i += 1
            here.blocks.append(Block("para", [" ".join(para)], line=start + 1))
        else:
            i += 1
    return sections


def find(sections: list[Section], title_start: str, source: str) -> Section:
    """The section whose plain title starts with `title_start`."""
    for s in sections:
        if roff.plain(s.title).startswith(title_start):
            return s
    raise DocError(f"{source}: no section {title_start!r}")


def write_blocks(page: roff.Page, blocks: list[Block]) -> None:
    """Blocks as roff: paragraphs, literal blocks, bullets, tables as tagged
    paragraphs (the first cell the tag, the others the body)."""
    for b in blocks:
        if b.kind == "para":
            page.para(roff.inline(b.text))
        elif b.kind == "code":
            page.code(b.items)
        elif b.kind == "list":
            for item in b.items:
                page.bullet(roff.inline(item))
        else:
            for row in b.rows:
                page.tp(roff.inline(row[0]), roff.inline("; ".join(row[1:])))
