"""The frame codec pipelined by a seq field: docs/config.md's "STX len seq cmd data
CRC-16/MODBUS ETX" declaration, verld on a real pty before tests/framedevice.py's
controller, which answers out of order after random delays with noise and bad frames
between its replies; many API clients pipelining their calls at once."""

from __future__ import annotations

import base64
import random
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import serial
import yaml
from framedevice import EVENT_CMD, FrameDevice, split_stx, stx_frame
from support import DaemonProc, write_config

from verld.client import call_request
from verld.client.messages import reply_from

pytestmark = pytest.mark.timeout(90)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "config.md"
CLIENTS, CALLS = 6, 50  #: 300 calls and the port's: the 1-byte seq wraps
PORT_CALLS = 20  #: a program's on a virtual port, numbered by it from 100
HEADER = bytes.fromhex("000001")  #: len, seq (verld writes both), cmd 01


def documented() -> dict[str, Any]:
    """docs/config.md's STX declaration (the second worked one): its sections."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Binary framings") :]
    block = re.findall(r"```yaml\n(.*?)```", section, re.S)[1]
    sections: dict[str, Any] = yaml.safe_load(block)
    assert sections["device"]["frame"]["seq"] == {"offset": 1, "size": 1}
    return sections


@pytest.fixture
def controller(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[FrameDevice, DaemonProc]]:
    args = getattr(request, "param", ())
    device = FrameDevice(tmp_path, "stx", "--delay", "50", *args)
    try:
        sections = documented()
        sections["device"]["timeout"] = 10.0  # (calls queue behind the window)
        sections["ports"] = [{"link": str(tmp_path / "ttyV0")}]
        daemon = DaemonProc(write_config(tmp_path, device.link, sections))
    except BaseException:
        device.stop()
        raise
    yield device, daemon
    daemon.stop()
    device.stop()


def pipeline(daemon: DaemonProc, name: int, ready: threading.Barrier) -> dict[bytes, bytes]:
    """Send `CALLS` calls on one connection without waiting; each payload → its reply's."""
    rng = random.Random(name)
    payloads = {
        n: f"client {name} call {n} ".encode() + rng.randbytes(rng.randint(0, 40))
        for n in range(CALLS)
    }
    got: dict[bytes, bytes] = {}
    with daemon.client() as client:
        ready.wait()
        for n, payload in payloads.items():
            client.send({**call_request(HEADER + payload, None, None, False), "id": n})
        while len(got) < CALLS:
            message = client.receive()
            reply = reply_from(message)
            assert reply.status == 0 and reply.data[2] == 0x01, reply
            got[payloads[message["id"]]] = reply.data[3:]
    return got


def port_program(daemon: DaemonProc, ready: threading.Barrier) -> dict[int, bytes]:
    """A program on a virtual port pipelining `PORT_CALLS` with its own seqs; seq → payload
    of each reply."""
    got: dict[int, bytes] = {}
    with serial.Serial(str(daemon.config.parent / "ttyV0"), timeout=10) as port:
        ready.wait()
        port.write(b"".join(stx_frame(100 + n, 0x01, b"port %d" % n) for n in range(PORT_CALLS)))
        buf = b""
        while len(got) < PORT_CALLS:
            chunk = port.read(port.in_waiting or 1)
            assert chunk, f"replies so far: {got}"
            frames, buf, bad = split_stx(buf + chunk)
            assert not bad
            got.update((seq, payload) for seq, cmd, payload in frames if cmd != EVENT_CMD)
    return got


def run_clients(device: FrameDevice, daemon: DaemonProc) -> tuple[int, int]:
    """Clients pipelining at once, a program on a port and a subscriber beside them: each
    reply its asker's, every event delivered; (verld's bad_frames, the bad frames sent)."""
    results: dict[int, dict[bytes, bytes]] = {}
    failures: list[BaseException] = []
    events: list[bytes] = []
    ready = threading.Barrier(CLIENTS + 2, timeout=15)
    on_port: dict[int, bytes] = {}

    def run(name: int) -> None:
        try:
            if name == CLIENTS:
                on_port.update(port_program(daemon, ready))
            else:
                results[name] = pipeline(daemon, name, ready)
        except BaseException as exc:
            failures.append(exc)

    with daemon.client() as sub:
        sub.subscribe(["events"])
        threads = [threading.Thread(target=run, args=(n,)) for n in range(CLIENTS + 1)]
        for thread in threads:
            thread.start()
        ready.wait()
        for thread in threads:
            thread.join(60)
        assert not failures, failures
        for event in sub.events():  # (one each fifth request, at most 50 ms after it)
            events.append(base64.b64decode(event["data"]))
            if len(events) == (CLIENTS * CALLS + PORT_CALLS) // 5:
                break
        counts = device.stop()
    assert len(results) == CLIENTS
    for got in results.values():
        assert len(got) == CALLS and all(reply == asked for asked, reply in got.items())
    assert on_port == {100 + n: b"port %d" % n for n in range(PORT_CALLS)}
    assert counts["requests"] == CLIENTS * CALLS + PORT_CALLS and "bad" not in counts
    assert sorted(data[3:] for data in events) == [
        n.to_bytes(4, "big") for n in range(counts["events"])
    ]
    assert all(data[2] == 0x80 for data in events)
    status = daemon.status()
    counters = status["counters"]
    assert counters["calls_ok"] == CLIENTS * CALLS + PORT_CALLS, counters
    assert counters["stale"] == counters["timeouts"] == counters["retries"] == 0, counters
    assert counters["events"] == counts["events"], counters
    return counters["bad_frames"], counts["corrupt"]


def test_every_reply_reaches_its_asker(controller: tuple[FrameDevice, DaemonProc]) -> None:
    """Pipelined calls answered out of order among noise: each to its asker, bad frames counted."""
    bad_frames, corrupt = run_clients(*controller)
    assert bad_frames == corrupt > 0


@pytest.mark.parametrize("controller", [("--noise", "any")], indirect=True)
def test_noise_with_false_starts(controller: tuple[FrameDevice, DaemonProc]) -> None:
    """Noise holding STX bytes (false starts, lengths reaching past the reply) loses nothing."""
    bad_frames, corrupt = run_clients(*controller)
    assert bad_frames >= corrupt > 0


@pytest.mark.parametrize("controller", [("--noise", "stuck")], indirect=True)
def test_a_false_start_before_the_last_reply(controller: tuple[FrameDevice, DaemonProc]) -> None:
    """A start whose length reaches past the only reply is dropped after the quiet guard."""
    _, daemon = controller
    client = daemon.client()
    for n in range(3):
        reply = client.call(HEADER + b"alone %d" % n, timeout=2.0)
        assert reply.data[3:] == b"alone %d" % n and reply.ms < 1000, reply
    assert daemon.status()["counters"]["bad_frames"] == 3
