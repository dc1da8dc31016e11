"""tools/manpages' command line: write man/, or check it is what would be written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from manlib import markdown, pages

REPO = Path(__file__).resolve().parent.parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="tools/manpages",
        description="Build verld's man pages (man/) from the argparse parsers, the config "
        "schema and the docs.",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when a committed page differs from what would "
        "be written (or is missing)",
    )
    p.add_argument(
        "--output",
        metavar="DIR",
        type=Path,
        default=REPO / "man",
        help="where the pages go (default: man/ of this checkout)",
    )
    args = p.parse_args(argv)
    try:
        built = pages.build_all(REPO)
    except markdown.DocError as exc:
        print(f"tools/manpages: {exc}", file=sys.stderr)
        return 2
    out: Path = args.output
    stale = []
    for name, text in built.items():
        path = out / name
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old == text:
            continue
        if args.check:
            why = "missing" if old is None else "differs from what tools/manpages generates"
            print(f"{_shown(path)}: {why}", file=sys.stderr)
            stale.append(name)
        else:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {_shown(path)}")
    if stale:
        print("run `make man` (tools/manpages) and commit man/", file=sys.stderr)
        return 1
    if args.check:
        print(f"man pages up to date: {', '.join(built)}")
    return 0


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)
