"""verld-sim as a GPS: the NMEA sentences, `NMEA n`, and `--nmea HZ` on a real pty.

Sentences are checked against published ones and, under hypothesis, by a parser
of the test's own; the sim's pty is read as gpsd reads it, and by gpsd if installed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import operator
import os
import random
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import SimProc

from verld.sim.device import Device, LinePersonality, make_personality, run_line
from verld.sim.faults import Counters, Faults
from verld.sim.launch import sim_command
from verld.sim.main import main as sim_main
from verld.sim.nmea import Fix, checksum, fix_sentences

WHEN = datetime(2024, 3, 9, 12, 35, 19, 127_000, tzinfo=UTC)
PROPS = settings(max_examples=200, deadline=None)

# --- an independent reader of what the sim writes ------------------------------------------


def fields(sentence: str) -> list[str]:
    """The fields of `sentence` (talker+type first); fails unless its checksum verifies."""
    assert sentence.startswith("$"), sentence
    body, star, given_sum = sentence[1:].rpartition("*")
    assert star and len(given_sum) == 2, sentence
    assert int(given_sum, 16) == functools.reduce(operator.xor, body.encode("ascii"), 0)
    return body.split(",")


def degrees(value: str, hemisphere: str) -> float:
    """`ddmm.mmmm` / `dddmm.mmmm` and N/S/E/W → signed decimal degrees."""
    whole, minutes = value[:-7], value[-7:]
    sign = -1.0 if hemisphere in "SW" else 1.0
    return sign * (int(whole) + float(minutes) / 60)


class Reader:
    """The pty's far end, as gpsd opens it: non-blocking, read line by line."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)

    def read_for(self, seconds: float, lines: int = 0) -> bytes:
        """What arrives within `seconds`; given `lines`, no more once that many arrived."""
        data = b""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not 0 < lines <= data.count(b"\n"):
            if select.select([self.fd], [], [], left)[0]:
                with contextlib.suppress(BlockingIOError):
                    data += os.read(self.fd, 65536)
        return data

    def drain(self) -> None:
        """Drop what is waiting (fixes sent before the test looked)."""
        self.read_for(0.05)

    def close(self) -> None:
        os.close(self.fd)


class Gps:
    """verld-sim runs as a line device (`--codec line`) in `tmp`, and readers of its pty."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sims: list[SimProc] = []
        self.readers: list[Reader] = []

    def start(self, *args: str) -> SimProc:
        self.sims.append(SimProc(self.tmp, *args, codec="line", timeout=10))
        return self.sims[-1]

    def open(self, sim: SimProc) -> Reader:
        self.readers.append(Reader(sim.link))
        return self.readers[-1]

    def close(self) -> None:
        for reader in self.readers:
            reader.close()
        for sim in self.sims:
            assert sim.stop() == 0


@pytest.fixture
def gps(tmp_path: Path) -> Iterator[Gps]:
    """A `Gps`; every sim it started must stop cleanly (exit 0) at the end."""
    runs = Gps(tmp_path)
    yield runs
    runs.close()


# --- the sentences ---------------------------------------------------------------------------


class TestSentences:
    @pytest.mark.parametrize(
        "known",
        [
            "$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47",
            "$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A",
            "$GPGSA,A,3,04,05,,09,12,,,24,,,,,2.5,1.3,2.1*39",
            "$GPGLL,4916.45,N,12311.12,W,225444,A,*1D",
        ],
    )
    def test_checksum_matches_published_sentences(self, known: str) -> None:
        """checksum() over a published sentence's body gives the checksum printed with it."""
        body, _, printed = known[1:].rpartition("*")
        assert checksum(body) == printed

    def test_default_fix(self) -> None:
        """The default fix: GGA quality 1 with 8 satellites, RMC valid, GSA 3D, all stamped."""
        assert fix_sentences(Fix(), WHEN) == [
            "$GPGGA,123519.12,4807.0380,N,01131.0020,E,1,08,0.9,545.4,M,46.9,M,,*68",
            "$GPRMC,123519.12,A,4807.0380,N,01131.0020,E,0.0,0.0,090324,,,A*5C",
            "$GPGSA,A,3,01,02,03,04,05,06,07,08,,,,,1.5,0.9,1.2*34",
        ]

    def test_time_is_written_in_utc(self) -> None:
        """An aware time in another zone is written as UTC; a naive one is taken as UTC."""
        east = WHEN.astimezone(timezone(timedelta(hours=5, minutes=30)))
        naive = WHEN.replace(tzinfo=None)
        assert fix_sentences(Fix(), east) == fix_sentences(Fix(), WHEN)
        assert fix_sentences(Fix(), naive) == fix_sentences(Fix(), WHEN)

    def test_minutes_never_read_sixty(self) -> None:
        """A position just below a whole degree rounds up to the next degree, not to 60'."""
        gga = fields(fix_sentences(Fix(lat=-12.9999999, lon=-0.0000001), WHEN)[0])
        assert gga[2:6] == ["1300.0000", "S", "00000.0000", "W"]

    @pytest.mark.parametrize(
        "bad",
        [
            {"lat": 90.5},
            {"lon": -181.0},
            {"satellites": 0},
            {"satellites": 13},
            {"hdop": -1.0},
            {"altitude": math.nan},
            {"course": 360.0},
        ],
    )
    def test_impossible_fix_is_refused(self, bad: dict[str, Any]) -> None:
        """A Fix outside what the sentences can say raises ValueError."""
        with pytest.raises(ValueError):
            Fix(**bad)


fixes = st.builds(
    Fix,
    lat=st.floats(-90, 90),
    lon=st.floats(-180, 180),
    altitude=st.floats(-1000, 20000),
    satellites=st.integers(1, 12),
    hdop=st.floats(0, 50),
    vdop=st.floats(0, 50),
    speed=st.floats(0, 999),
    course=st.floats(0, 359.9),
)
times = st.datetimes(datetime(2000, 1, 1), datetime(2099, 12, 31, 23, 59, 59), timezones=st.none())


class TestSentenceProperties:
    @PROPS
    @given(fixes, times)
    def test_every_sentence_verifies(self, fix: Fix, when: datetime) -> None:
        """Any fix at any time: GGA, RMC, GSA, each checksum right and within 80 characters."""
        sentences = fix_sentences(fix, when)
        assert [fields(s)[0] for s in sentences] == ["GPGGA", "GPRMC", "GPGSA"]
        assert all(len(s) <= 80 for s in sentences)  # 82 with CR LF, NMEA's limit

    @PROPS
    @given(fixes, times)
    def test_position_reads_back(self, fix: Fix, when: datetime) -> None:
        """GGA and RMC give back lat/lon to the precision written (1e-4 minute)."""
        gga, rmc, _ = (fields(s) for s in fix_sentences(fix, when))
        for lat, lon in ((gga[2:4], gga[4:6]), (rmc[3:5], rmc[5:7])):
            assert degrees(*lat) == pytest.approx(fix.lat, abs=0.51e-4 / 60)
            assert degrees(*lon) == pytest.approx(fix.lon, abs=0.51e-4 / 60)

    @PROPS
    @given(fixes, times)
    def test_time_and_date_read_back(self, fix: Fix, when: datetime) -> None:
        """GGA and RMC carry hhmmss.ss (truncated), RMC ddmmyy."""
        gga, rmc, _ = (fields(s) for s in fix_sentences(fix, when))
        day, month, year = (int(rmc[9][i : i + 2]) for i in (0, 2, 4))
        hms = datetime.strptime(rmc[1] + "0000", "%H%M%S.%f")
        stamp = hms.replace(year=2000 + year, month=month, day=day)  # (2000..2099 drawn)
        assert stamp == when.replace(microsecond=when.microsecond // 10_000 * 10_000)
        assert gga[1] == rmc[1]


# --- NMEA n, in-process ----------------------------------------------------------------------


class TestCommand:
    @pytest.mark.parametrize(
        ("line", "expected"),
        [
            ("NMEA 3", (["OK"], 0, 3)),
            ("nmea 0", (["OK"], 0, 0)),
            ("NMEA 3600", (["OK"], 0, 3600)),
            ("NMEA 3601", (["ERROR bad arguments"], 0, 0)),
            ("NMEA", (["ERROR bad arguments"], 0, 0)),
            ("NMEA 2 x", (["ERROR bad arguments"], 0, 0)),
        ],
    )
    def test_run_line(self, line: str, expected: tuple[list[str], int, int]) -> None:
        """NMEA n answers OK with n fixes to follow; n is 0..3600."""
        assert run_line(line) == expected

    def test_fixes_are_a_second_apart(self) -> None:
        """NMEA 2: OK, then two fixes stamped by the clock, the second one second later."""
        personality = make_personality("line", 64)
        assert isinstance(personality, LinePersonality)
        personality.clock = lambda: WHEN
        device = Device(personality, Faults(), Counters(), random.Random(1))
        [timed] = device.feed(b"NMEA 2\n", 0)
        later = WHEN + timedelta(seconds=1)
        sentences = fix_sentences(Fix(), WHEN) + fix_sentences(Fix(), later)
        assert timed.data == b"OK\n" + b"".join(s.encode() + b"\n" for s in sentences)
        assert device.status()["events"] == 6


class TestUnsolicited:
    @staticmethod
    def device(**faults: Any) -> tuple[Device, list[bytes]]:
        personality = make_personality("line", 64, crlf=True)
        assert isinstance(personality, LinePersonality)
        device = Device(personality, Faults(**faults), Counters(), random.Random(2))
        return device, personality.fix_events()

    def test_clean_fix_goes_out_whole(self) -> None:
        """No faults: the fix's sentences as they are, each ending with the reply terminator."""
        device, events = self.device()
        data = device.unsolicited(events)
        assert data == b"".join(events)
        assert data is not None and data.count(b"\r\n") == 3
        assert device.status()["events"] == 3

    def test_hang_silences_it(self) -> None:
        """A hung device sends nothing, and counts nothing."""
        device, events = self.device(hang=True)
        assert device.unsolicited(events) is None
        assert (device.status()["dropped"], device.status()["events"]) == (0, 0)

    def test_drop_loses_the_whole_fix(self) -> None:
        """drop 1: nothing goes out; the fix is counted in `dropped`."""
        device, events = self.device(drop=1.0)
        assert device.unsolicited(events) is None
        assert (device.status()["dropped"], device.status()["events"]) == (1, 0)

    def test_corrupt_breaks_one_checksum_not_the_lines(self) -> None:
        """corrupt 1: one sentence fails its checksum; the three lines stay whole."""
        device, events = self.device(corrupt=1.0)
        data = device.unsolicited(events)
        assert data is not None
        *lines, rest = data.split(b"\r\n")
        assert len(lines) == 3 and rest == b""
        assert sum(line + b"\r\n" != event for line, event in zip(lines, events, strict=True)) == 1
        assert device.status()["corrupted"] == 1


# --- the real program --------------------------------------------------------------------------


class TestProcess:
    @pytest.mark.timeout(20)
    def test_nmea_command_over_the_pty(self, gps: Gps) -> None:
        """NMEA 3 on the line codec: OK, then 3 fixes of GGA, RMC, GSA, checksums right."""
        reader = gps.open(gps.start())
        reader.write(b"NMEA 3\n")
        lines = reader.read_for(5.0, lines=10).split(b"\n")
        assert lines[0] == b"OK"
        assert [fields(line.decode())[0] for line in lines[1:-1]] == ["GPGGA", "GPRMC", "GPGSA"] * 3
        assert lines[-1] == b""

    @pytest.mark.timeout(20)
    def test_nmea_rate(self, gps: Gps) -> None:
        """--nmea 10: about ten fixes a second, sent with nobody asking (loose bounds)."""
        reader = gps.open(gps.start("--nmea", "10"))
        reader.drain()
        lines = reader.read_for(1.0).splitlines()
        count = sum(1 for line in lines if line.startswith(b"$GPGGA"))
        assert 5 <= count <= 20

    @pytest.mark.timeout(20)
    def test_fixes_come_as_whole_lines(self, gps: Gps) -> None:
        """With replies going out too, every line is a whole sentence or a whole reply line."""
        reader = gps.open(gps.start("--nmea", "50"))
        reader.drain()
        for _ in range(20):
            reader.write(b"MULTI 30\nECHO " + b"x" * 200 + b"\n")
            time.sleep(0.01)
        lines = reader.read_for(1.0).split(b"\n")[:-1]
        replies = [line for line in lines if not line.startswith(b"$")]
        assert all(fields(line.decode()) for line in lines if line.startswith(b"$"))
        expected = [f"LINE {i}".encode() for i in range(30)] + [b"OK", b"x" * 200]
        assert replies == expected * 20
        assert len(lines) > len(replies)

    @pytest.mark.timeout(20)
    def test_crlf_ends_the_sentences(self, gps: Gps) -> None:
        """With --crlf the sentences end with CR LF, like the replies."""
        reader = gps.open(gps.start("--nmea", "20", "--crlf"))
        reader.drain()
        data = reader.read_for(0.5)
        assert data.count(b"$GPGGA") >= 2
        assert data.count(b"\n") == data.count(b"\r\n")

    @pytest.mark.timeout(20)
    def test_hang_stops_the_fixes(self, gps: Gps) -> None:
        """A hung GPS is silent; unhung, its fixes resume."""
        sim = gps.start("--nmea", "20")
        reader = gps.open(sim)
        sim.control("hang")
        reader.drain()
        assert b"$GP" not in reader.read_for(0.4)
        sim.control("unhang")
        assert b"$GPGGA" in reader.read_for(0.5)

    @pytest.mark.timeout(20)
    def test_unread_fixes_do_not_pile_up(self, gps: Gps) -> None:
        """Nobody reading: once the pty is full, fixes are skipped and counted; the sim answers."""
        sim = gps.start("--nmea", "1000")  # and nobody opens the pty
        deadline = time.monotonic() + 10
        while sim.counters()["overflow"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        begin = time.monotonic()
        assert sim.control("status")["ok"] is True
        assert time.monotonic() - begin < 0.5

    @pytest.mark.timeout(20)
    def test_nmea_needs_the_line_codec(self, tmp_path: Path) -> None:
        """--nmea with --codec verl: exit 2 and a message saying why."""
        cmd = sim_command(link=str(tmp_path / "dev"), codec="verl", extra_args=["--nmea", "5"])
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=15, check=False)
        assert done.returncode == 2
        assert "--nmea" in done.stderr and "--codec line" in done.stderr
        assert not os.path.lexists(tmp_path / "dev")

    @pytest.mark.parametrize("rate", ["0", "-1", "nan", "inf", "1001", "fast"])
    def test_rate_must_be_positive(self, rate: str, capsys: pytest.CaptureFixture[str]) -> None:
        """--nmea takes 0 < HZ <= 1000: anything else exits 2 naming the option."""
        with pytest.raises(SystemExit) as exit_:
            sim_main(["--codec", "line", "--nmea", rate])
        assert exit_.value.code == 2
        assert "--nmea" in capsys.readouterr().err


# --- gpsd itself, where it is installed -----------------------------------------------------------


@pytest.mark.skipif(shutil.which("gpsd") is None, reason="gpsd is not installed")
@pytest.mark.timeout(30)
def test_gpsd_reports_a_3d_fix(gps: Gps, tmp_path: Path) -> None:
    """gpsd reading the sim's pty reports a 3D fix (TPV mode 3) at the sim's position."""
    sim = gps.start("--nmea", "5")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = ["gpsd", "-N", "-n", "-b", "-S", str(port), "-F", str(tmp_path / "gpsd.sock"), sim.link]
    gpsd = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        tpv = _first_3d_fix(port, deadline=time.monotonic() + 15)
    finally:
        gpsd.terminate()
        gpsd.wait(10)
    assert (tpv["lat"], tpv["lon"]) == (pytest.approx(48.1173), pytest.approx(11.5167))
    assert tpv["altMSL"] == pytest.approx(545.4)


def _first_3d_fix(port: int, deadline: float) -> dict[str, Any]:
    """The first TPV with mode 3 that gpsd on `port` reports (it may take a moment to start)."""
    while True:
        assert time.monotonic() < deadline, "gpsd reported no 3D fix"
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=1)
        except OSError:
            time.sleep(0.1)  # not listening yet
            continue
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        with conn, conn.makefile("rwb") as stream:
            stream.write(b'?WATCH={"enable":true,"json":true}\n')
            stream.flush()
            while line := stream.readline():
                report = json.loads(line)
                if report.get("class") == "TPV" and report.get("mode") == 3:
                    return dict(report)
