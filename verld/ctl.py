"""verlctl: inspect and drive a running verld.

Exit codes (DESIGN.md): 0 ok, 1 device error, 2 usage (and bad_request /
unknown_op / too_large from the daemon), 3 daemon unreachable (and
shutting_down), 4 timeout or link down, 5 forbidden, 6 busy.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from verld import journal
from verld.client import Client, ClientError, Reply, Unreachable, default_socket
from verld.config import load_config
from verld.errors import ConfigError

EXIT_CODES = {
    "bad_request": 2,
    "unknown_op": 2,
    "too_large": 2,
    "usage": 2,
    "unreachable": 3,
    "shutting_down": 3,
    "timeout": 4,
    "link_down": 4,
    "forbidden": 5,
    "busy": 6,
    "remote_failure": 1,
    "device_error": 1,
}

EPILOG = """examples:
  verlctl status                         link state, counters, latency
  verlctl --socket /tmp/verld-demo.sock call --hex 01aabb
  verlctl call --text '*IDN?'            text request (line devices)
  verlctl ping -c 5                      five pings with a summary
  verlctl --json status | jq .link       machine-readable output
  verlctl events                         print device and link events until Ctrl-C

socket: --socket, else $VERLD_SOCKET, else --config's api.socket, else /run/verld/verld.sock
exit codes: 0 ok, 1 device error, 2 usage, 3 unreachable, 4 timeout/link down,
            5 forbidden, 6 busy
"""


class Usage(Exception):
    """A command-line mistake: exit 2."""


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), *range(127, 160))}  # C0, DEL, C1
_CONTROL.update({ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"})


def safe(text: object) -> str:
    """Text from a device or a client, with control characters escaped (no terminal tricks)."""
    return str(text).translate(_CONTROL)


def hexdump(data: bytes, width: int = 16) -> str:
    """Classic offset / hex / ASCII dump."""
    if not data:
        return "(no data)"
    lines = []
    for off in range(0, len(data), width):
        chunk = data[off : off + width]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes:<{width * 3 - 1}}  |{text}|")
    return "\n".join(lines)


def _out(args: argparse.Namespace, human: str, obj: Any) -> None:
    if args.json:
        print(json.dumps(obj, sort_keys=True), flush=True)
    else:
        print(human, flush=True)


def _fmt_since(ts: float) -> str:
    if not ts:
        return "-"
    ago = max(0.0, time.time() - ts)
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(ts))} ({ago:.0f} s ago)"


def render_status(st: dict[str, Any]) -> str:
    link, c, lat = st["link"], st["counters"], st["latency_ms"]
    rows = [
        ("link", f"{link['state']} ({link['reason']})"),
        ("generation", str(link["generation"])),
        ("port", f"{link['port']}  codec {link['codec']}  {link.get('settings', '')}".rstrip()),
        ("since", _fmt_since(link.get("since", 0))),
        ("uptime", f"{st['uptime']:.0f} s"),
        ("clients", str(st["clients"])),
        ("queue", str(st["queue"])),
        (
            "calls",
            f"{c['calls']} (ok {c['calls_ok']}, failed {c['calls_failed']}, "
            f"timeouts {c['timeouts']}, retries {c['retries']})",
        ),
        (
            "latency",
            f"p50 {lat['p50']} ms  p90 {lat['p90']} ms  p99 {lat['p99']} ms  max {lat['max']} ms",
        ),
        (
            "frames",
            f"tx {c['frames_tx']}  rx {c['frames_rx']}  bad {c['bad_frames']}  stale {c['stale']}",
        ),
        ("bytes", f"tx {c['bytes_tx']}  rx {c['bytes_rx']}"),
        ("events", str(c["events"])),
        ("pings", str(c["pings"])),
        ("reconnects", str(c["reconnects"])),
        ("lease", "none" if not st.get("lease") else json.dumps(st["lease"])),
    ]
    return "\n".join(f"{k:<11} {v}" for k, v in rows)


def _reply_obj(r: Reply) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "status": r.status,
        "hex": r.data.hex(),
        "ms": r.ms,
        "generation": r.generation,
    }
    if r.text is not None:
        obj["text"] = r.text
    return obj


def cmd_status(c: Client, args: argparse.Namespace) -> int:
    st = c.status()
    st.pop("id", None)
    st.pop("ok", None)
    _out(args, render_status(st), st)
    return 0


def cmd_call(c: Client, args: argparse.Namespace) -> int:
    data: bytes | str
    if args.hex is not None:
        try:
            data = bytes.fromhex(args.hex)
        except ValueError:
            raise Usage(f"--hex: not hexadecimal: {args.hex!r}") from None
    elif args.text is not None:
        data = args.text
    else:
        try:
            with open(args.file, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise Usage(f"--file: {exc.strerror}: {args.file}") from None
    r = c.call(data, timeout=args.timeout, retry=args.retry, wait=args.wait)
    head = f"status 0x{r.status:02x}  {len(r.data)} bytes  {r.ms:.3f} ms  generation {r.generation}"
    body = (
        "\n".join(safe(line) for line in r.text.split("\n"))
        if r.text is not None
        else hexdump(r.data)
    )
    _out(args, f"{head}\n{body}", _reply_obj(r))
    return 0 if r.status == 0 else 1


def cmd_ping(c: Client, args: argparse.Namespace) -> int:
    times: list[float] = []
    sent = 0
    failed_code: str | None = None
    port = "verld"
    try:
        port = c.hello()["device"]["port"]
    except (ClientError, KeyError, TypeError):
        pass
    if not args.json:
        print(f"PING {port} via {c.socket_path}", flush=True)
    try:
        while args.count is None or sent < args.count:
            if sent:
                time.sleep(args.interval)
            sent += 1
            try:
                r = c.ping(timeout=args.timeout)
            except ClientError as exc:
                if isinstance(exc, Unreachable):
                    raise
                failed_code = exc.code
                _out(
                    args,
                    f"seq={sent} {exc.code}: {exc.message}",
                    {"seq": sent, "error": exc.code, "message": exc.message},
                )
                continue
            times.append(r.ms)
            _out(
                args,
                f"reply seq={sent} status=0x{r.status:02x} time={r.ms:.3f} ms "
                f"generation={r.generation}",
                {"seq": sent, **_reply_obj(r)},
            )
    except KeyboardInterrupt:
        pass
    lost = sent - len(times)
    summary: dict[str, Any] = {"sent": sent, "received": len(times), "lost": lost}
    if times:
        avg = sum(times) / len(times)
        mdev = math.sqrt(sum((t - avg) ** 2 for t in times) / len(times))
        summary.update(min=min(times), avg=avg, max=max(times), mdev=mdev)
    if not args.json:
        pct = 100.0 * lost / sent if sent else 0.0
        print(f"--- {port} ping statistics ---")
        print(f"{sent} sent, {len(times)} received, {pct:.0f}% lost")
        if times:
            print(
                f"rtt min/avg/max/mdev = {summary['min']:.3f}/{summary['avg']:.3f}/"
                f"{summary['max']:.3f}/{summary['mdev']:.3f} ms"
            )
    else:
        print(json.dumps({"summary": summary}), flush=True)
    if lost == 0:
        return 0
    return EXIT_CODES.get(failed_code or "timeout", 4)


def _stream(
    c: Client,
    args: argparse.Namespace,
    topics: Sequence[str],
    render: Callable[[dict[str, Any]], str],
) -> int:
    c.timeout = None
    c.subscribe(topics)
    for ev in c.events():
        _out(args, render(ev), ev)
    return 0


def render_event(ev: dict[str, Any]) -> str:
    stamp = time.strftime("%H:%M:%S")
    kind = ev.get("event")
    if kind == "device":
        import base64

        data = base64.b64decode(ev.get("data", ""))
        shown = safe(ev["text"]) if ev.get("text") is not None else data.hex(" ")
        return f"{stamp} device gen={ev.get('generation')} {shown}"
    if kind == "link":
        return f"{stamp} link {ev['state']} gen={ev['generation']} ({ev.get('reason')})"
    if kind == "overflow":
        return f"{stamp} overflow: {ev.get('dropped')} events dropped (this client was slow)"
    if kind == "log":
        rec = dict(ev.get("record", {}))
        return f"{stamp} log {safe(rec.pop('level', ''))} {safe(rec.pop('msg', ''))} {safe(rec)}"
    return f"{stamp} {json.dumps(ev)}"


def cmd_events(c: Client, args: argparse.Namespace) -> int:
    return _stream(c, args, ["events", "link"], render_event)


def render_record(rec: dict[str, Any]) -> str:
    rec = dict(rec)
    ts = rec.pop("ts", 0)
    level = str(rec.pop("level", "")).upper()
    msg = rec.pop("msg", "")
    when = time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int((ts % 1) * 1000):03d}"
    fields = " ".join(f"{safe(k)}={safe(v)}" for k, v in rec.items())
    return f"{when} {safe(level):<7} {safe(msg)} {fields}".rstrip()


def render_traffic(ev: dict[str, Any]) -> str:
    """One protocol-analyser line (plus a hex/ASCII dump for payloads)."""
    t = float(ev.get("t", 0.0))
    when = time.strftime("%H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1e6):06d}"
    arrow = "->" if ev.get("dir") == "tx" else "<-"
    data = bytes.fromhex(str(ev.get("hex", "")))
    if ev.get("event") == "wire":
        return f"{when} {arrow} raw {len(data)} bytes\n{hexdump(data)}"
    seq = "-" if ev.get("seq") is None else str(ev["seq"])
    status = "" if ev.get("status") is None else f" status=0x{ev['status']:02x}"
    head = f"{when} {arrow} {ev.get('kind', '?'):<7} seq={seq:<5} len={len(data)}{status}"
    return f"{head}\n{hexdump(data)}" if data else head


def cmd_monitor(c: Client, args: argparse.Namespace) -> int:
    return _stream(c, args, ["wire"] if args.raw else ["traffic"], render_traffic)


def _level_filter(args: argparse.Namespace) -> Callable[[dict[str, Any]], bool]:
    order = ["debug", "info", "warning", "error", "critical"]
    floor = order.index(args.level.lower()) if args.level else 0

    def keep(rec: dict[str, Any]) -> bool:
        lvl = str(rec.get("level", "info")).lower()
        return (order.index(lvl) if lvl in order else 1) >= floor

    return keep


def cmd_logs(c: Client, args: argparse.Namespace) -> int:
    keep = _level_filter(args)
    records = [r for r in c.request("logs", lines=args.lines)["records"] if keep(r)]
    for rec in records:
        _out(args, render_record(rec), rec)
    if args.follow:
        c.timeout = None
        c.subscribe(["logs"])
        for ev in c.events():
            rec = ev.get("record")
            if ev.get("event") == "log" and isinstance(rec, dict) and keep(rec):
                _out(args, render_record(rec), rec)
    return 0


def cmd_logs_journal(args: argparse.Namespace) -> int:
    """`logs --journal`: verld's records read back from the systemd journal."""
    try:
        matches = journal.matches_for(args.unit, args.match)
    except ValueError as exc:
        raise Usage(str(exc)) from None
    keep = _level_filter(args)
    try:
        for rec in journal.read(matches, args.lines, args.follow):
            if keep(rec):
                _out(args, render_record(rec), rec)
    except journal.JournalUnavailable as exc:
        print(f"verlctl: {exc}", file=sys.stderr)
        return 3
    return 0


def cmd_metrics(c: Client, args: argparse.Namespace) -> int:
    text = c.request("metrics")["text"]
    _out(args, text.rstrip("\n"), {"text": text})
    return 0


def cmd_simple(op: str) -> Callable[[Client, argparse.Namespace], int]:
    def run(c: Client, args: argparse.Namespace) -> int:
        reply = c.request(op)
        reply.pop("id", None)
        changed = reply.get("changed")
        human = f"{op}: ok" + (
            f" (changed: {', '.join(changed) or 'nothing'})" if changed is not None else ""
        )
        _out(args, human, reply)
        return 0

    return run


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--socket", "-s", default=argparse.SUPPRESS, help="verld's API socket")
    common.add_argument(
        "--config", default=argparse.SUPPRESS, help="take the socket from this config"
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="JSON output"
    )
    p = argparse.ArgumentParser(
        prog="verlctl",
        description="Inspect and drive a running verld.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub.add_parser("status", parents=[common], help="link state, counters, latency")
    pp = sub.add_parser("ping", parents=[common], help="ping the device through verld")
    pp.add_argument("-c", "--count", type=int, default=None, help="stop after N pings")
    pp.add_argument("-i", "--interval", type=float, default=1.0, help="seconds between pings")
    pp.add_argument("--timeout", type=float, default=None, help="seconds per ping")
    pc = sub.add_parser("call", parents=[common], help="send one request, print the reply")
    src = pc.add_mutually_exclusive_group(required=True)
    src.add_argument("--hex", help="request bytes as hex, e.g. 01aabb")
    src.add_argument("--text", help="request as text (UTF-8)")
    src.add_argument("--file", help="request bytes from a file")
    pc.add_argument("--timeout", type=float, default=None, help="seconds per try")
    pc.add_argument("--retry", type=int, default=None, help="extra tries after a timeout")
    pc.add_argument("--wait", action="store_true", help="wait for the link if it is down")
    sub.add_parser("events", parents=[common], help="print device and link events until Ctrl-C")
    pm = sub.add_parser("monitor", parents=[common], help="live traffic, decoded per frame")
    pm.add_argument("--raw", action="store_true", help="raw bytes as read/written, garbage too")
    pl = sub.add_parser("logs", parents=[common], help="recent daemon log records")
    pl.add_argument("-n", "--lines", type=int, default=100)
    pl.add_argument("-f", "--follow", action="store_true")
    pl.add_argument("--level", choices=["debug", "info", "warning", "error"], default=None)
    pl.add_argument(
        "--journal", action="store_true", help="read the systemd journal, not the daemon"
    )
    pl.add_argument("-u", "--unit", help="with --journal: this unit's entries (e.g. verld@bench1)")
    pl.add_argument(
        "match", nargs="*", metavar="FIELD=VALUE", help="with --journal: e.g. LINK_STATE=down"
    )
    sub.add_parser("metrics", parents=[common], help="Prometheus text exposition")
    sub.add_parser("reconnect", parents=[common], help="drop and reopen the device link (admin)")
    sub.add_parser("reload", parents=[common], help="re-read the daemon's config (admin)")
    return p


COMMANDS: dict[str, Callable[[Client, argparse.Namespace], int]] = {
    "status": cmd_status,
    "ping": cmd_ping,
    "call": cmd_call,
    "events": cmd_events,
    "monitor": cmd_monitor,
    "logs": cmd_logs,
    "metrics": cmd_metrics,
    "reconnect": cmd_simple("reconnect"),
    "reload": cmd_simple("reload"),
}


def _socket_path(args: argparse.Namespace) -> str:
    if getattr(args, "socket", None):
        return str(args.socket)
    config = getattr(args, "config", None)
    if config and not _env_socket():
        try:
            return load_config(config).api.socket
        except ConfigError as exc:
            raise Usage(f"--config: {exc}") from None
    return default_socket()


def _env_socket() -> str | None:
    import os

    return os.environ.get("VERLD_SOCKET")


def _stop(_sig: int, _frame: object) -> NoReturn:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.json = getattr(args, "json", False)
    signal.signal(signal.SIGTERM, _stop)
    try:
        if args.command == "logs" and args.journal:
            return cmd_logs_journal(args)
        if args.command == "logs" and (args.unit or args.match):
            raise Usage("-u/--unit and FIELD=VALUE matches read the journal: add --journal")
        path = _socket_path(args)
        with Client(path, timeout=60.0) as c:
            return COMMANDS[args.command](c, args)
    except Usage as exc:
        print(f"verlctl: {exc}", file=sys.stderr)
        return 2
    except ClientError as exc:
        if args.json:
            print(json.dumps({"error": {"code": exc.code, "message": exc.message}}), flush=True)
        print(f"verlctl: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_CODES.get(exc.code, 1)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
