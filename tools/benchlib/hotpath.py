"""`tools/hotpath`: the API call path's own cost, in one process, per call; A/B across checkouts.

    tools/hotpath [CHECKOUT ...] [--calls N] [--repeat N] [--config FILE]

The daemon's CPU per call under load (`tools/bench-ab`) is the figure that counts,
but on a shared 2-CPU machine it moves by 10-20 % from run to run. This measures
the Python work of one call alone, where nothing moves it: verld's `ApiServer` over
a real `Core` (the session rig, `verld.testing.session.SessionRig(core=True)`), 16
connections whose transports only count writes, and the device's replies framed by
the codec's own device side (`verl`, window 8; `--config FILE`: the codec of that
config's `device.codec` and `device.frame`, e.g. configs/frame.yaml). The load is the
checker's shape: 16 clients with 8 calls each outstanding, the device answering the
window in one read, each answered client sending its next call at once. No syscall,
no event loop.

For each checkout (a directory holding a `verld` package with `verld.testing.session`;
default: this one) it runs a child process that prints:

- `us/call`: CPU time per call (process time, best of `--repeat` runs of `--calls`);
- `bytecodes/call`: Python instructions executed per call (an opcode trace over 2000
  calls: exact, and the same on every run);
- `py-calls/call`: Python-level function calls per call (cProfile's count).

Every call must succeed (verld's own `calls_ok`), else the child exits 1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

TOOLS = Path(__file__).resolve().parent.parent

CHILD = r"""
import base64, collections, cProfile, json, logging, pstats, struct, sys, time
sys.path.insert(0, sys.argv[1])
import structlog, yaml
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
from verld.testing.session import SessionRig
from verld.fronts.api.server import ApiServer
from verld.fronts.api.conn import ClientConn
N, REPEAT = int(sys.argv[2]), int(sys.argv[3])
DEVICE = {"port": "/dev/fake", "window": 8, "timeout": 10, "retry": 0, **json.loads(sys.argv[4])}
CFG = yaml.safe_dump({"device": DEVICE, "api": {"socket": "/tmp/x.sock"}})
ANSWERED = []

class Transport:  # a connection's far end: counts writes; the client answers at once
    def __init__(self):
        self.conn = None
    def write(self, data):
        ANSWERED.append(self.conn)
    def is_closing(self):
        return False
    def get_write_buffer_size(self):
        return 0
    def get_extra_info(self, key):
        return None
    def set_write_buffer_limits(self, high, low):
        pass
    def close(self):
        pass
    def pause_reading(self):
        pass
    def resume_reading(self):
        pass

rig = SessionRig(CFG, core=True)
rig.connect()
api = ApiServer(rig.cfg, rig.core)
conns = []
for i in range(16):
    conn, transport = ClientConn(api, i + 1), Transport()
    transport.conn = conn
    conn.connection_made(transport)
    conns.append(conn)
data = base64.b64encode(b"x" * 32)
def message(i):
    body = b'{"id":%d,"op":"call","data":"%s"}' % (i, data)
    return struct.pack(">I", len(body)) + body
MESSAGES = [message(k) for k in range(8)]
REPLIES = [rig.wire.framing.reply(seq, 0, b"x" * 32, None) for seq in range(65536)]
rig.wire.write = lambda data: None
window = rig.session.window
for conn in conns:
    for m in MESSAGES:
        conn.data_received(m)

def run(n):
    done = 0
    for _ in range(n // 8):
        for conn in ANSWERED:
            conn.data_received(MESSAGES[0])
        done += len(ANSWERED)
        ANSWERED.clear()
        rig.wire.deliver(b"".join([REPLIES[seq] for seq in window._calls]))
    return done

run(2000)
best = float("inf")
for _ in range(REPEAT):
    t0 = time.process_time()
    done = run(N)
    best = min(best, (time.process_time() - t0) / done)

opcodes = 0
if sys.version_info >= (3, 12):  # sys.monitoring: 3.12's settrace gives no opcode events
    mon = sys.monitoring
    mon.use_tool_id(mon.DEBUGGER_ID, "hotpath")
    def instruction(code, offset):
        global opcodes
        opcodes += 1
    mon.register_callback(mon.DEBUGGER_ID, mon.events.INSTRUCTION, instruction)
    mon.set_events(mon.DEBUGGER_ID, mon.events.INSTRUCTION)
    traced = run(2000)
    mon.set_events(mon.DEBUGGER_ID, 0)
    mon.free_tool_id(mon.DEBUGGER_ID)
else:
    def tracer(frame, event, arg):
        frame.f_trace_opcodes, frame.f_trace_lines = True, False
        def local(frame, event, arg):
            global opcodes
            if event == "opcode":
                opcodes += 1
            return local
        return local
    sys.settrace(tracer)
    traced = run(2000)
    sys.settrace(None)

profile = cProfile.Profile()
profile.enable()
profiled = run(2000)
profile.disable()
stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
py_calls = sum(v[1] for k, v in stats.items() if not k[0].startswith("~"))
counters = rig.session.stats.counters
print(json.dumps({"us_per_call": best * 1e6, "bytecodes_per_call": opcodes / traced,
                  "py_calls_per_call": py_calls / profiled, "calls": counters.calls,
                  "ok": counters.calls_ok, "codec": type(rig.session.codec).__name__}))
sys.exit(0 if counters.calls == counters.calls_ok else 1)
"""


def device_of(config: Path | None) -> dict[str, Any]:
    """The codec a config file chooses: its `device.codec` and `device.frame` ({}: verl)."""
    if config is None:
        return {}
    device = (yaml.safe_load(config.read_text()) or {}).get("device") or {}
    return {key: device[key] for key in ("codec", "frame") if key in device}


def measure(
    checkout: Path, calls: int, repeat: int, device: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One checkout's figures (SystemExit with the child's error when it fails)."""
    codec = json.dumps(device or {})
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(checkout), str(calls), str(repeat), codec],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"tools/hotpath: {checkout}: {proc.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/hotpath",
        description=(__doc__ or "").split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("checkouts", type=Path, nargs="*", default=[TOOLS.parent])
    parser.add_argument("--calls", type=int, default=8000, help="calls per timed run")
    parser.add_argument("--repeat", type=int, default=12, help="timed runs (the best counts)")
    parser.add_argument(
        "--config",
        type=Path,
        help="the codec of this config's device.codec and device.frame (default: verl)",
    )
    args = parser.parse_args(argv)
    device = device_of(args.config)
    print(f"{'checkout':40s} {'us/call':>8s} {'bytecodes/call':>15s} {'py-calls/call':>14s}  codec")
    for checkout in args.checkouts:
        f = measure(checkout.resolve(), args.calls, args.repeat, device)
        print(
            f"{checkout!s:40s} {f['us_per_call']:8.2f} {f['bytecodes_per_call']:15.0f} "
            f"{f['py_calls_per_call']:14.1f}  {f['codec']}"
        )
    return 0
