"""A/B two verld checkouts on a family's ratio targets, interleaved, on the bench's engine.

    tools/bench-ab OLD_CHECKOUT [NEW_CHECKOUT] [--family api|ports|modbus|network|links]
                   [--rounds N]

e.g. `git worktree add /tmp/before HEAD~3 && tools/bench-ab /tmp/before` (a worktree
has no .venv: this checkout's Python runs both). The family's `ab_phase` is one phase
of interleaved rounds: `direct`, then verld from each checkout (paths `A` and `B`, the
order alternating per round), all on one sim and with this checkout's generators:

- api (default): lock-step 32-byte echoes (p50 / direct's p50) and the checker's load —
  16 API clients × 8 in flight in 2 generator processes, window 8 — (calls/s / direct
  with 8 in flight, and verld's CPU µs per call: schedstat, every thread, over the
  common window, the figure least moved by a noisy machine);
- ports: a lock-step program on a virtual serial port (p50 / direct's p50);
- modbus: a lock-step pymodbus and a raw master through verld's Modbus TCP gateway
  (p50 / the same master's on the pty);
- network: a lock-step program on a shared raw network port (p50 / direct's p50);
- links: a lock-step API client of verld on an `rfc2217://` link to ser2net serving
  the sim's pty (p50 / direct's p50).

Each checkout's figures and targets are the family's own (`report`), computed with its
path in the place of `verld`; ratios within a round, medians over rounds. Every call is
checked as in the bench; a wrong or missing reply exits 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from benchlib import report
from benchlib.engine import Run, Timing
from benchlib.families import family
from benchlib.procs import BenchError, Procs

TOOLS = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="tools/bench-ab",
        description=(__doc__ or "").split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("old", type=Path, help="checkout whose verld is A")
    parser.add_argument("new", type=Path, nargs="?", default=TOOLS.parent, help="B (this one)")
    parser.add_argument(
        "--family", choices=("api", "ports", "modbus", "network", "links"), default="api"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds before each window")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds measured")
    args = parser.parse_args()
    checkouts = {"A": args.old.resolve(), "B": args.new.resolve()}
    for name, path in checkouts.items():
        if not (path / "verld" / "__init__.py").exists():
            parser.error(f"{name}: {path} holds no verld package")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(TOOLS.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    procs, tmp = Procs(), Path(tempfile.mkdtemp(prefix="verld-ab-"))
    options = argparse.Namespace(baud=0, no_mbusd=True, modbus_baud=0, modbus_registers=10)
    run = Run(
        procs,
        tmp,
        rounds=args.rounds,
        timings={"lock": Timing(args.warmup, args.duration)},
        say=lambda line: print(line, flush=True),
        options=options,
    )
    fam: Any = family(args.family)
    try:
        fam.setup(run)
        phase = fam.ab_phase(checkouts)
        rounds = run.phase(phase, list(phase.paths))
    except BenchError as exc:
        print(f"bench-ab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    decl = types.SimpleNamespace(figures=fam.figures, targets=fam.ab_targets)
    rows: dict[str, list[str]] = {}
    for name in checkouts:
        view = [
            {**r, **dict.fromkeys(("verld", "port", "network", "rfc2217"), r[name])} for r in rounds
        ]
        section = {"paths": {"rounds": ["direct", "verld"]}, "phases": {"rounds": view}, "info": {}}
        for t in report.summarise(decl, section)["targets"]:
            verdict = {None: "n/a", True: "met", False: "not met"}[t["pass"]]
            cell = f"{report.fmt(t['measured'], 2)} {verdict}"
            rows.setdefault(f"{t['name']} ({t['op']} {t['target']:g} {t['unit']})", []).append(cell)
    print(
        f"medians over {args.rounds} rounds, {args.family} family, ratios within a round; "
        + ", ".join(f"{n} = {p}" for n, p in checkouts.items())
    )
    width = max(map(len, rows)) + 2
    print(f"  {'target':<{width}}" + "".join(f"{n:>16}" for n in checkouts))
    for label, cells in rows.items():
        print(f"  {label:<{width}}" + "".join(f"{c:>16}" for c in cells))
    for error in run.errors:
        print(f"bench-ab: ERROR: {error}", file=sys.stderr)
    return 1 if run.errors else 0
