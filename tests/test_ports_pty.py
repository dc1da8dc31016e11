"""The pty edge of a virtual serial port, on real ptys with real programs' opens.

Strategy: each test makes a `PtyPort` in tmp_path and plays the program on its
link, either with pyserial (`serial.Serial(link)`, as a script would) or with a
bare `os.open` where pyserial's own input flush on open would hide what is being
shown (stale bytes). An autouse fixture checks that no test leaks an fd.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import re
import stat
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import serial

from verld.fronts.ports.pty import DETACHED, PortSetupError, PtyPort

pytestmark = pytest.mark.timeout(20)


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def no_fd_leak() -> Iterator[None]:
    before = _fds()
    yield
    assert _fds() - before == set()


@pytest.fixture
def port(tmp_path: Path) -> Iterator[PtyPort]:
    p = PtyPort(str(tmp_path / "ttyV0"), 0o660, None)
    p.open()
    yield p
    p.close()


def _read_for(port: PtyPort, want: int, timeout: float = 2.0) -> bytes:
    """Read from the port until `want` bytes came or `timeout` passed."""
    got = b""
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        chunk = port.read()
        if chunk:
            got += chunk
        else:
            time.sleep(0.002)
    return got


def _open_program(link: str) -> int:
    """A program opening the port the plain way (no flush, unlike pyserial)."""
    return os.open(link, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)


def _read_program(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


def _hung_up(fd: int) -> bool:
    try:
        return os.read(fd, 1) == b""
    except OSError as exc:
        return exc.errno == errno.EIO


def test_open_makes_the_link_point_at_a_raw_pts_with_mode_and_group(tmp_path: Path) -> None:
    """The link points at a raw /dev/pts node with the entry's mode and group."""
    link = str(tmp_path / "ttyV0")
    with PtyPort(link, 0o640, os.getegid()) as p:
        target = os.readlink(link)
        assert re.fullmatch(r"/dev/pts/\d+", target)
        assert target == p.slave_path
        st = os.stat(target)
        assert stat.S_ISCHR(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o640
        assert st.st_gid == os.getegid()
        lflag = termios.tcgetattr(p.fd)[3]
        assert lflag & (termios.ECHO | termios.ICANON | termios.ISIG) == 0


def test_bytes_a_program_writes_come_out_of_read(port: PtyPort) -> None:
    """What a program writes comes out of `read` byte for byte; then b"", not a hang-up."""
    with serial.Serial(port.link, timeout=1) as prog:
        prog.write(b"\x00hello\xff\n")
        prog.flush()
        assert _read_for(port, 8) == b"\x00hello\xff\n"
        assert port.read() == b""  # nothing more: not a hang-up


def test_write_reaches_the_program(port: PtyPort) -> None:
    """`write` while a program is attached reaches it whole."""
    with serial.Serial(port.link, timeout=1) as prog:
        assert port.program_attached()
        assert port.write(b"\x13\x11reply\r\n") == 9
        assert prog.read(9) == b"\x13\x11reply\r\n"


def test_no_program_means_detached_read_none_and_write_refused(port: PtyPort) -> None:
    """With nobody attached, `read` gives None and `write` refuses with DETACHED."""
    assert not port.program_attached()
    assert port.read() is None
    assert port.write(b"nobody listens") == DETACHED


def test_program_opening_later_reads_nothing_written_while_detached(port: PtyPort) -> None:
    """A write refused while detached never reaches a program that opens later."""
    assert port.write(b"stale") == DETACHED
    prog = _open_program(port.link)
    try:
        assert port.program_attached()
        time.sleep(0.05)
        assert _read_program(prog) == b""
    finally:
        os.close(prog)


def test_kernel_buffers_a_raw_master_write_while_detached(port: PtyPort) -> None:
    """The hazard `write` guards against: the kernel keeps a detached write for the next program."""
    # the hazard `write` guards against: the pty keeps bytes for the next program
    os.write(port.fd, b"stale")
    prog = _open_program(port.link)
    try:
        deadline = time.monotonic() + 2
        got = b""
        while not got and time.monotonic() < deadline:
            got = _read_program(prog)
            time.sleep(0.001)
        assert got == b"stale"
    finally:
        os.close(prog)


def test_bytes_racing_a_close_are_discarded_when_the_next_program_is_seen(
    port: PtyPort,
) -> None:
    """Bytes slipped in while detached are flushed when the next program is first seen."""
    assert not port.program_attached()
    os.write(port.fd, b"raced")  # as if the program closed between check and write
    prog = _open_program(port.link)
    try:
        assert port.program_attached()  # first sight of the new program: flush
        assert _read_program(prog) == b""
        assert port.write(b"fresh") == 5
        assert _read_program(prog) == b"fresh"
    finally:
        os.close(prog)


def test_program_close_and_reopen_flips_attached_within_the_poll(port: PtyPort) -> None:
    """Each close is seen by `program_attached` well within half a second, each open at once."""
    for _ in range(3):
        with serial.Serial(port.link, timeout=1) as prog:
            assert port.program_attached()
            prog.write(b"ping")
            assert _read_for(port, 4) == b"ping"
            assert port.write(b"pong") == 4
            assert prog.read(4) == b"pong"
        deadline = time.monotonic() + 0.5
        while port.program_attached() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not port.program_attached()
        assert port.read() is None


def test_attached_until_the_last_of_two_programs_closes(port: PtyPort) -> None:
    """Two programs on one port: attached until the last of them closes."""
    a = _open_program(port.link)
    b = _open_program(port.link)
    os.close(a)
    assert port.program_attached()
    os.close(b)
    assert not port.program_attached()


def test_what_a_program_wrote_before_closing_is_read_before_the_hangup(port: PtyPort) -> None:
    """A program's last words are read before `read` reports it gone."""
    prog = _open_program(port.link)
    os.write(prog, b"last words")
    os.close(prog)
    assert port.read() == b"last words"
    assert port.read() is None


def test_fix_termios_undoes_echo_and_icanon_a_program_set(port: PtyPort) -> None:
    """`fix_termios` clears echo and canonical mode a program set: no echo, no line holding."""
    with serial.Serial(port.link, timeout=1) as prog:
        attrs = termios.tcgetattr(prog.fileno())
        attrs[3] |= termios.ECHO | termios.ECHONL | termios.ICANON
        termios.tcsetattr(prog.fileno(), termios.TCSANOW, attrs)
        assert port.program_attached()
        assert port.fix_termios() is True
        lflag = termios.tcgetattr(prog.fileno())[3]
        assert lflag & (termios.ECHO | termios.ECHONL | termios.ICANON) == 0
        assert port.write(b"no newline") == 10
        assert prog.read(10) == b"no newline"  # not held for a line
        time.sleep(0.05)
        assert port.read() == b""  # and not echoed back to verld
        assert port.fix_termios() is False  # nothing left to clear


def test_fix_termios_reports_once_per_program_open(port: PtyPort) -> None:
    """`fix_termios` reports True once per program open, however often it clears."""

    def open_with_echo() -> int:
        fd = _open_program(port.link)
        attrs = termios.tcgetattr(fd)
        attrs[3] |= termios.ECHO
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
        return fd

    fd = open_with_echo()
    assert port.program_attached()
    assert port.fix_termios() is True
    attrs = termios.tcgetattr(fd)
    attrs[3] |= termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, attrs)
    assert port.fix_termios() is False  # cleared again, not reported again
    assert termios.tcgetattr(fd)[3] & termios.ECHO == 0
    os.close(fd)
    assert not port.program_attached()
    fd = open_with_echo()
    try:
        assert port.program_attached()
        assert port.fix_termios() is True
    finally:
        os.close(fd)


def test_termios_outlive_a_program_close(port: PtyPort) -> None:
    """termios belongs to the pty: verld's raw mode and a program's changes outlive its close."""
    fd = _open_program(port.link)
    raw = termios.tcgetattr(fd)
    assert raw[3] & (termios.ECHO | termios.ICANON) == 0  # verld's raw, kept
    raw[3] |= termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, raw)
    os.close(fd)
    fd = _open_program(port.link)
    try:
        assert termios.tcgetattr(fd)[3] & termios.ECHO  # the last program's, kept
    finally:
        os.close(fd)


def test_modem_line_ioctl_on_the_port_is_enotty(port: PtyPort) -> None:
    """Modem-line ioctls on the port fail ENOTTY (a pty has no DTR/RTS)."""
    fd = _open_program(port.link)
    try:
        with pytest.raises(OSError) as info:
            fcntl.ioctl(fd, termios.TIOCMGET, b"\0\0\0\0")
        assert info.value.errno == errno.ENOTTY
    finally:
        os.close(fd)


def test_a_regular_file_at_the_link_is_an_error_and_kept(tmp_path: Path) -> None:
    """A regular file at the link is a setup error and is left as it was."""
    link = tmp_path / "ttyV0"
    link.write_text("mine")
    with pytest.raises(PortSetupError, match="not a link to a pty"):
        PtyPort(str(link), 0o660, None).open()
    assert link.read_text() == "mine"


def test_a_symlink_elsewhere_at_the_link_is_an_error(tmp_path: Path) -> None:
    """A symlink to something other than a pty at the link is an error and kept."""
    link = tmp_path / "ttyV0"
    link.symlink_to("/dev/null")
    with pytest.raises(PortSetupError):
        PtyPort(str(link), 0o660, None).open()
    assert os.readlink(link) == "/dev/null"


def test_an_old_pts_symlink_at_the_link_is_replaced(tmp_path: Path) -> None:
    """A /dev/pts symlink an earlier run left is re-pointed, and removed at close."""
    link = tmp_path / "ttyV0"
    link.symlink_to("/dev/pts/9999")
    with PtyPort(str(link), 0o660, None) as p:
        assert os.readlink(link) == p.slave_path != "/dev/pts/9999"
    assert sorted(os.listdir(tmp_path)) == []


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    """A link in a missing directory is a setup error naming the link."""
    link = str(tmp_path / "nope" / "ttyV0")
    with pytest.raises(PortSetupError, match="does not exist") as info:
        PtyPort(link, 0o660, None).open()
    assert info.value.fields == {"link": link}


def test_an_unknown_group_is_an_error(tmp_path: Path) -> None:
    """An unknown group is a setup error, and no link is left."""
    with pytest.raises(PortSetupError, match="group"):
        PtyPort(str(tmp_path / "ttyV0"), 0o660, "no-such-group-verld").open()
    assert not (tmp_path / "ttyV0").exists()


def test_close_removes_the_link_and_the_pty_and_leaks_no_fds(tmp_path: Path) -> None:
    """`close` removes the link, hangs the program up, leaks no fd, and is idempotent."""
    before = _fds()
    p = PtyPort(str(tmp_path / "ttyV0"), 0o660, None)
    p.open()
    with serial.Serial(p.link, timeout=1):
        pass
    prog = _open_program(p.link)
    p.close()
    p.close()  # idempotent
    assert not os.path.lexists(tmp_path / "ttyV0")
    try:
        assert _hung_up(prog)  # the program sees a hang-up, as on an unplug
    finally:
        os.close(prog)
    assert _fds() == before
    p.open()  # and it opens again
    assert os.readlink(p.link) == p.slave_path
    p.close()
    assert _fds() == before


def test_close_keeps_a_link_someone_else_replaced(port: PtyPort, tmp_path: Path) -> None:
    """`close` leaves a link someone else re-pointed."""
    os.unlink(port.link)
    os.symlink("/dev/null", port.link)
    port.close()
    assert os.readlink(tmp_path / "ttyV0") == "/dev/null"


async def _program_attached(port: PtyPort, interval: float) -> None:
    """Return once a program has the port open, looking every `interval` s (as the port does)."""
    while not port.program_attached():  # noqa: ASYNC110 (polling is the point: no event exists)
        await asyncio.sleep(interval)


def test_a_program_closing_its_end_tells_the_reader_and_the_poller(port: PtyPort) -> None:
    """A close ends the reader with None after the last bytes; polling then sees the next open."""

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        got: list[bytes] = []
        gone = asyncio.Event()

        def on_readable() -> None:
            data = port.read()
            if data is None:
                loop.remove_reader(port.fd)  # a detached master is readable for ever
                gone.set()
            elif data:
                got.append(data)

        def program() -> None:
            with serial.Serial(port.link, timeout=1) as prog:
                prog.write(b"one")
                prog.flush()
                time.sleep(0.2)

        running = asyncio.ensure_future(asyncio.to_thread(program))
        await asyncio.wait_for(_program_attached(port, 0.01), 5)
        loop.add_reader(port.fd, on_readable)  # only while attached: else it spins
        try:
            await asyncio.wait_for(gone.wait(), 5)
        finally:
            loop.remove_reader(port.fd)
            await running
        waiter = asyncio.ensure_future(_program_attached(port, 0.02))
        await asyncio.sleep(0.1)
        assert not waiter.done()
        prog = _open_program(port.link)
        try:
            await asyncio.wait_for(waiter, 2)
        finally:
            os.close(prog)
        return got

    assert b"".join(asyncio.run(main())) == b"one"
