"""verlctl on the `frame` codec: traffic read by the declaration, and `monitor` lines.

`verld.ctl.frame.FrameReading` is called directly (no daemon), with the declaration of
configs/frame.yaml ("STX len seq cmd data CRC-16/MODBUS ETX") and others built here;
`cmd_monitor` runs against the stand-in client of tests/test_ctl_modbus.py.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from test_ctl_modbus import FakeClient, hello_codec, traffic

from verld.client import Client
from verld.codec.frame.declaration import Check, Event, FrameDeclaration, Length, Status
from verld.codec.frame.frames import FrameFormat
from verld.config import load_config
from verld.ctl.commands import cmd_monitor
from verld.ctl.frame import FrameReading
from verld.ctl.render import render_traffic

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "frame.yaml"


def stx() -> FrameReading:
    """configs/frame.yaml's declaration."""
    frame = load_config(str(CONFIG)).device.frame
    assert frame is not None
    return FrameReading(frame, 4096)


class TestReading:
    def test_a_request_shows_the_header_verld_writes(self) -> None:
        """A request's length and seq are shown as verld writes them, with the wire check."""
        line = stx().describe(bytes.fromhex("000001016869"), request=True, seq=5)
        assert line == "header 03 05 01 (length 3, seq 5)  payload 01 68 69  check 73 fa"

    def test_a_reply_shows_its_fields_and_a_good_check(self) -> None:
        """A reply's header fields come from its data; its check is the wire's, and good."""
        line = stx().describe(bytes.fromhex("030501016869"), request=False)
        assert line == "header 03 05 01 (length 3, seq 5)  payload 01 68 69  check 73 fa ok"

    def test_an_event_is_named(self) -> None:
        """A frame with the declared event byte says so."""
        line = stx().describe(bytes.fromhex("00008021"), request=False)
        assert line.startswith("header 01 00 80 (length 1, seq 0, event 80)  payload 21  check ")

    def test_a_long_payload_is_cut_short(self) -> None:
        """The payload's first 16 bytes are shown, then how many more (the dump has all)."""
        line = stx().describe(bytes(3) + bytes(range(20)), request=False)
        assert "payload 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f ... (+4 bytes)" in line

    def test_data_shorter_than_the_header_is_not_a_frame(self) -> None:
        """Data that cannot be a frame says why; nothing raises."""
        line = stx().describe(b"\x00", request=True, seq=1)
        assert line == "not a frame: 1 bytes, shorter than the frame's 3-byte header"

    def test_status_and_match_bytes(self) -> None:
        """The status byte is judged by `ok`; match bytes are shown by offset."""
        frame = FrameDeclaration(
            header=2, start=b"\xaa", length=Length(1, 1), match=(0,), status=Status(0, (0,))
        )
        reading = FrameReading(frame, 64)
        assert reading.describe(b"\x07\x00hi", request=False) == (
            "header 07 02 (length 2, match@0 07, status 07 not ok)  payload 68 69"
        )

    def test_a_stuffed_frames_check_is_read_unstuffed(self) -> None:
        """With SLIP, the check shown is the frame's own, not its escaped wire bytes."""
        frame = FrameDeclaration(header=1, check=Check("xor8"), stuffing="slip")
        reading = FrameReading(frame, 64)
        assert FrameFormat(frame, 64).encode(b"\x00\xc0") == b"\x00\xdb\xdc\xdb\xdc\xc0"
        assert reading.describe(b"\x00\xc0", request=False) == (
            "header 00  payload c0  check c0 ok"
        )

    def test_a_framing_without_header_or_check(self) -> None:
        """No header, no check: the payload alone."""
        frame = FrameDeclaration(header=0, start=b"\x02", end=b"\x03", event=None)
        assert FrameReading(frame, 64).describe(b"ab", request=True) == (
            "header (none)  payload 61 62"
        )

    def test_an_event_declaration_names_only_its_values(self) -> None:
        """A header byte at the event offset that is not an event value is no event."""
        frame = FrameDeclaration(header=1, start=b"\x02", end=b"\x03", event=Event(0, (0x80,)))
        assert FrameReading(frame, 64).describe(b"\x01", request=False) == (
            "header 01  payload (none)"
        )


# --- cmd_monitor ----------------------------------------------------------------------------
@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC, so a line's time stamp is known."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def monitor(
    fake: FakeClient, capsys: pytest.CaptureFixture[str], **options: str
) -> tuple[str, str]:
    args = argparse.Namespace(raw=False, json=False, **options)
    assert cmd_monitor(cast(Client, fake), args) == 0
    out = capsys.readouterr()
    return out.out, out.err


@pytest.mark.usefixtures("utc")
class TestMonitorCommand:
    EV = traffic("tx", "request", 5, None, "000001016869")

    def test_monitor_reads_frames_by_the_configs_declaration(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With --config, `monitor` reads each frame by the config's device.frame."""
        out, err = monitor(FakeClient(hello_codec("frame"), [self.EV]), capsys, config=str(CONFIG))
        assert out.splitlines()[0] == (
            "00:00:01.250000 -> request seq=5     len=6  "
            "header 03 05 01 (length 3, seq 5)  payload 01 68 69  check 73 fa"
        )
        assert err == ""

    def test_monitor_without_a_config_shows_frames_undecoded_and_says_why(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without --config the lines are as on any codec; stderr names --config."""
        out, err = monitor(FakeClient(hello_codec("frame"), [self.EV]), capsys)
        assert out == render_traffic(self.EV) + "\n"
        assert "--config FILE" in err
