"""One lock-step client (1 client, 1 call in flight) with blocking I/O and no event loop.

Strategy: a lock-step round trip is a chain — generator, bridge, device, bridge,
generator — so every microsecond the generator spends is on the measured path.
An event loop adds its own wake-up and dispatch to each reply, and more on a socket
than on a pty fd (asyncio transports), which would charge socat and verld for the
generator's work. So all three paths get the same plain client: write(2) the
request on a blocking fd, block in read(2) until the reply is whole, check it,
repeat — two syscalls per call, nothing else (no select/poll, no socket timeout,
which polls before every recv). A hung bridge cannot hang the bench: an interval
timer (re-armed a few times a second, not per call) interrupts the blocked read.
Every reply is still checked against its own request (seq or id, status 0, the
unique echoed bytes). The calls before the window's T0 are the warm-up; none starts
after T1.

A network port (kind `tcp`, HOST:PORT: a `network:` entry of verld, ser2net) is a
TCP connection with TCP_NODELAY, driven the same way. A virtual serial port of verld
(kind `serial`) is opened as a program opens it, with pyserial, and then driven the
same way through its fd (made blocking, with VMIN 1: pyserial leaves VMIN 0, where
read(2) returns at once); kind `pyserial` goes through pyserial's own API instead
(`write`, then `read(in_waiting or 1)` until the reply is whole: a select() and an
ioctl more per read), as a pyserial program would, on a port or on the device pty alike.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import socket
import termios
import time
import tty
from collections.abc import Callable
from typing import Any

import serial

from benchlib.meter import ECHO, ApiEcho, Meter, Payloads, Spec
from verld.codec.verl import FrameDecoder, encode_frame

_REQUEST, _REPLY = 0x11, 0x12
_GIVE_UP = 50  #: errors after which a client stops (the run has failed anyway)


def open_pty(path: str) -> int:
    """The pty's link end, raw, non-blocking, with stale input flushed."""
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    tty.setraw(fd)
    termios.tcflush(fd, termios.TCIOFLUSH)
    return fd


def open_serial(path: str, *, blocking: bool = False) -> serial.Serial:
    """A port opened as a program opens it: pyserial, 115200 8N1, reads without a timeout.

    pyserial sets the termios (raw, VMIN 0 and VTIME 0, the baud rate) and flushes the
    input, and waits in select() before each read of its non-blocking fd. `blocking`:
    for a client that blocks in read(2) instead, the fd is made blocking and VMIN set
    to 1 (a read waits for a byte, as on a pty set raw by `open_pty`).
    """
    port = serial.Serial(path, 115200, timeout=None)
    if blocking:
        fd = port.fileno()
        attrs = termios.tcgetattr(fd)
        attrs[6][termios.VMIN], attrs[6][termios.VTIME] = 1, 0
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
        os.set_blocking(fd, True)
    return port


def connect(kind: str, target: str) -> socket.socket:
    """A stream socket to the bridge: `tcp` HOST:PORT (TCP_NODELAY, as a client that
    cares about latency sets it), else a Unix socket path."""
    if kind != "tcp":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(target)
        return sock
    host, _, port = target.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class NoReply(Exception):
    """The bridge or device went quiet or away; the run stops with an error."""


class Watchdog:
    """SIGALRM when no call has started for `limit` s: the blocked read raises NoReply."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.armed_at = -1.0
        self._old = signal.signal(signal.SIGALRM, self._fire)

    def _fire(self, _signum: int, _frame: object) -> None:
        raise NoReply(f"no reply within {self.limit:g} s")

    def progress(self, now: float) -> None:
        if now - self.armed_at > 0.25:  # a syscall four times a second, not per call
            signal.setitimer(signal.ITIMER_REAL, self.limit)
            self.armed_at = now

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old)


def _reader(fd: int) -> Callable[[], bytes]:
    """read(2) on a blocking fd: the call's only wait."""

    def read() -> bytes:
        data = os.read(fd, 65536)
        if not data:
            raise NoReply("closed by the other end")
        return data

    return read


def _writer(fd: int) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return write


def _pyserial_io(port: serial.Serial) -> tuple[Callable[[], bytes], Callable[[bytes], None]]:
    """Read and write through pyserial's API, as a pyserial program does."""

    def read() -> bytes:
        data = port.read(port.in_waiting or 1)
        if not data:
            raise NoReply("pyserial read nothing")
        return data

    def write(data: bytes) -> None:
        port.write(data)

    return read, write


def _verl_calls(
    spec: Spec,
    rng: random.Random,
    read: Callable[[], bytes],
    write: Callable[[bytes], None],
    decoder: FrameDecoder,
) -> Callable[[Meter], None]:
    """One checked verl echo per call of the returned function."""
    payloads = Payloads(0, spec.size, rng)
    state = {"seq": rng.randrange(0x10000)}

    def one(meter: Meter) -> None:
        seq = state["seq"] = (state["seq"] + 1) & 0xFFFF
        data = payloads.next()
        frame = encode_frame(_REQUEST, seq, ECHO + data)
        meter.sent += 1
        sent = time.monotonic_ns()
        write(frame)
        while True:
            for reply in decoder.feed(read()):
                if reply.kind != _REPLY or reply.seq != seq:
                    meter.stale += 1
                    continue
                now = time.monotonic_ns()
                if reply.payload == b"\x00" + data:
                    meter.good(now - sent, now)
                else:
                    meter.answered += 1
                    meter.error(f"seq {seq}: reply {reply.payload[:16].hex()}… is not the echo")
                return

    return one


def _api_calls(
    spec: Spec, rng: random.Random, read: Callable[[], bytes], write: Callable[[bytes], None]
) -> Callable[[Meter], None]:
    """One checked verld API echo per call of the returned function."""
    payloads = Payloads(0, spec.size, rng)
    echo = ApiEcho(spec)
    state: dict[str, Any] = {"id": 0, "buf": b""}

    def one(meter: Meter) -> None:
        call_id = state["id"] = state["id"] + 1
        data = payloads.next()
        body = b'{"op":"call","id":%d,"data":"%s"}' % (
            call_id,
            base64.b64encode(echo.request + data),
        )
        expected = echo.expected(data)
        meter.sent += 1
        sent = time.monotonic_ns()
        write(len(body).to_bytes(4, "big") + body)
        buf = state["buf"]
        while True:
            if len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big")
                if len(buf) >= 4 + size:
                    break
            buf += read()
        now = time.monotonic_ns()
        reply, state["buf"] = buf[4 : 4 + size], buf[4 + size :]
        head = b'{"id":%d,' % call_id
        if reply.startswith(head) and echo.ok_at(reply, len(head), expected):
            meter.good(now - sent, now)
            return
        meter.answered += 1
        try:
            msg = json.loads(reply)
        except ValueError:
            meter.error(f"unreadable reply {reply[:80]!r}")
            return
        if not (
            isinstance(msg, dict) and msg.get("id") == call_id and echo.reply_ok(msg, expected)
        ):
            meter.error(f"id {call_id}: {json.dumps(msg)[:100]}")
            return
        meter.answered -= 1
        meter.good(now - sent, now)

    return one


def run(spec: Spec, window: Callable[[], tuple[int, int]]) -> dict[str, Any]:
    """Open, say READY and wait for the window (`window`), call until T1: the RESULT object."""
    rng = random.Random(spec.seed)
    if spec.kind == "pty":
        fd = open_pty(spec.target)
        os.set_blocking(fd, True)
        close: Callable[[], None] = lambda: os.close(fd)  # noqa: E731
    elif spec.kind in ("serial", "pyserial"):
        port = open_serial(spec.target, blocking=spec.kind == "serial")
        fd, close = port.fileno(), port.close
    else:
        sock = connect(spec.kind, spec.target)
        sock.setblocking(True)
        fd, close = sock.fileno(), sock.close
    read, write = _reader(fd), _writer(fd)
    if spec.kind == "pyserial":
        read, write = _pyserial_io(port)
    decoder = FrameDecoder(spec.max_payload, frozenset({_REPLY, 0x13}))
    if spec.kind == "api":
        one = _api_calls(spec, rng, read, write)
    else:
        one = _verl_calls(spec, rng, read, write, decoder)
    missing = 0
    try:
        t0, t1 = window()
        meter = Meter(t0, t1)
        watchdog = Watchdog(spec.drain)
        try:
            clock = time.monotonic_ns
            while (now := clock()) < t1 and meter.errors < _GIVE_UP:
                watchdog.progress(now / 1e9)
                one(meter)
        except NoReply as exc:
            missing = 1  # the call in flight: counted in the result's errors
            meter.error_samples.append(str(exc))
        finally:
            watchdog.stop()
    finally:
        close()
    client = "pyserial" if spec.kind == "pyserial" else "blocking"
    extra = {"clients": 1, "inflight": 1, "bad_frames": decoder.bad_frames, "client": client}
    return meter.result(missing, extra)
