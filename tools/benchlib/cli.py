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
from benchlib import mbreport, mbworker, portbench, portreport, portworker, report, worker
from benchlib.modbus import (
    MBUSD_BUILD,
    MBUSD_SRC,
    MbusdBuild,
    ModbusRunner,
    ModbusTiming,
    build_mbusd,
    prebuilt_mbusd,
)
from benchlib.procs import BenchError, Procs
from benchlib.runner import Runner, Timing

ROOT = Path(__file__).resolve().parent.parent.parent
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
MODBUS_BEGIN, MODBUS_END = "<!-- bench:modbus:begin -->", "<!-- bench:modbus:end -->"
PORTS_BEGIN, PORTS_END = "<!-- bench:ports:begin -->", "<!-- bench:ports:end -->"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tools/bench",
        description="Benchmark verld (its API and its virtual serial ports) against a direct "
        "pty and a socat relay, all on one verld-sim, in interleaved rounds; and verld's "
        "Modbus TCP gateway against a direct RTU master and mbusd. Prints a table, writes "
        "JSON (and a plot and "
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
    mb = p.add_argument_group(
        "Modbus rounds",
        "Part of a full run; --quick runs them only with --modbus. mbusd is built from "
        "its source (github.com/3cky/mbusd, not in this repository: --mbusd-src or "
        "$MBUSD_SRC) when cmake, make and a C compiler are there; else the rounds run "
        "without the mbusd column and say why.",
    )
    mb.add_argument("--modbus", action="store_true", help="run only the Modbus rounds")
    mb.add_argument("--no-modbus", action="store_true", help="leave the Modbus rounds out")
    mb.add_argument("--no-mbusd", action="store_true", help="Modbus rounds without mbusd")
    mb.add_argument("--mbusd", metavar="BINARY", help="use this mbusd instead of building one")
    mb.add_argument("--mbusd-src", metavar="DIR", default=MBUSD_SRC, help="mbusd's source")
    mb.add_argument(
        "--mbusd-build", metavar="DIR", default=MBUSD_BUILD, help=f"build dir ({MBUSD_BUILD})"
    )
    mb.add_argument(
        "--modbus-baud",
        type=int,
        default=19200,
        help="the paced Modbus rounds' baud rate (default 19200; 0 skips them)",
    )
    mb.add_argument(
        "--modbus-registers",
        type=int,
        default=10,
        help="holding registers each Modbus call reads (default 10, at most 125)",
    )
    vp = p.add_argument_group("Virtual serial port rounds", portbench.HELP)
    vp.add_argument("--ports", action="store_true", help="run only the port rounds")
    vp.add_argument("--no-ports", action="store_true", help="leave the port rounds out")
    for hidden in ("--worker", "--modbus-worker", "--port-worker"):
        p.add_argument(hidden, metavar="SPEC", help=argparse.SUPPRESS)
    return p


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker is not None:
        return worker.main(args.worker)
    if args.modbus_worker is not None:
        return mbworker.main(args.modbus_worker)
    if args.port_worker is not None:
        return portworker.main(args.port_worker)
    if args.from_json is not None:
        return _rerender(args)
    if args.rounds is not None and args.rounds < 1:
        print("bench: --rounds must be at least 1", file=sys.stderr)
        return 2
    for part in ("modbus", "ports"):
        if getattr(args, part) and getattr(args, "no_" + part):
            print(f"bench: --{part} and --no-{part} exclude each other", file=sys.stderr)
            return 2
    if not 1 <= args.modbus_registers <= 125:
        print("bench: --modbus-registers must be 1..125", file=sys.stderr)
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
    with_core = not (args.modbus or args.ports)  # --modbus, --ports: only those parts
    with_modbus = args.modbus or (with_core and not (quick or args.no_modbus))
    with_ports = args.ports or (with_core and not args.no_ports)
    docs = not quick and not args.no_docs
    core_docs = docs and with_core  # a Modbus- or port-only run leaves bench.json/png alone
    json_path = args.json or (str(ROOT / "docs/bench.json") if core_docs else None)
    plot_path = args.plot or (str(ROOT / "docs/bench.png") if core_docs else None)
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
    result: dict[str, Any] = {"meta": meta}
    errors: list[str] = []
    warnings: list[str] = []
    if with_core or with_ports:
        make = portbench.runner(core=with_core) if with_ports else Runner
        runner = make(procs, tmp, timing=timing, paced_timing=paced_timing, say=_say)
        all_rounds = [runner.round(n) for n in range(rounds)]
        paced = runner.paced(args.baud, rounds) if args.baud else None
        if with_ports:  # the port figures move to their own section
            result["ports"] = portbench.section(all_rounds, paced)
        if with_core:
            meta["paths"] = runner.paths
            idle = runner.idle(idle_seconds)
            summary = report.summarise(all_rounds, paced, idle, runner.paths)
            result.update(summary=summary, rounds=all_rounds, paced=paced, idle=idle)
        errors += runner.errors
        warnings += runner.warnings
    if with_modbus:
        result["modbus"] = _modbus(args, procs, tmp, rounds, timing, errors, warnings)
    meta["loadavg_end"] = _loadavg()
    result = {
        "meta": meta, "ok": not errors, "errors": errors, "warnings": warnings,
        **{k: v for k, v in result.items() if k != "meta"},
    }  # fmt: skip
    _print_tables(result)
    _write_outputs(result, json_path, plot_path, md_path)
    for warning in warnings:
        print(f"bench: warning: {warning}", file=sys.stderr)
    for error in errors:
        print(f"bench: ERROR: {error}", file=sys.stderr)
    return 0 if not errors else 1


def _modbus(
    args: argparse.Namespace,
    procs: Procs,
    tmp: Path,
    rounds: int,
    timing: Timing,
    errors: list[str],
    warnings: list[str],
) -> dict[str, Any]:
    """The Modbus rounds (benchlib.modbus): mbusd built or not, then every round."""
    try:
        import pymodbus
    except ImportError:
        raise BenchError(
            "the Modbus rounds need pymodbus (pip install 'pymodbus>=3.11,<4'; it is in the "
            "test extra), or leave them out with --no-modbus"
        ) from None
    if args.no_mbusd:
        mbusd = MbusdBuild(None, "", "left out (--no-mbusd)")
    elif args.mbusd:
        mbusd = prebuilt_mbusd(args.mbusd, f"the binary {args.mbusd}")
    else:
        _say(f"bench: building mbusd from {args.mbusd_src} into {args.mbusd_build}")
        mbusd = build_mbusd(args.mbusd_src, args.mbusd_build, tmp / "mbusd-build.log")
    if mbusd.binary is None:
        _say(f"bench: NO mbusd: {mbusd.note}; the Modbus rounds run without the mbusd column")
    else:
        _say(f"bench: mbusd {mbusd.version}: {mbusd.note}")
    mb_timing = ModbusTiming(
        lock=timing,
        paced=Timing(max(timing.warmup, 0.3), timing.duration * 1.5),
        offline=Timing(max(timing.warmup, 2.5), timing.duration * 3),
    )
    baud = args.modbus_baud
    runner = ModbusRunner(
        procs, tmp, timing=mb_timing, baud=baud, mbusd=mbusd, say=_say,
        registers=args.modbus_registers,
    )  # fmt: skip
    mb_rounds: list[dict[str, Any]] = []
    try:
        for n in range(rounds):
            mb_rounds.append(runner.round(n))
    finally:
        errors += runner.errors
        warnings += runner.warnings
    return {
        "paths": runner.paths,
        "baud": baud,
        "registers": runner.registers,
        "wire_bytes_per_call": runner.wire_bytes,
        "pymodbus": pymodbus.__version__,
        "mbusd": {"binary": mbusd.binary, "version": mbusd.version, "note": mbusd.note},
        "timing": {k: vars(v) for k, v in vars(mb_timing).items()},
        "rounds_n": rounds,
        "summary": mbreport.summarise(mb_rounds, runner.paths),
        "rounds": mb_rounds,
    }


def _print_tables(result: dict[str, Any]) -> None:
    if "summary" in result:
        print()
        print(report.table(result["summary"], result["meta"]["paths"], result["meta"].get("baud")))
    if "ports" in result:
        print()
        print(portreport.table(result["ports"]))
    if "modbus" in result:
        print()
        print(mbreport.table(result["modbus"]))


def _rerender(args: argparse.Namespace) -> int:
    """Tables, plot and markdown from a saved run (to change how it is shown, not measured)."""
    result = json.loads(Path(args.from_json).read_text())
    if "rounds" in result:
        paths = result["meta"]["paths"]
        result["summary"] = report.summarise(
            result["rounds"], result["paced"], result["idle"], paths
        )
    if "ports" in result:
        result["ports"]["summary"] = portreport.summarise(result["ports"])
    if "modbus" in result:
        mb = result["modbus"]
        mb["summary"] = mbreport.summarise(mb["rounds"], mb["paths"])
    _print_tables(result)
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
        if "summary" in result:
            section = report.markdown(result["summary"], result["meta"]["paths"], result["meta"])
            _refresh_markdown(Path(md_path), section)
        if "ports" in result:
            section = portreport.markdown(result["ports"], result["meta"])
            _refresh_markdown(Path(md_path), section, PORTS_BEGIN, PORTS_END)
        if "modbus" in result:
            section = mbreport.markdown(result["modbus"], result["meta"])
            _refresh_markdown(Path(md_path), section, MODBUS_BEGIN, MODBUS_END)
        _say(f"bench: figures refreshed in {md_path}")
    if plot_path and "rounds" in result:
        from benchlib.plot import plot

        try:
            skipped = plot(result, Path(plot_path))
        except Exception as exc:  # the figures are written already: do not lose the run
            skipped = f"plot failed ({type(exc).__name__}: {exc}); the figures are unaffected"
        _say(f"bench: {skipped}" if skipped else f"bench: plot in {plot_path}")


def _refresh_markdown(path: Path, section: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace what lies between the markers `begin` and `end` (append them if missing)."""
    text = path.read_text() if path.exists() else "# verld benchmarks\n"
    block = f"{begin}\n{section}\n{end}"
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
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
