"""`tools/soak`'s command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

from soaklib import modbus, neighbours
from soaklib.faults import FAULTS, applicable
from soaklib.report import render, verdict
from soaklib.run import Options, soak
from verld.testing import HarnessError


def parse_faults(text: str) -> list[str] | None:
    """A --faults value: the fault names, or None for `all` (each the codec can take)."""
    if text == "all":
        return None
    if text == "none":
        return []
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(FAULTS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown fault(s) {', '.join(unknown)}; choose from {', '.join(FAULTS)}"
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tools/soak",
        description="Soak verld: N clients calling through it while verld-sim injects faults.",
    )
    p.add_argument("--clients", type=int, default=4, metavar="N")
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        metavar="T",
        help="the soak's length (default 30); with --neighbours, each case's "
        f"(default {neighbours.DEFAULT_SECONDS:g})",
    )
    p.add_argument(
        "--neighbours",
        action="store_true",
        help="the neighbour battery instead: every codec x front x misbehaving neighbour "
        "beside a well-behaved client, the table of what that client saw",
    )
    p.add_argument(
        "--cases",
        metavar="GLOB[,GLOB]",
        help="with --neighbours: only the cases whose VARIANT/FRONT/BEHAVIOUR id matches",
    )
    p.add_argument(
        "--faults",
        type=parse_faults,
        default=None,
        metavar="all|none|LIST",
        help=f"comma-separated, from: {', '.join(FAULTS)} (default all: those the codec can take)",
    )
    p.add_argument(
        "--codec",
        choices=("verl", *modbus.CODECS),
        default="verl",
        help="verl: echo calls (default); modbus-rtu, modbus-tcp: verld and verld-sim on "
        f"that codec, clients writing and reading back holding registers on units "
        f"{','.join(map(str, modbus.UNITS))}, some calls to the silent unit {modbus.SILENT}",
    )
    p.add_argument("--seed", type=int, default=None, metavar="S")
    p.add_argument("--depth", type=int, default=4, help="calls in flight per client (default 4)")
    p.add_argument(
        "--warmup",
        type=float,
        default=None,
        metavar="S",
        help="seconds before the RSS baseline (default: a quarter of T, at most 60)",
    )
    p.add_argument("--json", dest="json_out", metavar="OUT", help="also write the report here")
    p.add_argument(
        "--max-rss-growth",
        type=float,
        default=None,
        metavar="MIB",
        help="fail when RSS grows more than this after the warm-up",
    )
    p.add_argument("--keep", action="store_true", help="keep the work dir (config, daemon log)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.seconds is not None and args.seconds <= 0:
        print("tools/soak: --seconds must be positive", file=sys.stderr)
        return 2
    if args.neighbours:
        command = "tools/soak " + " ".join(argv if argv is not None else sys.argv[1:])
        seconds = args.seconds or neighbours.DEFAULT_SECONDS
        return neighbours.run(seconds, args.cases, args.json_out, args.keep, command)
    args.seconds = args.seconds or 30.0
    if args.clients < 1 or args.seconds <= 0 or args.depth < 1:
        print("tools/soak: --clients, --seconds and --depth must be positive", file=sys.stderr)
        return 2
    if args.codec in modbus.CODECS and args.clients > modbus.MAX_CLIENTS:
        print(
            f"tools/soak: --codec {args.codec} takes at most {modbus.MAX_CLIENTS} clients "
            "(client k owns holding register k of the sim's 100)",
            file=sys.stderr,
        )
        return 2
    named = args.faults is not None
    try:
        faults, left_out = applicable(args.codec, args.faults if named else list(FAULTS), named)
    except ValueError as exc:
        print(f"tools/soak: {exc}", file=sys.stderr)
        return 2
    for name, why in left_out.items():
        print(f"tools/soak: fault {name} left out on {args.codec}: {why}", file=sys.stderr)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    warmup = args.warmup if args.warmup is not None else min(args.seconds / 4, 60.0)
    opts = Options(
        args.clients,
        args.seconds,
        faults,
        seed,
        args.depth,
        warmup,
        args.json_out,
        args.max_rss_growth,
        args.keep,
        args.codec,
        left_out,
    )
    workdir = Path(tempfile.mkdtemp(prefix="verld-soak-"))
    try:
        report = asyncio.run(soak(opts, workdir))
    except (RuntimeError, HarnessError) as exc:
        print(f"tools/soak: {exc}", file=sys.stderr)
        log = workdir / "verld.log"
        if log.exists():
            sys.stderr.write(log.read_text(errors="replace")[-4000:])
        return 3
    finally:
        if opts.keep:
            print(f"tools/soak: work dir kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    broken = verdict(report, opts.max_rss_growth)
    report["command"] = "tools/soak " + " ".join(argv if argv is not None else sys.argv[1:])
    report["passed"] = not broken
    report["broken"] = broken
    print(render(report, broken), flush=True)
    if opts.json_out:
        Path(opts.json_out).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if broken else 0
