"""`verlctl ping`: ping(8)-style pings through verld, with loss and rtt statistics."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from verld.client import Client, ClientError, Unreachable
from verld.ctl.codes import EXIT_CODES
from verld.ctl.render import emit, reply_obj
from verld.errors import ErrorCode


@dataclass
class PingStats:
    """What a run of pings saw."""

    sent: int = 0
    times: list[float] = field(default_factory=list)  #: ms of each answered ping
    failed_code: str | None = None  #: the last error code a ping got

    @property
    def lost(self) -> int:
        return self.sent - len(self.times)

    def summary(self) -> dict[str, Any]:
        """sent / received / lost, and min / avg / max / mdev once any ping was answered."""
        times = self.times
        out: dict[str, Any] = {"sent": self.sent, "received": len(times), "lost": self.lost}
        if times:
            avg = sum(times) / len(times)
            mdev = math.sqrt(sum((t - avg) ** 2 for t in times) / len(times))
            out.update(min=min(times), avg=avg, max=max(times), mdev=mdev)
        return out

    def exit_code(self) -> int:
        """0 if every ping was answered, else the exit code of the last error (timeout: 4)."""
        if self.lost == 0:
            return 0
        return EXIT_CODES.get(self.failed_code or ErrorCode.TIMEOUT, 4)


def cmd_ping(c: Client, args: argparse.Namespace) -> int:
    (port, codec), ping = _device(c)
    if ping is None:
        print(
            f"verlctl: the device has no ping (codec {codec}): set heartbeat.payload in "
            "verld's config to a request it answers (e.g. PING, AT or *IDN? on a line "
            "device, 010300000001 on Modbus)",
            file=sys.stderr,
        )
        return 2
    if not args.json:
        print(f"PING {port} via {c.socket_path}", flush=True)
    stats = PingStats()
    try:
        while args.count is None or stats.sent < args.count:
            if stats.sent:
                time.sleep(args.interval)
            _ping_once(c, args, stats, ping)
    except KeyboardInterrupt:
        pass
    _print_summary(args, port, stats)
    return stats.exit_code()


def _device(c: Client) -> tuple[tuple[str, str], bytes | None]:
    """(the device's port and codec, for the header lines; its ping, None: it has none),
    as hello reports them (a verld from before `device.ping`: the empty request)."""
    try:
        device = c.hello()["device"]
        where = (str(device["port"]), str(device["codec"]))
    except (ClientError, KeyError, TypeError):
        return ("verld", "?"), b""
    ping = device.get("ping", "")
    try:
        return where, None if ping is None else bytes.fromhex(ping)
    except (TypeError, ValueError):
        return where, b""


def _ping_once(c: Client, args: argparse.Namespace, stats: PingStats, ping: bytes) -> None:
    """One ping and its line; API errors count as lost, Unreachable ends the run."""
    stats.sent += 1
    seq = stats.sent
    try:
        r = c.call(ping, timeout=args.timeout)
    except Unreachable:
        raise
    except ClientError as exc:
        stats.failed_code = exc.code
        human = f"seq={seq} {exc.code}: {exc.message}"
        emit(args, human, {"seq": seq, "error": exc.code, "message": exc.message})
        return
    stats.times.append(r.ms)
    human = f"reply seq={seq} status=0x{r.status:02x} time={r.ms:.3f} ms generation={r.generation}"
    emit(args, human, {"seq": seq, **reply_obj(r)})


def _print_summary(args: argparse.Namespace, port: str, stats: PingStats) -> None:
    summary = stats.summary()
    if args.json:
        print(json.dumps({"summary": summary}), flush=True)
        return
    pct = 100.0 * stats.lost / stats.sent if stats.sent else 0.0
    print(f"--- {port} ping statistics ---")
    print(f"{stats.sent} sent, {len(stats.times)} received, {pct:.0f}% lost")
    if stats.times:
        print(
            f"rtt min/avg/max/mdev = {summary['min']:.3f}/{summary['avg']:.3f}/"
            f"{summary['max']:.3f}/{summary['mdev']:.3f} ms"
        )
