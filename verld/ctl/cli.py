"""verlctl's command line: the argument table, the parser built from it, and `main`.

`SPEC` lists every command with its help and options (the parser is built from
it); `main` finds the socket, runs the command from `verld.ctl.commands` and turns
errors into the exit codes of `verld.ctl.codes` (docs/verlctl.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from verld import __version__
from verld.client import DEFAULT_SOCKET, Client, ClientError, PermissionDenied, Unreachable
from verld.config import load_config
from verld.ctl.codes import USAGE, Usage, exit_code
from verld.ctl.commands import COMMANDS, cmd_logs_journal
from verld.errors import ConfigError

EPILOG = """examples:
  verlctl status                         link state, counters, latency
  verlctl --socket /tmp/verld-demo.sock call --hex 01aabb
  verlctl call --text '*IDN?'            text request (line devices)
  verlctl call --text '*RST' --no-reply  a command the device does not answer
  verlctl ping -c 5                      five pings with a summary
  verlctl --json status | jq .link       machine-readable output
  verlctl events                         print device and link events until Ctrl-C

socket: --socket, else $VERLD_SOCKET, else --config's api.socket, else /run/verld/verld.sock
        (or $XDG_RUNTIME_DIR/verld.sock, a quick-start verld's, when only that one exists)
exit codes: 0 ok, 1 device error, 2 usage, 3 unreachable, 4 timeout/link down,
            5 forbidden, 6 busy
"""


@dataclass(frozen=True)
class Opt:
    """One add_argument call: its flags (or name) and keyword arguments."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any]


def opt(*flags: str, **kwargs: Any) -> Opt:
    return Opt(flags, kwargs)


class _Container(Protocol):
    """A parser or an argument group: what options are added to."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action: ...


@dataclass(frozen=True)
class Cmd:
    """A command's help and options; `one_of` is a required, mutually exclusive group."""

    help: str
    one_of: tuple[Opt, ...] = ()
    options: tuple[Opt, ...] = ()


#: options every command takes, before or after its name
COMMON = (
    opt("--socket", "-s", default=argparse.SUPPRESS, help="verld's API socket"),
    opt("--config", default=argparse.SUPPRESS, help="take the socket from this config"),
    opt("--json", action="store_true", default=argparse.SUPPRESS, help="JSON output"),
)

SPEC: dict[str, Cmd] = {
    "status": Cmd("link state, counters, latency"),
    "ping": Cmd(
        "ping the device through verld",
        options=(
            opt("-c", "--count", type=int, default=None, help="stop after N pings"),
            opt("-i", "--interval", type=float, default=1.0, help="seconds between pings"),
            opt("--timeout", type=float, default=None, help="seconds per ping"),
        ),
    ),
    "call": Cmd(
        "send one request, print the reply",
        one_of=(
            opt("--hex", help="request bytes as hex, e.g. 01aabb"),
            opt("--text", help="request as text (UTF-8)"),
            opt("--file", help="request bytes from a file"),
        ),
        options=(
            opt("--timeout", type=float, default=None, help="seconds per try"),
            opt("--retry", type=int, default=None, help="extra tries after a timeout"),
            opt("--wait", action="store_true", help="wait for the link if it is down"),
            opt(
                "--no-reply",
                action="store_true",
                help="a command the device does not answer: send it once, await nothing",
            ),
        ),
    ),
    "events": Cmd("print device and link events until Ctrl-C"),
    "monitor": Cmd(
        "live traffic, decoded per frame",
        options=(opt("--raw", action="store_true", help="raw bytes as read/written, garbage too"),),
    ),
    "logs": Cmd(
        "recent daemon log records",
        options=(
            opt("-n", "--lines", type=int, default=100),
            opt("-f", "--follow", action="store_true"),
            opt("--level", choices=["debug", "info", "warning", "error"], default=None),
            opt("--journal", action="store_true", help="read the systemd journal, not the daemon"),
            opt("-u", "--unit", help="with --journal: this unit's entries (e.g. verld@bench1)"),
            opt(
                "match",
                nargs="*",
                metavar="FIELD=VALUE",
                help="with --journal: e.g. LINK_STATE=down",
            ),
        ),
    ),
    "metrics": Cmd("Prometheus text exposition"),
    "top": Cmd(
        "live view of the link, its rates and every program using the device (q quits)",
        options=(
            opt(
                "--interval",
                type=float,
                default=1.0,
                metavar="S",
                help="seconds between looks (default 1)",
            ),
        ),
    ),
    "reconnect": Cmd("drop and reopen the device link (admin)"),
    "reload": Cmd("re-read the daemon's config (admin)"),
    "inhibit": Cmd(
        "let go of the device port for another program, e.g. a flasher (admin)",
        options=(
            opt(
                "command_argv",
                nargs="*",
                metavar="-- COMMAND ARG",
                help="run COMMAND ({port} in ARGs is the port, $VERLD_PORT too), then give "
                "the port back and exit with its status; without: hold until Ctrl-C",
            ),
        ),
    ),
}


def _add(target: _Container, opts: tuple[Opt, ...]) -> None:
    for o in opts:
        target.add_argument(*o.flags, **o.kwargs)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _add(common, COMMON)
    p = argparse.ArgumentParser(
        prog="verlctl",
        description="Inspect and drive a running verld.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    p.add_argument("--version", action="version", version=f"verlctl {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in SPEC.items():
        sp = sub.add_parser(name, parents=[common], help=cmd.help)
        if cmd.one_of:
            _add(sp.add_mutually_exclusive_group(required=True), cmd.one_of)
        _add(sp, cmd.options)
    return p


def default_socket(env: Mapping[str, str] = os.environ, system: str = DEFAULT_SOCKET) -> str:
    """$VERLD_SOCKET, else `system` (/run/verld/verld.sock), else
    $XDG_RUNTIME_DIR/verld.sock when only that one exists (where `verld PORT` run by
    this user listens)."""
    if env.get("VERLD_SOCKET"):
        return env["VERLD_SOCKET"]
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and not os.path.lexists(system):
        mine = os.path.join(runtime, "verld.sock")
        if os.path.lexists(mine):
            return mine
    return system


def _socket_path(args: argparse.Namespace) -> str | None:
    """--socket, else $VERLD_SOCKET, else --config's api.socket; None: the default."""
    if getattr(args, "socket", None):
        return str(args.socket)
    config = getattr(args, "config", None)
    if config and not os.environ.get("VERLD_SOCKET"):
        try:
            return load_config(config).api.socket
        except ConfigError as exc:
            raise Usage(f"--config: {exc}") from None
    return os.environ.get("VERLD_SOCKET") or None


def _run(args: argparse.Namespace) -> int:
    if args.command == "logs" and args.journal:
        return cmd_logs_journal(args)
    if args.command == "logs" and (args.unit or args.match):
        raise Usage("-u/--unit and FIELD=VALUE matches read the journal: add --journal")
    path = _socket_path(args)
    try:
        client = Client(path or default_socket(), timeout=60.0).connect()
    except PermissionDenied:
        raise
    except Unreachable as exc:
        if path is None:  # the default: say how another socket is named
            hint = (
                "is verld running? (--socket PATH, $VERLD_SOCKET or --config FILE name its socket)"
            )
            raise Unreachable(f"{exc.message}; {hint}") from None
        raise
    with client as c:
        return COMMANDS[args.command](c, args)


def _failed(args: argparse.Namespace, exc: ClientError) -> int:
    """Report an error reply (also as JSON with --json); its exit code."""
    if args.json:
        print(json.dumps({"error": {"code": exc.code, "message": exc.message}}), flush=True)
    if isinstance(exc, PermissionDenied):  # the message says it all: "permission denied on ..."
        print(f"verlctl: {exc.message}", file=sys.stderr)
    else:
        print(f"verlctl: {exc.code}: {exc.message}", file=sys.stderr)
    return exit_code(exc.code)


def _stop(_sig: int, _frame: object) -> NoReturn:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.json = getattr(args, "json", False)
    signal.signal(signal.SIGTERM, _stop)
    try:
        return _run(args)
    except Usage as exc:
        print(f"verlctl: {exc}", file=sys.stderr)
        return USAGE
    except ClientError as exc:
        return _failed(args, exc)
    except (KeyboardInterrupt, BrokenPipeError):
        return 0
