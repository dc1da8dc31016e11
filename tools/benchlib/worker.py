"""The load generator: one process per workload, every client in one asyncio loop.

Strategy: the orchestrator starts `tools/bench --worker SPEC` for each workload,
so the generator's CPU is never counted as the bridge's. A worker opens its
clients — the pty itself (`pty`), a Unix socket relayed to the pty by socat
(`unix`), both speaking raw verl frames with seq matching, or verld's API socket
(`api`, length-prefixed JSON) — and keeps `inflight` calls outstanding on each.
After `warmup` seconds it prints START, measures for `duration` seconds, prints
END, stops sending, waits for every outstanding reply and prints one `RESULT`
line of JSON. Every reply is checked against its request (seq or id, status 0,
the echoed bytes, unique per call); a wrong or missing one is an error.

The clients (`peers`) are written lean on purpose — asyncio.Protocol, one write
per loop turn, API requests built by bytes formatting and replies compared as
bytes — so that the generator is not the bottleneck: the bench measures the bridge.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from benchlib import lockstep
from benchlib.meter import Meter, Spec
from benchlib.peers import ApiPeer, FdPipe, VerlPeer, VerlProtocol, open_pty


async def _open(
    spec: Spec, meter: Meter, rng: random.Random
) -> tuple[list[Any], Callable[[], None]]:
    """The connected peers and a function closing them."""
    loop = asyncio.get_running_loop()
    if spec.kind == "pty":
        peer = VerlPeer(meter, spec, rng)
        pipe = FdPipe(loop, open_pty(spec.target), peer)
        return [peer], pipe.close
    if spec.kind == "unix":
        peer = VerlPeer(meter, spec, rng)
        transport, _ = await loop.create_unix_connection(lambda: VerlProtocol(peer), spec.target)
        return [peer], transport.close
    if spec.kind == "api":
        peers: list[ApiPeer] = []
        transports: list[asyncio.BaseTransport] = []
        for client in range(spec.clients):
            factory = functools.partial(ApiPeer, meter, spec, client, rng)
            transport, api = await loop.create_unix_connection(factory, spec.target)
            peers.append(api)
            transports.append(transport)

        def close_all() -> None:
            for t in transports:
                t.close()

        return list(peers), close_all
    raise ValueError(f"unknown worker kind {spec.kind!r}")


async def run(spec: Spec) -> dict[str, Any]:
    """Warm up, measure, drain; the RESULT object."""
    rng = random.Random(spec.seed)
    meter = Meter()
    peers, close = await _open(spec, meter, rng)
    try:
        for peer in peers:
            peer.start()
        await asyncio.sleep(spec.warmup)
        meter.begin()
        _say("START")
        await asyncio.sleep(spec.duration)
        meter.end()
        _say("END")
        deadline = time.monotonic() + spec.drain
        # Polled for at most `drain` s at the end of a run: the peers' readers would need
        # an event each for a one-off wait.
        while any(p.outstanding and p.alive for p in peers) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        missing = sum(p.outstanding for p in peers)
        if missing:  # counted in the result's `errors` through `missing`
            meter.error_samples.append(f"{missing} calls got no reply within {spec.drain} s")
    finally:
        close()
    bad_frames = sum(p.decoder.bad_frames for p in peers if isinstance(p, VerlPeer))
    extra = {"clients": spec.clients, "inflight": spec.inflight, "bad_frames": bad_frames}
    return meter.result(missing, extra)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _loop_runner() -> Callable[[Coroutine[Any, Any, dict[str, Any]]], dict[str, Any]]:
    """uvloop when installed (the `fast` extra), as verld itself runs: a lean generator.

    BENCH_GEN_LOOP=asyncio forces the standard loop.
    """
    if os.environ.get("BENCH_GEN_LOOP", "uvloop") == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            # (not uvloop.run: uvloop 0.17, Debian 12's, has no run)
            return asyncio.Runner(loop_factory=uvloop.new_event_loop).run
    return asyncio.run


def main(spec_json: str) -> int:
    """Run one workload; exit 0 when every call was answered correctly."""
    spec = Spec.from_json(spec_json)
    try:
        if spec.clients == 1 and spec.inflight == 1:
            result = lockstep.run(spec, _say)  # a chain: no event loop on the measured path
        else:
            result = _loop_runner()(run(spec))
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        result = {"errors": 1, "error_samples": [f"cannot open {spec.target}: {exc}"]}
    _say("RESULT " + json.dumps(result, separators=(",", ":")))
    return 0 if result["errors"] == 0 else 1
