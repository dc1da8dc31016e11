"""An outage is told once: the loss, the first attempt, a new kind of reason, then a
reminder a minute; the handshake that hears noise says so; a locked port names its holder."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import pytest
from support import DaemonProc, SimProc, write_config

from verld.links.link import LinkState, Transition
from verld.links.serialport import lock_holder
from verld.session.outage import REMIND, Outage, reason_kind

pytestmark = pytest.mark.timeout(60)


def down(reason: str) -> Transition:
    return Transition(LinkState.DOWN, reason, 1)


CONNECTING = Transition(LinkState.CONNECTING, "reopening after: hangup", 1)
UP = Transition(LinkState.UP, "connected", 2)


class TestOutage:
    def test_the_loss_and_the_first_attempt_are_told(self) -> None:
        """The loss is an event at WARNING; the first attempt's `connecting` an event."""
        o = Outage()
        told = o.tell(down("hangup"), 0.0)
        assert (told.event, told.level) == (True, "warning")
        assert o.tell(CONNECTING, 0.1).event

    def test_repeated_attempts_with_the_same_reason_are_quiet(self) -> None:
        """Later attempts that fail alike: no events, DEBUG lines only."""
        o = Outage()
        o.tell(down("open failed: [Errno 2] No such file"), 0.0)
        o.tell(CONNECTING, 0.1)
        for n in range(1, 30):
            assert o.tell(down("open failed: [Errno 2] No such file"), n).level == "debug"
            assert not o.tell(CONNECTING, n + 0.1).event

    def test_a_new_kind_of_reason_is_told_again(self) -> None:
        """A different reason is a WARNING and an event, and so is the next `connecting`."""
        o = Outage()
        o.tell(down("hangup"), 0.0)
        o.tell(CONNECTING, 0.1)
        told = o.tell(down("open failed: locked by pid 812 (picocom)"), 0.2)
        assert (told.event, told.level) == (True, "warning")
        assert o.tell(CONNECTING, 0.3).event
        assert not o.tell(down("open failed: locked by pid 813 (picocom)"), 0.4).event

    def test_a_reminder_comes_once_a_minute(self) -> None:
        """While the outage lasts, one WARNING (a reminder, no event) per REMIND seconds."""
        o = Outage()
        o.tell(down("hangup"), 0.0)
        levels = [o.tell(down("hangup"), t).level for t in range(1, int(3 * REMIND) + 1)]
        assert levels.count("warning") == 3
        reminder = o.tell(down("hangup"), 4 * REMIND)
        assert reminder.remind and not reminder.event

    def test_up_ends_the_outage(self) -> None:
        """After `up`, the next loss is told again, even with the same reason."""
        o = Outage()
        o.tell(down("hangup"), 0.0)
        assert o.tell(UP, 1.0).event
        assert o.tell(down("hangup"), 2.0).event

    def test_reason_kind_ignores_figures(self) -> None:
        """Figures do not make a new kind of reason."""
        assert reason_kind("handshake failed: 1616 bytes") == reason_kind(
            "handshake failed: 7 bytes"
        )


def test_an_unplugged_device_is_told_once(tmp_path: Path) -> None:
    """An unplugged device gives a handful of link events and WARNINGs, not two per attempt."""
    # Two seconds unplugged with fast retries; status counts the attempts.
    sim = SimProc(tmp_path)
    d = DaemonProc(write_config(tmp_path, sim.link, {"reconnect": {"initial": 0.02, "max": 0.05}}))
    try:
        sub = d.client()
        sub.subscribe(["link"])
        sim.control("unplug 30")
        time.sleep(2.0)
        link = d.status()["link"]
        assert link["state"] in ("down", "connecting") and link["attempts"] >= 10
        sim.control("replug")
        states = []
        for ev in sub.events():
            if ev["event"] == "link":
                states.append(ev["state"])
                if ev["state"] == "up":
                    break
        assert len(states) <= 6, states
        records = [json.loads(x) for x in d.log().splitlines() if x.startswith("{")]
        warnings = [r for r in records if r.get("level") == "warning" and "link" in r["event"]]
        assert 1 <= len(warnings) <= 3, warnings
        assert d.status()["link"]["attempts"] == 0
    finally:
        d.stop()
        sim.stop()


def test_a_handshake_that_hears_noise_asks_about_codec_and_baud_rate(tmp_path: Path) -> None:
    """A verl handshake hearing NMEA gives a reason counting bytes and asking about the codec."""
    # A verl daemon on a GPS talking NMEA lines: the reason counts the bytes and asks "wrong codec
    # or baud rate?".
    sim = SimProc(tmp_path, "--nmea", "20", codec="line")
    d = DaemonProc(write_config(tmp_path, sim.link), wait_up=False)
    try:
        deadline = time.monotonic() + 10
        reason = ""
        while "wrong codec" not in reason and time.monotonic() < deadline:
            reason = d.status()["link"]["reason"]
            time.sleep(0.05)
        assert "bytes" in reason and "wrong codec or baud rate?" in reason, reason
    finally:
        d.stop()
        sim.stop()


def test_a_locked_port_names_its_holder(tmp_path: Path) -> None:
    """The reason for a port another process holds names that process's pid and program."""
    path = tmp_path / "port"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert (
            lock_holder(str(path))
            == f"pid {os.getpid()} ({Path('/proc/self/comm').read_text().strip()})"
        )
    finally:
        os.close(fd)
    assert lock_holder(str(path)) == "another process"


def test_a_second_verld_on_the_same_port_names_the_first(tmp_path: Path) -> None:
    """A second verld (another socket) on a port the first holds says which pid has it."""
    sim = SimProc(tmp_path)
    first = DaemonProc(write_config(tmp_path, sim.link))
    other = tmp_path / "second"
    other.mkdir()
    second = DaemonProc(write_config(other, sim.link), wait_up=False)
    try:
        deadline = time.monotonic() + 10
        reason = ""
        while f"pid {first.pid}" not in reason and time.monotonic() < deadline:
            reason = second.status()["link"]["reason"]
            time.sleep(0.05)
        assert f"is locked by pid {first.pid} (" in reason, reason
        assert first.client().call(b"\x01still mine").data == b"still mine"
    finally:
        second.stop()
        first.stop()
        sim.stop()
