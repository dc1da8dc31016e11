"""`tools/bench`: the command line, the run's set-up and clean-up, and its outputs.

Exit codes: 0 every call answered correctly (targets may still fail: they are
reported, not enforced), 1 a wrong or missing reply or another broken invariant,
2 the bench could not run (bad arguments, a process did not start), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import verld
from benchlib import report, worker
from benchlib.procs import BenchError, Procs
from benchlib.runner import Runner, Timing

ROOT = Path(__file__).resolve().parent.parent.parent
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tools/bench",
        description="Benchmark verld against a direct pty and a socat relay, all on one "
        "verld-sim, in interleaved rounds. Prints a table, writes JSON (and a plot and "
        "docs/benchmarks.md on a full run).",
    )
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5; --quick: 1)")
    p.add_argument("--quick", action="store_true", help="a short smoke run (no docs written)")
    p.add_argument("--idle-seconds", type=float, help="idle CPU window (default 30; --quick: 2)")
    p.add_argument(
        "--baud",
        type=int,
        default=115200,
        help="pace the sim's writes to this rate for the link-utilisation rounds "
        "(default 115200; 0 skips them)",
    )
    p.add_argument("--warmup", type=float, help="seconds before each measurement window")
    p.add_argument("--duration", type=float, help="seconds of each measurement window")
    p.add_argument("--json", metavar="PATH", help="results file (default docs/bench.json)")
    p.add_argument("--plot", metavar="PATH", help="plot file (default docs/bench.png)")
    p.add_argument(
        "--markdown", metavar="PATH", help="refresh the results in PATH (docs/benchmarks.md)"
    )
    p.add_argument("--no-docs", action="store_true", help="write only what is asked explicitly")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (logs, configs)")
    p.add_argument(
        "--from-json",
        metavar="PATH",
        help="measure nothing: print the tables of a saved run and redraw its plot/markdown",
    )
    p.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    return p


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker is not None:
        return worker.main(args.worker)
    if args.from_json is not None:
        return _rerender(args)
    if args.rounds is not None and args.rounds < 1:
        print("bench: --rounds must be at least 1", file=sys.stderr)
        return 2
    # children (sim, verld, generators) run this checkout's verld, like the bench itself
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    procs = Procs()
    tmp = Path(tempfile.mkdtemp(prefix="verld-bench-"))
    try:
        return _run(args, procs, tmp)
    except KeyboardInterrupt:
        print("\nbench: interrupted; stopping everything it started", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    finally:
        procs.stop_all()
        if args.keep_tmp:
            print(f"bench: temp dir kept: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(args: argparse.Namespace, procs: Procs, tmp: Path) -> int:
    quick = args.quick
    rounds = args.rounds or (1 if quick else 5)
    idle_seconds = args.idle_seconds if args.idle_seconds is not None else (2 if quick else 30)
    warmup = args.warmup if args.warmup is not None else (0.1 if quick else 0.5)
    duration = args.duration if args.duration is not None else (0.4 if quick else 2.0)
    timing = Timing(warmup, duration)
    paced_timing = Timing(max(warmup, 0.2), max(duration, 0.6) * (1 if quick else 1.25))
    docs = not quick and not args.no_docs
    json_path = args.json or (str(ROOT / "docs/bench.json") if docs else None)
    plot_path = args.plot or (str(ROOT / "docs/bench.png") if docs else None)
    md_path = args.markdown or (str(ROOT / "docs/benchmarks.md") if docs else None)

    meta = _machine()
    meta.update(
        command=shlex.join(["tools/bench", *sys.argv[1:]]),
        rounds=rounds,
        warmup_s=warmup,
        duration_s=duration,
        paced_duration_s=paced_timing.duration,
        idle_seconds=idle_seconds,
        baud=args.baud,
        loadavg_start=_loadavg(),
    )
    _say(f"bench: {meta['nproc']} CPUs ({meta['cpu']}), Python {meta['python']}, {rounds} rounds")
    runner = Runner(procs, tmp, timing=timing, paced_timing=paced_timing, say=_say)
    meta["paths"] = runner.paths
    all_rounds = [runner.round(n) for n in range(rounds)]
    paced = runner.paced(args.baud, rounds) if args.baud else None
    idle = runner.idle(idle_seconds)
    meta["loadavg_end"] = _loadavg()
    summary = report.summarise(all_rounds, paced, idle, runner.paths)
    result: dict[str, Any] = {
        "meta": meta,
        "ok": not runner.errors,
        "errors": runner.errors,
        "warnings": runner.warnings,
        "summary": summary,
        "rounds": all_rounds,
        "paced": paced,
        "idle": idle,
    }
    print()
    print(report.table(summary, runner.paths, args.baud))
    _write_outputs(result, json_path, plot_path, md_path)
    for warning in runner.warnings:
        print(f"bench: warning: {warning}", file=sys.stderr)
    for error in runner.errors:
        print(f"bench: ERROR: {error}", file=sys.stderr)
    return 0 if not runner.errors else 1


def _rerender(args: argparse.Namespace) -> int:
    """Tables, plot and markdown from a saved run (to change how it is shown, not measured)."""
    result = json.loads(Path(args.from_json).read_text())
    paths = result["meta"]["paths"]
    summary = report.summarise(result["rounds"], result["paced"], result["idle"], paths)
    result["summary"] = summary
    print(report.table(summary, paths, result["meta"].get("baud")))
    _write_outputs(result, args.json, args.plot, args.markdown)
    return 0 if result["ok"] else 1


def _write_outputs(
    result: dict[str, Any], json_path: str | None, plot_path: str | None, md_path: str | None
) -> None:
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=1) + "\n")
        _say(f"bench: results in {json_path}")
    if md_path:
        section = report.markdown(result["summary"], result["meta"]["paths"], result["meta"])
        _refresh_markdown(Path(md_path), section)
        _say(f"bench: figures refreshed in {md_path}")
    if plot_path:
        from benchlib.plot import plot

        try:
            skipped = plot(result, Path(plot_path))
        except Exception as exc:  # the figures are written already: do not lose the run
            skipped = f"plot failed ({type(exc).__name__}: {exc}); the figures are unaffected"
        _say(f"bench: {skipped}" if skipped else f"bench: plot in {plot_path}")


def _refresh_markdown(path: Path, section: str) -> None:
    """Replace what lies between the bench markers (append them if missing)."""
    text = path.read_text() if path.exists() else "# verld benchmarks\n"
    block = f"{BEGIN}\n{section}\n{END}"
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def _say(line: str) -> None:
    print(line, flush=True)


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def _machine() -> dict[str, Any]:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "verld": verld.__version__,
        "git": _output(["git", "-C", str(ROOT), "describe", "--always", "--dirty"]),
        "socat": (_output(["socat", "-V"], line_with="socat version").split() + ["?"] * 3)[2],
    }


def _output(cmd: list[str], line_with: str = "") -> str:
    try:
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    for line in text.splitlines():
        if line_with in line:
            return line.strip()
    return "?"
