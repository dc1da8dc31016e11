"""docs/client.md, the client library's reference, cannot drift from `verld.client`.

Every public name (`verld.client.__all__`, `verld.client.modbus.__all__`) and every
public method of `Client`, `AsyncClient`, `Modbus` and `Request` has a heading of its
own there (`` ### `Reply` ``, `` #### `Client.call` ``); each documented callable's
section names all its parameters; no heading names something the library does not
have; the links lead to files and headings of the repository.
"""

from __future__ import annotations

import enum
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import verld.client
import verld.client.modbus
from verld.client import AsyncClient, Client
from verld.client.modbus import AsyncModbus, Modbus, Request

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "client.md"
#: the classes each of whose public methods has a heading `Class.method`
CLASSES: dict[str, type] = {
    "Client": Client,
    "AsyncClient": AsyncClient,
    "Modbus": Modbus,
    "Request": Request,
}
HEADING = re.compile(r"^(#{1,6}) (.+)$")
NAME = re.compile(r"^`([A-Za-z_][\w.]*)`$")


def _lines() -> list[str]:
    """The doc's lines with fenced code blocks blanked (a `# comment` there is no heading)."""
    lines, fenced = [], False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return lines


def sections() -> dict[str, str]:
    """Each heading that is one backticked name → its own text, up to the next heading
    (the signature block included: code is kept here, only headings are read from
    `_lines`)."""
    raw = DOC.read_text(encoding="utf-8").splitlines()
    starts = [(i, m) for i, line in enumerate(_lines()) if (m := HEADING.match(line))]
    found: dict[str, str] = {}
    for n, (i, m) in enumerate(starts):
        name = NAME.match(m[2].strip())
        if name is None:
            continue
        end = starts[n + 1][0] if n + 1 < len(starts) else len(raw)
        assert name[1] not in found, f"docs/client.md: two headings for {name[1]}"
        found[name[1]] = "\n".join(raw[i + 1 : end])
    return found


def public_names() -> list[str]:
    """Every name the reference must have a heading for."""
    names = [*verld.client.__all__, *verld.client.modbus.__all__]
    for cls_name, cls in CLASSES.items():
        names += [f"{cls_name}.{m}" for m, _ in inspect.getmembers(cls) if not m.startswith("_")]
    return names


def resolve(name: str) -> Any:
    """The object a heading names: `X` from verld.client or verld.client.modbus, `Class.m`."""
    head, _, attr = name.partition(".")
    for module in (verld.client, verld.client.modbus):
        if head in module.__all__:
            obj = getattr(module, head)
            return inspect.getattr_static(obj, attr) if attr else obj
    raise LookupError(name)


def parameters(obj: Any) -> list[str]:
    """The parameter names a callable's section must mention (none for the rest)."""
    if isinstance(obj, staticmethod | classmethod):
        obj = obj.__func__
    if isinstance(obj, type):
        if issubclass(obj, enum.Enum) or obj.__init__ is ValueError.__init__:
            return []
        if getattr(obj, "_is_protocol", False):  # a typing Protocol: its `call`
            obj = getattr(obj, "call")  # noqa: B009 - (mypy: `type` has no `call`)
    if not callable(obj):
        return []
    return [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]


def test_the_doc_lists_names() -> None:
    """The reference has headings for the library's main names (the parser finds them)."""
    found = sections()
    assert {"Client", "Client.call", "AsyncClient.call", "Reply", "Modbus"} <= set(found)
    assert len(found) > 60


@pytest.mark.parametrize("name", public_names())
def test_every_public_name_has_a_heading(name: str) -> None:
    """Each public name of verld.client (and its modbus package, and each method) has a heading."""
    assert name in sections(), f"docs/client.md has no heading `{name}`"


def test_no_heading_names_what_the_library_lacks() -> None:
    """Every backticked heading names a public name of verld.client or its modbus package."""
    stale = []
    for name in sections():
        if name.startswith("verld."):  # a module: `verld.client`, `verld.client.modbus`
            continue
        try:
            resolve(name)
        except (LookupError, AttributeError):
            stale.append(name)
    assert not stale, f"docs/client.md documents what verld.client does not have: {stale}"


@pytest.mark.parametrize("name", public_names())
def test_each_section_names_every_parameter(name: str) -> None:
    """A callable's section names each of its parameters (its signature is the current one)."""
    text = sections()[name]
    missing = [p for p in parameters(resolve(name)) if not re.search(rf"\b{p}\b", text)]
    assert not missing, f"docs/client.md, `{name}`: no mention of {missing}"


def test_async_modbus_has_the_methods_modbus_has() -> None:
    """AsyncModbus has exactly Modbus's public methods (the doc says "the same eight")."""

    def methods(cls: type) -> set[str]:
        return {m for m, _ in inspect.getmembers(cls, callable) if not m.startswith("_")}

    assert methods(AsyncModbus) == methods(Modbus)
    assert len(methods(Modbus)) == 8
    for method in methods(Modbus):
        assert f"`{method}`" in sections()["AsyncModbus"]


def test_call_documents_reply_false() -> None:
    """`Client.call`'s section says what `reply=False` is for, and `Reply` has its field."""
    assert "reply=False" in DOC.read_text(encoding="utf-8")
    assert "`reply`" in sections()["Client.call"]
    assert "`reply`" in sections()["Reply"]


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to -."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_links_lead_to_files_and_headings_of_the_repository() -> None:
    """Every relative link in docs/client.md names a file in the repository and a heading in it."""
    links = re.findall(r"\]\(([^)\s]+)\)", DOC.read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 10, local
    for link in local:
        target, _, anchor = link.partition("#")
        path = (DOC.parent / target).resolve() if target else DOC
        assert path.is_relative_to(REPO), f"{link} leads outside the repository"
        assert path.is_file(), f"{link}: no such file"
        if anchor:
            assert anchor in _anchors(path), f"{link}: no heading #{anchor} in {path.name}"


def test_readme_and_protocol_link_the_reference() -> None:
    """README.md and docs/protocol.md both link docs/client.md."""
    assert "](docs/client.md)" in (REPO / "README.md").read_text(encoding="utf-8")
    assert "](client.md)" in (REPO / "docs" / "protocol.md").read_text(encoding="utf-8")
