"""How calls take turns on the line: chosen once from the codec, asked without `if`s.

Strategy: beyond its framing (`verld.codec`), what differs between codecs is the
discipline of the line, and the session holds exactly one, made by `discipline_for`
from the codec's traits. The session and its timekeeper call its hooks at fixed
points and never ask which codec runs:

- `Plain` (verl, length, line, frame): every call is the line's own; a call whose tries
  all ran out tells about the device (a probe ping follows); a retry goes straight
  back out (with seqs) or after the quiet guard. On `line` it screens requests
  (one line per call: `LineCodec.refuse`).
- `Turns` (modbus-rtu, modbus-tcp): a bus of units (`bus.Bus`): requests are
  checked as Modbus, calls queue by unit (`calls.LaneQueue`), a silent unit goes
  offline without taking the line down, a broadcast is answered by nobody, an
  exception reply is `device_error`; on RTU the line must be silent for 3.5
  characters before each request (`gap`, kept on the `precise` clock with its own
  alarm), and silence ends a reply whose bytes do not tell its length.
- `Declared` (frame): a `Plain` line whose framing the config declares. Its codec
  may hold an incomplete frame (a false start in noise claiming a long length):
  once the line has been silent for `device.guard`, the codec drops it (`flush`)
  and reads again what followed its start, so the replies held behind it are not
  lost. Its replies' status is the device's own header byte, so any reply to a
  ping, whatever its status, shows the device is there.

Hooks that cost nothing on the plain line are None there (`heard`, `clear`), so
the per-call path tests one attribute, not a codec.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import structlog

from verld.alarm import Alarm, Clock
from verld.codec.base import Inbound, LinkCodec
from verld.codec.modbus import ModbusRtuCodec
from verld.codec.registry import CodecSpec
from verld.config import Config
from verld.errors import ErrorCode
from verld.links.link import Link
from verld.session.bus import Bus, exception_message
from verld.session.calls import Call, CallResult, FairQueue, Finish, LaneQueue
from verld.session.window import EPSILON

log = structlog.get_logger("verld.session.session")


class Plain:
    """The line of a codec whose calls are the line's own (verl, length, line)."""

    #: calls take turns by unit: a retry queues again, a call's silence is its unit's
    turns = False
    #: at submit: why a request cannot be one call (bad_request), or None; None: no screen
    screen: Callable[[Call], str | None] | None = None
    #: bytes came (before decoding); None: nothing to note
    heard: Callable[[], None] | None = None
    #: whether the line may take a request now; None: always
    clear: Callable[[], bool] | None = None

    def __init__(self, cfg: Config, codec: LinkCodec, link: Link) -> None:
        self.link = link
        refuse = getattr(codec, "refuse", None)  # (line: one line per call)
        if refuse is not None:
            self.screen = lambda call: refuse(call.payload)

    def queue(self, old: FairQueue) -> FairQueue:
        """The queue for this line, `old` itself when it is of the right kind."""
        if type(old) is FairQueue:
            return old
        return _moved(old, FairQueue(old.limit, old.share))

    def configure(self, cfg: Config) -> None:
        """A reload's settings."""

    def offline(self, call: Call, now: float) -> str | None:
        """Why a call fails `timeout` at once (its unit is offline), or None."""
        return None

    def unfinished(self) -> None:
        """Bytes came (`heard` is set) and ended no frame."""

    def sent(self, calls: list[Call], now: float) -> None:
        """Calls went out: the heartbeat's clock restarts."""
        self.link.activity(now)

    def unanswerable(self, call: Call) -> bool:
        """Whether nobody answers this call (it succeeds when its time is up)."""
        return False

    def try_timed_out(self, call: Call, queue: FairQueue) -> None:
        """A client call's try got no answer."""

    def reply_error(self, status: int) -> tuple[ErrorCode, str]:
        """The error of a reply with a non-zero status."""
        if status == 0xFF:
            return ErrorCode.REMOTE_FAILURE, "the device reported failure (status 0xff)"
        return ErrorCode.DEVICE_ERROR, f"device status 0x{status:02x}"

    def ping_answered(self, ping: Call) -> None:
        """A ping got its answer."""

    def ping_turn(self, ping: Call) -> None:
        """A heartbeat ping that must take a turn like a call (`turns` only)."""

    def finished(self, call: Call, error: str | None, now: float) -> int | None:
        """A call with a unit ended; the unit, when this took it offline."""
        return None

    def unit_offline(self, unit: int, queue: FairQueue, finish: Finish) -> None:
        """A unit went offline: its waiting calls fail at once."""

    def proves_alive(self, result: CallResult) -> bool:
        """Whether a ping's result shows the device is there."""
        return result.error is None

    def stop(self) -> None:
        """The link went away: no alarm of its own rings."""

    def status(self) -> dict[str, Any]:
        """Its part of the `status` reply."""
        return {}

    def unit_calls(self) -> dict[tuple[int, str], int] | None:
        """(unit, outcome) → calls, for `verld_modbus_unit_calls_total` (None: no units)."""
        return None


class Turns(Plain):
    """A Modbus bus: units take turns on one line (modbus-rtu, modbus-tcp)."""

    turns = True

    def __init__(
        self,
        cfg: Config,
        codec: LinkCodec,
        link: Link,
        *,
        rtu: bool,
        clock: Clock,
        precise: Callable[[], float],
        quiet: Callable[[list[Inbound]], None],
    ) -> None:
        super().__init__(cfg, codec, link)
        self.bus = Bus(cfg, rtu=rtu)
        self.rtu = codec if isinstance(codec, ModbusRtuCodec) else None
        self.precise = precise
        #: when the line has been silent long enough, on `precise` time
        self.quiet_until = 0.0
        self._quiet = quiet  #: frames that silence ended, then the queue pumped
        self.alarm = Alarm(clock, self._silence)
        self.screen = self.bus.check
        self.configure(cfg)

    def queue(self, old: FairQueue) -> FairQueue:
        new = old if isinstance(old, LaneQueue) else _moved(old, LaneQueue(old.limit, old.share))
        assert isinstance(new, LaneQueue)
        new.heavy = self.bus.heavy
        return new

    def configure(self, cfg: Config) -> None:
        self.bus.configure(cfg)
        gap = self.bus.gap
        self.heard = self._heard if gap else None
        self.clear = self._clear if gap else None

    # --- the silent gap (RTU) ------------------------------------------------------------
    def _heard(self) -> None:
        self.quiet_until = self.precise() + self.bus.gap

    def unfinished(self) -> None:
        """Bytes came and ended no frame: a reply whose end only silence tells."""
        if self.rtu is not None and self.rtu.partial:
            self.alarm.set(self.quiet_until)

    def _clear(self) -> bool:
        """The line has been silent for 3.5 characters (else the alarm pumps once it has)."""
        if self.quiet_until - self.precise() <= EPSILON:
            return True
        self.alarm.set_earlier(self.quiet_until)
        return False

    def _silence(self) -> None:
        if self.quiet_until - self.precise() > EPSILON:  # bytes came since (or rang early)
            self.alarm.set(self.quiet_until)
            return
        rtu = self.rtu
        self._quiet(rtu.flush() if rtu is not None and rtu.partial else [])

    def stop(self) -> None:
        self.alarm.cancel()

    # --- calls ------------------------------------------------------------------------
    def offline(self, call: Call, now: float) -> str | None:
        return self.bus.offline(call, now)

    def sent(self, calls: list[Call], now: float) -> None:
        # A request to a silent unit proves nothing: only replies restart the
        # heartbeat's clock, so a dead adapter is found under load too.
        first = calls[0]
        if self.rtu is not None and first.unit == 0 and not first.is_ping:
            self.rtu.expect_nothing()

    def unanswerable(self, call: Call) -> bool:
        return self.bus.is_broadcast(call) and not call.is_ping

    def try_timed_out(self, call: Call, queue: FairQueue) -> None:
        self.bus.try_timed_out(call)
        queue.cut_turn(call.unit)

    def reply_error(self, status: int) -> tuple[ErrorCode, str]:
        return ErrorCode.DEVICE_ERROR, exception_message(status)

    def ping_answered(self, ping: Call) -> None:
        self.bus.replied(ping.payload[0])  # (the heartbeat's unit is there)

    def ping_turn(self, ping: Call) -> None:
        ping.unit = ping.payload[0]

    def finished(self, call: Call, error: str | None, now: float) -> int | None:
        return self.bus.finished(call, error, now)

    def unit_offline(self, unit: int, queue: FairQueue, finish: Finish) -> None:
        assert isinstance(queue, LaneQueue)
        log.warning("modbus_unit_offline", unit=unit, backoff=self.bus.backoff)
        for call in queue.lane(unit):
            if call.is_ping:
                continue  # (the heartbeat is the port's: it times out on its own)
            queue.remove(call)
            if call.timer is not None:
                call.timer.cancel()
                call.timer = None
            self.bus.count_offline(call)
            finish(call, ErrorCode.TIMEOUT, f"unit {unit} offline")

    def proves_alive(self, result: CallResult) -> bool:
        # an exception reply shows the device is there too
        return result.error is None or result.error == ErrorCode.DEVICE_ERROR

    def status(self) -> dict[str, Any]:
        return {"units": self.bus.status()}

    def unit_calls(self) -> dict[tuple[int, str], int] | None:
        return self.bus.unit_calls()


class Declared(Plain):
    """A declared framing's line (frame): after `device.guard` of silence an incomplete
    frame is dropped and the codec reads on; any reply proves the device alive."""

    def __init__(
        self,
        cfg: Config,
        codec: LinkCodec,
        link: Link,
        *,
        clock: Clock,
        quiet: Callable[[list[Inbound]], None],
    ) -> None:
        super().__init__(cfg, codec, link)
        self.codec = codec
        self.clock = clock
        self._quiet = quiet  #: frames the flush found, then the queue pumped
        self._last = 0.0  #: when bytes last came
        self.alarm = Alarm(clock, self._silence)
        self.heard = self._heard
        self.configure(cfg)

    def configure(self, cfg: Config) -> None:
        self.guard = cfg.device.guard

    def _heard(self) -> None:
        # One alarm per guard at most, not one per read: it moves itself on when it rings.
        self._last = now = self.clock.time()
        if self.alarm.at == math.inf:
            self.alarm.set(now + self.guard)

    def _silence(self) -> None:
        due = self._last + self.guard
        if due - self.clock.time() > EPSILON:  # bytes came since
            self.alarm.set(due)
            return
        if getattr(self.codec, "partial", False):
            self._quiet(self.codec.flush())  # type: ignore[attr-defined]

    def stop(self) -> None:
        self.alarm.cancel()

    def proves_alive(self, result: CallResult) -> bool:
        return result.status is not None  # (a reply, ok or not)


def _moved(old: FairQueue, new: FairQueue) -> FairQueue:
    new.carry_over(old)
    return new


def discipline_for(
    spec: CodecSpec,
    cfg: Config,
    codec: LinkCodec,
    link: Link,
    *,
    clock: Clock,
    precise: Callable[[], float],
    quiet: Callable[[list[Inbound]], None],
) -> Plain:
    """The discipline of `spec`'s line."""
    if spec.bus:
        return Turns(cfg, codec, link, rtu=spec.rtu, clock=clock, precise=precise, quiet=quiet)
    if spec.declared:
        return Declared(cfg, codec, link, clock=clock, quiet=quiet)
    return Plain(cfg, codec, link)
