"""`verld-sim`: command line → device, port and loop."""

from __future__ import annotations

import argparse
import codecs
import logging
import math
import os
import random
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

from verld import __version__
from verld.codec.modbus import MAX_RTU_UNIT
from verld.codec.registry import CODECS, PluginError, spec
from verld.config.framefile import load_declaration
from verld.errors import ConfigError
from verld.sim.device import Device, LinePersonality, make_personality
from verld.sim.faults import (
    Counters,
    Faults,
    parse_baud,
    parse_ms,
    parse_probability,
    parse_seconds,
)
from verld.sim.loop import Beacon, Sim
from verld.sim.modbus import parse_units
from verld.sim.ports import Port, PtyPort, TcpPort

T = TypeVar("T")

MAX_NMEA_HZ = 1000.0  #: fastest --nmea rate (real receivers do 1..25 Hz)


#: one command-line option: its flags and its `add_argument` keywords
Option = tuple[tuple[str, ...], dict[str, Any]]


def _opt(*flags: str, **kwargs: Any) -> Option:
    """One table row: `_opt("--seed", type=int)` is `add_argument("--seed", type=int)`."""
    return flags, kwargs


def _where_options() -> tuple[Option, ...]:
    """Where the device lives: a pty or a TCP port (mutually exclusive)."""
    return (
        _opt(
            "--link",
            metavar="PATH",
            help="symlink to the pty's device end (default /tmp/verld-sim-<pid>)",
        ),
        _opt(
            "--tcp",
            metavar="PORT",
            type=_port,
            help="listen on 127.0.0.1:PORT instead of a pty (0 = any free port)",
        ),
    )


def _device_options() -> tuple[Option, ...]:
    """What the device speaks, and its control socket."""
    return (
        _opt(
            "--codec",
            choices=tuple(CODECS),
            default="verl",
            help="link codec; modbus-rtu / modbus-tcp make it a Modbus slave (see --units)",
        ),
        _opt("--max-payload", metavar="N", type=_positive, default=4096),
        _opt(
            "--terminator",
            metavar="TEXT",
            type=_terminator,
            default=b"\n",
            help="line codec: request terminator, backslash escapes allowed (default \\n)",
        ),
        _opt("--crlf", action="store_true", help="line codec: end reply lines with \\r\\n"),
        _opt(
            "--nmea",
            metavar="HZ",
            type=_rate,
            default=0.0,
            help="line codec: be a GPS, sending a fix (NMEA GGA, RMC, GSA) HZ times a second",
        ),
        _opt(
            "--units",
            metavar="LIST",
            type=_arg(parse_units),
            default=(1,),
            help="modbus codecs: the unit ids served, e.g. 1,2,7 (default 1); others stay silent",
        ),
        _opt(
            "--frame",
            metavar="FILE",
            help="frame codec: a YAML file holding the device.frame mapping (how requests, "
            "replies and events are framed)",
        ),
        _opt("--control", metavar="PATH", help="Unix socket for runtime control"),
    )


def _fault_options() -> tuple[Option, ...]:
    """The faults at start-up (the control socket changes them at run time)."""
    return (
        _opt("--latency", metavar="MS", type=_arg(parse_ms), default=0.0),
        _opt(
            "--jitter",
            metavar="MS",
            type=_arg(parse_ms),
            default=0.0,
            help="uniform extra latency 0..MS",
        ),
        _opt(
            "--drop",
            metavar="P",
            type=_arg(parse_probability),
            default=0.0,
            help="probability a request gets no reply",
        ),
        _opt(
            "--corrupt",
            metavar="P",
            type=_arg(parse_probability),
            default=0.0,
            help="probability a reply has one byte flipped",
        ),
        _opt(
            "--garbage",
            metavar="P",
            type=_arg(parse_probability),
            default=0.0,
            help="probability 1..64 random bytes precede a reply",
        ),
        _opt(
            "--baud",
            metavar="N",
            type=_arg(parse_baud),
            default=0,
            help="pace the line both ways at N baud, N/10 bytes per second (0 = unpaced)",
        ),
        _opt("--hang", action="store_true", help="start hung: read requests, never answer"),
        _opt(
            "--unplug-every",
            metavar="S",
            type=_arg(parse_seconds),
            default=0.0,
            help="unplug every S seconds (0 = never)",
        ),
        _opt(
            "--replug-after",
            metavar="S",
            type=_positive_seconds,
            default=1.0,
            help="an automatic unplug lasts S seconds (default 1)",
        ),
    )


def _run_options() -> tuple[Option, ...]:
    """Randomness and logging."""
    return (
        _opt("--seed", metavar="N", type=int, help="seed the fault randomness"),
        _opt("--verbose", "-v", action="store_true", help="log to stderr"),
    )


def _add(target: argparse._ActionsContainer, options: tuple[Option, ...]) -> None:
    """Add `options` to a parser or one of its groups, in order."""
    for flags, kwargs in options:
        target.add_argument(*flags, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The verld-sim command line."""
    p = argparse.ArgumentParser(
        prog="verld-sim",
        description="Simulated device for verld: a pty (or TCP port) speaking verl, "
        "length or line, or a Modbus slave (modbus-rtu, modbus-tcp), with faults on demand. "
        "Prints 'READY <address>' once it serves.",
    )
    # Order matters: it is the order of the usage line and of each --help section.
    _add(p.add_mutually_exclusive_group(), _where_options())
    _add(p, _device_options())
    faults = p.add_argument_group("faults (see --control for changing them at run time)")
    _add(faults, _fault_options())
    _add(p, _run_options())
    p.add_argument("--version", action="version", version=f"verld-sim {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM/SIGINT; the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        codec = spec(args.codec)
    except PluginError as exc:
        parser.error(f"--codec: {exc}")
    # (a declared framing's commands come with its declaration: `--frame`, below)
    if codec.commands is None and not (codec.bus or codec.text or codec.declared):
        parser.error(
            f"--codec {args.codec}: the simulator plays binary commands (a codec "
            "spec's commands), lines or Modbus; this codec has none of them"
        )
    if codec.rtu and not all(1 <= unit <= MAX_RTU_UNIT for unit in args.units):
        parser.error("--units: modbus-rtu serves units 1..247 (0 is the broadcast address)")
    if args.nmea and not codec.text:
        parser.error(f"--nmea: NMEA sentences are lines: it needs --codec line, not {args.codec}")
    if codec.declared != (args.frame is not None):
        parser.error("--frame FILE goes with --codec frame, and --codec frame needs it")
    frame = None
    if args.frame is not None:
        try:
            frame = load_declaration(args.frame)
        except ConfigError as exc:
            parser.error(f"--frame: {exc}")
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
    personality = make_personality(
        args.codec, args.max_payload, args.terminator, args.crlf, args.units, frame
    )
    device = Device(personality, faults, Counters(), random.Random(args.seed))
    beacon = None
    if args.nmea and isinstance(personality, LinePersonality):
        beacon = Beacon(1.0 / args.nmea, personality.fix_events)
    try:
        port: Port = (
            TcpPort(args.tcp)
            if args.tcp is not None
            else PtyPort(args.link or f"/tmp/verld-sim-{os.getpid()}")
        )
        return Sim(port, device, args.control, trace=args.verbose, beacon=beacon).run()
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


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rate in Hz, got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_NMEA_HZ):
        raise argparse.ArgumentTypeError(f"must be > 0 and <= {MAX_NMEA_HZ:g} Hz, got {text}")
    return value


def _terminator(text: str) -> bytes:
    value = codecs.decode(text, "unicode_escape").encode("latin-1")
    if not value:
        raise argparse.ArgumentTypeError("the terminator must not be empty")
    return value
