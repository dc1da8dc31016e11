"""`tools/bench` and `tools/bench-fleet`: the command line, set-up and clean-up, and outputs.

A run is one or more families (`benchlib.families`) on the one engine: a full run
`api`, `ports`, `modbus`, `network` and `links`; `--ports`, `--modbus`, `--family NAME`
(repeatable) pick; `--quick` is a smoke run of every family (fleet too, where mosquitto
is installed) with tiny windows, each family in a child process of its own, side by
side (its figures say nothing about speed: it checks that everything runs and every
call is right).
`tools/bench-fleet` is `--family fleet`. The JSON has every family's section
(`families.NAME`: each phase's rounds, `summary` of figures and targets, `info`).

Exit codes: 0 every call answered correctly (targets may still fail: they are
reported, not enforced), 1 a wrong or missing reply or another broken invariant,
2 the bench could not run (bad arguments, a process did not start), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from benchlib import report
from benchlib.engine import Run, Timing
from benchlib.families import NAMES, family
from benchlib.families.modbus import MBUSD_BUILD, MBUSD_SRC
from benchlib.host import ROOT, loadavg, machine, which
from benchlib.procs import BenchError, Procs

ENGINE = 2  #: the JSON's shape (docs/bench.json from before the one engine has none)
MARKERS = {
    "api": "bench",
    "ports": "bench:ports",
    "modbus": "bench:modbus",
    "network": "bench:network",
    "links": "bench:links",
    "fleet": "bench:fleet",
}


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Benchmark verld against what it can be "
        "compared with, family by family (docs/benchmarks.md): its API against a direct pty and "
        "socat, its virtual serial ports, its Modbus TCP gateway against a direct RTU master and "
        "mbusd, its network ports against ser2net, its rfc2217:// device link against tcp:// "
        "(both through ser2net), and verld-mqtt against verld's socket and a "
        "bare MQTT echo, in interleaved rounds. Prints tables; writes JSON (and the plot and "
        "docs/benchmarks.md on a full run).",
    )
    add = p.add_argument
    add("--rounds", type=int, help="interleaved rounds (default 5; --quick: 1)")
    add("--quick", action="store_true", help="a smoke run of every family (no docs written)")
    add("--family", action="append", choices=NAMES, help="run this family (repeatable)")
    add(
        "--phase",
        action="append",
        metavar="NAME",
        help="run only this phase of the family "
        "(repeatable; --quick runs the api family's rounds beside its other phases)",
    )
    add("--idle-seconds", type=float, help="idle CPU window (default 30; --quick: 0.3)")
    add("--baud", type=int, default=115200, help="the paced rounds' rate (0 skips them)")
    add("--warmup", type=float, help="seconds before each window (0.5; --quick: 0.05)")
    add("--duration", type=float, help="seconds of each window (2; --quick: 0.2)")
    add("--json", metavar="PATH", help="results file (full run: docs/bench.json)")
    add("--plot", metavar="PATH", help="plot file (full run with api: docs/bench.png)")
    add("--markdown", metavar="PATH", help="refresh the families' results in PATH")
    add("--no-docs", action="store_true", help="write only what is asked explicitly")
    add("--keep-tmp", action="store_true", help="keep the temp dir (logs, configs)")
    add(
        "--from-json",
        metavar="PATH",
        help="measure nothing: print a saved run's tables, redraw its plot/markdown",
    )
    vp = p.add_argument_group("ports family")
    vp.add_argument("--ports", action="store_true", help="run only the ports family")
    vp.add_argument("--no-ports", action="store_true", help="leave it out")
    mb = p.add_argument_group(
        "modbus family",
        "mbusd is built from its source (github.com/"
        "3cky/mbusd, not in this repository: --mbusd-src or $MBUSD_SRC) when cmake, make and a C "
        "compiler are there; else the family runs without the mbusd path and says why.",
    )
    mb.add_argument("--modbus", action="store_true", help="run only the modbus family")
    mb.add_argument("--no-modbus", action="store_true", help="leave it out")
    mb.add_argument("--no-mbusd", action="store_true", help="without the mbusd path")
    mb.add_argument("--mbusd", metavar="BINARY", help="use this mbusd instead of building one")
    mb.add_argument("--mbusd-src", metavar="DIR", default=MBUSD_SRC, help="mbusd's source")
    mb.add_argument("--mbusd-build", metavar="DIR", default=MBUSD_BUILD, help="its build dir")
    mb.add_argument("--modbus-baud", type=int, default=19200, help="paced rate (0 skips it)")
    mb.add_argument("--modbus-registers", type=int, default=10, help="registers per call (1..125)")
    fl = p.add_argument_group("fleet family (tools/bench-fleet)")
    fl.add_argument("--devices", type=int, help="devices of the rounds (16; --quick: 1)")
    fl.add_argument("--rss-devices", type=int, help="devices of the RSS phase (64; --quick: 1)")
    fl.add_argument(
        "--bridge-checkout",
        type=Path,
        metavar="DIR",
        help="run verld-mqtt from this checkout instead of this one",
    )
    return p


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None, prog: str = "tools/bench") -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--gen"] and len(argv) == 3:
        from benchlib import gen

        return gen.main(argv[1], argv[2])
    args = _parser(prog).parse_args(argv)
    if args.from_json is not None:
        return _rerender(args)
    problem = _check(args)
    if problem:
        print(f"bench: {problem}", file=sys.stderr)
        return 2
    names = _families(args)
    # children (sim, verld, generators) run this checkout's verld, like the bench itself
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    procs, tmp = Procs(), Path(tempfile.mkdtemp(prefix="verld-bench-"))
    try:
        if args.quick and len(names) > 1:
            return _side_by_side(args, argv, names, procs, tmp)
        return _run(args, names, procs, tmp, prog)
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


def _check(args: argparse.Namespace) -> str | None:
    if args.rounds is not None and args.rounds < 1:
        return "--rounds must be at least 1"
    for part in ("modbus", "ports"):
        if getattr(args, part) and getattr(args, "no_" + part):
            return f"--{part} and --no-{part} exclude each other"
    if not 1 <= args.modbus_registers <= 125:
        return "--modbus-registers must be 1..125"
    if (args.devices is not None and args.devices < 1) or (args.rss_devices or 1 << 30) < (
        args.devices or 1
    ):
        return "need --devices >= 1 and --rss-devices >= --devices"
    return None


def _families(args: argparse.Namespace) -> list[str]:
    if args.family:
        return list(dict.fromkeys(args.family))
    if args.ports or args.modbus:
        return [n for n in ("ports", "modbus") if getattr(args, n)]
    fleet = ["fleet"] if args.quick and which("mosquitto") else []
    names = ["api", "ports", "modbus", "network", "links", *fleet]
    return [n for n in names if not getattr(args, f"no_{n}", False)]


def _run(args: argparse.Namespace, names: list[str], procs: Procs, tmp: Path, prog: str) -> int:
    quick = args.quick
    rounds = args.rounds or (1 if quick else 5)
    warmup = args.warmup if args.warmup is not None else (0.03 if quick else 0.5)
    duration = args.duration if args.duration is not None else (0.12 if quick else 2.0)
    if args.idle_seconds is None:
        args.idle_seconds = 0.3 if quick else 30.0
    paced = Timing(
        max(warmup, 0.05 if quick else 0.2),
        max(duration, 0.25 if quick else 0.6) * (1 if quick else 1.25),
    )
    docs = not quick and not args.no_docs and names != ["fleet"]
    meta = machine()
    meta.update(
        command=shlex.join([prog, *sys.argv[1:]]),
        rounds=rounds,
        warmup_s=warmup,
        duration_s=duration,
        paced_duration_s=paced.duration,
        families=names,
        loadavg_start=loadavg(),
    )
    _say(
        f"bench: {meta['nproc']} CPUs ({meta['cpu']}), Python {meta['python']}, {rounds} rounds, "
        f"families {' '.join(names)}"
    )
    run = Run(
        procs,
        tmp,
        rounds=rounds,
        timings={"lock": Timing(warmup, duration), "paced": paced},
        say=_say,
        options=args,
        quick=quick,
    )
    sections = {}
    for name in names:
        sections[name] = run.family(family(name))
    meta["loadavg_end"] = loadavg()
    result = {
        "engine": ENGINE,
        "meta": meta,
        "ok": not run.errors,
        "errors": run.errors,
        "warnings": run.warnings,
        "families": sections,
    }
    _print_tables(result)
    json_path = args.json or (str(ROOT / "docs/bench.json") if docs and "api" in names else None)
    plot_path = args.plot or (str(ROOT / "docs/bench.png") if docs and "api" in names else None)
    _write(
        result,
        json_path,
        plot_path,
        args.markdown or (str(ROOT / "docs/benchmarks.md") if docs else None),
    )
    return _verdict(result)


def _side_by_side(
    args: argparse.Namespace, argv: list[str], names: list[str], procs: Procs, tmp: Path
) -> int:
    """--quick: each family in a child of its own, at once; their JSON merged."""
    children = []
    for name in names:  # the api family, the longest, as two children: rounds | the rest
        for part in (["rounds"], ["paced", "idle", "codecs"]) if name == "api" else [[]]:
            tag = "-".join([name, *part])
            out = tmp / f"{tag}.json"
            cmd = [
                sys.executable,
                str(ROOT / "tools" / "bench"),
                *_strip(argv),
                "--family",
                name,
                *(w for p in part for w in ("--phase", p)),
                "--json",
                str(out),
            ]
            with open(tmp / f"{tag}.out", "wb") as log:
                children.append((tag, out, procs.spawn(cmd, stdout=log, stderr=subprocess.STDOUT)))
    started, done = time.monotonic(), dict[str, int]()
    while len(done) < len(children):
        for name, _, proc in children:
            if name not in done and proc.poll() is not None:
                done[name] = proc.returncode
                _say(f"bench: family {name} done after {time.monotonic() - started:.1f} s")
        time.sleep(0.05)
    codes = list(done.values())
    merged: dict[str, Any] = {
        "engine": ENGINE,
        "meta": None,
        "ok": True,
        "errors": [],
        "warnings": [],
        "families": {},
    }
    for name, out, _ in children:
        print((tmp / f"{name}.out").read_text(errors="replace"), end="", flush=True)
        if not out.exists():
            continue
        part = json.loads(out.read_text())
        merged["meta"] = merged["meta"] or {
            **part["meta"],
            "command": shlex.join(["tools/bench", *argv]),
        }
        merged["meta"]["families"] = names
        merged["ok"] &= part["ok"]
        merged["errors"] += part["errors"]
        merged["warnings"] += part["warnings"]
        for fam, section in part["families"].items():
            if fam in merged["families"]:  # the api family's second child: its phases
                section["paths"].update(merged["families"][fam]["paths"])
                section["phases"].update(merged["families"][fam]["phases"])
                section["summary"] = report.summarise(family(fam), section)
            merged["families"][fam] = section
    _write(merged, args.json, args.plot, args.markdown)
    worst = max(codes)
    return worst if worst in (1, 2, 130) else (2 if any(codes) else 0)


def _strip(argv: list[str]) -> list[str]:
    """argv without the options the side-by-side run gives each child itself."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--json", "--plot", "--markdown", "--family", "--phase"):
            skip = True
        elif not word.startswith(("--json=", "--plot=", "--markdown=", "--family=", "--phase=")):
            out.append(word)
    return out


def _print_tables(result: dict[str, Any]) -> None:
    for name, section in result["families"].items():
        print()
        print(report.table(family(name), section, result["meta"]))


def _verdict(result: dict[str, Any]) -> int:
    for warning in result["warnings"]:
        print(f"bench: warning: {warning}", file=sys.stderr)
    for error in result["errors"]:
        print(f"bench: ERROR: {error}", file=sys.stderr)
    return 0 if not result["errors"] else 1


def _rerender(args: argparse.Namespace) -> int:
    """Tables, plot and markdown from a saved run (to change how it is shown, not measured)."""
    result = json.loads(Path(args.from_json).read_text())
    if result.get("engine") != ENGINE:
        print(
            f"bench: {args.from_json} is from an older engine (before tools/bench was one "
            "engine for every family): its figures are in docs/benchmarks.md as they were; "
            "run tools/bench again for a file this one reads",
            file=sys.stderr,
        )
        return 2
    for name, section in result["families"].items():
        section["summary"] = report.summarise(family(name), section)
    _print_tables(result)
    _write(result, args.json, args.plot, args.markdown)
    return 0 if result["ok"] else 1


def _write(
    result: dict[str, Any], json_path: str | None, plot_path: str | None, md_path: str | None
) -> None:
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=1) + "\n")
        _say(f"bench: results in {json_path}")
    if md_path:
        for name, section in result["families"].items():
            text = report.markdown(family(name), section, result["meta"])
            _refresh_markdown(Path(md_path), text, MARKERS[name])
        _say(f"bench: figures refreshed in {md_path}")
    if plot_path and "api" in result["families"]:
        from benchlib.plot import plot

        try:
            skipped = plot(result, Path(plot_path))
        except Exception as exc:  # the figures are written already: do not lose the run
            skipped = f"plot failed ({type(exc).__name__}: {exc}); the figures are unaffected"
        _say(f"bench: {skipped}" if skipped else f"bench: plot in {plot_path}")


def _refresh_markdown(path: Path, section: str, marker: str) -> None:
    """Replace what lies between `<!-- MARKER:begin -->` and its end (append them if missing)."""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    text = path.read_text() if path.exists() else "# verld benchmarks\n"
    block = f"{begin}\n{section}\n{end}"
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        text = head + block + rest.partition(end)[2]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def _say(line: str) -> None:
    print(line, flush=True)
