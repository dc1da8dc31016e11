"""The fd transport on a real pty, opened the way verld opens a serial port (pyserial).

Strategy: `open_port` opens the slave end of a fresh pty pair; the test plays the
device on the master end. What the device writes reaches the handler exactly once,
a quiet device is no hang-up, and a real hang-up is reported.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import pytest

from verld.config import parse_config
from verld.links.port import PortKind, RawPort, open_port, port_kind
from verld.links.serialport import SerialPort
from verld.links.transport import BACKLOG, FdTransport

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


Body = Callable[[SerialPort, Recorder, int], Awaitable[None]]


def run_on_pty(body: Body) -> None:
    """Open a pty's slave end with open_port; run `body(transport, handler, master_fd)`."""
    master, slave = os.openpty()
    path = os.ttyname(slave)

    async def main() -> None:
        cfg = parse_config(f"device: {{port: {path}}}")
        handler = Recorder()
        transport = await open_port(cfg.device, path, handler, 1.0)
        assert isinstance(transport, SerialPort)
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


class TestReading:
    def test_a_quiet_device_is_no_hangup(self) -> None:
        """Nothing sent: no data, no loss, while the loop runs."""

        async def body(transport: SerialPort, handler: Recorder, master: int) -> None:
            await asyncio.sleep(0.05)
            assert (handler.data, handler.lost, transport.closed) == ([], [], False)

        run_on_pty(body)

    def test_device_bytes_arrive_once(self) -> None:
        """Bytes the device writes reach the handler once, in order."""

        async def body(transport: SerialPort, handler: Recorder, master: int) -> None:
            os.write(master, b"\x00reply\x00")
            await until(lambda: b"".join(handler.data) == b"\x00reply\x00")
            await asyncio.sleep(0.05)
            assert b"".join(handler.data) == b"\x00reply\x00"
            assert handler.lost == [] and not transport.closed

        run_on_pty(body)

    def test_a_hangup_is_reported_once(self) -> None:
        """The device side closes: the transport reports the loss once and is closed."""

        async def body(transport: SerialPort, handler: Recorder, master: int) -> None:
            os.close(master)
            await until(lambda: bool(handler.lost))
            await asyncio.sleep(0.05)
            assert transport.closed and len(handler.lost) == 1

        run_on_pty(body)

    def test_bytes_after_close_reach_nobody(self) -> None:
        """A closed transport delivers nothing more (no read on a closed or reused fd)."""

        async def body(transport: SerialPort, handler: Recorder, master: int) -> None:
            transport.close()
            os.write(master, b"late")
            await asyncio.sleep(0.05)
            assert handler.data == [] and handler.lost == []

        run_on_pty(body)


class TestSerialPort:
    def test_a_pty_opens_as_a_serial_raw_port_without_modem_lines(self) -> None:
        """A tty path opens as a SerialPort: a RawPort with its pyserial port, no modem lines."""

        async def body(transport: SerialPort, handler: Recorder, master: int) -> None:
            assert isinstance(transport, RawPort) and transport.serial is not None
            assert (transport.modem_bits(), transport.comport_server) == (None, False)

        run_on_pty(body)


class TestFlow:
    def test_paused_reading_holds_the_bytes_until_resumed(self) -> None:
        """While reading is paused nothing is delivered; resumed, the bytes arrive."""

        async def body(transport: SerialPort, handler: Recorder, master: int) -> None:
            transport.pause_reading()
            os.write(master, b"held")
            await asyncio.sleep(0.05)
            assert handler.data == []
            transport.resume_reading()
            await until(lambda: b"".join(handler.data) == b"held")

        run_on_pty(body)

    def test_flow_is_told_full_past_the_backlog_and_free_once_drained(self) -> None:
        """More than BACKLOG bytes waiting: flow(True) once; read away: flow(False) once."""

        async def body(transport: SerialPort, handler: Recorder, master: int) -> None:
            told: list[bool] = []
            transport.flow = told.append
            transport.write(bytes(BACKLOG // 2))
            transport.write(bytes(BACKLOG))  # (a pty takes a few KiB: the rest waits)
            assert told == [True]
            os.set_blocking(master, False)
            got = 0
            while got < BACKLOG + BACKLOG // 2:
                await asyncio.sleep(0.001)
                try:
                    got += len(os.read(master, 65536))
                except BlockingIOError:
                    pass
            assert told == [True, False]

        run_on_pty(body)


class TestKind:
    @pytest.mark.parametrize(
        ("port", "kind"),
        [
            ("/dev/ttyUSB0", PortKind.SERIAL),
            ("tcp://10.0.0.5:4001", PortKind.TCP),
            ("rfc2217://[::1]:2217", PortKind.RFC2217),
        ],
    )
    def test_a_port_name_says_its_kind(self, port: str, kind: PortKind) -> None:
        """A path is a serial port; tcp:// and rfc2217:// URLs are their kinds."""
        assert port_kind(port) is kind

    def test_a_tcp_port_is_a_plain_fd_without_lines_or_settings(self) -> None:
        """open_port on tcp:// gives an FdTransport: no modem lines, no settings, no server."""

        async def main() -> None:
            # (the server closes what it accepts: since 3.12 wait_closed waits for that)
            server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
            host, number = server.sockets[0].getsockname()[:2]
            cfg = parse_config(f"device: {{port: 'tcp://{host}:{number}'}}")
            port = await open_port(cfg.device, cfg.device.port, Recorder(), 1.0)
            try:
                assert type(port) is FdTransport and isinstance(port, RawPort)
                assert (port.modem_bits(), port.serial, port.comport_server) == (None, None, False)
            finally:
                port.close()
                server.close()
                await server.wait_closed()

        asyncio.run(main())


class TestOpen:
    def test_line_settings_the_tty_refuses_are_an_open_error(self) -> None:
        """Line settings the tty refuses are a failed open, retried with backoff, not a crash."""
        # A pty takes even parity once, then tcsetattr fails (termios.error): that is a failed open
        # (retried with backoff), never a crash of the link task.
        from verld.errors import OpenError
        from verld.links.serialport import open_serial

        device = parse_config("device: {port: /dev/null, parity: even}\n").device
        master, slave = os.openpty()
        try:
            path = os.ttyname(slave)
            errors = []
            for _ in range(3):
                try:
                    open_serial(device, path).close()
                except OpenError as exc:
                    errors.append(str(exc))
            assert errors and all("Invalid argument" in e for e in errors)
        finally:
            os.close(master)
            os.close(slave)
