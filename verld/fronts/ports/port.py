"""One virtual serial port: a program's requests in, only its own answers out.

Strategy: the port is one owner in the core's fair queue, like an API client. Its
pty (`pty.PtyPort`) is watched by one task: while no program has it open the task
polls every `ATTACH_POLL` (0.1 s) and nothing is read or written (a detached master is readable
for ever, so a reader would spin); once a program opens it a reader is added, and
the program's close (read gives None) removes it again. What the program writes is
fed to the codec's device side (`framing`); each request becomes a call, and the
call's end becomes the answer in the same framing:

- `verl`: every request is submitted at once (the window and the fair queue bound
  them), and each reply is written as it completes, with the program's seq.
- the other codecs: one call at a time, in order; the rest wait here, at most
  `api.client_queue` of them (past that, a request fails `busy`).

A call that fails gets no answer (as from a silent device): it is counted by error
code and logged at DEBUG. An answer from the device (any status, a Modbus
exception included) is written back.

Epochs: a program's close, a codec change or a reload that resets the decoder
starts a new epoch and forgets the port's calls in the core. An answer to a call of
an older epoch is never written (it would be stale to whoever opens the port next);
calls left unanswered that way count as `dropped`.

Bounds: bytes queued to the program are at most `api.max_backlog` (whole answers and
events beyond it are dropped and counted); input the decoder cannot use is
discarded until the port has been quiet for `device.guard` (`framing` counts it
`ignored`); `write: false` ignores (and counts) all input.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any

import structlog

from verld.bus import silent_gap
from verld.calls import CallResult
from verld.config import Config, PortConfig
from verld.errors import ErrorCode
from verld.fronts.ports.framing import PortFraming, PortRequest, make_port_framing
from verld.fronts.ports.pty import DETACHED, PtyPort
from verld.link import LinkState

if TYPE_CHECKING:
    from verld.fronts.base import Core

log = structlog.get_logger("verld.ports")

#: seconds between looks at a port nobody has open: a program that opens it and
#: writes at once waits at most this long (two syscalls a look: no CPU to speak of)
ATTACH_POLL = 0.1

#: errors after which the device's own answer exists (and is written back)
_ANSWERED = (None, ErrorCode.DEVICE_ERROR, ErrorCode.REMOTE_FAILURE)


class PortStats:
    """One port's figures (`status.ports[]`)."""

    __slots__ = ("calls", "dropped", "failed", "ignored", "ok")

    def __init__(self) -> None:
        self.calls = 0  #: requests the program made (calls submitted or refused here)
        self.ok = 0  #: calls the device answered (any status)
        self.failed: dict[str, int] = {}  #: calls that got no answer, by error code
        self.dropped = 0  #: answers and events not delivered (nobody there, backlog full)
        self.ignored = 0  #: input bytes ignored (read-only port; framing adds its own)


class VirtualPort:
    """One `ports:` entry: its pty, its decoder, its calls and its output."""

    def __init__(self, core: Core, cfg: Config, entry: PortConfig) -> None:
        self.core = core
        self.counts = core.front("port")
        self.entry = entry
        self.link = entry.link
        self.pty = PtyPort(entry.link, entry.mode, entry.group)
        self.stats = PortStats()
        self.epoch = 0
        self.attached = False
        self._out = bytearray()  #: bytes waiting for the program to read
        self._sizes: deque[int] = deque()  #: the messages in `_out`, by size left
        self._pending: deque[PortRequest] = deque()  #: one-at-a-time codecs: waiting here
        self._busy = False  #: one-at-a-time codecs: a call is out
        self._pumping = False
        self._outstanding = 0  #: calls of this epoch not ended yet
        self._watch: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  #: (set by `open`)
        self._gone: asyncio.Future[None] | None = None
        self._quiet: asyncio.TimerHandle | None = None
        self._flush: asyncio.TimerHandle | None = None
        self._last_input = 0.0
        self._bad_frames_before = 0  #: bad frames of framings replaced by a reload
        self._ignored_before = 0
        self.framing: PortFraming = make_port_framing(cfg)
        self.configure(cfg, entry)

    def __repr__(self) -> str:
        return f"port:{self.link}"

    def configure(self, cfg: Config, entry: PortConfig) -> None:
        """Take the (re)loaded settings; the decoder stays (see `reset_framing`)."""
        self.cfg, self.entry = cfg, entry
        self.max_backlog = cfg.api.max_backlog
        self.client_queue = cfg.api.client_queue
        self.guard = cfg.device.guard
        self.pipelined = cfg.device.codec == "verl"
        self.rtu = cfg.device.codec == "modbus-rtu"
        self.gap = silent_gap(cfg)
        if (entry.mode, entry.group) != (self.pty.mode, self.pty.group):
            self.pty.set_access(entry.mode, entry.group)

    def _the_loop(self) -> asyncio.AbstractEventLoop:
        """The loop `open` ran in (asyncio.get_running_loop costs a syscall a call)."""
        assert self._loop is not None, "the port is not open"
        return self._loop

    # --- lifecycle ----------------------------------------------------------------------
    def open(self) -> None:
        """Create the pty and its link (`PortSetupError` says why not) and watch it."""
        self.pty.open()
        self._loop = asyncio.get_running_loop()
        self._watch = self._loop.create_task(self._watch_program(), name=f"port {self.link}")
        log.info("port_created", link=self.link, pty=self.pty.slave_path,
                 write=self.entry.write, events=self.entry.events)  # fmt: skip

    def close(self) -> None:
        """Close the pty (its program sees a hang-up) and remove the link."""
        if self._watch is not None:
            self._watch.cancel()  # (it only ever waits: nothing to clean up after it)
            self._watch = None
        self._detach("port removed")
        for timer in (self._quiet, self._flush):
            if timer is not None:
                timer.cancel()
        self.pty.close()

    async def _watch_program(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.pty.program_attached():  # (no event tells: poll)
                self._departed()
                await asyncio.sleep(ATTACH_POLL)
            self._gone = loop.create_future()
            self._attach()
            await self._gone

    def _departed(self) -> None:
        """A program opened the port, wrote and closed it between two polls: its
        requests go to the device (as to a real one), its answers nowhere."""
        while (data := self.pty.read()) is not None and data:
            self.feed(data)
        if self._outstanding or self._pending:
            self.new_epoch()
        self.framing.reset()

    def _attach(self) -> None:
        self.attached = True
        self.framing.reset()  # what an earlier program left half-written is worthless
        self._the_loop().add_reader(self.pty.fd, self._readable)
        log.info("port_opened", link=self.link)

    def _detach(self, reason: str) -> None:
        """The program closed the port (or the port goes): a new epoch, output dropped."""
        if not self.attached:
            return
        self.attached = False
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.pty.fd)
        self._drop_output()
        self.new_epoch()
        log.info("port_closed", link=self.link, reason=reason)
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    def new_epoch(self) -> None:
        """Forget this port's calls: answers still to come are never written."""
        self.epoch += 1
        self.stats.dropped += self._outstanding + len(self._pending)
        self._outstanding = 0
        self._pending.clear()
        self._busy = False
        self.core.forget(self)

    def reset_framing(self, cfg: Config) -> None:
        """The codec (or its settings) changed: a new decoder, and a new epoch."""
        self._bad_frames_before += self.framing.bad_frames
        self._ignored_before += self.framing.ignored
        self.framing = make_port_framing(cfg)
        self.new_epoch()

    # --- input ----------------------------------------------------------------------------
    def _readable(self) -> None:
        data = self.pty.read()
        if data is None:
            self._detach("the program closed it")
        elif data:
            self.feed(data)

    def feed(self, data: bytes) -> None:
        """What the program wrote."""
        if not self.entry.write:
            self.stats.ignored += len(data)
            return
        framing = self.framing
        requests = framing.feed(data)
        if framing.discarding:  # out of step: wait for a quiet spell
            loop = self._the_loop()
            self._last_input = loop.time()
            if self._quiet is None:
                self._quiet = loop.call_later(self.guard, self._check_quiet)
        elif self.rtu:  # an RTU request of unknown length ends at silence
            if self._flush is not None:
                self._flush.cancel()
            self._flush = self._the_loop().call_later(self.gap, self._silence)
        self._requests(requests)

    def _check_quiet(self) -> None:
        self._quiet = None
        loop = self._the_loop()
        due = self._last_input + self.guard
        if loop.time() < due:
            self._quiet = loop.call_at(due, self._check_quiet)
            return
        self.framing.reset()
        log.debug("port_input_resumed", link=self.link, ignored=self.framing.ignored)

    def _silence(self) -> None:
        self._flush = None
        self._requests(self.framing.flush())

    def _requests(self, requests: list[PortRequest]) -> None:
        if not requests:
            return
        self.stats.calls += len(requests)
        if not self.pipelined:  # one at a time: the rest wait here, bounded
            room = max(0, self.client_queue - len(self._pending))
            self._pending.extend(requests[:room])
            for _ in requests[room:]:
                self._count(ErrorCode.BUSY)
                self._failed(ErrorCode.BUSY, "more than api.client_queue requests waiting")
            self._pump()
        elif len(requests) == 1:  # the lock-step case: straight out
            self._submit(requests[0])
        else:
            core = self.core
            core.hold()  # a burst of requests goes to the device in one write
            try:
                for request in requests:
                    self._submit(request)
            finally:
                core.flush()

    def _submit(self, request: PortRequest) -> None:
        core, epoch, tag = self.core, self.epoch, request.tag
        self._outstanding += 1

        def done(result: CallResult) -> None:
            self._done(epoch, tag, result)

        # While an open attempt is under way (at start, say), the call waits for it.
        wait = core.session.link.state is LinkState.CONNECTING
        core.submit(core.make_call(None, self, request.payload, done, req_id=tag, wait=wait))

    def _count(self, outcome: str) -> None:
        outcomes = self.counts.outcomes
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    def _done(self, epoch: int, tag: int | None, result: CallResult) -> None:
        self._count(result.error or "ok")
        if epoch != self.epoch:
            return  # forgotten (the program left): counted in `dropped` then
        self._outstanding -= 1
        if result.status is not None and result.error in _ANSWERED:
            self.stats.ok += 1
            self.send(self.framing.reply(tag, result.status, result.data, result.text))
        else:
            self._failed(result.error or "no_answer", result.message)
        if not self.pipelined:
            self._busy = False
            self._pump()

    def _pump(self) -> None:
        """One-at-a-time codecs: the next waiting request goes out, once the last
        ended. A loop, not recursion: a refused call ends inside `submit`."""
        if self._pumping:
            return  # (a call that ended at once, inside the loop below)
        self._pumping = True
        try:
            while not self._busy and self._pending:
                self._busy = True
                self._submit(self._pending.popleft())
        finally:
            self._pumping = False

    def _failed(self, code: str, message: str) -> None:
        failed = self.stats.failed
        failed[code] = failed.get(code, 0) + 1
        log.debug("port_call_failed", link=self.link, error=code, message=message)

    # --- output -----------------------------------------------------------------------------
    def event(self, data: bytes, text: str | None) -> None:
        """A device event, for a port with `events: true`."""
        if self.entry.events:
            self.send(self.framing.event(data, text))

    def send(self, frame: bytes) -> None:
        """Write one answer or event, or queue it; drop it whole when nobody is
        there or the backlog is full."""
        if not frame:
            return
        if not self.attached:
            self.stats.dropped += 1
            return
        if self._out:  # a write is waiting for the program to read: queue behind it
            if len(self._out) + len(frame) > self.max_backlog:
                self.stats.dropped += 1
            else:
                self._out += frame
                self._sizes.append(len(frame))
            return
        if self.pty.fix_termios():
            log.info("port_termios_fixed", link=self.link,
                     reason="the program turned on echo or canonical mode: turned off")  # fmt: skip
        written = self.pty.write(frame)
        if written == DETACHED:  # closed since: the reader will see it (and read its last words)
            self.stats.dropped += 1
        elif written < len(frame):
            self._out += frame[written:]
            self._sizes.append(len(frame) - written)
            self._the_loop().add_writer(self.pty.fd, self._writable)

    def _writable(self) -> None:
        written = self.pty.write(self._out)
        if written == DETACHED:
            self._drop_output()
            return
        del self._out[:written]
        sizes = self._sizes
        while sizes and written >= sizes[0]:
            written -= sizes.popleft()
        if sizes:
            sizes[0] -= written
        if not self._out:
            self._the_loop().remove_writer(self.pty.fd)

    def _drop_output(self) -> None:
        if self._out:
            self._the_loop().remove_writer(self.pty.fd)
            self.stats.dropped += len(self._sizes)
            self._out.clear()
            self._sizes.clear()

    # --- figures ----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """This port's `status.ports` entry."""
        st, framing = self.stats, self.framing
        return {
            "link": self.link,
            "open": self.attached,
            "calls": st.calls,
            "ok": st.ok,
            "failed": dict(sorted(st.failed.items())),
            "dropped": st.dropped,
            "ignored": st.ignored + self._ignored_before + framing.ignored,
            "bad_frames": self._bad_frames_before + framing.bad_frames,
            "write": self.entry.write,
            "events": self.entry.events,
        }
