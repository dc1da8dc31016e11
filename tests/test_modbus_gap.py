"""The 3.5-character gap on a real pty, on both event loops: a spec minimum, so a
lower bound (a slow machine only lengthens gaps; it cannot make this test fail).

The test is the slave: it answers every request at once and notes when its answer
went out and when the next request came in. verld (a real subprocess) must leave at
least 1.75 ms between them above 19200 baud.
"""

from __future__ import annotations

import os
import threading
import time
import tty
from pathlib import Path

import pytest

from verld.client.modbus import Modbus
from verld.codec.modbus import rtu_frame, rtu_request_length
from verld.sim.modbus import ModbusSlave
from verld.testing import DaemonProc, write_config

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_every_request_waits_three_and_a_half_characters_after_a_reply(
    tmp_path: Path, loop: str
) -> None:
    """50 lock-step reads at 115200 baud: every gap answer → next request ≥ 1.75 ms."""
    master, slave = os.openpty()
    tty.setraw(slave)
    link = tmp_path / "dev.tty"
    link.symlink_to(os.ttyname(slave))
    units = ModbusSlave((1,))
    gaps: list[float] = []
    stop = threading.Event()

    def serve() -> None:
        buf = b""
        answered_at = None
        while not stop.is_set():
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            now = time.monotonic()
            if answered_at is not None and not buf:
                gaps.append(now - answered_at)
            buf += chunk
            n = rtu_request_length(buf)
            if n is None or len(buf) < n:
                continue
            response = units.handle(buf[: n - 2])
            buf = buf[n:]
            if response is not None:
                # stamped before the write: a thread preempted around the write can only
                # lengthen the gap measured, never shorten it
                answered_at = time.monotonic()
                os.write(master, rtu_frame(response))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    config = write_config(
        tmp_path,
        str(link),
        {
            "device": {"codec": "modbus-rtu", "baudrate": 115200, "timeout": 1.0},
            "heartbeat": {"interval": 0},
        },
    )
    daemon = DaemonProc(config, env={"VERLD_EVENT_LOOP": loop})
    try:
        bus = Modbus(daemon.client())
        for i in range(50):
            assert bus.read_holding_registers(1, i, 1) == [i]
    finally:
        daemon.stop()
        stop.set()
        os.close(slave)
        os.close(master)
        thread.join(5)
    assert len(gaps) >= 45
    assert min(gaps) >= 0.00175, sorted(gaps)[:5]
