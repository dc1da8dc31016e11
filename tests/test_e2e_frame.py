"""The frame codec end to end: `verld --codec frame --frame F` against `verld-sim --codec
frame --frame F` on a real pty, calls through the real API."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import DaemonProc, SimProc, write_config

pytestmark = pytest.mark.timeout(60)

#: "STX len seq cmd data CRC-16/MODBUS ETX", pipelined by its seq byte, events cmd 0x80
STX = """\
start: "02"
header: 3
length: {offset: 0, size: 1}
check: {kind: CRC-16/MODBUS, order: little}
end: "03"
seq: {offset: 1, size: 1}
event: {offset: 2, values: ["80"]}
"""
#: the same device without a seq: one call at a time, the reply matched by its cmd byte
NO_SEQ = """\
start: "02"
header: 2
length: {offset: 0, size: 1}
check: {kind: sum8}
end: "03"
match: [1]
"""


def rig(tmp: Path, declaration: str) -> tuple[SimProc, DaemonProc]:
    frame = tmp / "frame.yaml"
    frame.write_text(declaration)
    sim = SimProc(tmp, "--frame", str(frame), codec="frame")
    try:
        # the ping: a frame's data, the header alone (the sim answers it)
        ping = "000001" if "seq" in declaration else "0001"
        cfg = write_config(tmp, sim.link, {"heartbeat": {"payload": ping}})
        daemon = DaemonProc(cfg, args=("--codec", "frame", "--frame", str(frame)))
    except BaseException:
        sim.stop()
        raise
    return sim, daemon


@pytest.fixture
def stx(tmp_path: Path) -> Iterator[DaemonProc]:
    sim, daemon = rig(tmp_path, STX)
    yield daemon
    daemon.stop()
    sim.stop()


@pytest.fixture
def no_seq(tmp_path: Path) -> Iterator[DaemonProc]:
    sim, daemon = rig(tmp_path, NO_SEQ)
    yield daemon
    daemon.stop()
    sim.stop()


class TestWithSeq:
    def test_a_call_is_answered(self, stx: DaemonProc) -> None:
        """An echo in a frame comes back as the reply frame's header and payload."""
        reply = stx.client().call(bytes.fromhex("000001") + b"\x01hello")
        assert reply.status == 0
        assert reply.data[0] == 5 and reply.data[2:] == b"\x01hello"
        assert stx.status()["link"]["state"] == "up"

    def test_pipelined_calls_get_their_own_replies(self, stx: DaemonProc) -> None:
        """Calls on the link at once are answered by seq, a slow one after a fast one."""
        results: dict[str, bytes] = {}

        def call(name: str, payload: bytes) -> None:
            results[name] = stx.client().call(bytes.fromhex("000001") + payload).data[3:]

        slow = threading.Thread(target=call, args=("slow", b"\x03\x02\x58slow"))
        slow.start()
        call("fast", b"\x01fast")
        assert "slow" not in results  # (600 ms to go)
        slow.join(10)
        assert results == {"fast": b"fast", "slow": b"slow"}

    def test_events_reach_subscribers(self, stx: DaemonProc) -> None:
        """Frames marked by `event` are pushed to subscribers."""
        sub = stx.client()
        sub.subscribe(["events"])
        stx.client().call(bytes.fromhex("000001") + b"\x06\x00\x02")
        got = []
        for ev in sub.events():
            got.append(base64.b64decode(ev["data"]))
            if len(got) == 2:
                break
        assert [data[2:] for data in got] == [b"\x80evt" + i.to_bytes(4, "big") for i in range(2)]


class TestWithoutSeq:
    def test_a_call_is_answered(self, no_seq: DaemonProc) -> None:
        """Without a seq a call's reply is the frame with its match byte."""
        reply = no_seq.client().call(bytes.fromhex("0007") + b"\x01hi")
        assert (reply.status, reply.data) == (0, b"\x02\x07hi")
