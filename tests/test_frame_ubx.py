"""The frame codec against a u-blox receiver: docs/config.md's UBX declaration, verld on
a real pty before tests/framedevice.py's receiver (pyubx2 builds and reads its messages,
NMEA text mixed in), API clients polling and subscribed at once, and a pyserial +
pyubx2 program on a virtual port."""

from __future__ import annotations

import base64
import itertools
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import serial
import yaml
from framedevice import FrameDevice
from pyubx2 import ERR_RAISE, POLL, SET, UBXMessage, UBXReader  # type: ignore[import-untyped]
from support import DaemonProc, write_config

pytestmark = pytest.mark.timeout(60)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "config.md"
MON_VER_POLL = UBXMessage("MON", "MON-VER", POLL).serialize()


def documented() -> dict[str, Any]:
    """docs/config.md's UBX declaration (the first worked one): its sections."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Binary framings") :]
    first = re.findall(r"```yaml\n(.*?)```", section, re.S)[0]
    sections: dict[str, Any] = yaml.safe_load(first)
    assert "b5 62" in sections["device"]["frame"]["start"]
    return sections


def data_of(wire: bytes) -> bytes:
    """A UBX message's frame data: its header (class, id, length) and payload."""
    return wire[2:-2]


def message_of(data: bytes) -> Any:
    """The UBX message whose frame data is `data`, read back by pyubx2 (check included)."""
    ck_a = ck_b = 0
    for byte in data:
        ck_a = (ck_a + byte) & 0xFF
        ck_b = (ck_b + ck_a) & 0xFF
    return UBXReader.parse(b"\xb5\x62" + data + bytes((ck_a, ck_b)))


def steps(itows: list[int]) -> list[int]:
    """The ms between successive NAV-PVTs."""
    return [b - a for a, b in itertools.pairwise(itows)]


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[FrameDevice, DaemonProc]]:
    device = FrameDevice(tmp_path, "ubx")
    try:
        sections = documented()
        overrides = {**sections, "ports": [{"link": str(tmp_path / "ttyV0")}]}
        daemon = DaemonProc(write_config(tmp_path, device.link, overrides))
    except BaseException:
        device.stop()
        raise
    yield device, daemon
    daemon.stop()
    device.stop()


def nav_itows(daemon: DaemonProc, count: int, ready: threading.Barrier) -> list[int]:
    """The iTOW of the next `count` NAV-PVT events one subscriber gets."""
    itows: list[int] = []
    with daemon.client() as sub:
        sub.subscribe(["events"])
        ready.wait()
        for event in sub.events():
            message = message_of(base64.b64decode(event["data"]))
            assert message.identity == "NAV-PVT", message
            itows.append(message.iTOW)
            if len(itows) == count:
                return itows
    raise AssertionError("unreachable")


def test_polls_and_events_at_once(receiver: tuple[FrameDevice, DaemonProc]) -> None:
    """Clients polling MON-VER each get MON-VER while subscribers get every NAV-PVT."""
    device, daemon = receiver
    ready = threading.Barrier(3 + 2, timeout=15)
    polled: dict[int, list[str]] = {}
    heard: dict[int, list[int]] = {}
    failures: list[BaseException] = []

    def poll(n: int) -> None:
        try:
            with daemon.client() as client:
                ready.wait()
                for _ in range(8):
                    reply = client.call(data_of(MON_VER_POLL))
                    assert reply.status == 0
                    message = message_of(reply.data)
                    polled.setdefault(n, []).append(message.identity)
                    assert message.swVersion.startswith(b"EXT CORE 1.00")
        except BaseException as exc:
            failures.append(exc)

    def listen(n: int) -> None:
        try:
            heard[n] = nav_itows(daemon, 10, ready)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=poll, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=listen, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not failures, failures
    assert polled == {n: ["MON-VER"] * 8 for n in range(3)}
    assert steps(heard[0]) == steps(heard[1]) == [200] * 9  # (5 Hz, none lost)
    counters = daemon.status()["counters"]
    assert counters["bad_frames"] == 0
    assert device.stop().get("bad", 0) == 0  # (every frame verld wrote parsed)


def test_cfg_is_acknowledged(receiver: tuple[FrameDevice, DaemonProc]) -> None:
    """A CFG-RATE set is answered ACK-ACK for it, and the receiver then navigates at 10 Hz."""
    _, daemon = receiver
    rate = UBXMessage("CFG", "CFG-RATE", SET, measRate=100, navRate=1, timeRef=1)
    reply = daemon.client().call(data_of(rate.serialize()))
    ack = message_of(reply.data)
    assert (ack.identity, ack.clsID, ack.msgID) == ("ACK-ACK", 0x06, 0x08)
    itows = nav_itows(daemon, 6, threading.Barrier(1))
    assert steps(itows) == [100] * 5


def test_a_pyubx2_program_on_a_port(receiver: tuple[FrameDevice, DaemonProc]) -> None:
    """pyubx2 on a port (errors raised), an API client polling too: clean UBX, its answers only."""
    _, daemon = receiver
    stop = threading.Event()
    api_polls: list[str] = []

    def api_poller() -> None:
        with daemon.client() as client:
            while not stop.is_set():
                api_polls.append(message_of(client.call(data_of(MON_VER_POLL)).data).identity)

    poller = threading.Thread(target=api_poller)
    poller.start()
    try:
        seen = pyubx2_program(str(daemon.config.parent / "ttyV0"))
    finally:
        stop.set()
        poller.join(15)
    assert seen.count("MON-VER") == 2 and seen.count("ACK-ACK") == 1
    assert set(seen) == {"MON-VER", "ACK-ACK", "NAV-PVT"}
    assert len(api_polls) > 2 and set(api_polls) == {"MON-VER"}


def pyubx2_program(path: str) -> list[str]:
    """Poll MON-VER, set CFG-RATE, read 5 NAV-PVTs, poll again; what pyubx2 read."""
    with serial.Serial(path, timeout=5) as port:
        reader = UBXReader(port, quitonerror=ERR_RAISE)
        port.write(MON_VER_POLL)
        port.write(UBXMessage("CFG", "CFG-RATE", SET, measRate=200, navRate=1).serialize())
        seen: list[str] = []
        while "ACK-ACK" not in seen or seen.count("NAV-PVT") < 5:
            raw, message = reader.read()
            assert raw is not None, f"nothing more after {seen}"
            assert isinstance(message, UBXMessage), message
            seen.append(message.identity)
        port.write(MON_VER_POLL)
        while seen[-1] != "MON-VER":
            raw, message = reader.read()
            assert isinstance(message, UBXMessage), message
            seen.append(message.identity)
    return seen
