"""`verlctl inhibit [-- COMMAND ARG...]`: hand the real port to another program.

verld finishes what is on the link and closes the port, then tells its path. With no
COMMAND, verlctl holds the inhibition until Ctrl-C (or SIGTERM, or verld going
away). With one, it runs COMMAND with every `{port}` in its arguments replaced by
the path and `$VERLD_PORT` set, waits for it (Ctrl-C reaches COMMAND from the
terminal; verlctl waits for it to end), ends the inhibition and exits with
COMMAND's status: 127 when it cannot be run, 128+N when signal N ended it.
Refused as forbidden or busy: 5 or 6, like every command (docs/verlctl.md).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from verld.client import Client, ClientError
from verld.ctl.render import emit

CANNOT_RUN = 127


def cmd_inhibit(c: Client, args: argparse.Namespace) -> int:
    command = list(args.command_argv)
    if command[:1] == ["--"]:
        command = command[1:]
    c.hello("verlctl inhibit")  # the name `status` shows beside the pid
    port = c.inhibit()
    if not command:
        return _hold(c, args, port)
    code = run_command(command, port)
    _uninhibit(c)
    return code


def _hold(c: Client, args: argparse.Namespace, port: str) -> int:
    """Until Ctrl-C/SIGTERM (exit 0; closing the connection ends it) or verld goes away."""
    emit(args, f"inhibited: verld let go of {port}; Ctrl-C gives it back", {"port": port})
    c.timeout = None
    while True:
        c.receive()  # nothing is expected; Unreachable (exit 3) if verld goes away


def run_command(command: Sequence[str], port: str) -> int:
    """COMMAND with `{port}` replaced and $VERLD_PORT set; its exit status."""
    argv = [arg.replace("{port}", port) for arg in command]
    env = {**os.environ, "VERLD_PORT": port}
    try:
        proc = subprocess.Popen(argv, env=env)
    except OSError as exc:
        print(f"verlctl: cannot run {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return CANNOT_RUN
    # Ctrl-C goes to COMMAND from the terminal; verlctl only waits for it to end.
    # SIGTERM to verlctl is passed on to COMMAND.
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, lambda *_: _forward(proc))
    try:
        status = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    return status if status >= 0 else 128 - status


def _forward(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()


def _uninhibit(c: Client) -> None:
    """Give the port back now (closing the connection would too, a moment later)."""
    try:
        c.uninhibit()
    except ClientError as exc:
        print(f"verlctl: uninhibit: {exc.code}: {exc.message}", file=sys.stderr)
