"""A program behind a byte stream: its requests in, only its own answers out.

Strategy: a front whose programs speak the device's own protocol over a byte
stream (a virtual serial port's pty; a raw TCP connection) is a thin edge around
one `ProgramStream`, which knows no fd, pty or socket. The edge tells it when a
program comes (`attach`) and goes (`detach`; `absent` while nobody is there), hands
it what the program wrote (`feed`) and says when more output fits (`writable`); the
stream writes through the edge (`Edge`), and its two timers run on a `Clock` (the
event loop, or a test's manual clock).

What the program writes is fed to the codec's device side (`spec_of(cfg).device`);
each request becomes a call for one owner, the stream, in the core's fair queue like
an API client, and the call's end becomes the answer in the same framing:

- pipelined codecs (verl): every request is submitted at once (the window and the
  fair queue bound them), and each reply is written as it completes, with the
  program's seq.
- the others: one call at a time, in order; the rest wait here, at most
  `api.client_queue` of them (past that, a request fails `busy`).

A call that fails gets no answer (as from a silent device): it is counted by error
code and logged at DEBUG; a request verld refuses (`bad_request`, too long) is logged
at WARNING the first time for each program (a port's open, a connection), with the
reason. A request the device does not answer (`line.no_reply`) is written and nothing
goes back. An answer from the device (any status, a Modbus exception
included) is written back.

Epochs: a program's leaving, a codec change or a reload that resets the decoder
starts a new epoch and forgets the stream's calls in the core. An answer to a call
of an older epoch is never written (it would be stale to whoever comes next); calls
left unanswered that way count as `dropped`.

Bounds: bytes waiting for the program are at most `api.max_backlog` (whole answers
and events beyond it are dropped and counted); input the decoder cannot use is
discarded until the program has been quiet for `device.guard` (the decoder counts
it `ignored`); on RTU, a request whose length its bytes do not tell ends at 3.5
characters of silence; where the framing may hold a false start (`guard_flush`: a
`frame` program's start marker with no frame behind it), what the program left
incomplete is dropped once it has been quiet for `device.guard` (and a request the
search then finds behind it is heard); `write: false` ignores (and counts) all input.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Protocol

import structlog

from verld.alarm import Alarm, Clock
from verld.codec.base import PortFraming, PortRequest
from verld.codec.registry import spec_of
from verld.config import Config
from verld.errors import ErrorCode
from verld.fronts.protocol import StreamFigures
from verld.session.bus import silent_gap
from verld.session.calls import CallResult

if TYPE_CHECKING:
    from verld.fronts.base import Core

log = structlog.get_logger("verld.stream")

#: `Edge.write`'s answer when nobody is there to take the bytes (none were written)
GONE = -1

#: errors after which the device's own answer exists (and is written back)
_ANSWERED = (None, ErrorCode.DEVICE_ERROR, ErrorCode.REMOTE_FAILURE)
#: errors that say the program's request was refused (told once per program at WARNING)
_REFUSED = (ErrorCode.BAD_REQUEST, ErrorCode.TOO_LARGE)


class Edge(Protocol):
    """What a stream needs from the I/O around it (a pty, a socket)."""

    def write(self, data: bytes | bytearray) -> int:
        """Hand `data` to the program without blocking (and without keeping `data`):
        the bytes it took (0: none fit now), or `GONE`."""
        ...

    def want_writable(self, want: bool) -> None:
        """True: bytes wait, call the stream's `writable` when more fit; False: none wait."""
        ...


class Share:
    """Calls several streams hold together (a network entry's connections: one
    client's share, `api.client_queue`): waiting here or on the device."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def room(self) -> int:
        return max(0, self.limit - self.used)


class StreamStats:
    """One stream's figures."""

    __slots__ = ("calls", "dropped", "failed", "ignored", "ok")

    def __init__(self) -> None:
        self.calls = 0  #: requests the program made (calls submitted or refused here)
        self.ok = 0  #: calls the device answered (any status)
        self.failed: dict[str, int] = {}  #: calls that got no answer, by error code
        self.dropped = 0  #: answers and events not delivered (nobody there, backlog full)
        self.ignored = 0  #: input bytes ignored (write: false; the decoder adds its own)


class ProgramStream:
    """The program behind one byte stream: its decoder, its calls and its output.

    `kind` names it in the front counts (`core.front(kind)`) and starts its log
    events (`port` → `port_call_failed`); `where` is the key-values every one of its
    records carries (`{"link": ...}`); both make its repr in the core's logs.
    """

    def __init__(
        self,
        core: Core,
        cfg: Config,
        edge: Edge,
        clock: Clock,
        *,
        kind: str,
        where: dict[str, str],
        write: bool = True,
        events: bool = True,
        share: Share | None = None,
    ) -> None:
        self.core = core
        self.share = share  #: calls held with other streams (None: this stream's own limit)
        self.counts = core.front(kind)
        self.edge = edge
        self.clock = clock
        self.kind, self.where = kind, where
        self.stats = StreamStats()
        self.epoch = 0
        self.attached = False
        self._out = bytearray()  #: bytes waiting for the program to take
        self._sizes: deque[int] = deque()  #: the messages in `_out`, by size left
        self._pending: deque[PortRequest] = deque()  #: one-at-a-time codecs: waiting here
        self._busy = False  #: one-at-a-time codecs: a call is out
        self._pumping = False
        self._outstanding = 0  #: calls of this epoch not ended yet
        self._quiet = Alarm(clock, self._check_quiet)
        self._gap = Alarm(clock, self._silence)
        self._last_input = 0.0
        self._bad_frames_before = 0  #: bad frames of decoders replaced by a reload
        self._ignored_before = 0
        self._told = False  #: a refused request of this program was logged at WARNING
        self.framing: PortFraming = spec_of(cfg).device(cfg)
        self.configure(cfg, write=write, events=events)

    def __repr__(self) -> str:
        return ":".join([self.kind, *self.where.values()])

    def configure(self, cfg: Config, *, write: bool, events: bool) -> None:
        """Take (re)loaded settings; the decoder stays (see `reset_framing`)."""
        spec = spec_of(cfg)
        self.write, self.events = write, events
        self.max_backlog = cfg.api.max_backlog
        self.client_queue = cfg.api.client_queue
        self.guard = cfg.device.guard
        self.pipelined = spec.port_window
        #: the program's silence that ends what it left half-written (0: none does):
        #: 3.5 characters on RTU, `device.guard` where a false start may be held
        self.silence = silent_gap(cfg) if spec.rtu else self.guard if spec.guard_flush else 0.0

    def reset_framing(self, cfg: Config) -> None:
        """The codec (or its settings) changed: a new decoder, and a new epoch."""
        self._bad_frames_before += self.framing.bad_frames
        self._ignored_before += self.framing.ignored
        self.framing = spec_of(cfg).device(cfg)
        self.new_epoch()

    # --- a program comes and goes ---------------------------------------------------------
    def attach(self) -> None:
        """A program is there; what an earlier one left half-written is worthless."""
        self.attached = True
        self._told = False
        self.framing.reset()

    def detach(self) -> bool:
        """The program left (or the stream goes): its output dropped, a new epoch.
        False when none was there."""
        if not self.attached:
            return False
        self.attached = False
        self._drop_output()
        self.new_epoch()
        return True

    def absent(self) -> None:
        """Nobody is there (one may have come, written and gone unseen: what it
        wrote was fed, its answers go nowhere): its calls forgotten, a fresh decoder."""
        if self._outstanding or self._pending:
            self.new_epoch()
        self.framing.reset()

    def new_epoch(self) -> None:
        """Forget this stream's calls: answers still to come are never written."""
        self.epoch += 1
        forgotten = self._outstanding + len(self._pending)
        self.stats.dropped += forgotten
        if self.share is not None:
            self.share.used -= forgotten
        self._outstanding = 0
        self._pending.clear()
        self._busy = False
        self.core.forget(self)

    def close(self) -> None:
        """The stream goes: a program there is detached, the timers stop."""
        self.detach()
        self._quiet.cancel()
        self._gap.cancel()

    # --- input ------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """What the program wrote."""
        if not self.write:
            self.stats.ignored += len(data)
            return
        framing = self.framing
        requests = framing.feed(data)
        if framing.discarding:  # out of step: wait for a quiet spell
            self._last_input = now = self.clock.time()
            if self._quiet.at == math.inf:
                self._quiet.set(now + self.guard)
                self._tell_refused("a request too long (or not in the device's framing)")
        elif self.silence:  # what is half-written ends at silence
            self._last_input = now = self.clock.time()
            if self._gap.at == math.inf:
                self._gap.set(now + self.silence)
        if requests:
            self._requests(requests)

    def _check_quiet(self) -> None:
        due = self._last_input + self.guard
        if self.clock.time() < due:
            self._quiet.set(due)
            return
        self.framing.reset()
        log.debug(f"{self.kind}_input_resumed", **self.where, ignored=self.framing.ignored)

    def _silence(self) -> None:
        due = self._last_input + self.silence
        if self.clock.time() < due:
            self._gap.set(due)
            return
        requests = self.framing.flush()
        if requests:
            self._requests(requests)

    def _requests(self, requests: list[PortRequest]) -> None:
        self.stats.calls += len(requests)
        share = self.share
        if share is not None:  # beyond the share: busy, unanswered
            room = share.room()
            if len(requests) > room:
                self._refuse(len(requests) - room, "more than api.client_queue calls on this entry")
            requests = requests[:room]
            share.used += len(requests)
            if not requests:
                return
        if not self.pipelined:  # one at a time: the rest wait here, bounded
            room = max(0, self.client_queue - len(self._pending))
            self._pending.extend(requests[:room])
            if len(requests) > room:
                self._refuse(len(requests) - room, "more than api.client_queue requests waiting")
                if share is not None:
                    share.used -= len(requests) - room
            self._pump()
        elif len(requests) == 1:  # the lock-step case: straight out
            self._submit(requests[0])
        else:
            with self.core.burst():  # a burst of requests goes to the device in one write
                for request in requests:
                    self._submit(request)

    def _submit(self, request: PortRequest) -> None:
        core, epoch, tag, payload = self.core, self.epoch, request.tag, request.payload
        self._outstanding += 1
        awaited = core.awaits(payload)  # (asked first: `done` holds no call, no cycle)

        def done(result: CallResult) -> None:
            self._done(epoch, tag, result, awaited)

        core.submit(core.make_call(self.counts, self, payload, done, req_id=tag, reply=awaited))

    def _done(self, epoch: int, tag: int | None, result: CallResult, awaited: bool) -> None:
        if epoch != self.epoch:
            return  # forgotten (the program left): counted in `dropped` then
        self._outstanding -= 1
        if self.share is not None:
            self.share.used -= 1
        if result.status is not None and result.error in _ANSWERED:
            self.stats.ok += 1
            if awaited:  # (else the device gives no answer: nor does verld)
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

    def _refuse(self, n: int, message: str) -> None:
        """`n` requests refused here (a flood: counted at once, logged once)."""
        outcomes, failed = self.counts.outcomes, self.stats.failed
        outcomes[ErrorCode.BUSY] = outcomes.get(ErrorCode.BUSY, 0) + n
        failed[ErrorCode.BUSY] = failed.get(ErrorCode.BUSY, 0) + n
        log.debug(
            f"{self.kind}_call_failed", **self.where, error=ErrorCode.BUSY, message=message, calls=n
        )

    def _failed(self, code: str, message: str) -> None:
        failed = self.stats.failed
        failed[code] = failed.get(code, 0) + 1
        if code in _REFUSED:
            self._tell_refused(message, code)
        else:
            log.debug(f"{self.kind}_call_failed", **self.where, error=code, message=message)

    def _tell_refused(self, reason: str, code: str = ErrorCode.BAD_REQUEST) -> None:
        """A request of this program was refused: at WARNING the first time (a user
        typing into a terminal program learns why nothing came back), then DEBUG."""
        if self._told:
            log.debug(f"{self.kind}_request_refused", **self.where, error=code, reason=reason)
            return
        self._told = True
        note = "told once per program; later refusals are logged at DEBUG"
        log.warning(
            f"{self.kind}_request_refused", **self.where, error=code, reason=reason, note=note
        )

    # --- output -------------------------------------------------------------------------------
    def event(self, data: bytes, text: str | None) -> None:
        """A device event: written when the stream takes events."""
        if self.events:
            self.send(self.framing.event(data, text))

    def send(self, frame: bytes) -> None:
        """Write one answer or event, or queue it; drop it whole when nobody is
        there or the backlog is full."""
        if not frame:
            return
        if not self.attached:
            self.stats.dropped += 1
            return
        if self._out:  # bytes wait for the program already: queue behind them
            if len(self._out) + len(frame) > self.max_backlog:
                self.stats.dropped += 1
            else:
                self._out += frame
                self._sizes.append(len(frame))
            return
        written = self.edge.write(frame)
        if written == GONE:  # left since: the edge will tell (after its last words)
            self.stats.dropped += 1
        elif written < len(frame):
            self._out += frame[written:]
            self._sizes.append(len(frame) - written)
            self.edge.want_writable(True)

    def writable(self) -> None:
        """The edge can take more: what waits goes on."""
        written = self.edge.write(self._out)
        if written == GONE:
            self._drop_output()
            return
        del self._out[:written]
        sizes = self._sizes
        while sizes and written >= sizes[0]:
            written -= sizes.popleft()
        if sizes:
            sizes[0] -= written
        if not self._out:
            self.edge.want_writable(False)

    def purge(self, *, received: bool, sent: bool) -> None:
        """Discard what is held for the program: its half-read input (`received`),
        its answers not yet taken (`sent`; counted `dropped`)."""
        if received:
            self.framing.reset()
        if sent:
            self._drop_output()

    def _drop_output(self) -> None:
        if self._out:
            self.edge.want_writable(False)
            self.stats.dropped += len(self._sizes)
            self._out.clear()
            self._sizes.clear()

    @property
    def waiting(self) -> int:
        """Its calls not ended: on the device, or waiting here or in the queue."""
        return self._outstanding + len(self._pending)

    # --- figures --------------------------------------------------------------------------------
    def figures(self) -> StreamFigures:
        """Its calls, answers, drops and ignored input, for the front's `status`."""
        st, framing = self.stats, self.framing
        return {
            "calls": st.calls,
            "ok": st.ok,
            "failed": dict(sorted(st.failed.items())),
            "dropped": st.dropped,
            "ignored": st.ignored + self._ignored_before + framing.ignored,
            "bad_frames": self._bad_frames_before + framing.bad_frames,
        }
