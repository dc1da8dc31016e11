"""The frame codec with SLIP stuffing: docs/config.md's SLIP declaration (a type byte, the
payload, CRC-16/XMODEM) with `match` on the type, verld on a real pty before
tests/framedevice.py's device, which frames with sliplib and sends an unsolicited frame
(and at times bad ones) before each answer."""

from __future__ import annotations

import base64
import binascii
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import serial
import yaml
from framedevice import UNSOLICITED, FrameDevice
from sliplib import Driver, config  # type: ignore[import-untyped]
from support import DaemonProc, write_config

pytestmark = pytest.mark.timeout(60)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "config.md"
#: payloads full of SLIP's own bytes: END, ESC, and what follows ESC in an escape
AWKWARD = [
    b"\xc0",
    b"\xdb",
    b"\xdb\xdc",
    b"\xdb\xdd",
    b"\xc0\xc0\xdb\xdb",
    b"a\xc0b\xdbc\xdc\xdd",
    bytes(range(256)),
    b"",
]


def documented() -> dict[str, Any]:
    """docs/config.md's SLIP declaration (the third worked one): its sections."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Binary framings") :]
    block = re.findall(r"```yaml\n(.*?)```", section, re.S)[2]
    sections: dict[str, Any] = yaml.safe_load(block)
    assert sections["device"]["frame"]["stuffing"] == "slip"
    return sections


@pytest.fixture
def slip(tmp_path: Path) -> Iterator[tuple[FrameDevice, DaemonProc]]:
    device = FrameDevice(tmp_path, "slip")
    try:
        sections = documented()
        sections["device"]["frame"]["match"] = [0]  # a reply has its request's type
        sections["ports"] = [{"link": str(tmp_path / "ttyV0")}]
        daemon = DaemonProc(write_config(tmp_path, device.link, sections))
    except BaseException:
        device.stop()
        raise
    yield device, daemon
    daemon.stop()
    device.stop()


def test_slip_bytes_in_payloads(slip: tuple[FrameDevice, DaemonProc]) -> None:
    """Payloads holding C0 and DB, escaped both ways, come back byte for byte."""
    device, daemon = slip
    client = daemon.client()
    for kind, payload in enumerate(AWKWARD, start=1):
        reply = client.call(bytes((kind,)) + payload)
        assert (reply.status, reply.data) == (0, bytes((kind,)) + payload)
    counts = device.stop()
    assert counts["requests"] == len(AWKWARD) and "bad" not in counts


def test_unsolicited_frames_are_events(slip: tuple[FrameDevice, DaemonProc]) -> None:
    """Frames of another type arriving while calls wait are events, in order; bad ones counted."""
    device, daemon = slip
    calls, clients = 10, 3
    failures: list[BaseException] = []

    def run(name: int) -> None:
        try:
            with daemon.client() as client:
                for n in range(calls):
                    data = bytes((0x10 + name,)) + f"{name}:{n}".encode() + b"\xc0\xdb"
                    assert client.call(data).data == data
        except BaseException as exc:
            failures.append(exc)

    events: list[bytes] = []
    with daemon.client() as sub:
        sub.subscribe(["events"])
        threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not failures, failures
        for event in sub.events():
            events.append(base64.b64decode(event["data"]))
            if len(events) == calls * clients:
                break
    counts = device.stop()
    assert counts["events"] == calls * clients
    assert events == [
        bytes((UNSOLICITED,)) + n.to_bytes(4, "big") + b"\xc0\xdb" for n in range(len(events))
    ]
    assert daemon.status()["counters"]["bad_frames"] == counts["corrupt"] > 0


def with_crc(body: bytes) -> bytes:
    """`body` and its CRC-16/XMODEM, big-endian: a SLIP message before stuffing."""
    return body + binascii.crc_hqx(body, 0).to_bytes(2, "big")


def test_a_sliplib_program_on_a_port(slip: tuple[FrameDevice, DaemonProc]) -> None:
    """A sliplib program on a virtual port gets its answers byte for byte, events between."""
    _, daemon = slip
    with config.use_leading_end_byte(True):
        driver = Driver()
    asked = [bytes((kind,)) + payload for kind, payload in enumerate(AWKWARD, start=1)]
    replies: list[bytes] = []
    events: list[bytes] = []
    with serial.Serial(str(daemon.config.parent / "ttyV0"), timeout=5) as port:
        port.write(b"".join(driver.send(with_crc(body)) for body in asked))
        while len(replies) < len(asked):
            chunk = port.read(port.in_waiting or 1)
            assert chunk, f"answers so far: {replies}"
            driver.receive(chunk)
            while (message := driver.get(block=False)) is not None:
                body = message[:-2]
                assert message == with_crc(body)
                (events if body[0] == UNSOLICITED else replies).append(body)
    assert replies == asked
    assert events and all(event.endswith(b"\xc0\xdb") for event in events)
