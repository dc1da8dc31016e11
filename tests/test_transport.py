"""The fd transport on a real pty, opened the way verld opens a serial port (pyserial).

Strategy: `open_link` opens the slave end of a fresh pty pair; the test plays the
device on the master end. The session's early `poll()` (used while the window is
full) must deliver data exactly once and never turn the loop's now-empty readiness
into a false hang-up, while a real hang-up is still reported.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

import pytest

from verld.config import parse_config
from verld.transport import FdTransport, open_link

pytestmark = pytest.mark.timeout(30)


class Recorder:
    """A LinkHandler that keeps what it is told."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.lost: list[str] = []

    def link_data(self, data: bytes) -> None:
        self.data.append(data)

    def link_lost(self, reason: str) -> None:
        self.lost.append(reason)


Body = Callable[[FdTransport, Recorder, int], Awaitable[None]]


def run_on_pty(body: Body) -> None:
    """Open a pty's slave end with open_link; run `body(transport, handler, master_fd)`."""
    master, slave = os.openpty()
    path = os.ttyname(slave)

    async def main() -> None:
        cfg = parse_config(f"device: {{port: {path}}}")
        handler = Recorder()
        transport = await open_link(cfg.device, path, handler, 1.0)
        try:
            await body(transport, handler, master)
        finally:
            transport.close()

    try:
        asyncio.run(main())
    finally:
        os.close(slave)
        if master >= 0:
            try:
                os.close(master)
            except OSError:
                pass  # the body closed it to hang up


async def until(pred: Callable[[], bool], limit: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not pred():
        assert loop.time() < deadline, "not true in time"
        await asyncio.sleep(0.005)


class TestPoll:
    def test_poll_on_a_quiet_device_reads_nothing_and_keeps_the_link(self) -> None:
        """poll() with nothing sent: no data, no hang-up, then and after the loop runs."""

        async def body(transport: FdTransport, handler: Recorder, master: int) -> None:
            transport.poll()
            await asyncio.sleep(0.05)
            assert (handler.data, handler.lost, transport.closed) == ([], [], False)

        run_on_pty(body)

    def test_polled_data_arrives_once_and_the_empty_wakeup_is_no_hangup(self) -> None:
        """Bytes read by poll() reach the handler once; the empty queued wakeup is no hang-up."""
        # The reader callback that the loop already had queued then finds nothing, which is not a
        # hang-up.

        async def body(transport: FdTransport, handler: Recorder, master: int) -> None:
            os.write(master, b"\x00reply\x00")
            # Blocks on purpose (asyncio.sleep would let the loop read the bytes first):
            # the bytes cross the pty while the loop does not run, so only poll() reads them.
            time.sleep(0.02)  # noqa: ASYNC251
            transport.poll()
            assert handler.data == [b"\x00reply\x00"]
            transport._on_readable()  # what the loop runs next: its readiness was stale
            await asyncio.sleep(0.05)
            assert b"".join(handler.data) == b"\x00reply\x00"
            assert handler.lost == [] and not transport.closed

        run_on_pty(body)

    def test_a_hangup_after_a_poll_is_still_reported(self) -> None:
        """The device side closes after a poll(): the transport reports the loss."""

        async def body(transport: FdTransport, handler: Recorder, master: int) -> None:
            transport.poll()
            os.close(master)
            await until(lambda: bool(handler.lost))
            assert transport.closed and len(handler.lost) == 1

        run_on_pty(body)

    def test_poll_after_close_does_nothing(self) -> None:
        """A closed transport ignores poll() (no read on a closed or reused fd)."""

        async def body(transport: FdTransport, handler: Recorder, master: int) -> None:
            os.write(master, b"late")
            # Blocks on purpose, as above: the loop does not run, so nothing reads the bytes.
            time.sleep(0.02)  # noqa: ASYNC251
            transport.close()
            transport.poll()
            assert handler.data == [] and handler.lost == []

        run_on_pty(body)


class TestOpen:
    def test_line_settings_the_tty_refuses_are_an_open_error(self) -> None:
        """Line settings the tty refuses are a failed open, retried with backoff, not a crash."""
        # A pty takes even parity once, then tcsetattr fails (termios.error): that is a failed open
        # (retried with backoff), never a crash of the link task.
        from verld.errors import OpenError
        from verld.transport import _open_serial

        device = parse_config("device: {port: /dev/null, parity: even}\n").device
        master, slave = os.openpty()
        try:
            path = os.ttyname(slave)
            errors = []
            for _ in range(3):
                try:
                    _open_serial(device, path).close()
                except OpenError as exc:
                    errors.append(str(exc))
            assert errors and all("Invalid argument" in e for e in errors)
        finally:
            os.close(master)
            os.close(slave)
