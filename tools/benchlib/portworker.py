"""One program on a verld virtual serial port, in its own process (`tools/bench --port-worker`).

Strategy: as the Modbus masters (`mbworker`): the orchestrator starts every program
of a workload, waits for each one's `READY` (its port open) and for verld to have
seen every port opened, then writes `GO T0 T1` on each one's stdin: CLOCK_MONOTONIC
nanoseconds, the same clock in every process. A program calls from GO on (the calls
before T0 are its warm-up), starts no call after T1, waits for its outstanding
replies and prints one `RESULT` line: the replies that came inside [T0, T1] give
its calls/s and latencies, so the programs' rates add up over one common window.

A program opens its port's link with pyserial, as any program would, and speaks
verl to it exactly as to the device: the generators' own verl client (`VerlPeer`:
seq matching, every echo unique and checked byte for byte) on blocking write(2)
and read(2) of the port's fd. `inflight` 1 is lock-step; more keeps that many
requests outstanding (verld answers each with the program's own seq). An interval
timer ends a program whose port went silent (`lockstep.Watchdog`).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from benchlib.lockstep import NoReply, Watchdog
from benchlib.meter import Meter, Spec
from benchlib.peers import VerlPeer, open_serial

_GIVE_UP = 50  #: errors after which a program stops (the run has failed anyway)


class WindowMeter(Meter):
    """A `Meter` whose window is [t0, t1] on CLOCK_MONOTONIC, common to every program."""

    def __init__(self, t0: int, t1: int) -> None:
        super().__init__()
        self.w0, self.w1 = t0, t1
        self.t0, self.t1 = 0, t1 - t0  # what `result` divides by: the window

    def good(self, ns: int) -> None:
        self.answered += 1
        if self.w0 <= time.monotonic_ns() <= self.w1:
            self.calls += 1
            self.latencies.append(ns)


def _writer(fd: int) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return write


def run(spec: Spec, fd: int, t0: int, t1: int) -> dict[str, Any]:
    """Calls until T1, then the outstanding replies; the RESULT object."""
    meter = WindowMeter(t0, t1)
    peer = VerlPeer(meter, spec, random.Random(spec.seed))
    peer.write = _writer(fd)
    watchdog = Watchdog(spec.drain)
    clock = time.monotonic_ns
    missing = 0
    try:
        peer.start()
        while True:
            now = clock()
            if now >= t1 or meter.errors >= _GIVE_UP:
                meter.stopping = True  # no new call: send_next stops
                if not peer.outstanding:
                    break
            watchdog.progress(now / 1e9)
            data = os.read(fd, 65536)
            if not data:
                raise NoReply("the port closed")
            peer.feed(data)
    except NoReply as exc:
        missing = peer.outstanding  # counted in the result's errors
        meter.error_samples.append(f"{exc} ({missing} calls outstanding)")
    finally:
        watchdog.stop()
    extra = {
        "link": spec.target,
        "inflight": spec.inflight,
        "bad_frames": peer.decoder.bad_frames,
        "latencies_ns": sorted(meter.latencies),
    }
    return meter.result(missing, extra)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(spec_json: str) -> int:
    """READY, wait for GO on stdin, call, RESULT; exit 0 when every call was answered right."""
    spec = Spec.from_json(spec_json)
    try:
        port = open_serial(spec.target, blocking=True)
    except OSError as exc:
        _say("RESULT " + json.dumps({"errors": 1, "error_samples": [f"{spec.target}: {exc}"]}))
        return 1
    try:
        fd = port.fileno()
        _say("READY")
        words = sys.stdin.readline().split()
        if len(words) != 3 or words[0] != "GO":
            _say("RESULT " + json.dumps({"errors": 1, "error_samples": ["no GO line"]}))
            return 1
        result = run(spec, fd, int(words[1]), int(words[2]))
    except KeyboardInterrupt:
        return 130
    finally:
        port.close()
    _say("RESULT " + json.dumps(result, separators=(",", ":")))
    return 0 if result["errors"] == 0 else 1
