"""The simulator's single-threaded event loop.

Strategy: one `selectors` loop watches the port (pty master or TCP), the control
socket and a signal wake-up socket. Bytes read go to the sans-I/O `Device`,
which returns timed answers; they wait in a heap until due, then move to one
output buffer. Writes never block: the buffer drains as the fd accepts bytes
(EAGAIN → wait for writable). With a baud rate set, writes are paced against a
deadline in slices of about 5 ms of line time, because a pty ignores the baud
rate: a slice is written when its last byte would have crossed the wire, and
bytes read only reach the device once their own wire time has passed. Timers
(due answers, pacing, replug, periodic unplug, the beacon) set the select timeout.

A `Beacon` (`--nmea`) is output the device sends on its own, on a fixed schedule
whether or not anyone talks to it: whole lines into the same buffer as the
replies (so never inside one), with the device's faults and the baud pacing.
One that finds earlier output still unwritten is skipped and counted as
`overflow`, like a fix lost at a full UART: it never piles up for a reader
that does not read.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import structlog

from verld.sim.control import ControlServer, run_command
from verld.sim.device import Device, Timed
from verld.sim.faults import Faults
from verld.sim.ports import Port

MAX_OUTPUT = 8 << 20  #: bytes buffered for a reader that does not read; more are dropped
READ_PAUSE = 0.1  #: seconds between reads of a pty master that gives EIO (never spin)
SLICE_TIME = 0.005  #: seconds of line time per paced write
CATCH_UP = 0.02  #: a pacing deadline further behind than this restarts from now

log = structlog.get_logger("verld.sim")


class Beacon(NamedTuple):
    """Events the device sends on its own every `period` seconds (`--nmea`)."""

    period: float
    events: Callable[[], list[bytes]]  #: the encoded events of one emission (one fix)


class Sim:
    """The running simulator: port, device, faults, timers, control socket."""

    def __init__(
        self,
        port: Port,
        device: Device,
        control_path: str | None = None,
        trace: bool = False,
        beacon: Beacon | None = None,
    ) -> None:
        self.port = port
        self._beacon = beacon
        self._next_beacon: float | None = None
        self._trace = trace  # hex dumps cost time on the hot path: only when logging
        self.device = device
        self.faults: Faults = device.faults
        self.control_path = control_path
        self._selector = selectors.DefaultSelector()
        self._heap: list[tuple[float, int, bytes]] = []
        self._order = itertools.count()
        self._out = bytearray()
        self._next_free = 0.0  #: device→host line free again (paced)
        self._slice_due: float | None = None  #: when the slice on the line has fully arrived
        self._slice_len = 0
        self._rx_free = 0.0  #: host→device line free again (paced)
        self._line_busy = False  #: output was still queued when the last slice ended
        self._want_write = False
        self._watched: int | None = None
        self._read_paused_until: float | None = None
        self._replug_at: float | None = None
        self._next_unplug: float | None = None
        self._plugged = False
        self._stop = False
        self._signals: list[int] = []

    # --- running ------------------------------------------------------------

    def run(self) -> int:
        """Plug in, announce READY on stdout, serve until SIGTERM/SIGINT; exit code."""
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        self._selector.register(wake_r, selectors.EVENT_READ, lambda _m: _drain(wake_r))
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno())
        old_handlers = {
            sig: signal.signal(sig, self._on_signal)
            for sig in (
                signal.SIGTERM,
                signal.SIGINT,
                signal.SIGHUP,
                signal.SIGUSR1,
                signal.SIGUSR2,
            )
        }
        control = None
        try:
            if self.port.listener is not None:
                self._selector.register(self.port.listener, selectors.EVENT_READ, self._on_accept)
            self.port.plug()  # a failure here is fatal; later replugs retry
            self.replug()
            if self._beacon is not None:
                self._next_beacon = time.monotonic()
            if self.control_path:
                control = ControlServer(self.control_path, self._selector, self.control)
            sys.stdout.write(f"READY {self.port.address}\n")
            sys.stdout.flush()
            log.info("sim_ready", address=self.port.address, control=self.control_path)
            self._serve()
        finally:
            if control is not None:
                control.close()
            self._unwatch()
            self.port.close()
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            wake_r.close()
            wake_w.close()
            self._selector.close()
        log.info("sim_stopped")
        return 0

    def _serve(self) -> None:
        while not self._stop:
            for key, mask in self._selector.select(self._timeout(time.monotonic())):
                key.data(mask)
            self._handle_signals()
            self._tick(time.monotonic())

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._signals.append(signum)

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            log.info("signal", signal=signal.Signals(signum).name)
            if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                self._stop = True
            elif signum == signal.SIGUSR1:
                self.faults.hang = not self.faults.hang
            elif signum == signal.SIGUSR2:
                self.unplug(1.0)

    def _timeout(self, now: float) -> float | None:
        timers = (self._replug_at, self._next_unplug, self._read_paused_until, self._next_beacon)
        deadlines = [t for t in timers if t is not None]
        if self._heap:
            deadlines.append(self._heap[0][0])
        if self._out and self.port.fd is not None and not self._want_write and self.faults.baud:
            deadlines.append(self._slice_due if self._slice_due is not None else now)
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _tick(self, now: float) -> None:
        if self._replug_at is not None and now >= self._replug_at:
            self.replug()
        if self._next_unplug is not None and now >= self._next_unplug:
            self.unplug(self.faults.replug_after)
        if self._read_paused_until is not None and now >= self._read_paused_until:
            self._read_paused_until = None
            self._rewatch()
        while self._heap and self._heap[0][0] <= now:
            self._emit(heapq.heappop(self._heap)[2])
        self._flush(now)
        if self._next_beacon is not None and now >= self._next_beacon:
            self._send_beacon(now)

    def _send_beacon(self, now: float) -> None:
        """One beacon emission, unless the line is still busy; the next one is due."""
        assert self._beacon is not None and self._next_beacon is not None
        period = self._beacon.period
        # Keep the phase (no drift), unless the loop fell a whole period behind.
        self._next_beacon += period
        if self._next_beacon <= now:
            self._next_beacon = now + period
        if self.port.fd is None:
            return  # unplugged, or nobody connected: nobody hears it
        events = self._beacon.events()
        if self._out:
            self.device.counters.overflow += sum(map(len, events))
            return
        data = self.device.unsolicited(events)
        if data is not None:
            self._emit(data)
            self._flush(now)

    # --- the data fd ------------------------------------------------------------

    def _on_accept(self, _mask: int) -> None:
        self._unwatch()
        if self.port.accept():
            log.info("client_connected")
            self._forget_output()
        self._rewatch()

    def _on_data(self, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._want_write = False
            self._rewatch()
        if mask & selectors.EVENT_READ:
            self._read()
        self._flush(time.monotonic())

    def _read(self) -> None:
        fd = self.port.fd
        if fd is None:
            return
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError as exc:
            self._link_error(exc.errno)
            return
        if not data:
            self._link_error(None)
            return
        if self._trace:
            log.debug("rx", hex=data.hex())
        now = time.monotonic()
        if self.faults.baud:
            # The request is only "there" once it has crossed the paced wire.
            self._rx_free = max(self._rx_free, now) + len(data) / (self.faults.baud / 10)
            now = self._rx_free
        for timed in self.device.feed(data, now):
            self._schedule(timed)

    def _link_error(self, err: int | None) -> None:
        """The fd read b'' or failed: a TCP peer left; a pty master waits a little."""
        log.debug("link_error", errno=errno.errorcode.get(err or 0))
        self._unwatch()
        if self.port.peer_closes:
            self.port.hang_up()
            self._forget_output()
        else:
            self._read_paused_until = time.monotonic() + READ_PAUSE
            self._out.clear()
        self._rewatch()

    def _schedule(self, timed: Timed) -> None:
        heapq.heappush(self._heap, (timed.due, next(self._order), timed.data))

    def _emit(self, data: bytes) -> None:
        """Queue bytes for writing now; nobody to take them → dropped."""
        if self.port.fd is None:
            return
        if len(self._out) + len(data) > MAX_OUTPUT:
            self.device.counters.overflow += len(data)
            return
        self._out += data

    def _flush(self, now: float) -> None:
        fd = self.port.fd
        baud = self.faults.baud
        while self._out and fd is not None and not self._want_write:
            rate = baud / 10
            size = max(1, int(rate * SLICE_TIME)) if baud else 65536
            if baud:
                # A slice is handed over when its last byte would have crossed the wire.
                if self._slice_due is None:
                    self._slice_len = min(size, len(self._out))
                    # Back to back with the previous slice, or from now on an idle line;
                    # a loop that woke a little late catches up instead of losing line time.
                    busy = self._next_free >= now - CATCH_UP and self._line_busy
                    start = self._next_free if busy else max(now, self._next_free)
                    self._slice_due = start + self._slice_len / rate
                if now < self._slice_due:
                    return
                size = self._slice_len
            try:
                sent = os.write(fd, self._out[:size])
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self._link_error(exc.errno)
                return
            if self._trace:
                log.debug("tx", hex=bytes(self._out[:sent]).hex())
            del self._out[:sent]
            if baud and sent and self._slice_due is not None:
                self._next_free, self._slice_due = self._slice_due, None
                self._line_busy = bool(self._out)  # more queued: the next slice follows
            if sent < size and self._out:
                self._want_write = True
                self._rewatch()

    def _forget_output(self) -> None:
        self._heap.clear()
        self._out.clear()
        self._slice_due = None
        self._want_write = False
        self.device.reset()

    def _unwatch(self) -> None:
        if self._watched is not None:
            self._selector.unregister(self._watched)
            self._watched = None

    def _rewatch(self) -> None:
        """Watch the port's fd for what the loop currently needs from it."""
        self._unwatch()
        fd = self.port.fd
        events = 0 if self._read_paused_until is not None else selectors.EVENT_READ
        events |= selectors.EVENT_WRITE if self._want_write else 0
        if fd is not None and events:
            self._selector.register(fd, events, self._on_data)
            self._watched = fd

    # --- what the control socket and signals do ------------------------------

    def control(self, line: str) -> dict[str, Any]:
        """Answer one control-socket command line."""
        answer = run_command(self, line)
        log.info("control", command=line.strip(), ok=answer["ok"])
        return answer

    def status(self) -> dict[str, Any]:
        return {
            "address": self.port.address,
            "plugged": self._plugged,
            "faults": self.faults.as_dict(),
            "counters": self.device.status(),
        }

    def unplug(self, seconds: float) -> None:
        """Unplug now; replug after `seconds` (0: stay unplugged until `replug`)."""
        now = time.monotonic()
        self._replug_at = now + seconds if seconds > 0 else None
        self._next_unplug = None
        if not self._plugged:
            return
        self.device.counters.unplugs += 1
        self._unwatch()
        self.port.unplug()
        self._plugged = False
        self._read_paused_until = None
        self._forget_output()
        log.info("unplugged", replug_after=seconds or None)

    def replug(self) -> None:
        """Plug in (again); a failure is retried a second later."""
        now = time.monotonic()
        self._replug_at = None
        if not self._plugged:
            try:
                self.port.plug()
            except OSError as exc:
                log.warning("replug_failed", error=str(exc))
                self._replug_at = now + 1.0
                return
            self._plugged = True
            self._rewatch()
            log.info("plugged", address=self.port.address)
        every = self.faults.unplug_every
        self._next_unplug = now + every if every > 0 else None

    def inject_garbage(self, size: int) -> None:
        self._emit(self.device.garbage(size))
        self._flush(time.monotonic())

    def inject_event(self, payload: bytes) -> None:
        self._emit(self.device.event(payload))
        self._flush(time.monotonic())

    def reset_faults(self) -> None:
        self.faults.reset()
        self.replug()


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except BlockingIOError:
        pass
