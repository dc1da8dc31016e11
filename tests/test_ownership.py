"""A second start never harms the running one: the `PATH.lock` flocks and the start order.

Strategy: the lock module (`verld.ownership`) is tested in this process and against
helper processes that hold a lock; the daemon's behaviour with real verld and real
verld-sim processes (line codec): a first verld serves ports, a second start of the
same config (or one sharing only a port link, or one racing it) must exit 1 with
one log line naming what is in the way, no traceback, and leave the first verld's
links, ptys and socket exactly as they were. Every process started here is
stopped by its pid.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import serial
import yaml

from verld import ownership
from verld.client import Client
from verld.ownership import LockHeld, acquire, lock_path
from verld.testing import DaemonProc, Processes, SimProc, stop_process, wait_for, write_config

#: a process that takes the lock on argv[1] ("" for a bare flock with no pid written),
#: says "held", and keeps it until its stdin closes
HOLDER = """
import fcntl, os, sys
from verld.ownership import acquire
path, bare = sys.argv[1], sys.argv[2] == "bare"
if bare:
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
else:
    lock = acquire(path)
print("held", flush=True)
sys.stdin.read()
"""


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


class Holder:
    """Another process holding the lock of `path` (as verld would, or a bare flock)."""

    def __init__(self, path: Path, bare: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path), "bare" if bare else "verld"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line != b"held\n":
            self.stop()
            raise AssertionError(f"the holder did not take the lock: {line!r}")

    @property
    def comm(self) -> str:
        return Path(f"/proc/{self.proc.pid}/comm").read_text().strip()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.proc, sig, grace=5.0)


@pytest.fixture
def holder_factory() -> Iterator[list[Holder]]:
    holders: list[Holder] = []
    yield holders
    for h in holders:
        h.stop()


# --- the lock module ---------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_acquire_writes_our_pid_and_release_removes_the_file_and_the_fd(tmp_path: Path) -> None:
    """A lock is PATH.lock holding our pid; release removes it and closes its fd."""
    before = _fds()
    target = tmp_path / "ttyV0"
    lock = acquire(str(target))
    assert lock.held and lock.path == lock_path(str(target)) == f"{target}.lock"
    assert Path(lock.path).read_text() == f"{os.getpid()}\n"
    lock.release()
    lock.release()  # idempotent
    assert repr(lock).endswith("released)")
    assert os.listdir(tmp_path) == []
    assert _fds() == before


@pytest.mark.timeout(20)
def test_a_second_fd_even_in_the_same_process_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    """A second acquire on another fd, even in-process, fails with LockHeld until released."""
    # flock is per open file: LockHeld names our pid and program; once released it succeeds.
    target = str(tmp_path / "verld.sock")
    comm = Path("/proc/self/comm").read_text().strip()
    with acquire(target):
        with pytest.raises(LockHeld) as info:
            acquire(target)
        assert info.value.holder == f"pid {os.getpid()} ({comm})"
        assert info.value.path == f"{target}.lock"
    with acquire(target) as again:
        assert again.held


@pytest.mark.timeout(20)
def test_another_process_holding_the_lock_is_named_and_its_death_frees_it(
    tmp_path: Path, holder_factory: list[Holder]
) -> None:
    """A lock another process holds is refused naming it, and is taken over once it dies."""
    # LockHeld names its pid and program; after it is killed (SIGKILL: it cleans nothing) its
    # leftover file is taken over with our pid.
    target = tmp_path / "ttyV0"
    holder = Holder(target)
    holder_factory.append(holder)
    with pytest.raises(LockHeld, match=f"pid {holder.proc.pid} \\({holder.comm}\\)"):
        acquire(str(target))
    holder.stop(signal.SIGKILL)
    assert Path(f"{target}.lock").read_text() == f"{holder.proc.pid}\n"  # (left behind)
    with acquire(str(target)) as lock:
        assert Path(lock.path).read_text() == f"{os.getpid()}\n"


@pytest.mark.timeout(20)
def test_a_holder_that_wrote_no_pid_is_another_process(
    tmp_path: Path, holder_factory: list[Holder]
) -> None:
    """A lock file with no pid in it (a bare flock) is held by "another process"."""
    holder_factory.append(Holder(tmp_path / "ttyV0", bare=True))
    with pytest.raises(LockHeld) as info:
        acquire(str(tmp_path / "ttyV0"))
    assert info.value.holder == "another process"


@pytest.mark.timeout(20)
def test_describe_pid_names_the_program_or_only_the_pid() -> None:
    """describe_pid: "pid N (comm)" where /proc shows it, "pid N" where it does not."""
    comm = Path("/proc/self/comm").read_text().strip()
    assert ownership.describe_pid(os.getpid()) == f"pid {os.getpid()} ({comm})"
    assert ownership.describe_pid(2**22 + 1) == f"pid {2**22 + 1}"  # (above pid_max)


@pytest.mark.timeout(20)
def test_a_starter_that_locked_a_file_its_holder_removed_tries_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A starter that locked a lock file its holder removed locks the new file at the path."""
    # The race that makes removing lock files safe: a starter opens PATH.lock, the holder removes
    # it and lets go, the starter's flock then succeeds on the removed file: acquire sees the file
    # at the path is another one and locks that instead.
    target = str(tmp_path / "ttyV0")
    first = acquire(target)
    real_open = ownership._open
    opened: list[int] = []

    def open_then_holder_leaves(path: str) -> tuple[int, bool]:
        fd, writable = real_open(path)
        opened.append(os.fstat(fd).st_ino)
        first.release()  # (no-op after the first time)
        return fd, writable

    monkeypatch.setattr(ownership, "_open", open_then_holder_leaves)
    with acquire(target) as lock:
        assert len(opened) == 2  # (the first file was let go, the second one locked)
        assert os.stat(lock.path).st_ino == os.fstat(lock._fd).st_ino == opened[1]
        monkeypatch.setattr(ownership, "_open", real_open)
        with pytest.raises(LockHeld):
            acquire(target)


@pytest.mark.timeout(20)
def test_a_symlink_at_the_lock_path_is_refused_and_left_alone(tmp_path: Path) -> None:
    """A symlink planted at PATH.lock is not followed: OSError, symlink and target untouched."""
    # O_NOFOLLOW.
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "ttyV0.lock").symlink_to(victim)
    with pytest.raises(OSError, match="symlink") as info:
        acquire(str(tmp_path / "ttyV0"))
    assert info.value.errno == errno.ELOOP
    assert victim.read_text() == "precious"
    assert os.readlink(tmp_path / "ttyV0.lock") == str(victim)


@pytest.mark.timeout(20)
def test_the_lock_fd_is_not_inherited(tmp_path: Path) -> None:
    """O_CLOEXEC: a child (the sim) never inherits the lock, so it cannot outlive verld."""
    with acquire(str(tmp_path / "x")) as lock:
        fd = lock._fd
        assert not os.get_inheritable(fd)
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC


@pytest.mark.timeout(30)
def test_many_processes_acquiring_at_once_exactly_one_wins(
    tmp_path: Path, procs: Processes
) -> None:
    """Six processes acquiring and releasing the lock in a loop never hold it two at once."""
    # Released at the same instant, each takes, holds and releases (removing) the lock in a loop
    # for a while.
    script = """
import os, sys, time
from verld.ownership import LockHeld, acquire
target, log, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
time.sleep(max(0.0, start - time.time()))
wins = 0
while time.time() < start + 0.8:
    try:
        lock = acquire(target)
    except LockHeld:
        time.sleep(0)
        continue
    with open(log, "a") as f:
        f.write(f"+{os.getpid()}\\n")
        f.flush()
        time.sleep(0.002)
        f.write(f"-{os.getpid()}\\n")
    lock.release()
    wins += 1
print(wins)
"""
    log = tmp_path / "log"
    start = time.time() + 1.0
    lockers = [
        procs.popen(
            [sys.executable, "-c", script, str(tmp_path / "t"), str(log), str(start)],
            stdout=subprocess.PIPE,
        )
        for _ in range(6)
    ]
    wins = [int(p.communicate(timeout=20)[0]) for p in lockers]
    events = log.read_text().split()
    assert sum(wins) > 6 and len(events) == 2 * sum(wins)
    for i in range(0, len(events), 2):  # (each win's + and - are adjacent: none overlapped)
        assert events[i][0] == "+" and events[i + 1] == "-" + events[i][1:]
    assert sorted(os.listdir(tmp_path)) == ["log"]


# --- the daemon ----------------------------------------------------------------------------


def _config(tmp: Path, sim: SimProc, links: list[Path], **sections: Any) -> Path:
    overrides: dict[str, Any] = {
        "device": {"codec": "line"},
        "heartbeat": {"interval": 0},
        "ports": [{"link": str(link)} for link in links],
        **sections,
    }
    return write_config(tmp, sim.link, overrides)


def _run_verld(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verld", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def _refusal(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """A refused start: exit 1, no traceback, exactly one error line; that line."""
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "Traceback" not in out
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    errors = [r for r in records if r["level"] == "error"]
    assert len(errors) == 1, out
    return dict(errors[0])


def _link_up(sock: str) -> bool:
    try:
        with Client(sock, timeout=5.0) as c:
            return bool(c.status()["link"]["state"] == "up")
    except OSError:
        return False


def _ask(link: Path) -> bytes:
    """A program opening the port and asking: the device's answer."""
    with serial.Serial(str(link), timeout=3) as port:
        port.write(b"PING\n")
        return bytes(port.readline())


def _files(tmp: Path) -> dict[str, str]:
    """What is in tmp apart from the rig's own files: name → link target or kind."""
    ours = {"sim.log", "sim.ctl", "dev.tty", "verld.yaml", "verld.log", "b"}
    seen = {}
    for entry in os.scandir(tmp):
        if entry.name in ours or entry.name.startswith("race"):
            continue
        try:  # (a running verld may remove an entry between the listing and the look)
            if entry.is_symlink():
                seen[entry.name] = os.readlink(entry.path)
            else:
                sock = stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
                seen[entry.name] = "socket" if sock else "file"
        except FileNotFoundError:
            seen[entry.name] = "gone"
    return seen


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimProc]:
    s = SimProc(tmp_path, codec="line")
    yield s
    s.stop()


@pytest.mark.timeout(60)
def test_a_second_start_of_the_same_config_exits_1_and_harms_nothing(
    tmp_path: Path, sim: SimProc
) -> None:
    """A second verld on the same config exits 1 naming the holder and leaves the first's intact."""
    # verld twice on one config with ports: the second exits 1 with one line naming the socket
    # and its holder, no traceback; the first's links still point at its ptys and answer, its
    # socket answers; at exit the first removes all of it.
    links = [tmp_path / "ttyA", tmp_path / "ttyB"]
    config = _config(tmp_path, sim, links)
    with DaemonProc(config) as first:
        before = _files(tmp_path)
        assert set(before) == {
            "ttyA",
            "ttyB",
            "ttyA.lock",
            "ttyB.lock",
            "verld.sock",
            "verld.sock.lock",
        }
        error = _refusal(_run_verld(config))
        assert error["event"] == "cannot_serve"
        assert f"pid {first.pid} (" in error["error"] and "already serving" in error["error"]
        assert _files(tmp_path) == before  # not re-pointed, not removed
        for link in links:
            assert _ask(link) == b"PONG\n"
        assert first.client().call(b"PING").text == "PONG"
        assert first.stop() == 0
    assert _files(tmp_path) == {}


@pytest.mark.timeout(60)
def test_a_second_verld_with_another_socket_but_the_same_link_exits_1_naming_the_link(
    tmp_path: Path, sim: SimProc
) -> None:
    """A second verld sharing only the first's port link exits 1 naming the link and holder."""
    # Its own socket and lock are not left behind.
    link = tmp_path / "ttyA"
    with DaemonProc(_config(tmp_path, sim, [link])) as first:
        other = tmp_path / "b"
        other.mkdir()
        pts = os.readlink(link)
        error = _refusal(_run_verld(_config(other, sim, [link])))
        assert error["event"] == "cannot_create_port"
        assert error["link"] == str(link)
        assert f"belongs to pid {first.pid} (" in error["error"]
        assert os.readlink(link) == pts
        assert sorted(os.listdir(other)) == ["verld.yaml"]  # (no socket, no lock left)
        assert _ask(link) == b"PONG\n"
        assert first.stop() == 0


@pytest.mark.timeout(60)
def test_leftovers_nobody_holds_are_replaced(tmp_path: Path, sim: SimProc) -> None:
    """A crashed run's leftover link, socket and lock files are replaced and verld serves."""
    # The link to a pty long gone, the lock files with a dead pid in them, unlocked.
    link = tmp_path / "ttyA"
    link.symlink_to("/dev/pts/9999")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(tmp_path / "verld.sock"))
    dead.close()
    for name in ("ttyA.lock", "verld.sock.lock"):
        (tmp_path / name).write_text(f"{2**22 + 1}\n")
    with DaemonProc(_config(tmp_path, sim, [link])) as daemon:
        assert os.readlink(link) != "/dev/pts/9999"
        assert _ask(link) == b"PONG\n"
        for name in ("ttyA.lock", "verld.sock.lock"):
            assert (tmp_path / name).read_text() == f"{daemon.pid}\n"
        assert daemon.stop() == 0
    assert _files(tmp_path) == {}


@pytest.mark.timeout(60)
def test_a_socket_answering_without_a_lock_is_still_not_stolen(
    tmp_path: Path, sim: SimProc
) -> None:
    """A served socket with no lock held is not stolen: exit 1 "already serving", no link made."""
    # Someone serves the socket file while nobody holds its lock (a verld from before the locks).
    path = tmp_path / "verld.sock"
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(path))
    live.listen(4)
    try:
        error = _refusal(_run_verld(_config(tmp_path, sim, [tmp_path / "ttyA"])))
        assert error["event"] == "cannot_serve" and "already serving" in error["error"]
        assert _files(tmp_path) == {"verld.sock": "socket"}
    finally:
        live.close()


@pytest.mark.timeout(60)
def test_a_file_at_the_socket_path_is_one_line_and_kept(tmp_path: Path, sim: SimProc) -> None:
    """A regular file at api.socket: exit 1, one line, the file untouched."""
    path = tmp_path / "verld.sock"
    path.write_text("precious")
    error = _refusal(_run_verld(_config(tmp_path, sim, [tmp_path / "ttyA"])))
    assert "is not a socket" in error["error"]
    assert path.read_text() == "precious"
    assert _files(tmp_path) == {"verld.sock": "file"}


def _race(configs: list[Path], link: Path, out: Path) -> None:
    """Start verld on both configs at once: one must serve, the other give up."""
    with Processes() as owner:
        verlds: list[subprocess.Popen[bytes]] = []
        for i, config in enumerate(configs):
            with open(out / f"race{i}.out", "wb") as log:
                verlds.append(
                    owner.popen(
                        [sys.executable, "-m", "verld", "--config", str(config)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        wait_for(lambda: any(p.poll() is not None for p in verlds), 20.0, "one to give up")
        loser = next(i for i, p in enumerate(verlds) if p.poll() is not None)
        winner = verlds[1 - loser]
        text = (out / f"race{loser}.out").read_text()
        _refusal(subprocess.CompletedProcess([], verlds[loser].returncode, text, ""))
        sock = yaml.safe_load(configs[1 - loser].read_text())["api"]["socket"]
        wait_for(lambda: winner.poll() is None and _link_up(sock), 10.0, "the winner up")
        assert _ask(link) == b"PONG\n"
        assert stop_process(winner) == 0
        assert not os.path.lexists(link)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("same_socket", [True, False], ids=["same-config", "same-link"])
def test_two_starts_at_the_same_moment_exactly_one_wins(
    tmp_path: Path, sim: SimProc, same_socket: bool
) -> None:
    """Of two verlds started together exactly one serves and owns the link; the other exits 1."""
    # On one config, or sharing only the link, three times: the loser exits 1 with one line, and
    # the link is the winner's and answers.
    link = tmp_path / "ttyA"
    dirs = [tmp_path, tmp_path if same_socket else tmp_path / "b"]
    dirs[1].mkdir(exist_ok=True)
    configs = [_config(d, sim, [link]) for d in dirs]
    for _ in range(3):
        _race(configs, link, tmp_path)


@pytest.mark.timeout(60)
def test_a_taken_modbus_listen_stops_the_start_before_any_link_exists(
    tmp_path: Path, procs: Processes
) -> None:
    """A modbus.listen bound elsewhere exits 1 naming the address before any link or file exists."""
    # No link, lock or socket file was ever made (the check comes first).
    sim = procs.sim(tmp_path, codec="modbus-rtu")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        config = write_config(
            tmp_path,
            sim.link,
            {
                "device": {"codec": "modbus-rtu"},
                "heartbeat": {"interval": 0},
                "ports": [{"link": str(tmp_path / "ttyM")}],
                "modbus": {"listen": listen},
            },
        )
        proc = procs.popen(
            [sys.executable, "-m", "verld", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seen: set[str] = set()
        while proc.poll() is None:  # (watch: the link must never appear, not even briefly)
            seen |= set(_files(tmp_path))
            time.sleep(0.001)
        out = proc.communicate(timeout=20)[0]
        error = _refusal(subprocess.CompletedProcess([], proc.returncode, out, ""))
        assert error["event"] == "cannot_serve_modbus" and listen in error["error"]
        assert "Address already in use" in error["error"]
        assert not seen & {"ttyM", "verld.sock"}
        assert _files(tmp_path) == {}


@pytest.mark.timeout(60)
def test_reload_adding_a_port_someone_else_owns_fails_that_port_only(
    tmp_path: Path, sim: SimProc
) -> None:
    """A reload adding a port whose lock another process holds fails that port only."""
    # That port is logged as failed and left out, the daemon and its other port go on; a port
    # removed by a reload lets its lock go (another process can take it at once).
    a, b = tmp_path / "ttyA", tmp_path / "ttyB"
    config = _config(tmp_path, sim, [a])
    with DaemonProc(config) as daemon:
        with acquire(str(b)) as taken:  # (its release is idempotent)
            cfg = yaml.safe_load(config.read_text())
            cfg["ports"] = [{"link": str(a)}, {"link": str(b)}]
            config.write_text(yaml.safe_dump(cfg))
            daemon.client().request("reload")
            wait_for(lambda: "port_create_failed" in daemon.log(), 5.0, "port_create_failed")
            assert f"belongs to pid {os.getpid()} (" in daemon.log()
            assert [p["link"] for p in daemon.status()["ports"]] == [str(a)]
            assert not os.path.lexists(b)
            assert _ask(a) == b"PONG\n"
            cfg["ports"] = [{"link": str(b)}]
            taken.release()
            config.write_text(yaml.safe_dump(cfg))
            daemon.client().request("reload")
            wait_for(lambda: [p["link"] for p in daemon.status()["ports"]] == [str(b)], 5.0, "B")
            assert not os.path.lexists(a)
            with acquire(str(a)):  # A's lock went with its port
                pass
            assert _ask(b) == b"PONG\n"
        assert daemon.stop() == 0
    assert _files(tmp_path) == {}
