"""Real third-party programs on verld's virtual serial ports: gpsd, picocom, socat.

Strategy: verld runs as a subprocess on a verld-sim pty (line codec) with `ports:`
entries in tmp_path, as in tests/test_ports.py; the programs are the installed
binaries, run as a user would run them. picocom needs a terminal on stdin, so it
gets a pty of its own (`Picocom`): the test types into that pty's master and reads
picocom's screen from it. gpsd is read through its JSON socket (no gpsd-clients).
A missing program skips its test, except under CI=true (.ci/run installs them),
where it fails. The last test keeps docs/ports.md's config snippets valid.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from verld.testing import DaemonProc, SimProc, stop_process, wait_for, write_config

pytestmark = pytest.mark.timeout(60)

DOC = Path(__file__).resolve().parent.parent / "docs" / "ports.md"
#: the sim's GPS position (docs/sim.md, "GPS mode")
LAT, LON = 48.1173, 11.5167
#: how picocom is run on a port (docs/ports.md, session 1): Enter sends CR, which ends a
#: program's line; --imap lfcrlf shows the device's LF as a new line
PICOCOM_OPTS = ("-q", "--imap", "lfcrlf", "-b", "115200")
#: a pyserial program: COUNT `ECHO TAG-i` requests, a little apart; prints its replies
ECHO_SCRIPT = """
import json, sys, time
import serial
link, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
replies = []
with serial.Serial(link, 115200, timeout=2) as port:
    for i in range(count):
        port.write(f"ECHO {tag}-{i}\\n".encode())
        replies.append(port.readline().decode())
        time.sleep(0.02)
print(json.dumps(replies))
"""


def _need(program: str) -> str:
    """The program's path; skip without it, except under CI=true (.ci/run installs it).
    The sbin directories count too: gpsd is in /usr/sbin, outside a user's usual PATH."""
    path = shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")
    if path is not None:
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"{program} is not installed, and CI=true: .ci/run installs it")
    pytest.skip(f"{program} is not installed")


def _free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Bench:
    """A line-codec verld-sim, verld with ports on it, and the programs run on them.

    `ports` maps a link's name (in `tmp`) to the rest of its `ports:` entry.
    """

    def __init__(
        self,
        tmp: Path,
        ports: dict[str, dict[str, Any]],
        *,
        event: str | None = None,
        sim_args: tuple[str, ...] = (),
    ) -> None:
        self.tmp = tmp
        self.sim = SimProc(tmp, *sim_args, codec="line")
        device: dict[str, Any] = {"codec": "line", "timeout": 1.0}
        if event is not None:
            device["line"] = {"event": event}
        entries = [{"link": self.link(name), **entry} for name, entry in ports.items()]
        cfg = {"device": device, "heartbeat": {"interval": 0}, "ports": entries}
        try:
            self.daemon = DaemonProc(write_config(tmp, self.sim.link, cfg))
        except BaseException:
            self.sim.stop()
            raise
        self.procs: list[subprocess.Popen[bytes]] = []
        self.terminals: list[Picocom] = []

    def link(self, name: str) -> str:
        return str(self.tmp / name)

    def port_status(self, name: str) -> dict[str, Any]:
        for entry in self.daemon.status()["ports"]:
            if entry["link"] == self.link(name):
                return dict(entry)
        raise AssertionError(f"no port {name} in status")

    def wait_open(self, name: str, is_open: bool = True) -> None:
        wait_for(lambda: self.port_status(name)["open"] is is_open, 10.0, f"{name} open={is_open}")

    def popen(self, cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        """A program, stopped (by pid) in `stop`."""
        proc = subprocess.Popen(cmd, **kw)
        self.procs.append(proc)
        return proc

    def picocom(self, name: str) -> Picocom:
        """picocom on the port `name`, once verld sees it open and its terminal is raw."""
        term = Picocom(self.link(name))
        self.terminals.append(term)
        self.wait_open(name)
        return term

    def stop(self) -> None:
        for term in self.terminals:
            term.close()
        for proc in self.procs:
            stop_process(proc, grace=5.0)
        self.daemon.stop()
        self.sim.stop()


Make = Callable[..., Bench]


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Make]:
    """`bench(ports, event=..., sim_args=...)` makes the test's Bench, stopped at teardown."""
    made: list[Bench] = []

    def make(ports: dict[str, dict[str, Any]], **kw: Any) -> Bench:
        made.append(Bench(tmp_path, ports, **kw))
        return made[-1]

    yield make
    for b in made:
        b.stop()


class Picocom:
    """picocom on `link`, its terminal a pty of ours: `type` keys, read its `screen`."""

    def __init__(self, link: str) -> None:
        cmd = [_need("picocom"), *PICOCOM_OPTS, link]
        self.master, slave = os.openpty()
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
            )
        finally:
            os.close(slave)
        self.screen = b""  #: all picocom wrote to its terminal so far
        try:
            wait_for(self._ready, 10.0, lambda: f"picocom's raw terminal; screen {self.screen!r}")
        except BaseException:
            self.close()
            raise

    def _ready(self) -> bool:
        """picocom set its terminal raw (it does once the port is open): keys typed
        from now on reach it one by one, not held by a canonical line discipline."""
        self._drain(0.0)
        if self.proc.poll() is not None:
            raise AssertionError(f"picocom exited {self.proc.returncode}: {self.screen!r}")
        return not termios.tcgetattr(self.master)[3] & termios.ICANON

    def _drain(self, seconds: float) -> bool:
        """Read the screen for up to `seconds`; False once picocom's side closed."""
        ready, _, _ = select.select([self.master], [], [], seconds)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: picocom exited, its terminal is closed
            return False
        self.screen += chunk
        return bool(chunk)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def read_until(self, want: bytes, timeout: float = 10.0) -> bytes:
        """The screen, once `want` is on it."""
        deadline = time.monotonic() + timeout
        while want not in self.screen:
            left = deadline - time.monotonic()
            assert left > 0, f"{want!r} not on picocom's screen: {self.screen!r}"
            if not self._drain(min(left, 0.1)):
                raise AssertionError(f"picocom left before {want!r}: {self.screen!r}")
        return self.screen

    def quit(self) -> int:
        """C-a C-x, picocom's exit key; its exit code."""
        self.type(b"\x01\x18")
        deadline = time.monotonic() + 10
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._drain(0.05)
        return self.proc.wait(max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1


class Gpsd:
    """gpsd in the foreground on a port, its JSON on a free TCP port, its log in tmp."""

    def __init__(self, bench: Bench, name: str, *options: str) -> None:
        self.port = _free_tcp_port()
        self.log = bench.tmp / "gpsd.log"
        cmd = [
            _need("gpsd"),
            "-N",
            "-n",
            *options,
            "-S",
            str(self.port),
            "-F",
            str(bench.tmp / "gpsd.sock"),
            bench.link(name),
        ]
        with open(self.log, "wb") as log:
            self.proc = bench.popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def first_3d_fix(self, timeout: float = 20.0) -> dict[str, Any]:
        """The first TPV with mode 3 and a position on gpsd's JSON socket (after `?WATCH`);
        gpsd may take a moment to listen, and on a busy machine may report mode 3 (from
        GSA) in a cycle before the position (GGA, RMC) is in."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"gpsd exited {self.proc.returncode}: {self.log.read_text()}")
            assert time.monotonic() < deadline, f"gpsd reported no 3D fix: {self.log.read_text()}"
            try:
                conn = socket.create_connection(("127.0.0.1", self.port), timeout=1)
            except OSError:
                time.sleep(0.1)  # not listening yet
                continue
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            with conn, conn.makefile("rwb") as stream:
                stream.write(b'?WATCH={"enable":true,"json":true}\n')
                stream.flush()
                while line := stream.readline():
                    report = json.loads(line)
                    if report.get("class") == "TPV" and report.get("mode") == 3 and "lat" in report:
                        return dict(report)


# --- gpsd --------------------------------------------------------------------------------


@pytest.mark.timeout(40)
def test_gpsd_gets_a_3d_fix_through_a_read_only_port_while_api_calls_go_on(bench: Make) -> None:
    """gpsd -b gets a 3D fix through a read-only port while an API client's PING is answered."""
    # verld-sim as a GPS (5 fixes a second), its sentences device events; gpsd -b on a `write:
    # false` port reports TPV mode 3 at the sim's position, an API client's PING is answered
    # meanwhile, and the port shows open with no calls.
    _need("gpsd")
    rig = bench({"ttyGPS": {"write": False}}, event="^\\$GP", sim_args=("--nmea", "5"))
    gpsd = Gpsd(rig, "ttyGPS", "-b")
    tpv = gpsd.first_3d_fix()
    assert (tpv["lat"], tpv["lon"]) == (pytest.approx(LAT), pytest.approx(LON))
    assert tpv["device"] == rig.link("ttyGPS")
    assert rig.daemon.client().call(b"PING").text == "PONG"
    st = rig.port_status("ttyGPS")
    assert (st["open"], st["calls"], st["ok"], st["failed"], st["write"]) == (True, 0, 0, {}, False)
    assert gpsd.proc.poll() is None


@pytest.mark.timeout(40)
def test_gpsd_probing_a_read_only_port_has_its_writes_ignored_not_called(bench: Make) -> None:
    """gpsd probing a read-only port has every written byte counted ignored, none a call."""
    # Without -b gpsd probes the receiver (vendor queries, speed changes) before it settles on
    # NMEA: on a `write: false` port every byte it writes is counted `ignored`, none becomes a
    # call, and the fix still comes.
    _need("gpsd")
    rig = bench({"ttyGPS": {"write": False}}, event="^\\$GP", sim_args=("--nmea", "5"))
    tpv = Gpsd(rig, "ttyGPS").first_3d_fix()
    assert (tpv["lat"], tpv["lon"]) == (pytest.approx(LAT), pytest.approx(LON))
    wait_for(lambda: rig.port_status("ttyGPS")["ignored"] > 0, 10.0, "gpsd's probes ignored")
    st = rig.port_status("ttyGPS")
    assert (st["calls"], st["ok"], st["failed"], st["bad_frames"]) == (0, 0, {}, 0)
    assert rig.sim.counters()["requests"] == 0, "a probe reached the device"


# --- picocom -------------------------------------------------------------------------------


@pytest.mark.timeout(40)
def test_picocom_typing_ping_sees_pong_and_leaves_the_port_closed(bench: Make) -> None:
    """picocom typing PING sees PONG, exits 0 on C-a C-x and leaves the port closed."""
    # picocom on a writable port, its terminal a pty: `PING` + Enter shows `PONG`; after C-a C-x
    # it exits 0, the port is closed and its one call was answered.
    _need("picocom")
    rig = bench({"ttyV0": {}})
    term = rig.picocom("ttyV0")
    term.type(b"PING\r")
    assert term.read_until(b"PONG\r\n") == b"PONG\r\n"
    assert term.quit() == 0
    rig.wait_open("ttyV0", False)
    st = rig.port_status("ttyV0")
    assert (st["calls"], st["ok"], st["failed"], st["dropped"]) == (1, 1, {}, 0)


# --- socat ---------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_socat_on_a_port_reads_the_devices_identity(bench: Make) -> None:
    """`socat - FILE:LINK,raw,echo=0` fed `*IDN?` from a pipe prints the identity line."""
    path = _need("socat")
    rig = bench({"ttyV0": {}})
    socat = rig.popen(
        [path, "-", f"FILE:{rig.link('ttyV0')},raw,echo=0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert socat.stdin is not None and socat.stdout is not None
    rig.wait_open("ttyV0")
    socat.stdin.write(b"*IDN?\n")
    socat.stdin.flush()
    out = b""
    deadline = time.monotonic() + 10
    while not out.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([socat.stdout], [], [], 0.1)
        if ready:
            chunk = os.read(socat.stdout.fileno(), 4096)
            assert chunk, f"socat closed its output after {out!r}"
            out += chunk
    assert out == b"verld-sim 0.1.0\n"
    socat.stdin.close()  # socat ends after its half-close timeout
    assert socat.wait(10) == 0


# --- two programs at once -----------------------------------------------------------------------


@pytest.mark.timeout(40)
def test_picocom_and_a_pyserial_script_on_two_ports_each_see_only_their_own(
    bench: Make,
) -> None:
    """picocom and a pyserial script on two ports each see only their own replies."""
    # picocom on ttyA types `ECHO from-picocom-i` while a pyserial script on ttyB loops `ECHO
    # from-script-i` 50 times: picocom's screen holds its five replies and nothing else, the
    # script got its 50 in order and none of picocom's.
    _need("picocom")
    rig = bench({"ttyA": {}, "ttyB": {}})
    term = rig.picocom("ttyA")
    script = rig.popen(
        [sys.executable, "-c", ECHO_SCRIPT, rig.link("ttyB"), "from-script", "50"],
        stdout=subprocess.PIPE,
    )
    rig.wait_open("ttyB")
    for i in range(5):
        term.type(f"ECHO from-picocom-{i}\r".encode())
        term.read_until(f"from-picocom-{i}\r\n".encode())
        time.sleep(0.1)
    out, _ = script.communicate(timeout=20)
    assert script.returncode == 0
    assert json.loads(out) == [f"from-script-{i}\n" for i in range(50)]
    assert term.quit() == 0
    assert term.screen == b"".join(f"from-picocom-{i}\r\n".encode() for i in range(5))
    assert rig.port_status("ttyA")["ok"] == 5
    assert rig.port_status("ttyB")["ok"] == 50


# --- the guide -----------------------------------------------------------------------------------


def _config_snippets() -> list[str]:
    """docs/ports.md's ```yaml blocks that hold a `ports:` key."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return [block for block in blocks if re.search(r"^ports:", block, re.M)]


@pytest.mark.timeout(60)
def test_the_guides_config_snippets_pass_check_config(tmp_path: Path) -> None:
    """Every config in docs/ports.md with `ports:` passes `verld --check-config`."""
    # So the guide cannot drift from the schema.
    snippets = _config_snippets()
    assert len(snippets) >= 2, "docs/ports.md shows no `ports:` configs"
    for i, snippet in enumerate(snippets, 1):
        path = tmp_path / f"snippet{i}.yaml"
        path.write_text(snippet)
        done = subprocess.run(
            [sys.executable, "-m", "verld", "--check-config", str(path)],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert done.returncode == 0, f"docs/ports.md, yaml block {i}:\n{snippet}\n{done.stderr}"
