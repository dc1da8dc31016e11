"""`tools/soak --neighbours`: the neighbour battery's long form (docs/reliability.md, "Neighbours").

Every case of tests/neighbours.py — each codec variant × each front it has × each
neighbour behaviour the front has — runs for `--seconds` (default 5), one after another,
on one rig per variant (verld-sim, verld with every front, verld-mqtt on one mosquitto).
The table says, per case, what the well-behaved client saw: its calls, the wrong
replies, the link drops, the lost calls and its p99 latency (and, in the last column,
the documented errors it got, such as `busy` under the neighbour's lease; for
`late_answer`, verld's late lines dropped and stale replies; for `no_reply`, the
neighbour's commands seen written, those written twice, and verld's unexpected lines
dropped). Exit 1 when any case is not clean (a wrong reply, a drop, a lost call, a
command written twice, or a case that could not run as meant); `--json OUT` writes
every case's figures.

`--cases GLOB[,GLOB...]` runs only the cases whose id (`VARIANT/FRONT/BEHAVIOUR`, e.g.
`line:tcp/api/silent`) matches one of the patterns. Without mosquitto the MQTT cases
are left out, and the report says so.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from verld import __version__
from verld.testing import HarnessError

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SECONDS = 5.0


def battery() -> ModuleType:
    """tests/neighbours.py (with tests/ on the path: it uses the tests' rigs)."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import neighbours

    return neighbours


def have_mosquitto() -> bool:
    return bool(shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/sbin"))


def select(cases: list[Any], patterns: str | None) -> list[Any]:
    if not patterns:
        return cases
    globs = [g.strip() for g in patterns.split(",") if g.strip()]
    return [c for c in cases if any(fnmatch.fnmatchcase(c.id, g) for g in globs)]


def run(
    seconds: float,
    patterns: str | None,
    json_out: str | None,
    keep: bool,
    command: str,
) -> int:
    nb = battery()
    cases = select(nb.all_cases(), patterns)
    if not cases:
        print(f"tools/soak: no case matches {patterns!r}", file=sys.stderr)
        return 2
    skipped: list[str] = []
    if not have_mosquitto():
        skipped = [c.id for c in cases if c.front == "mqtt"]
        cases = [c for c in cases if c.front != "mqtt"]
        print(
            f"tools/soak: mosquitto is not installed: {len(skipped)} MQTT cases left out",
            file=sys.stderr,
        )
    workdir = Path(tempfile.mkdtemp(prefix="verld-nb-"))
    pool = nb.RigPool(workdir)
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    print(f"verld neighbours: {len(cases)} cases x {seconds:g} s, verld {__version__}", flush=True)
    try:
        for i, case in enumerate(cases, 1):
            t0 = time.monotonic()
            try:
                outcome = pool.run(case, seconds)
                result, text = outcome.as_dict(), outcome.describe()
            except (HarnessError, OSError, TimeoutError) as exc:  # the rig broke: say so,
                result = failed_case(case.id, seconds, f"{type(exc).__name__}: {exc}")
                text = f"{case.id}: the rig failed: {str(exc)[:2000]}"
                pool.stop()  # and the next case starts afresh
            results.append(result)
            mark = "ok" if result["clean"] else "NOT CLEAN"
            print(
                f"  [{i}/{len(cases)}] {case.id}: {mark} ({time.monotonic() - t0:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
            if not result["clean"]:
                print(indent(text), file=sys.stderr, flush=True)
    finally:
        pool.stop()
        if keep:
            print(f"tools/soak: work dir kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    dirty = [r["case"] for r in results if not r["clean"]]
    print(render(results), flush=True)
    if skipped:
        print(f"left out      {len(skipped)} MQTT cases (mosquitto is not installed)")
    print(f"elapsed       {time.monotonic() - started:.0f} s")
    print("result        " + ("PASS" if not dirty else f"FAIL: {', '.join(dirty)}"))
    if json_out:
        report = {
            "command": command,
            "version": __version__,
            "seconds": seconds,
            "passed": not dirty,
            "not_clean": dirty,
            "left_out": skipped,
            "cases": results,
        }
        Path(json_out).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if dirty else 0


def failed_case(case_id: str, seconds: float, problem: str) -> dict[str, Any]:
    return {
        "case": case_id,
        "seconds": seconds,
        "calls": 0,
        "ok": 0,
        "wrong": 0,
        "lost": 0,
        "dropped": 0,
        "late": 0,
        "allowed": {},
        "errors": {},
        "p50_ms": None,
        "p99_ms": None,
        "max_ms": None,
        "problem": problem,
        "clean": False,
    }


def indent(text: str) -> str:
    return "\n".join("      " + line for line in text.splitlines())


def render(results: list[dict[str, Any]]) -> str:
    """The table: codec × front × neighbour → calls, wrong, dropped, lost, p99."""
    head = (
        f"{'codec':<12}{'front':<8}{'neighbour':<13}{'calls':>7}{'wrong':>7}"
        f"{'dropped':>9}{'lost':>6}{'p99 ms':>9}  documented errors"
    )
    lines = [head]
    for r in results:
        variant, front, behaviour = r["case"].split("/")
        p99 = "-" if r["p99_ms"] is None else f"{r['p99_ms']:.1f}"
        note = ", ".join(f"{code} {n}" for code, n in sorted(r["allowed"].items()))
        extra = verld_note(behaviour, r.get("daemon") or {}, r.get("neighbour") or {})
        if extra:
            note = (note + "; " if note else "") + extra
        if r.get("problem"):
            note = (note + "; " if note else "") + "PROBLEM: " + r["problem"].splitlines()[0][:60]
        lines.append(
            f"{variant:<12}{front:<8}{behaviour:<13}{r['calls']:>7}{r['wrong']:>7}"
            f"{r['dropped']:>9}{r['lost']:>6}{p99:>9}  {note}".rstrip()
        )
    return "\n".join(lines)


def verld_note(behaviour: str, daemon: dict[str, Any], neighbour: dict[str, Any]) -> str:
    """What the text neighbours are about, beside the table's columns."""
    if behaviour == "late_answer":
        return (
            f"verld: late lines {daemon.get('late_lines', 0)}, stale "
            f"{daemon.get('stale', 0)}, timeouts {daemon.get('timeouts', 0)}"
        )
    if behaviour == "no_reply":
        return (
            f"commands written {neighbour.get('written', 0)}, twice "
            f"{neighbour.get('duplicated', 0)}; verld: unexpected "
            f"{daemon.get('unexpected', 0)}"
        )
    return ""
