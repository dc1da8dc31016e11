"""`verld-sim`: command line → device, port and loop."""

from __future__ import annotations

import argparse
import codecs
import logging
import os
import random
import sys
from collections.abc import Callable
from typing import TypeVar

import structlog

from verld.sim.device import Device, make_personality
from verld.sim.faults import (
    Counters,
    Faults,
    parse_baud,
    parse_ms,
    parse_probability,
    parse_seconds,
)
from verld.sim.loop import Sim
from verld.sim.ports import Port, PtyPort, TcpPort

T = TypeVar("T")


def build_parser() -> argparse.ArgumentParser:
    """The verld-sim command line."""
    p = argparse.ArgumentParser(
        prog="verld-sim",
        description="Simulated device for verld: a pty (or TCP port) speaking verl, "
        "length or line, with faults on demand. Prints 'READY <address>' once it serves.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--link",
        metavar="PATH",
        help="symlink to the pty's device end (default /tmp/verld-sim-<pid>)",
    )
    where.add_argument(
        "--tcp",
        metavar="PORT",
        type=_port,
        help="listen on 127.0.0.1:PORT instead of a pty (0 = any free port)",
    )
    p.add_argument("--codec", choices=("verl", "length", "line"), default="verl")
    p.add_argument("--max-payload", metavar="N", type=_positive, default=4096)
    p.add_argument(
        "--terminator",
        metavar="TEXT",
        type=_terminator,
        default=b"\n",
        help="line codec: request terminator, backslash escapes allowed (default \\n)",
    )
    p.add_argument("--crlf", action="store_true", help="line codec: end reply lines with \\r\\n")
    p.add_argument("--control", metavar="PATH", help="Unix socket for runtime control")
    f = p.add_argument_group("faults (see --control for changing them at run time)")
    f.add_argument("--latency", metavar="MS", type=_arg(parse_ms), default=0.0)
    f.add_argument(
        "--jitter",
        metavar="MS",
        type=_arg(parse_ms),
        default=0.0,
        help="uniform extra latency 0..MS",
    )
    f.add_argument(
        "--drop",
        metavar="P",
        type=_arg(parse_probability),
        default=0.0,
        help="probability a request gets no reply",
    )
    f.add_argument(
        "--corrupt",
        metavar="P",
        type=_arg(parse_probability),
        default=0.0,
        help="probability a reply has one byte flipped",
    )
    f.add_argument(
        "--garbage",
        metavar="P",
        type=_arg(parse_probability),
        default=0.0,
        help="probability 1..64 random bytes precede a reply",
    )
    f.add_argument(
        "--baud",
        metavar="N",
        type=_arg(parse_baud),
        default=0,
        help="pace the line both ways at N baud, N/10 bytes per second (0 = unpaced)",
    )
    f.add_argument("--hang", action="store_true", help="start hung: read requests, never answer")
    f.add_argument(
        "--unplug-every",
        metavar="S",
        type=_arg(parse_seconds),
        default=0.0,
        help="unplug every S seconds (0 = never)",
    )
    f.add_argument(
        "--replug-after",
        metavar="S",
        type=_positive_seconds,
        default=1.0,
        help="an automatic unplug lasts S seconds (default 1)",
    )
    p.add_argument("--seed", metavar="N", type=int, help="seed the fault randomness")
    p.add_argument("--verbose", "-v", action="store_true", help="log to stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM/SIGINT; the exit code."""
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    faults = Faults(
        latency=args.latency,
        jitter=args.jitter,
        drop=args.drop,
        corrupt=args.corrupt,
        garbage=args.garbage,
        baud=args.baud,
        hang=args.hang,
        unplug_every=args.unplug_every,
        replug_after=args.replug_after,
    )
    personality = make_personality(args.codec, args.max_payload, args.terminator, args.crlf)
    device = Device(personality, faults, Counters(), random.Random(args.seed))
    try:
        port: Port = (
            TcpPort(args.tcp)
            if args.tcp is not None
            else PtyPort(args.link or f"/tmp/verld-sim-{os.getpid()}")
        )
        return Sim(port, device, args.control, trace=args.verbose).run()
    except OSError as exc:
        print(f"verld-sim: {exc}", file=sys.stderr)
        return 1


def _configure_logging(verbose: bool) -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S.%f"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.DEBUG if verbose else logging.CRITICAL  # the sim never logs CRITICAL
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def _arg(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type that shows the parser's ValueError message."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {text}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _positive_seconds(text: str) -> float:
    value = parse_seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _terminator(text: str) -> bytes:
    value = codecs.decode(text, "unicode_escape").encode("latin-1")
    if not value:
        raise argparse.ArgumentTypeError("the terminator must not be empty")
    return value
