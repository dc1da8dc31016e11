"""The frame codec end to end: `verld --codec frame --frame F` against `verld-sim --codec
frame --frame F` on a real pty, calls through the real API."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import serial
from support import DaemonProc, SimProc, write_config

from verld.client import ClientError
from verld.codec.frame.declaration import Check, Event, Field, FrameDeclaration, Length
from verld.codec.frame.frames import FrameFormat, FrameReader

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
        # the ping: a frame's data, the header alone (the sim answers it); a virtual port
        ping = "000001" if "seq" in declaration else "0001"
        ports = [{"link": str(tmp / "ttyV0")}]
        cfg = write_config(tmp, sim.link, {"heartbeat": {"payload": ping}, "ports": ports})
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

    def test_reply_false_is_refused(self, stx: DaemonProc) -> None:
        """With seq every request is answered: `reply: false` is a bad_request."""
        with pytest.raises(ClientError) as info:
            stx.client().call(bytes.fromhex("000001") + b"\x01x", reply=False)
        assert info.value.code == "bad_request"

    def test_a_program_on_a_port_keeps_its_own_seqs(self, stx: DaemonProc) -> None:
        """A program on a virtual port gets its own seqs back, the slow call's reply last."""
        form = FrameFormat(stx_declaration(), 4096)
        with serial.Serial(str(stx.config.parent / "ttyV0"), timeout=5) as port:
            port.write(form.encode(b"\x00\x41\x01" + b"\x03\x01\x90slow"))
            port.write(form.encode(b"\x00\x42\x01" + b"\x01fast"))
            reader = FrameReader(form)
            got: list[bytes] = []
            while len(got) < 2:
                chunk = port.read(1)
                assert chunk, f"replies so far: {got}"
                got += reader.feed(chunk)
        assert [(data[1], data[3:]) for data in got] == [(0x42, b"fast"), (0x41, b"slow")]


def stx_declaration() -> FrameDeclaration:
    return FrameDeclaration(
        header=3,
        start=b"\x02",
        length=Length(0, 1),
        check=Check("CRC-16/MODBUS", order="little"),
        end=b"\x03",
        seq=Field(1, 1),
        event=Event(2, (0x80,)),
    )


class TestWithoutSeq:
    def test_a_call_is_answered(self, no_seq: DaemonProc) -> None:
        """Without a seq a call's reply is the frame with its match byte."""
        reply = no_seq.client().call(bytes.fromhex("0007") + b"\x01hi")
        assert (reply.status, reply.data) == (0, b"\x02\x07hi")

    def test_reply_false(self, no_seq: DaemonProc) -> None:
        """Without seq a call may say `reply: false`: written once, it ends ok unanswered."""
        reply = no_seq.client().call(bytes.fromhex("0009") + b"\x01x", reply=False)
        assert reply.ok and not reply.reply
        assert no_seq.client().call(bytes.fromhex("0007") + b"\x01y").data == b"\x01\x07y"


def test_the_built_in_sim_speaks_the_declared_framing(tmp_path: Path) -> None:
    """`device.port: sim` with codec frame: the daemon's own sim gets the declaration."""
    frame = {
        "start": "02",
        "header": 3,
        "length": {"offset": 0, "size": 1},
        "check": {"kind": "CRC-16/MODBUS", "order": "little"},
        "end": "03",
        "seq": {"offset": 1, "size": 1},
    }
    device = {"codec": "frame", "frame": frame}
    cfg = write_config(tmp_path, "sim", {"device": device, "heartbeat": {"payload": "000001"}})
    daemon = DaemonProc(cfg)
    try:
        reply = daemon.client().call(bytes.fromhex("000001") + b"\x01hi")
        assert (reply.status, reply.data[0], reply.data[2:]) == (0, 2, b"\x01hi")
    finally:
        daemon.stop()
