"""`tools/bench-fleet`: the command line, the run's set-up and clean-up, and its outputs.

Exit codes as tools/bench: 0 every call answered correctly (targets may still fail:
they are reported, not enforced), 1 a wrong, duplicated or missing reply or
another broken invariant, 2 the bench could not run (bad arguments, mosquitto
missing, a process did not start), 130 Ctrl-C.
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
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any

import verld
from benchlib import fleetecho, fleetreport, fleetworker
from benchlib.cli import _loadavg, _refresh_markdown, _say
from benchlib.fleetprocs import pythonpath
from benchlib.fleetrunner import FleetRunner
from benchlib.procs import BenchError, Procs
from benchlib.runner import Timing

ROOT = Path(__file__).resolve().parent.parent.parent
BEGIN, END = "<!-- bench:fleet:begin -->", "<!-- bench:fleet:end -->"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tools/bench-fleet",
        description="Benchmark verld-mqtt: lock-step and pipelined calls to N verld daemons "
        "(on verld-sim, codec verl) through verld's socket (direct), through mosquitto and "
        "verld-mqtt (mqtt), and to a bare aiomqtt echo behind the same mosquitto (echo), in "
        "interleaved rounds; then the bridge's RSS with --rss-devices devices. Prints tables "
        "and PASS/FAIL per target; writes JSON with --json.",
    )
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5; --quick: 1)")
    p.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    p.add_argument("--devices", type=int, help="devices of the rounds (default 16; --quick: 4)")
    p.add_argument(
        "--rss-devices",
        type=int,
        help="devices of the RSS phase (default 64, --quick 8; at least --devices)",
    )
    p.add_argument("--warmup", type=float, help="seconds before each window (0.5; --quick: 0.1)")
    p.add_argument("--duration", type=float, help="seconds of each window (2; --quick: 0.4)")
    p.add_argument("--json", metavar="FILE", help="write every round and figure here")
    p.add_argument("--markdown", metavar="FILE", help="refresh the fleet results section of FILE")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs, logs)")
    p.add_argument(
        "--bridge-checkout",
        metavar="DIR",
        type=Path,
        help="run verld-mqtt from this checkout (e.g. a git worktree with a change) instead "
        "of this one; everything else stays this checkout's",
    )
    for hidden in ("--worker", "--echo"):
        p.add_argument(hidden, metavar="SPEC", help=argparse.SUPPRESS)
    return p


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker is not None:
        return fleetworker.main(args.worker)
    if args.echo is not None:
        return fleetecho.main(args.echo)
    quick = args.quick
    rounds = args.rounds if args.rounds is not None else (1 if quick else 5)
    devices = args.devices if args.devices is not None else (4 if quick else 16)
    rss_devices = args.rss_devices or max(devices, 8 if quick else 64)
    if rounds < 1 or devices < 1 or rss_devices < devices:
        print(
            "bench-fleet: need --rounds >= 1, --devices >= 1, --rss-devices >= --devices",
            file=sys.stderr,
        )
        return 2
    warmup = args.warmup if args.warmup is not None else (0.1 if quick else 0.5)
    duration = args.duration if args.duration is not None else (0.4 if quick else 2.0)
    pythonpath(ROOT)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    procs = Procs()
    tmp = Path(tempfile.mkdtemp(prefix="verld-fleet-"))
    meta = _machine()
    meta.update(
        command=shlex.join(["tools/bench-fleet", *(argv or sys.argv[1:])]),
        rounds=rounds,
        devices=devices,
        rss_devices=rss_devices,
        warmup_s=warmup,
        duration_s=duration,
        loadavg_start=_loadavg(),
        bridge_checkout=str(args.bridge_checkout) if args.bridge_checkout else None,
    )
    try:
        return _run(args, procs, tmp, meta, Timing(warmup, duration))
    except KeyboardInterrupt:
        print("\nbench-fleet: interrupted; stopping everything it started", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"bench-fleet: {exc}", file=sys.stderr)
        return 2
    finally:
        procs.stop_all()
        if args.keep_tmp:
            print(f"bench-fleet: temp dir kept: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(
    args: argparse.Namespace, procs: Procs, tmp: Path, meta: dict[str, Any], timing: Timing
) -> int:
    _say(
        f"bench-fleet: {meta['nproc']} CPUs ({meta['cpu']}), Python {meta['python']}, "
        f"{meta['rounds']} rounds, {meta['devices']} devices"
    )
    runner = FleetRunner(
        procs, tmp, devices=meta["devices"], timing=timing, say=_say, checkout=args.bridge_checkout
    )
    meta["mosquitto"] = runner.broker.version
    rounds = [runner.round(n) for n in range(meta["rounds"])]
    rss = runner.rss(meta["rss_devices"])
    meta["loadavg_end"] = _loadavg()
    summary = fleetreport.summarise(rounds, runner.n, runner.scale, rss)
    errors, warnings = runner.errors, runner.warnings
    result = {
        "meta": meta,
        "ok": not errors,
        "errors": errors,
        "warnings": warnings,
        "summary": summary,
        "rounds": rounds,
        "rss": rss,
    }
    print()
    print(fleetreport.table(summary))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        _say(f"bench-fleet: results in {args.json}")
    if args.markdown:
        _refresh_markdown(Path(args.markdown), fleetreport.markdown(summary, meta), BEGIN, END)
        _say(f"bench-fleet: figures refreshed in {args.markdown}")
    for warning in warnings:
        print(f"bench-fleet: warning: {warning}", file=sys.stderr)
    for error in errors:
        print(f"bench-fleet: ERROR: {error}", file=sys.stderr)
    return 0 if not errors else 1


def _machine() -> dict[str, Any]:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (ln.partition(":")[2].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    git = _git("rev-parse", "--short", "HEAD") or "?"
    if _git("--no-optional-locks", "status", "--porcelain", "--untracked-files=no"):
        git += "-dirty"  # (read-only git commands: this tool never writes the repository)
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "verld": verld.__version__,
        "git": git,
        "aiomqtt": metadata.version("aiomqtt"),
        "paho": metadata.version("paho-mqtt"),
    }


def _git(*words: str) -> str:
    try:
        cmd = ["git", "-C", str(ROOT), *words]
        return subprocess.run(
            cmd, check=False, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""
