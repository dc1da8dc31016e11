"""A load generator process: `tools/bench --gen KIND SPEC`, one protocol for every family.

The orchestrator (`engine.Run.measure`) starts every generator process of a workload;
each opens its clients and prints `READY`; once all are ready the orchestrator writes
`GO T0 T1` (CLOCK_MONOTONIC nanoseconds, the same clock in every process) on each
one's stdin. A generator calls from GO on (the calls before T0 are its warm-up),
starts no call after T1, waits for its outstanding replies and prints one
`RESULT {json}` line: the replies that came inside [T0, T1] give its calls/s and
latencies (`latencies_ns` too, so the orchestrator can pool several processes), so
the processes of one workload share one window, and the bridge's CPU read at T0 and
T1 is over the same window. Every reply is checked; a wrong or missing one is an error.

Kinds: `verl` (verl frames on the pty, socat's socket, a TCP port or a verld port; or verld's
API: `meter.Spec`) — lock-step with the blocking client (`lockstep`: a chain, no
event loop on the measured path), else every client in one event loop (`peers`, on
uvloop where installed; `BENCH_GEN_LOOP=asyncio` forces the standard loop);
`modbus` (a Modbus master, `mbclients`); `mqtt` (the fleet's callers, `mqttgen`);
`echo` (not a generator: the fleet's bare MQTT echo responder, `mqttecho`).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

Window = Callable[[], tuple[int, int]]


class NoGo(Exception):
    """stdin said something else than GO T0 T1."""


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def window() -> tuple[int, int]:
    """READY, then block until the orchestrator's `GO T0 T1`."""
    say("READY")
    words = sys.stdin.readline().split()
    if len(words) != 3 or words[0] != "GO":
        raise NoGo(f"expected GO T0 T1, got {words!r}")
    return int(words[1]), int(words[2])


def main(kind: str, text: str) -> int:
    """Run one generator; exit 0 when every call was answered correctly."""
    try:
        if kind == "verl":
            result = _verl(text)
        elif kind == "modbus":
            from benchlib import mbclients

            result = mbclients.main(text, window)
        elif kind == "mqtt":
            from benchlib import mqttgen

            result = mqttgen.main(text, window)
        elif kind == "echo":
            from benchlib import mqttecho

            return mqttecho.main(text)
        else:
            raise ValueError(f"unknown generator kind {kind!r}")
    except KeyboardInterrupt:
        return 130
    except (OSError, NoGo, ValueError) as exc:
        result = {"errors": 1, "error_samples": [f"{type(exc).__name__}: {exc}"]}
    say("RESULT " + json.dumps(result, separators=(",", ":")))
    return 0 if result.get("errors") == 0 else 1


def _verl(text: str) -> dict[str, Any]:
    from benchlib import lockstep
    from benchlib.meter import Spec

    spec = Spec.from_json(text)
    if spec.clients == 1 and spec.inflight == 1:
        return lockstep.run(spec, window)  # a chain: no event loop on the measured path
    return _loop_runner()(_pipelined(spec))


async def _pipelined(spec: Any) -> dict[str, Any]:
    """Every client in this loop, `inflight` calls outstanding each, until T1; then drain."""
    import asyncio
    import functools

    from benchlib.lockstep import open_pty
    from benchlib.meter import Meter
    from benchlib.peers import ApiPeer, FdPipe, VerlPeer, VerlProtocol

    loop = asyncio.get_running_loop()
    rng = random.Random(spec.seed)
    meter = Meter()
    peers: list[Any] = []
    closers: list[Callable[[], None]] = []
    try:
        if spec.kind == "pty":
            peers.append(VerlPeer(meter, spec, rng))
            closers.append(FdPipe(loop, open_pty(spec.target), peers[0]).close)
        elif spec.kind == "unix":
            peers.append(VerlPeer(meter, spec, rng))
            factory = functools.partial(VerlProtocol, peers[0])
            transport, _ = await loop.create_unix_connection(factory, spec.target)
            closers.append(transport.close)
        elif spec.kind == "tcp":  # (the loop sets TCP_NODELAY on its TCP connections)
            peers.append(VerlPeer(meter, spec, rng))
            factory = functools.partial(VerlProtocol, peers[0])
            host, _, port = spec.target.rpartition(":")
            transport, _ = await loop.create_connection(factory, host.strip("[]"), int(port))
            closers.append(transport.close)
        elif spec.kind == "api":
            for client in range(spec.clients):
                make = functools.partial(ApiPeer, meter, spec, client, rng)
                transport, api = await loop.create_unix_connection(make, spec.target)
                peers.append(api)
                closers.append(transport.close)
        else:
            raise ValueError(f"no pipelined client for {spec.kind!r}")
        meter.t0, meter.t1 = window()  # (blocks the loop: nothing runs on it yet)
        for peer in peers:
            peer.start()
        await asyncio.sleep(max(0.0, (meter.t1 - time.monotonic_ns()) / 1e9))
        meter.stopping = True
        deadline = time.monotonic() + spec.drain
        # Polled for at most `drain` s at the end of a run: the peers' readers would need
        # an event each for a one-off wait.
        while any(p.outstanding and p.alive for p in peers) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        missing = sum(p.outstanding for p in peers)
        if missing:  # counted in the result's `errors` through `missing`
            meter.error_samples.append(f"{missing} calls got no reply within {spec.drain} s")
    finally:
        for close in closers:
            close()
    bad_frames = sum(p.decoder.bad_frames for p in peers if isinstance(p, VerlPeer))
    extra = {"clients": spec.clients, "inflight": spec.inflight, "bad_frames": bad_frames}
    return meter.result(missing, extra)


def _loop_runner() -> Callable[[Coroutine[Any, Any, dict[str, Any]]], dict[str, Any]]:
    """uvloop when installed, as verld itself runs: a lean generator."""
    import asyncio

    if os.environ.get("BENCH_GEN_LOOP", "uvloop") == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            # (not uvloop.run: uvloop 0.17, Debian 12's, has no run)
            return asyncio.Runner(loop_factory=uvloop.new_event_loop).run
    return asyncio.run
