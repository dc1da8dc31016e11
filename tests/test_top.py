"""`verlctl top` on a real terminal: tmux (send-keys, capture-pane) against a real verld.

Strategy: verld runs on a verld-sim with programs on every front of the codec —
an API client calling in a loop (with a `hello` name), a program on a virtual
port, a raw network connection; on modbus-rtu a Modbus TCP master too — and
`verlctl top` runs in a shell inside a tmux session of its own server (`-L`, killed
at the end), 80×24 unless the test resizes it. The screen is read back with
`capture-pane` (`-e` keeps the colours). The piped mode runs without tmux. A
missing tmux skips, except under CI=true (.ci/run installs it).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import free_port, need

from verld.client import ClientError
from verld.testing import DaemonProc, SimProc, wait_for, write_config

pytestmark = pytest.mark.timeout(90)

VERLCTL = [sys.executable, "-m", "verld.ctl"]


class Tmux:
    """A tmux server of its own with one 80×24 session running a shell."""

    def __init__(self, tmp: Path) -> None:
        self.tmux = [
            need("tmux", "tmux"),
            "-L",
            f"verld-top-{os.getpid()}-{id(self)}",
            "-f",
            "/dev/null",
        ]
        env = {**os.environ, "TERM": "xterm-256color", "PS1": "$ "}
        subprocess.run(
            [
                *self.tmux,
                "new-session",
                "-d",
                "-s",
                "top",
                "-x",
                "80",
                "-y",
                "24",
                "bash --norc --noprofile",
            ],
            check=True,
            env=env,
            cwd=tmp,
        )

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "top", *keys], check=True)

    def screen(self, colours: bool = False) -> str:
        extra = ["-e"] if colours else []
        out = subprocess.run(
            [*self.tmux, "capture-pane", "-p", *extra, "-t", "top"],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def wait(self, text: str, timeout: float = 15.0) -> str:
        wait_for(lambda: text in self.screen(), timeout, lambda: f"{text!r} on:\n{self.screen()}")
        return self.screen()

    def resize(self, width: int, height: int) -> None:
        subprocess.run(
            [*self.tmux, "resize-window", "-t", "top", "-x", str(width), "-y", str(height)],
            check=True,
        )

    def size(self) -> tuple[int, int]:
        out = subprocess.run(
            [*self.tmux, "display-message", "-p", "-t", "top", "#{pane_width} #{pane_height}"],
            check=True,
            capture_output=True,
            text=True,
        )
        width, height = out.stdout.split()
        return int(width), int(height)

    def stop(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], check=False, capture_output=True)


class Busy:
    """Programs on every front of a line device, calling until stopped."""

    def __init__(self, d: DaemonProc, port_link: str, net_port: int) -> None:
        self.stopping = threading.Event()
        self.api = d.client(name="logger")
        self.fd = os.open(port_link, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        self.net = socket.create_connection(("127.0.0.1", net_port), timeout=1.0)
        self.threads = [threading.Thread(target=self._api), threading.Thread(target=self._others)]
        for t in self.threads:
            t.start()

    def _api(self) -> None:
        while not self.stopping.is_set():
            try:
                self.api.call(b"PING")
            except ClientError:  # (the link down: a test's unplug)
                time.sleep(0.1)
            time.sleep(0.01)

    def _others(self) -> None:
        while not self.stopping.is_set():
            try:
                os.write(self.fd, b"PING\n")
                self.net.sendall(b"PING\n")
                time.sleep(0.1)
                os.read(self.fd, 100)
                self.net.recv(100)
            except (BlockingIOError, TimeoutError):
                continue  # (no answer: the link is down)
            except OSError:  # (verld stopped: the port and the connection are gone)
                return

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(10)
        os.close(self.fd)
        self.net.close()


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.net_port = free_port()
        self.link = str(tmp / "ttyV0")
        self.sim = SimProc(tmp, codec="line")
        more = {
            "device": {"codec": "line"},
            "ports": [{"link": self.link}],
            "network": [{"listen": f"127.0.0.1:{self.net_port}", "name": "lan"}],
        }
        self.config = write_config(tmp, self.sim.link, more)
        self.d = DaemonProc(self.config)
        self.busy = Busy(self.d, self.link, self.net_port)
        self.tmux = Tmux(tmp)

    def top(self, *args: str) -> None:
        cmd = " ".join([*VERLCTL, "--socket", self.d.socket, "top", *args])
        self.tmux.keys(f"{cmd}; echo EXIT=$?", "Enter")

    def stop(self) -> None:
        self.tmux.stop()
        self.busy.stop()
        self.d.stop()
        self.sim.stop()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.stop()


def calls_per_second(screen: str, start: str) -> float:
    row = next(line for line in screen.splitlines() if line.startswith(start))
    return float(row[48:58])


def test_rows_for_every_front_and_the_rates_move(rig: Rig) -> None:
    """The API client, the virtual port and the network connection each have a live row."""
    rig.top()
    screen = rig.tmux.wait("pid ")
    wait_for(lambda: calls_per_second(rig.tmux.screen(), "api     pid") > 0, 10)
    screen = rig.tmux.screen()
    assert f"pid {os.getpid()} logger" in screen
    assert any(line.startswith("port    …/ttyV0 ") for line in screen.splitlines())  # (its link)
    assert "network lan 127.0.0.1:" in screen
    assert "link    up (connected)" in screen
    lines = screen.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert lines[23].startswith("q quit")


def test_keys_pause_sort_and_quit_give_the_terminal_back(rig: Rig) -> None:
    """s changes the sort, p pauses, q exits 0 and the shell's screen is back."""
    rig.top()
    rig.tmux.wait("sort calls/s")
    rig.tmux.keys("s")
    rig.tmux.wait("sort failed")
    rig.tmux.keys("p")
    rig.tmux.wait("PAUSED")
    rig.tmux.keys("q")
    screen = rig.tmux.wait("EXIT=0")
    assert "FRONT" not in screen  # (the alternate screen is gone)


def test_a_resize_redraws(rig: Rig) -> None:
    """A larger window gets a redraw to its size: the keys on its last line."""
    rig.top()
    rig.tmux.wait("q quit")
    rig.tmux.resize(100, 30)

    def redrawn() -> bool:
        if rig.tmux.size() != (100, 30):
            rig.tmux.resize(100, 30)  # (again: tmux may not have taken it yet)
            return False
        return rig.tmux.screen().splitlines()[29:30] == ["q quit  p pause  s sort"]

    wait_for(
        redrawn, 20, lambda: f"{rig.tmux.size()}, the keys on line 30 of:\n{rig.tmux.screen()}"
    )


def test_verld_going_away_is_shown_and_retried(rig: Rig) -> None:
    """verld stopped: the screen says so; started again: the view comes back by itself."""
    rig.top("--interval", "0.5")
    rig.tmux.wait("link    up")
    rig.busy.stop()
    rig.busy = _Idle()  # type: ignore[assignment]
    rig.d.stop()
    rig.tmux.wait("verld is not answering")
    rig.d = DaemonProc(rig.config)
    wait_for(lambda: "not answering" not in rig.tmux.screen(), 15)
    assert "link    up" in rig.tmux.screen()


class _Idle:
    def stop(self) -> None:
        return None


def test_a_link_down_is_shown_in_colour(rig: Rig) -> None:
    """An unplugged device: the link line reads down, in red."""
    rig.top("--interval", "0.5")
    rig.tmux.wait("link    up")
    rig.sim.control("unplug 0")
    rig.tmux.wait("link    down")
    coloured = next(line for line in rig.tmux.screen(colours=True).splitlines() if "link " in line)
    assert "\x1b[" in coloured and "31m" in coloured  # (red)
    rig.sim.control("replug")


def test_piped_output_is_one_plain_frame(rig: Rig) -> None:
    """With stdout a pipe, one plain-text frame after one interval, exit 0."""
    out = subprocess.run(
        [*VERLCTL, "--socket", rig.d.socket, "top", "--interval", "0.5"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert out.returncode == 0
    assert "\x1b" not in out.stdout
    assert "FRONT   PROGRAM" in out.stdout and "network lan 127.0.0.1:" in out.stdout
    assert "q quit" not in out.stdout


def test_modbus_units_and_tcp_masters(tmp_path: Path) -> None:
    """On modbus-rtu the units table and a Modbus TCP master's row are shown."""
    sim = SimProc(tmp_path, codec="modbus-rtu")
    mb = free_port()
    more: dict[str, Any] = {
        "device": {"codec": "modbus-rtu"},
        "modbus": {"listen": f"127.0.0.1:{mb}"},
    }
    d = DaemonProc(write_config(tmp_path, sim.link, more))
    try:
        with socket.create_connection(("127.0.0.1", mb)) as master:
            for tid in range(3):  # read holding registers 0..1 of unit 1
                master.sendall(struct.pack(">HHHBBHH", tid, 0, 6, 1, 3, 0, 2))
                master.recv(100)
            top = [*VERLCTL, "--socket", d.socket, "top", "--interval", "0.3"]
            out = subprocess.run(top, capture_output=True, text=True, timeout=20, check=False)
        assert "UNIT" in out.stdout and "TIMEOUTS" in out.stdout
        assert any(line.startswith("1 ") for line in out.stdout.splitlines())
        assert "modbus  127.0.0.1:" in out.stdout
    finally:
        d.stop()
        sim.stop()


def test_json_gives_the_rows_with_their_rates(rig: Rig) -> None:
    """--json top prints one object: every program's row with its calls/s."""
    out = subprocess.run(
        [*VERLCTL, "--socket", rig.d.socket, "--json", "top", "--interval", "0.5"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert out.returncode == 0
    rows = json.loads(out.stdout)["programs"]
    logger = next(r for r in rows if r["who"].endswith(" logger"))
    assert logger["front"] == "api" and logger["rate"] > 0
