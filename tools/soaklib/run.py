"""One soak run: start the processes, run load and faults, measure, stop."""

from __future__ import annotations

import asyncio
import contextlib
import random
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soaklib import modbus
from soaklib.api import OUTCOMES, Conn, Tally, link_state, wait_up
from soaklib.faults import Control, fault_driver
from soaklib.load import REPLY_BOUND, abandoner, client
from soaklib.procs import fd_count, rss_kb, start_daemon, start_sim
from verld.testing import DaemonProc


@dataclass
class Options:
    clients: int
    seconds: float
    faults: list[str]
    seed: int
    depth: int
    warmup: float
    json_out: str | None
    max_rss_growth: float | None
    keep: bool
    codec: str = "verl"  #: verl (echo calls) or modbus-rtu / modbus-tcp (soaklib.modbus)
    left_out: dict[str, str] | None = None  #: faults this codec cannot take, and why


async def watch(proc: subprocess.Popen[bytes], until: float, died: list[float]) -> None:
    """Note the moment the daemon exits, if it does."""
    while time.monotonic() < until and not died:
        if proc.poll() is not None:
            died.append(time.monotonic())
        await asyncio.sleep(0.1)


async def final_echo(sock: str, tally: Tally) -> bool:
    """Once the faults stop: an echo call works (and some call worked before)."""
    final = Conn(tally, "final")
    await final.open(sock)
    pending = final.send_call(b"\x01final-check")
    tally.calls += 1
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(pending.done.wait(), 10)
    await final.close()
    final.settle()
    return pending.replies == 1 and tally.outcomes["ok"] > 0


async def soak(opts: Options, workdir: Path) -> dict[str, Any]:
    rng = random.Random(opts.seed)
    on_modbus = opts.codec in modbus.CODECS
    sim = start_sim(workdir, opts.seed, opts.codec)
    daemon: DaemonProc | None = None
    control = Control(sim.control_path)
    mb = modbus.ModbusTally()
    try:
        link = sim.address if opts.codec == "modbus-tcp" else sim.link
        daemon = start_daemon(workdir, link, opts.codec)
        sock = daemon.socket
        await wait_up(sock, daemon.proc, 20)
        pid = daemon.pid
        rss: dict[str, int] = {"start": rss_kb(pid)}
        fds_start = fd_count(pid)
        tally, episodes, died = Tally(), Counter[str](), list[float]()
        t0 = time.monotonic()
        until = t0 + opts.seconds
        rngs = [random.Random(rng.random()) for _ in range(opts.clients + 1)]
        if on_modbus:
            tasks = [
                asyncio.create_task(modbus.client(i, sock, opts.depth, until, rngs[i], tally, mb))
                for i in range(opts.clients)
            ]
            tasks.append(
                asyncio.create_task(
                    abandoner(sock, until, rngs[-1], tally, payload=modbus.abandoned_read)
                )
            )
        else:
            tasks = [
                asyncio.create_task(client(i, sock, opts.depth, until, rngs[i], tally))
                for i in range(opts.clients)
            ]
            tasks.append(asyncio.create_task(abandoner(sock, until, rngs[-1], tally)))
        tasks.append(asyncio.create_task(fault_driver(control, opts.faults, until, rng, episodes)))
        tasks.append(asyncio.create_task(watch(daemon.proc, until + REPLY_BOUND, died)))
        await asyncio.sleep(min(opts.warmup, opts.seconds))
        rss["after_warmup"] = rss_kb(pid)
        rss_max = rss["after_warmup"]
        timeline: list[tuple[float, int]] = []
        step = max(opts.seconds / 20, 1.0)
        while time.monotonic() < until and not died:
            await asyncio.sleep(0.5)
            now_rss = rss_kb(pid)
            rss_max = max(rss_max, now_rss)
            t = time.monotonic() - t0
            if not timeline or t - timeline[-1][0] >= step:
                timeline.append((round(t, 1), now_rss))
        await asyncio.gather(*tasks[:-1])
        elapsed = time.monotonic() - t0
        final_ok = False
        if not died:
            await control("reset")
            with contextlib.suppress(RuntimeError):
                await wait_up(sock, daemon.proc, 15)
                if on_modbus:
                    final_ok = await modbus.final_check(sock, tally, mb)
                else:
                    final_ok = await final_echo(sock, tally)
        tasks[-1].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[-1]
        _, status = await link_state(sock)
        # the daemon closes the clients' sockets as it notices them go
        deadline = time.monotonic() + 3
        while fd_count(pid) > fds_start and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # (polling /proc: there is no event to wait for)
        fds_end = fd_count(pid)
        rss["end"] = rss_kb(pid)
        rss["max"] = max(rss_max, rss["end"])
        rss["growth_after_warmup"] = rss["end"] - rss["after_warmup"]
        daemon_died = bool(died) or daemon.proc.poll() is not None
        exit_code = daemon.stop()
        daemon = None
    finally:
        if daemon is not None:
            daemon.stop()
        sim.stop()
    counters = status.get("counters", {})
    report: dict[str, Any] = {
        "clients": opts.clients,
        "seconds": opts.seconds,
        "elapsed": round(elapsed, 1),
        "faults": opts.faults,
        "seed": opts.seed,
        "depth": opts.depth,
        "calls": tally.calls,
        "calls_per_second": round(tally.calls / elapsed, 1) if elapsed else 0.0,
        "outcomes": {name: tally.outcomes[name] for name in OUTCOMES},
        "other_codes": dict(tally.other_codes),
        "misrouted": tally.misrouted,
        "no_reply": tally.no_reply,
        "duplicates": tally.duplicates,
        "lost": tally.no_reply + tally.duplicates,
        "abandoned": tally.abandoned,
        "connections": tally.connections,
        "final_call_ok": final_ok,
        "reconnects": counters.get("reconnects"),
        "generation": status.get("link", {}).get("generation"),
        "daemon_died": daemon_died,
        "daemon_exit": exit_code,
        "rss_kb": rss,
        "rss_timeline": timeline,
        "fds": {"start": fds_start, "end": fds_end},
        "fault_episodes": dict(sorted(episodes.items())),
        "counters": counters,
        "examples": tally.examples,
    }
    if on_modbus:
        report["codec"] = opts.codec
        report["faults_left_out"] = opts.left_out or {}
        report["modbus"] = {
            "units": list(modbus.UNITS),
            "silent_unit": modbus.SILENT,
            **mb.report(),
            "status_units": status.get("units", []),
        }
    return report
