"""`verlctl --config FILE monitor` against a real verld and verld-sim on `frame`: the
traffic lines read each frame by the config's declaration."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from support import DaemonProc, SimProc, write_config

from verld.client import ClientError, Unreachable
from verld.testing import Processes

pytestmark = pytest.mark.timeout(60)

#: configs/frame.yaml's declaration: "STX len seq cmd data CRC-16/MODBUS ETX"
STX = {
    "start": "02",
    "header": 3,
    "length": {"offset": 0, "size": 1},
    "check": {"kind": "CRC-16/MODBUS", "order": "little"},
    "end": "03",
    "seq": {"offset": 1, "size": 1},
    "event": {"offset": 2, "values": ["80"]},
}


def test_monitor_reads_each_frame_by_the_declaration(tmp_path: Path, procs: Processes) -> None:
    """A call's request and reply lines show the header fields, the payload and the check."""
    frame = tmp_path / "frame.yaml"
    frame.write_text(yaml.safe_dump(STX))
    overrides = {"device": {"codec": "frame", "frame": STX}, "heartbeat": {"payload": "000001"}}
    with SimProc(tmp_path, "--frame", str(frame), codec="frame") as sim:
        config = write_config(tmp_path, sim.link, overrides)
        with DaemonProc(config) as daemon:
            proc = procs.popen(
                [sys.executable, "-m", "verld.ctl", "--config", str(config), "monitor"],
                stdout=subprocess.PIPE,
                text=True,
            )
            out, lines = proc.stdout, queue.Queue[str]()
            assert out is not None

            def read() -> None:
                """verlctl's lines onto `lines` as they come, to the end of its output."""
                for line in out:
                    lines.put(line)

            threading.Thread(target=read, daemon=True).start()
            seen: list[str] = []
            c, deadline = daemon.client(), time.monotonic() + 30
            # (calls until verlctl, subscribed by then, shows one: it may start late)
            while not any("<- reply" in line and "payload 68 69 " in line for line in seen):
                assert time.monotonic() < deadline, f"no decoded reply from verlctl: {seen}"
                try:
                    c.call(bytes.fromhex("000001") + b"\x01hi")
                except Unreachable:
                    raise
                except ClientError:
                    pass  # (a timeout on a loaded machine: the next call may pass)
                with_more = time.monotonic() + 0.3
                while time.monotonic() < with_more:
                    try:
                        seen.append(lines.get(timeout=0.1))
                    except queue.Empty:
                        pass
            proc.terminate()
            assert proc.wait(30) == 0
    requests = [line for line in seen if "-> request" in line and "header 03 " in line]
    assert requests and "(length 3, seq " in requests[-1] and " check " in requests[-1]
    reply = next(line for line in seen if "<- reply" in line and "payload 68 69 " in line)
    assert "(length 2, seq " in reply and reply.rstrip().endswith(" ok")
