"""Virtual serial ports end to end: verld, verld-sim and programs on real ptys.

Strategy: verld runs as a subprocess on a verld-sim pty with `ports:` entries in
tmp_path; the programs are real processes (tests/port_program.py, a pyserial
script) or, where a test must see exactly what reaches the program, a bare
`os.open` of the link with no flush on open. API clients drive events and check
that the device and the other clients never stall.
"""

from __future__ import annotations

import errno
import json
import os
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import serial

from verld.codec.length import encode as length_encode
from verld.codec.verl import FrameDecoder, encode_frame
from verld.testing import DaemonProc, SimProc, wait_for, write_config

pytestmark = pytest.mark.timeout(60)

PROGRAM = str(Path(__file__).with_name("port_program.py"))
REQUEST, REPLY, EVENT = 0x11, 0x12, 0x13


class Rig:
    """A sim, verld with ports on it, and the programs started on them."""

    def __init__(
        self,
        tmp: Path,
        codec: str,
        ports: list[dict[str, Any]],
        overrides: dict[str, Any] | None = None,
    ) -> None:
        self.tmp = tmp
        self.sim = SimProc(tmp, codec=codec)
        device: dict[str, Any] = {"codec": codec, "timeout": 1.0}
        if codec == "line":
            device["line"] = {"event": "^EVENT"}
        overrides = overrides or {}
        cfg = {
            "heartbeat": {"interval": 0},
            "ports": ports,
            **overrides,
            "device": {**device, **overrides.get("device", {})},
        }
        try:
            self.daemon = DaemonProc(write_config(tmp, self.sim.link, cfg))
        except BaseException:
            self.sim.stop()
            raise
        self.procs: list[subprocess.Popen[str]] = []

    def link(self, name: str) -> str:
        return str(self.tmp / name)

    def program(
        self, name: str, codec: str, count: int, tag: str, *args: str
    ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, PROGRAM, self.link(name), codec, str(count), tag, *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def port_status(self, name: str) -> dict[str, Any]:
        for entry in self.daemon.status()["ports"]:
            if entry["link"] == self.link(name):
                return dict(entry)
        raise AssertionError(f"no port {name} in status")

    def wait_open(self, name: str, is_open: bool = True) -> None:
        wait_for(lambda: self.port_status(name)["open"] is is_open, 5.0, f"{name} open={is_open}")

    def stop(self) -> None:
        for proc in self.procs:
            with proc:  # (on the way out: its stdout closed, and it waited for)
                proc.kill()  # (nothing when it has exited)
        self.daemon.stop()
        self.sim.stop()

    def __enter__(self) -> Rig:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=40)
    assert proc.returncode == 0, out
    return dict(json.loads(out.strip().splitlines()[-1]))


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line.split()[1] for line in status if line.startswith("VmRSS")))


def _open_raw(link: str) -> int:
    """A program opening the port the plain way (no input flush, unlike pyserial)."""
    return os.open(link, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)


def _read_for(fd: int, seconds: float, want: int | None = None) -> bytes:
    """What the program can read within `seconds` (or until `want` bytes came)."""
    got = b""
    deadline = time.monotonic() + seconds
    while (want is None or len(got) < want) and (left := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            break
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        except OSError as exc:
            if exc.errno == errno.EIO:
                break
            raise
        if not chunk:
            break
        got += chunk
    return got


@pytest.fixture
def line_rig(tmp_path: Path) -> Iterator[Rig]:
    with Rig(
        tmp_path,
        "line",
        [
            {"link": str(tmp_path / "ttyA")},
            {"link": str(tmp_path / "ttyB")},
            {"link": str(tmp_path / "ttyRO"), "write": False},
            {"link": str(tmp_path / "ttyQuiet"), "events": False},
        ],
    ) as rig:
        yield rig


# --- each program gets only its own answers ------------------------------------------------


@pytest.mark.parametrize("codec", ["line", "length", "verl"])
def test_two_programs_writing_at_once_each_get_exactly_their_own_replies(
    tmp_path: Path, codec: str
) -> None:
    """Two programs writing interleaved on two ports each get exactly their own replies."""
    # Every reply is the program's own, none lost, none of the other's (verl: both use seqs 1..4,
    # four in flight).
    ports = [{"link": str(tmp_path / "ttyA")}, {"link": str(tmp_path / "ttyB")}]
    with Rig(tmp_path, codec, ports) as rig:
        extra = ["--partial"] + (["--window", "4"] if codec == "verl" else [])
        a = rig.program("ttyA", codec, 200, "a", *extra)
        b = rig.program("ttyB", codec, 200, "b", *extra)
        for result in (_result(a), _result(b)):
            assert result == {"sent": 200, "ok": 200, "wrong": [], "missing": 0, "events": 0}
        st = rig.port_status("ttyA")
        assert (st["calls"], st["ok"], st["failed"]) == (200, 200, {})


# --- events -----------------------------------------------------------------------------------


def test_events_reach_every_port_with_events_and_no_other(line_rig: Rig) -> None:
    """Device events reach every port with events, read-only ones too, and none without."""
    # Three device events: the two writable ports and the read-only one get all three as lines;
    # the port with events: false gets nothing.
    names = ("ttyA", "ttyB", "ttyRO", "ttyQuiet")
    fds = {name: _open_raw(line_rig.link(name)) for name in names}
    try:
        for name in names:
            line_rig.wait_open(name)
        assert line_rig.daemon.client().call(b"EVENTS 3").text == "OK"
        want = b"EVENT 0\nEVENT 1\nEVENT 2\n"
        for name in ("ttyA", "ttyB", "ttyRO"):
            assert _read_for(fds[name], 3.0, len(want)) == want, name
        assert _read_for(fds["ttyQuiet"], 0.5) == b""
    finally:
        for fd in fds.values():
            os.close(fd)


def test_a_read_only_port_ignores_what_the_program_writes(line_rig: Rig) -> None:
    """On a `write: false` port requests never reach the device and are counted as ignored."""
    fd = _open_raw(line_rig.link("ttyRO"))
    try:
        line_rig.wait_open("ttyRO")
        os.write(fd, b"PING\nPING\n")
        wait_for(lambda: line_rig.port_status("ttyRO")["ignored"] == 10, 5.0, "ignored bytes")
        assert _read_for(fd, 0.5) == b""
        st = line_rig.port_status("ttyRO")
        assert (st["calls"], st["ok"]) == (0, 0)
        assert line_rig.daemon.status()["counters"]["calls_ok"] == 0
    finally:
        os.close(fd)


# --- opening, closing, stale bytes --------------------------------------------------------------


def test_a_program_opening_late_reads_nothing_older_than_its_open(line_rig: Rig) -> None:
    """Events while no program has the port open are dropped; a late opener gets later ones."""
    # Dropped, not buffered: a program opening afterwards reads nothing of them, then gets the
    # next event.
    client = line_rig.daemon.client()
    assert client.call(b"EVENTS 5").text == "OK"
    wait_for(lambda: line_rig.port_status("ttyA")["dropped"] >= 5, 5.0, "events dropped")
    fd = _open_raw(line_rig.link("ttyA"))
    try:
        line_rig.wait_open("ttyA")
        assert _read_for(fd, 0.5) == b""
        client.call(b"EVENTS 1")
        assert _read_for(fd, 3.0, 8) == b"EVENT 0\n"
    finally:
        os.close(fd)


def test_closing_and_reopening_a_port_works_and_is_seen_within_half_a_second(
    line_rig: Rig,
) -> None:
    """A port closed by one program and opened by another shows in status within 0.5 s and works."""
    # 0.5 s plus the status round trip; the second program is answered.
    for _ in range(2):
        with serial.Serial(line_rig.link("ttyA"), timeout=2) as port:
            t0 = time.monotonic()
            line_rig.wait_open("ttyA")
            assert time.monotonic() - t0 < 1.0
            port.write(b"PING\n")
            assert port.readline() == b"PONG\n"
        t0 = time.monotonic()
        line_rig.wait_open("ttyA", False)
        assert time.monotonic() - t0 < 1.0


def test_a_program_that_turns_on_echo_and_canonical_mode_is_still_answered_once(
    line_rig: Rig,
) -> None:
    """A program setting ECHO and ICANON on its tty is answered once and its writes not re-read."""
    # As a terminal program might: verld clears them before writing, never reads its own writes
    # back as requests, and says so once in the log.
    with serial.Serial(line_rig.link("ttyA"), timeout=2) as port:
        fd = port.fileno()
        attrs = termios.tcgetattr(fd)
        attrs[3] |= termios.ECHO | termios.ICANON
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
        line_rig.wait_open("ttyA")
        for i in range(5):
            port.write(f"ECHO x{i}\n".encode())
            assert port.readline() == f"x{i}\n".encode()
        assert termios.tcgetattr(fd)[3] & (termios.ECHO | termios.ICANON) == 0
    st = line_rig.port_status("ttyA")
    assert (st["calls"], st["ok"]) == (5, 5)
    assert line_rig.daemon.log().count('"port_termios_fixed"') == 1


def test_a_call_that_fails_gets_no_answer_and_is_counted_by_error(tmp_path: Path) -> None:
    """A request the device does not answer in time gets nothing and is counted failed: timeout."""
    # Like a silent device: its late reply is stale; the next request is answered.
    with Rig(
        tmp_path,
        "verl",
        [{"link": str(tmp_path / "ttyA")}],
        {"device": {"timeout": 0.3, "retry": 0}},
    ) as rig:
        decoder = FrameDecoder(4096, frozenset({REPLY, EVENT}))
        with serial.Serial(rig.link("ttyA"), timeout=1.2) as port:
            port.write(encode_frame(REQUEST, 1, b"\x03\x03\x20late"))  # echo after 800 ms
            assert decoder.feed(port.read(4096)) == []  # 1.2 s: past the timeout and the reply
            port.write(encode_frame(REQUEST, 2, b"\x01now"))
            replies = decoder.feed(port.read_until(b"\x00", 4096) + port.read_until(b"\x00"))
        assert [(f.seq, f.payload) for f in replies] == [(2, b"\x00now")]
        st = rig.port_status("ttyA")
        assert (st["failed"], st["ok"]) == ({"timeout": 1}, 1)
        assert '"port_call_failed"' in rig.daemon.log()


# --- bounds ---------------------------------------------------------------------------------------


def test_a_program_that_never_reads_stalls_no_one_and_stays_bounded(tmp_path: Path) -> None:
    """A port program that never reads stalls no one and verld's memory stays bounded."""
    # 256 KiB of requests written to a port whose program never reads, and 256 KiB of events on
    # top: another port's program and an API client are still answered, the excess is dropped and
    # counted, and verld's memory does not follow.
    with Rig(
        tmp_path,
        "length",
        [{"link": str(tmp_path / "ttyA")}, {"link": str(tmp_path / "ttyB")}],
        {"api": {"max_backlog": 65536}},
    ) as rig:
        fd = _open_raw(rig.link("ttyA"))
        try:
            rig.wait_open("ttyA")
            stream = length_encode(b"\x01" + bytes(1020)) * 256  # echoes: 1 KiB back each
            written = 0
            deadline = time.monotonic() + 20
            while written < len(stream) and time.monotonic() < deadline:
                try:
                    written += os.write(fd, stream[written:])
                except BlockingIOError:
                    time.sleep(0.005)
            assert written == len(stream) >= 256 * 1024
            client = rig.daemon.client()
            client.call(b"\x06\x01\x00")  # 256 events on top
            other = rig.program("ttyB", "length", 50, "b")
            assert _result(other)["ok"] == 50
            assert client.call(b"\x01ping").data == b"ping"
            wait_for(lambda: rig.port_status("ttyA")["dropped"] > 0, 10.0, "answers dropped")
            assert _rss_kib(rig.daemon.pid) < 200 * 1024
        finally:
            os.close(fd)


def test_an_overlong_line_is_ignored_until_the_port_is_quiet(line_rig: Rig) -> None:
    """A line longer than max_payload makes the port ignored until quiet for device.guard."""
    # Then the program is answered again.
    with serial.Serial(line_rig.link("ttyA"), timeout=2) as port:
        line_rig.wait_open("ttyA")
        port.write(b"x" * 5000 + b"\nPING\n")  # the PING is part of the discarded burst
        time.sleep(0.5)  # quiet for longer than the 0.1 s guard
        port.write(b"PING\n")
        assert port.readline() == b"PONG\n"
        assert port.read(10) == b""
    st = line_rig.port_status("ttyA")
    assert st["ignored"] >= 5000 and st["calls"] == 1


def test_garbage_on_one_verl_port_is_counted_and_harms_no_other(tmp_path: Path) -> None:
    """Noise and broken frames on one verl port are counted; the other port is still answered."""
    # The program on the other port is answered throughout.
    ports = [{"link": str(tmp_path / "ttyA")}, {"link": str(tmp_path / "ttyB")}]
    with Rig(tmp_path, "verl", ports) as rig:
        other = rig.program("ttyB", "verl", 100, "b", "--window", "2")
        with serial.Serial(rig.link("ttyA"), timeout=2) as port:
            rig.wait_open("ttyA")
            good = encode_frame(REQUEST, 7, b"\x01ok")
            broken = bytearray(good)
            broken[4] ^= 0xFF
            for _ in range(20):
                port.write(os.urandom(64) + b"\x00" + bytes(broken))
            port.write(good)
            replies = FrameDecoder(4096, frozenset({REPLY})).feed(
                port.read_until(b"\x00") + port.read_until(b"\x00")
            )
        assert _result(other)["ok"] == 100
        assert (7, b"\x00ok") in [(f.seq, f.payload) for f in replies]
        assert rig.port_status("ttyA")["bad_frames"] >= 20


# --- status, metrics, verlctl --------------------------------------------------------------------


def test_status_lists_every_port_with_its_figures(line_rig: Rig) -> None:
    """status.ports: one entry per port, in config order, with the documented keys."""
    ports = line_rig.daemon.status()["ports"]
    names = ("ttyA", "ttyB", "ttyRO", "ttyQuiet")
    assert [p["link"] for p in ports] == [line_rig.link(n) for n in names]
    keys = {"link", "open", "calls", "ok", "failed", "dropped", "ignored"}
    assert all(keys <= set(p) for p in ports)
    assert ports[0]["open"] is False and ports[0]["failed"] == {}


def test_metrics_and_verlctl_status_show_the_ports(line_rig: Rig) -> None:
    """The port metrics count a port's calls and `verlctl status` has a row per port."""
    # verld_front_calls_total{front="port"} and the per-port series.
    with serial.Serial(line_rig.link("ttyA"), timeout=2) as port:
        port.write(b"PING\n")
        assert port.readline() == b"PONG\n"
    text = line_rig.daemon.client().request("metrics")["text"]
    assert 'verld_front_calls_total{front="port",outcome="ok"} 1' in text
    assert f'verld_port_calls_total{{link="{line_rig.link("ttyA")}"}} 1' in text
    out = subprocess.run(
        [sys.executable, "-m", "verld.ctl", "--socket", line_rig.daemon.socket, "status"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("vport ")]
    assert len(rows) == 4
    assert "calls 1  ok 1" in rows[0] and "read-only" in rows[2]


def test_requests_past_client_queue_on_a_one_at_a_time_port_fail_busy(tmp_path: Path) -> None:
    """A line port answers api.client_queue requests of a burst; the rest fail busy, unanswered."""
    # A line port holds at most api.client_queue requests of its own: ten written at once with
    # room for four get four answers.
    with Rig(
        tmp_path, "line", [{"link": str(tmp_path / "ttyA")}], {"api": {"client_queue": 4}}
    ) as rig:
        with serial.Serial(rig.link("ttyA"), timeout=1.5) as port:
            rig.wait_open("ttyA")
            port.write(b"".join(f"DELAY 50 r{i}\n".encode() for i in range(10)))
            answers = port.read(4096).split()
        st = rig.port_status("ttyA")
        busy = st["failed"].get("busy", 0)
        assert busy >= 1 and st["ok"] == len(answers) >= 4 and st["ok"] + busy == 10
        assert answers == [f"r{i}".encode() for i in range(len(answers))]
