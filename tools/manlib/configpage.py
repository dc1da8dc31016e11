"""verld.yaml(5): the config schema walked key by key, each key's type and meaning
from docs/config.md's tables, its default from the model's dataclasses.

Which keys exist comes from `verld.config.sections` (the tables the loader checks
files against); a key's default from the dataclass instances of
`verld.config.model`; its type and meaning from the row of docs/config.md's table
under the heading naming its section (`## \\`device\\``, `### \\`device.line\\``). A
schema key without a row, a row or section heading for a key the schema does not
have, or a default in the docs that is not the model's, stops the generation: the
docs and the page cannot drift from the code. A section documented in prose only
(`api.roles`) must name each of its keys in that prose.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from manlib import markdown as md
from manlib import roff
from verld.config.model import MODBUS_CODECS, MODBUS_DEVICE_DEFAULTS, Config
from verld.config.sections import CONFIG, SECTION_KEYS
from verld.config.validate import Section

SOURCE = "docs/config.md"
_PATH_TITLE = re.compile(r"`([a-z_][a-z_.]*)`")


@dataclass(frozen=True)
class Key:
    """One key of the schema."""

    path: str  #: dotted: "device.line.terminator"; a list's entries: "ports[].link"
    name: str
    default: object  #: the model's default (a dataclass instance for a nested section)
    nested: bool  #: a mapping of keys of its own (a `Section`)


@dataclass(frozen=True)
class SchemaSection:
    path: str  #: "device", "device.line", "ports" (a list of entries)
    keys: tuple[Key, ...]
    is_list: bool = False


def schema() -> list[SchemaSection]:
    """Every section of the schema, in the loader's order, depth first."""
    out: list[SchemaSection] = []
    hints = typing.get_type_hints(Config)
    defaults = Config()
    for name, check in CONFIG.keys.items():
        if isinstance(check, Section):
            out += _walk(check, getattr(defaults, name), name)
        else:  # a list of entries (ports): the keys of one entry, an entry's defaults
            (entry_cls,) = {a for a in typing.get_args(hints[name]) if a is not Ellipsis}
            entry = entry_cls()
            keys = tuple(
                Key(f"{name}[].{k}", k, getattr(entry, k), False) for k in SECTION_KEYS[name]
            )
            out.append(SchemaSection(name, keys, is_list=True))
    return out


def _walk(section: Section, value: object, path: str) -> list[SchemaSection]:
    keys = []
    subs = []
    for name, check in section.keys.items():
        default = getattr(value, name)
        keys.append(Key(f"{path}.{name}", name, default, isinstance(check, Section)))
        if isinstance(check, Section):
            subs.append((check, default, f"{path}.{name}"))
    out = [SchemaSection(path, tuple(keys))]
    for sub, default, sub_path in subs:
        out += _walk(sub, default, sub_path)
    return out


def dotted_paths() -> list[str]:
    """Every key's dotted path, sections included."""
    return [k.path for s in schema() for k in s.keys]


# --- defaults -------------------------------------------------------------------------


def yaml_value(value: object, *, octal: bool = False) -> str:
    """A default as it would be written in the file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and octal:
        return f'"0{value:o}"'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return value if re.fullmatch(r"[\w./:@+-]+", value) else json.dumps(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no YAML spelling for {value!r}")


def _same(doc: str, model: str) -> bool:
    if doc == model:
        return True
    try:
        return float(doc) == float(model)
    except ValueError:
        return False


# --- the docs' side -------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    meaning: str


@dataclass
class DocSection:
    section: md.Section  #: its heading and blocks
    rows: dict[str, Row] | None  #: None: documented in prose only
    table: md.Block | None


def doc_sections(sections: list[md.Section]) -> dict[str, DocSection]:
    """Sections whose heading names a config section (`device.line`), by that name."""
    found: dict[str, DocSection] = {}
    for s in sections:
        m = _PATH_TITLE.match(s.title)
        if not m or s.level < 2:
            continue
        tables = [t for t in s.tables() if t.items and t.items[0] == "key"]
        if len(tables) > 1:
            raise md.DocError(f"{SOURCE}:{s.line}: {m[1]} has {len(tables)} key tables")
        if not tables:
            found[m[1]] = DocSection(s, None, None)
            continue
        (table,) = tables
        if [h.split()[0] for h in table.items] != ["key", "type", "default", "meaning"]:
            raise md.DocError(
                f"{SOURCE}:{table.line}: expected columns key | type | default | "
                f"meaning, got {' | '.join(table.items)}"
            )
        rows = {}
        for n, cells in enumerate(table.rows):
            key = roff.plain(cells[0])
            if key in rows:
                raise md.DocError(f"{SOURCE}:{table.line + 2 + n}: {m[1]}.{key} twice")
            rows[key] = Row(key, cells[1], cells[2], cells[3])
        found[m[1]] = DocSection(s, rows, table)
    return found


def check(sections: list[md.Section]) -> dict[str, DocSection]:
    """The docs' section for each schema section; DocError lists every mismatch."""
    docs = doc_sections(sections)
    ours = {s.path: s for s in schema()}
    errors = []
    prose_only = {p for p, d in docs.items() if d.rows is None}
    for path, sec in ours.items():
        if any(path.startswith(p + ".") for p in prose_only):
            continue  # e.g. api.roles.admin: the api.roles prose covers it
        doc = docs.get(path)
        if doc is None:
            errors.append(
                f"{SOURCE}: no section for `{path}` (a heading `{path}` with a "
                "key | type | default | meaning table)"
            )
            continue
        if doc.rows is None:
            words = set(re.findall(r"\w+", doc.section.all_text()))
            for name in _names_under(path, ours):
                if name not in words:
                    errors.append(f"{SOURCE}:{doc.section.line}: `{path}` does not mention {name}")
            continue
        for key in sec.keys:
            row = doc.rows.get(key.name)
            if row is None:
                errors.append(
                    f"{SOURCE}:{doc.section.line}: `{path}` has no row for {key.name} ({key.path})"
                )
                continue
            shown = _DOC_DEFAULT.match(row.default)
            if shown and not key.nested:
                model = yaml_value(key.default, octal="octal" in row.type)
                if not _same(shown[1], model):
                    errors.append(
                        f"{SOURCE}: {key.path}: the docs' default is {shown[1]}, "
                        f"the model's {model}"
                    )
        for name in doc.rows.keys() - {k.name for k in sec.keys}:
            errors.append(
                f"{SOURCE}:{doc.section.line}: `{path}` documents {name}, "
                "which the schema does not have"
            )
    for path in docs.keys() - ours.keys():
        errors.append(
            f"{SOURCE}:{docs[path].section.line}: a section `{path}`, which the schema "
            "does not have"
        )
    if errors:
        raise md.DocError("\n".join(errors))
    return docs


_DOC_DEFAULT = re.compile(r"`([^`]*)`")


def _names_under(path: str, ours: Mapping[str, SchemaSection]) -> Iterator[str]:
    for sub, sec in ours.items():
        if sub == path or sub.startswith(path + "."):
            for key in sec.keys:
                yield key.name


# --- the page -------------------------------------------------------------------------


def write_keys(page: roff.Page, sections: list[md.Section]) -> None:
    """The KEYS section: one subsection per schema section, its docs prose in order
    with the key table written as one tagged paragraph per key."""
    docs = check(sections)
    ours = schema()
    by_path = {s.path: s for s in ours}
    for sec in ours:
        doc = docs.get(sec.path)
        if doc is None:  # under a prose-only section: written with it
            continue
        page.ss(roff.plain(doc.section.title))
        for block in doc.section.blocks:
            if block is doc.table:
                assert doc.rows is not None
                for key in sec.keys:
                    _write_key(page, key, doc.rows[key.name])
            else:
                md.write_blocks(page, [block])
        if doc.rows is None:
            _write_prose_keys(page, sec, by_path)


def _write_key(page: roff.Page, key: Key, row: Row) -> None:
    """A key's tagged paragraph: path, type and default; its meaning."""
    kind = roff.inline(row.type)
    if key.nested:
        page.tp(f"{roff.bold(key.path)} ({kind})", roff.inline(row.meaning))
        return
    if _DOC_DEFAULT.match(row.default):  # the model's value (checked equal to the docs')
        default = "default " + roff.bold(yaml_value(key.default, octal="octal" in row.type))
        section, _, name = key.path.rpartition(".")
        if section == "device" and name in MODBUS_DEVICE_DEFAULTS:
            modbus = roff.bold(str(MODBUS_DEVICE_DEFAULTS[name]))
            default += f", on {' and '.join(roff.bold(c) for c in MODBUS_CODECS)} {modbus}"
    elif row.default.startswith("("):  # "(required)"
        default = roff.inline(row.default.strip("()"))
    else:
        default = "default " + roff.inline(row.default)
    page.tp(f"{roff.bold(key.path)} ({kind}; {default})", roff.inline(row.meaning))


def _write_prose_keys(
    page: roff.Page, sec: SchemaSection, by_path: Mapping[str, SchemaSection]
) -> None:
    """A section documented in prose (api.roles): each of its keys with its default;
    a nested one as its keys' paths together."""
    for key in sec.keys:
        if not key.nested:
            page.tp(f"{roff.bold(key.path)} (default {roff.bold(yaml_value(key.default))})")
            continue
        leaves = by_path[key.path].keys
        tag = ", ".join(roff.bold(leaf.path) for leaf in leaves)
        shown = sorted({yaml_value(leaf.default) for leaf in leaves})
        page.tp(
            tag,
            f"The keys of {roff.bold(key.path)}; default "
            + ", ".join(roff.bold(s) for s in shown)
            + ".",
        )
        assert not any(leaf.nested for leaf in leaves), "deeper nesting: write it here"


def write_other(page: roff.Page, sections: list[md.Section]) -> None:
    """The docs' sections that are not a config section (the flat format, errors,
    quoting traps), as sections of their own."""
    for s in sections:
        if s.level < 2 or _PATH_TITLE.match(s.title):
            continue
        if s.level == 2:
            page.sh(roff.plain(s.title))
        else:
            page.ss(roff.plain(s.title))
        md.write_blocks(page, s.blocks)
