"""Every test function says in one line what behaviour it checks.

The docstring is the line pytest's reports and a reader of the suite see first: one
sentence stating the behaviour ("A CRC error in the reply is counted as a bad frame
and the call times out."), with any longer story in `#` comments at the top of the
body. This test reads every tests/**/*.py with `ast` (nothing is imported or run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent

Function = ast.FunctionDef | ast.AsyncFunctionDef


def find_tests(tree: ast.Module) -> Iterator[tuple[str, Function]]:
    """Each test function of a module (a name pytest collects: test*), module level or
    in a class (nested too), with its qualified name."""

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, Function]]:
        for node in body:
            if isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, Function) and node.name.startswith("test"):
                yield f"{prefix}{node.name}", node

    return walk(tree.body, "")


def problem(node: Function) -> str | None:
    """What is wrong with the docstring of `node` (None: one non-empty line)."""
    doc = ast.get_docstring(node, clean=False)
    if doc is None:
        return "no docstring"
    if not doc.strip():
        return "an empty docstring"
    if "\n" in doc:
        return f"a docstring of {len(doc.strip().splitlines())} lines"
    return None


def test_every_test_function_has_a_one_line_docstring() -> None:
    """Every test function in tests/ has a docstring of exactly one non-empty line."""
    found, wrong = 0, []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, node in find_tests(tree):
            found += 1
            why = problem(node)
            if why is not None:
                wrong.append(f"{path.relative_to(TESTS.parent)}:{node.lineno} {name}: {why}")
    assert found > 1000, f"only {found} test functions found under {TESTS}"
    listing = "\n".join(wrong)
    assert not wrong, f"{len(wrong)} test functions without a one-line docstring:\n{listing}"
