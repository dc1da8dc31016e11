"""The shape of the code, checked on the tree: what docs/architecture.md promises.

Each rule is read off the source with `ast`, so a change that breaks one fails
here with the file and line, not in a review: no import circle inside `verld/`
(TYPE_CHECKING imports included), the simulator
imported only by itself, `verld.testing` and the daemon's launch of the built-in
sim, the session and supervisor reached only through `Core`, and codec names
compared only in the codec registry (whose list `CODEC_NAMES` is).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from verld.codec.registry import CODECS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "verld"
CODEC_NAMES = set(CODECS)


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of the package: (dotted name, path)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """The `verld` modules `path` imports (TYPE_CHECKING and function-level included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno
                yield base, node.lineno


def graph() -> dict[str, set[str]]:
    """module → the package modules it imports."""
    names = {name for name, _ in modules()}
    edges: dict[str, set[str]] = {}
    for name, path in modules():
        edges[name] = {target for target, _ in imports(name, path) if target in names} - {name}
    return edges


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_circle_inside_verld() -> None:
    """No module of verld imports itself back through others, TYPE_CHECKING included."""
    edges = graph()
    # a package's __init__ re-exporting its own submodules is not a circle through it
    for name in edges:
        edges[name] = {t for t in edges[name] if not name.startswith(t + ".")}
    assert cycle(edges) is None, " → ".join(cycle(edges) or [])


def test_only_the_sim_testing_and_the_sim_launch_import_the_simulator() -> None:
    """Production code never imports verld.sim (the daemon only launches it)."""
    allowed = ("verld.sim", "verld.testing")
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for name, path in modules()
        if not name.startswith(allowed)
        for target, line in imports(name, path)
        if target.startswith("verld.sim") and not target.startswith("verld.sim.launch")
    ]
    assert found == []


def test_the_session_and_supervisor_are_reached_only_through_core() -> None:
    """Outside Core's module nothing reads `core.session` or `core.supervisor`."""
    found = []
    for name, path in modules():
        if name in ("verld.fronts.base",) or not name.startswith(("verld.fronts", "verld.daemon")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("session", "supervisor"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert found == []


def _names_a_codec(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in CODEC_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_codec(e) for e in node.elts)
    return isinstance(node, ast.Name) and node.id == "MODBUS_CODECS"


def test_codec_names_are_compared_only_in_the_registry() -> None:
    """Code that differs per codec asks the registry's traits, never a codec's name."""
    exempt = ("verld.codec.registry",)
    found = []
    for name, path in modules():
        if name.startswith(exempt):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                _names_a_codec(side) for side in [node.left, *node.comparators]
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
