"""verlctl's commands against a connected `Client` (and `logs --journal`, without one).

Each `cmd_*` takes the client and the parsed arguments and returns the exit code;
`COMMANDS` maps command names to them. Output goes through `verld.ctl.render`.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from verld import journal
from verld.client import Client, ClientError, Unreachable
from verld.codec.registry import CODECS
from verld.config import load_config
from verld.ctl import modbus
from verld.ctl.codes import Usage
from verld.ctl.frame import FrameReading
from verld.ctl.inhibit import cmd_inhibit
from verld.ctl.ping import cmd_ping
from verld.ctl.render import (
    Decoder,
    emit,
    hexdump,
    render_event,
    render_record,
    render_sent,
    render_status,
    render_traffic,
    reply_obj,
    safe,
)
from verld.ctl.top import cmd_top
from verld.errors import ConfigError

Command = Callable[[Client, argparse.Namespace], int]
Record = dict[str, Any]
LEVELS = ["debug", "info", "warning", "error", "critical"]


def cmd_status(c: Client, args: argparse.Namespace) -> int:
    st = c.status()
    st.pop("id", None)
    st.pop("ok", None)
    emit(args, render_status(st), st)
    return 0


def cmd_call(c: Client, args: argparse.Namespace) -> int:
    r = c.call(
        _request_data(args),
        timeout=args.timeout,
        retry=args.retry,
        wait=args.wait,
        reply=False if args.no_reply else None,
    )
    if not r.reply:  # nothing was awaited: the request was written, that is all
        emit(args, render_sent(r), reply_obj(r))
        return 0
    head = f"status 0x{r.status:02x}  {len(r.data)} bytes  {r.ms:.3f} ms  generation {r.generation}"
    if r.error is not None:  # the device answered with an error status: say which
        head += f"  {safe(r.error)}: {safe(r.message or '')}".rstrip()
    if r.text is not None:
        body = "\n".join(safe(line) for line in r.text.split("\n"))
    else:
        body = hexdump(r.data)
    emit(args, f"{head}\n{body}", reply_obj(r))
    return 0 if r.status == 0 else 1


def _request_data(args: argparse.Namespace) -> bytes | str:
    """The request of `call`: --hex bytes, --text, or a --file's bytes."""
    if args.hex is not None:
        try:
            return bytes.fromhex(args.hex)
        except ValueError:
            raise Usage(f"--hex: not hexadecimal: {args.hex!r}") from None
    if args.text is not None:
        return str(args.text)
    try:
        with open(args.file, "rb") as f:
            return f.read()
    except OSError as exc:
        raise Usage(f"--file: {exc.strerror}: {args.file}") from None


def _stream(
    c: Client,
    args: argparse.Namespace,
    topics: Sequence[str],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """Subscribe and print every event until interrupted."""
    c.timeout = None
    c.subscribe(topics)
    for ev in c.events():
        emit(args, render(ev), ev)
    return 0


def cmd_events(c: Client, args: argparse.Namespace) -> int:
    return _stream(c, args, ["events", "link"], render_event)


def cmd_monitor(c: Client, args: argparse.Namespace) -> int:
    if args.raw:
        return _stream(c, args, ["wire"], render_traffic)
    reader = _traffic_reader(c, args)
    if reader is None:
        return _stream(c, args, ["traffic"], render_traffic)
    return _stream(
        c, args, ["traffic"], lambda ev: render_traffic(ev, decode=reader(ev.get("seq")))
    )


#: a traffic line's payload reader, given the line's seq
Reader = Callable[[Any], Decoder]


def _traffic_reader(c: Client, args: argparse.Namespace) -> Reader | None:
    """The payload reader for the device's codec as `hello` names it (the Modbus codecs;
    `frame`, by the declaration in `--config`), else None."""
    try:
        device = c.hello()["device"]
        codec = device["codec"]
    except Unreachable:
        raise
    except (ClientError, KeyError, TypeError):
        return None  # no codec named: every line as on any other codec
    found = CODECS.get(codec) if isinstance(codec, str) else None
    if found is None:
        return None  # (a codec this verlctl does not know: read as any other)
    if found.declared:
        return _frame_reader(args, device)
    if not found.bus:
        return None
    describe = functools.partial(modbus.describe, rtu=found.rtu)  # unit 0 is a unit on TCP
    return lambda _seq: describe


def _frame_reader(args: argparse.Namespace, device: dict[str, Any]) -> Reader | None:
    """`frame`: the declaration in the config verlctl was given (`hello` names the codec
    only); without one the frames are shown undecoded, and stderr says why."""
    config = getattr(args, "config", None)
    if not config:
        print(
            "verlctl: monitor: frames are shown undecoded: give --config FILE (verld's "
            "config) to read them by its device.frame",
            file=sys.stderr,
        )
        return None
    try:
        frame = load_config(config).device.frame
    except ConfigError as exc:
        raise Usage(f"--config: {exc}") from None
    if frame is None:
        print(f"verlctl: monitor: {config} declares no device.frame", file=sys.stderr)
        return None
    max_payload = device.get("max_payload")
    bound = max_payload if isinstance(max_payload, int) and max_payload > 0 else 1 << 20
    return FrameReading(frame, bound).at


def _level_filter(args: argparse.Namespace) -> Callable[[Record], bool]:
    """Keeps records at --level or above (unknown levels count as info)."""
    floor = LEVELS.index(args.level.lower()) if args.level else 0

    def keep(rec: Record) -> bool:
        lvl = str(rec.get("level", "info")).lower()
        return (LEVELS.index(lvl) if lvl in LEVELS else 1) >= floor

    return keep


def _print_records(args: argparse.Namespace, records: Iterable[Record]) -> None:
    keep = _level_filter(args)
    for rec in records:
        if keep(rec):
            emit(args, render_record(rec), rec)


def _followed_records(c: Client) -> Iterable[Record]:
    """Log records pushed by the daemon from now on."""
    c.timeout = None
    c.subscribe(["logs"])
    for ev in c.events():
        rec = ev.get("record")
        if ev.get("event") == "log" and isinstance(rec, dict):
            yield rec


def cmd_logs(c: Client, args: argparse.Namespace) -> int:
    _print_records(args, c.request("logs", lines=args.lines)["records"])
    if args.follow:
        _print_records(args, _followed_records(c))
    return 0


def cmd_logs_journal(args: argparse.Namespace) -> int:
    """`logs --journal`: verld's records read back from the systemd journal."""
    try:
        matches = journal.matches_for(args.unit, args.match)
    except ValueError as exc:
        raise Usage(str(exc)) from None
    try:
        _print_records(args, journal.read(matches, args.lines, args.follow))
    except journal.JournalUnavailable as exc:
        print(f"verlctl: {exc}", file=sys.stderr)
        return 3
    return 0


def cmd_metrics(c: Client, args: argparse.Namespace) -> int:
    text = c.request("metrics")["text"]
    emit(args, text.rstrip("\n"), {"text": text})
    return 0


def cmd_simple(op: str) -> Command:
    """A command that sends one admin op and prints its acknowledgement."""

    def run(c: Client, args: argparse.Namespace) -> int:
        reply = c.request(op)
        reply.pop("id", None)
        changed = reply.get("changed")
        human = f"{op}: ok" + (
            f" (changed: {', '.join(changed) or 'nothing'})" if changed is not None else ""
        )
        emit(args, human, reply)
        return 0

    return run


COMMANDS: dict[str, Command] = {
    "status": cmd_status,
    "ping": cmd_ping,
    "call": cmd_call,
    "events": cmd_events,
    "monitor": cmd_monitor,
    "logs": cmd_logs,
    "metrics": cmd_metrics,
    "top": cmd_top,
    "reconnect": cmd_simple("reconnect"),
    "reload": cmd_simple("reload"),
    "inhibit": cmd_inhibit,
}
