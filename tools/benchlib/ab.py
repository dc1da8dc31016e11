"""A/B two verld checkouts on the bench's two ratio targets, interleaved, in one run.

    tools/bench-ab OLD_CHECKOUT [NEW_CHECKOUT] [--rounds N]

e.g. `git worktree add /tmp/before HEAD~3 && tools/bench-ab /tmp/before`. Each round
measures `direct` (the generator on the pty), then verld from each checkout (the
order alternates per round), all against one verld-sim and with this checkout's
generators (tools/bench --worker):

- lock-step: one blocking client, 32-byte echoes → p50 ratio to direct's p50;
- pipelined: 16 clients × 8 in flight, window 8 → calls/s ratio to direct with 8
  in flight, and verld's CPU per call in that window (schedstat, all threads, from
  the generator's START to its END: the figure least moved by a noisy machine).

Ratios are taken within a round; the medians over rounds are printed last. Every
call is checked as in the bench; a wrong or missing reply exits 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchlib.meter import Spec
from benchlib.procs import BenchError, CpuMark, LineReader, Procs, Sim, Verld, flush_pty

TOOLS = Path(__file__).resolve().parent.parent
BENCH = str(TOOLS / "bench")


def work(procs: Procs, spec: Spec, bridge: int | None = None) -> dict[str, Any]:
    """One generator run; its RESULT (BenchError when a call went wrong), with
    `bridge_cpu_us` (CPU µs per call of process `bridge` in the window) when given."""
    proc = procs.spawn([sys.executable, BENCH, "--worker", spec.to_json()],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    reader = LineReader(proc, "load generator")
    try:
        _expect(reader, "START", spec.warmup + 60)
        start = CpuMark.take([bridge] if bridge else [])
        _expect(reader, "END", spec.duration + 60)
        end = CpuMark.take([bridge] if bridge else [])
        line = _expect(reader, "RESULT ", 60)
    finally:
        procs.stop(proc)
    result: dict[str, Any] = json.loads(line[7:])
    if result["errors"]:
        raise BenchError(f"wrong or missing replies: {result.get('error_samples')}")
    used = end.since(start, bridge) if bridge else None
    if used is not None:
        result["bridge_cpu_us"] = used.sched * 1e6 / max(1, result["calls"])
    return result


def _expect(reader: LineReader, prefix: str, timeout: float) -> str:
    """The generator's next line that starts with `prefix`."""
    while True:
        line = reader.line(timeout)
        if line.startswith(prefix):
            return line


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="tools/bench-ab",
        description=(__doc__ or "").split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("old", type=Path, help="checkout whose verld is A")
    parser.add_argument("new", type=Path, nargs="?", default=TOOLS.parent, help="B (this one)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds before each window")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds measured")
    args = parser.parse_args()
    checkouts = {"A": args.old.resolve(), "B": args.new.resolve()}
    for name, path in checkouts.items():
        if not (path / "verld" / "__init__.py").exists():
            parser.error(f"{name}: {path} holds no verld package")
    procs = Procs()
    ratios: dict[str, list[float]] = {
        f"{n} {w}": [] for n in checkouts for w in ("lock", "pipe", "cpu")
    }
    try:
        with tempfile.TemporaryDirectory(prefix="verld-ab-") as tmpdir:
            tmp = Path(tmpdir)
            sim = Sim(procs, tmp, 4096)
            for rnd in range(args.rounds):
                flush_pty(sim.link)
                lock = Spec(
                    "pty",
                    sim.link,
                    1,
                    1,
                    32,
                    args.warmup,
                    args.duration,
                    max_payload=4096,
                    seed=rnd,
                )
                pipe = Spec(
                    "pty",
                    sim.link,
                    1,
                    8,
                    32,
                    args.warmup,
                    args.duration,
                    max_payload=4096,
                    seed=rnd,
                )
                d_p50 = float(work(procs, lock)["latency_us"]["p50"])
                d_rate = float(work(procs, pipe)["rate"])
                line = [f"round {rnd + 1}: direct p50 {d_p50:.1f} µs, 8 in flight {d_rate:,.0f}/s"]
                order = list(checkouts) if rnd % 2 == 0 else list(reversed(checkouts))
                for serial, name in enumerate(order, 1):
                    daemon = Verld(procs, tmp, sim.link, 8, 2 * rnd + serial, checkouts[name])
                    sock = daemon.socket
                    try:
                        lock_v = Spec("api", sock, 1, 1, 32, args.warmup, args.duration, seed=rnd)
                        pipe_v = Spec("api", sock, 16, 8, 32, args.warmup, args.duration, seed=rnd)
                        p50 = float(work(procs, lock_v)["latency_us"]["p50"])
                        piped = work(procs, pipe_v, daemon.pid)
                        rate, cpu = float(piped["rate"]), float(piped["bridge_cpu_us"])
                    finally:
                        daemon.stop()
                    ratios[f"{name} lock"].append(p50 / d_p50)
                    ratios[f"{name} pipe"].append(rate / d_rate)
                    ratios[f"{name} cpu"].append(cpu)
                    line.append(f"{name} {p50 / d_p50:.2f}× p50, {rate / d_rate:.2f}× calls/s, "
                                f"{cpu:.1f} µs CPU/call")  # fmt: skip
                print(" | ".join(line), flush=True)
    except BenchError as exc:
        print(f"bench-ab: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        procs.stop_all()
    print("medians over rounds (lock-step p50 / direct: target <= 2; window 8 / direct: >= 0.7):")
    for name, path in checkouts.items():
        lock_m = statistics.median(ratios[f"{name} lock"])
        pipe_m = statistics.median(ratios[f"{name} pipe"])
        cpus = ratios[f"{name} cpu"]
        print(f"  {name} {path}: lock-step {lock_m:.2f}×, window 8 {pipe_m:.2f}×, verld CPU "
              f"{statistics.median(cpus):.1f} µs/call pipelined "
              f"({min(cpus):.1f}–{max(cpus):.1f})")  # fmt: skip
    return 0
