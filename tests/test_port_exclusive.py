"""Port ownership: verld opens the serial port with an flock and the tty's TIOCEXCL.

Real verld-sim and verld processes on real ptys. The other opener is a small Python
run as uid 65534 (setpriv): TIOCEXCL refuses an open by a process without
CAP_SYS_ADMIN, and root has it, so only a non-root opener shows the flag. The pty's
slave node is made 0666 first, so only TIOCEXCL can refuse it. The sim keeps the pty's
master (and a slave fd) open throughout, so the flag outlives verld's fd unless verld
clears it (TIOCNXCL) before it closes the port.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pty
import shutil
import signal
import socket
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import (
    AS_NOBODY,
    DaemonProc,
    SimProc,
    free_port,
    nobody_python,
    stop_process,
    wait_for,
    write_config,
)

from verld.client import Client, Unreachable
from verld.config import DeviceConfig
from verld.links.serialport import close_serial, open_serial, tty_holder

NOBODY = 65534

needs_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="a non-root opener needs root and setpriv",
)

#: open(argv[1]) and close it; prints "ok" or the errno's name
_OPEN = """
import errno, os, sys
try:
    os.close(os.open(sys.argv[1], os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))
except OSError as exc:
    print(errno.errorcode[exc.errno])
else:
    print("ok")
"""

#: open argv[1] with TIOCEXCL, say so, hold it until stdin closes
_HOLD = """
import fcntl, os, sys, termios
fd = os.open(sys.argv[1], os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
fcntl.ioctl(fd, termios.TIOCEXCL)
print("held", flush=True)
sys.stdin.read()
"""

#: open_serial(argv[1]); prints the OpenError's text, or "opened"
_OPEN_SERIAL = """
import sys
from verld.config import DeviceConfig
from verld.errors import OpenError
from verld.links.serialport import close_serial, open_serial
try:
    close_serial(open_serial(DeviceConfig(), sys.argv[1]))
except OpenError as exc:
    print(exc)
else:
    print("opened")
"""


def as_nobody(script: str, *args: str) -> list[str]:
    """The command running Python `script` with `args` as uid 65534."""
    return [*AS_NOBODY, *nobody_python(), "-c", script, *args]


def nobody_opens(path: str) -> str:
    """What uid 65534's open(2) of `path` gives: "ok", or the errno's name ("EBUSY")."""
    r = subprocess.run(
        as_nobody(_OPEN, path), capture_output=True, text=True, timeout=30, cwd="/", check=True
    )
    return r.stdout.strip()


def open_to_all(sim: SimProc) -> str:
    """The sim's pty slave node, made 0666 (so only TIOCEXCL can refuse an open); its path."""
    path = os.path.realpath(sim.link)
    os.chmod(path, 0o666)
    return path


# --- verld as root ------------------------------------------------------------------------


@needs_nobody
@pytest.mark.timeout(60)  # nobody_python may copy verld first
def test_a_non_root_open_of_the_held_port_is_ebusy(sim: SimProc, daemon: DaemonProc) -> None:
    """While verld holds the port, a non-root process's open(2) of it fails with EBUSY."""
    path = open_to_all(sim)
    assert nobody_opens(path) == "EBUSY"


def test_root_still_opens_the_held_port(sim: SimProc, daemon: DaemonProc) -> None:
    """TIOCEXCL does not stop root (CAP_SYS_ADMIN): its open of the held port succeeds."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    os.close(os.open(sim.link, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))
    assert daemon.status()["link"]["state"] == "up"


@needs_nobody
@pytest.mark.timeout(60)
def test_the_port_opens_for_others_after_verld_exits(sim: SimProc, daemon: DaemonProc) -> None:
    """After verld's SIGTERM exit the flag is cleared: a non-root open succeeds (sim still on)."""
    path = open_to_all(sim)
    assert nobody_opens(path) == "EBUSY"  # (the flag was set: the next line means something)
    assert daemon.stop() == 0
    assert sim.proc.poll() is None
    assert nobody_opens(path) == "ok"


@needs_nobody
@pytest.mark.timeout(60)
def test_a_sigkilled_verld_leaves_the_flag_on_the_pty(sim: SimProc, daemon: DaemonProc) -> None:
    """A SIGKILLed verld cannot clear TIOCEXCL: non-root opens stay EBUSY while the sim holds it."""
    # (the kernel keeps the flag while anything holds the tty: why verld clears it itself)
    path = open_to_all(sim)
    daemon.stop(signal.SIGKILL)
    assert nobody_opens(path) == "EBUSY"


@needs_nobody
@pytest.mark.timeout(60)
def test_inhibit_hands_over_a_port_a_non_root_program_can_open(
    sim: SimProc, daemon: DaemonProc
) -> None:
    """While inhibited the port opens for a non-root program; back up, verld holds it again."""
    path = open_to_all(sim)
    holder = daemon.client()
    assert holder.inhibit() == sim.link
    assert nobody_opens(path) == "ok"
    holder.uninhibit()
    daemon.wait_state("up", min_generation=2)
    assert nobody_opens(path) == "EBUSY"


# --- verld as a non-root user -------------------------------------------------------------


@pytest.fixture
def nobody_dir(pubdir: Path) -> Path:
    """A directory uid 65534 owns (its verld's config, socket and socket lock)."""
    os.chown(pubdir, NOBODY, NOBODY)
    return pubdir


@contextlib.contextmanager
def nobody_verld(
    sim: SimProc, where: Path, overrides: dict[str, Any] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """verld run as uid 65534 on the sim's pty (its slave node made 0666), config and socket
    in `where`, link up; the process and its API socket. Stopped at the end."""
    config = write_config(where, open_to_all(sim), overrides)
    config.chmod(0o644)
    sock = str(where / "verld.sock")
    with open(where / "verld.log", "wb") as log:
        proc = subprocess.Popen(
            [*AS_NOBODY, *nobody_python(), "-m", "verld", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",
        )
    try:
        wait_for(lambda: link(proc, sock, where).get("state") == "up", 30, "the link up")
        assert os.stat(f"/proc/{proc.pid}").st_uid == NOBODY
        yield proc, sock
    finally:
        stop_process(proc)


def link(proc: subprocess.Popen[bytes], sock: str, where: Path) -> dict[str, Any]:
    """`status`'s link ({} while verld does not listen yet); fails if verld exited."""
    if proc.poll() is not None:
        log = (where / "verld.log").read_text(errors="replace")
        raise AssertionError(f"verld exited {proc.returncode}:\n{log}")
    try:
        with Client(sock, timeout=5.0) as c:
            found: dict[str, Any] = c.status()["link"]
            return found
    except Unreachable:
        return {}


def line_reply(s: socket.socket) -> bytes:
    """One line from `s` (what came before its end, if it closed first)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(100)
        if not chunk:
            break
        data += chunk
    return data


def wait_up(proc: subprocess.Popen[bytes], sock: str, where: Path, generation: int) -> None:
    """Until the link is up at `generation` or later (saying what it last was if not)."""
    seen: dict[str, Any] = {}

    def up() -> bool:
        nonlocal seen
        seen = link(proc, sock, where)
        return bool(seen.get("state") == "up" and seen["generation"] >= generation)

    wait_for(up, 15, lambda: f"the link up at generation {generation} (last seen {seen})")


@needs_nobody
@pytest.mark.timeout(90)
def test_a_non_root_verld_reopens_its_port_after_a_reconnect(
    sim: SimProc, nobody_dir: Path
) -> None:
    """A verld run as uid 65534 is back up after `reconnect`: its own flag does not lock it out."""
    path = os.path.realpath(sim.link)
    with nobody_verld(sim, nobody_dir) as (proc, sock):
        assert nobody_opens(path) == "EBUSY"  # a non-root verld sets the flag too
        with Client(sock, timeout=10.0) as c:
            c.request("reconnect")
        wait_up(proc, sock, nobody_dir, 2)
        with Client(sock, timeout=10.0) as c:
            r = c.call(b"\x01again")
        assert (r.status, r.data, r.generation) == (0, b"again", 2)
        assert nobody_opens(path) == "EBUSY"


@needs_nobody
@pytest.mark.timeout(90)
def test_a_non_root_verld_takes_its_port_back_after_a_passthrough(
    tmp_path: Path, nobody_dir: Path
) -> None:
    """A passthrough holds the port exclusively; at its end a uid 65534 verld reopens it."""
    sim = SimProc(tmp_path, codec="line")
    port = free_port()
    net = [
        {
            "listen": f"127.0.0.1:{port}",
            "name": "hold",
            "mode": "passthrough",
            "allow": ["127.0.0.0/8"],
        }
    ]
    path, overrides = os.path.realpath(sim.link), {"device": {"codec": "line"}, "network": net}
    try:
        with nobody_verld(sim, nobody_dir, overrides) as (proc, sock):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                wait_for(lambda: link(proc, sock, nobody_dir).get("state") == "inhibited", 10)
                s.sendall(b"PING\n")
                assert line_reply(s) == b"PONG\n"
                assert nobody_opens(path) == "EBUSY"  # the relay's own open is exclusive
            wait_up(proc, sock, nobody_dir, 2)
            assert nobody_opens(path) == "EBUSY"
    finally:
        sim.stop()


# --- open_serial's refusal ----------------------------------------------------------------


@needs_nobody
@pytest.mark.timeout(60)
def test_open_serial_refused_by_tiocexcl_names_the_holder() -> None:
    """A non-root open_serial of a tty another process holds with TIOCEXCL: "locked by pid N"."""
    master, slave = pty.openpty()
    path = os.ttyname(slave)
    os.chmod(path, 0o666)
    holder = subprocess.Popen(
        as_nobody(_HOLD, path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/"
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"held\n"
        with open(f"/proc/{holder.pid}/comm") as f:
            comm = f.read().strip()
        r = subprocess.run(
            as_nobody(_OPEN_SERIAL, path),
            capture_output=True,
            text=True,
            timeout=30,
            cwd="/",
            check=True,
        )
        # (this root test process has the tty open too, but /proc hides it from uid 65534)
        assert (
            r.stdout.strip()
            == f"{path} is locked by pid {holder.pid} ({comm}) (opened exclusively)"
        )
    finally:
        stop_process(holder)
        os.close(slave)
        os.close(master)


def test_tty_holder_names_the_processes_with_the_tty_open() -> None:
    """tty_holder lists the processes /proc shows with the tty open (here: this one)."""
    master, slave = pty.openpty()
    try:
        with open("/proc/self/comm") as f:
            me = f"pid {os.getpid()} ({f.read().strip()})"
        assert tty_holder(os.ttyname(slave)) == me
    finally:
        os.close(slave)
        os.close(master)
    assert tty_holder("/nonexistent/tty") == "another process"


def test_open_serial_sets_the_flag_and_close_serial_clears_it() -> None:
    """open_serial leaves TIOCEXCL set on the tty; close_serial clears it before closing."""
    master, slave = pty.openpty()
    try:
        ser = open_serial(DeviceConfig(), os.ttyname(slave))
        assert exclusive(slave)
        close_serial(ser)
        assert not exclusive(slave)
    finally:
        os.close(slave)
        os.close(master)


def exclusive(fd: int) -> bool:
    """The tty's exclusive flag (TIOCGEXCL; Python's termios lacks the name)."""
    tiocgexcl = getattr(termios, "TIOCGEXCL", 0x80045440)  # _IOR('T', 0x40, int)
    try:
        raw = fcntl.ioctl(fd, tiocgexcl, b"\0\0\0\0")
    except OSError as exc:
        if exc.errno in (errno.ENOTTY, errno.EINVAL):
            pytest.skip("this kernel has no TIOCGEXCL")
        raise
    return int.from_bytes(raw, sys.byteorder) != 0
