"""The Modbus bus: units, offline units, broadcast and the silent gap, sans-I/O.

Strategy: on the `modbus-rtu` and `modbus-tcp` codecs the session keeps one `Bus`
beside its window. The bus reads no clock (times come in as `now`) and does no
I/O; the session asks it three things on a call's way and tells it one:
- `check(call)` and `offline(call, now)` at submit: why the call ends at once — a
  request that is not Modbus (`bad_request`) or a unit that is offline (`timeout`,
  "unit N offline") — or None. `check` tags the call with its unit and turns a
  broadcast (unit 0 on RTU) into a call that holds the bus for `modbus.turnaround`
  and succeeds with no data; `offline` lets one call through as the probe of an
  offline unit whose backoff is over;
- `finished(call, error, now)` when a call ends: the unit's counts, and whether it
  goes offline (`modbus.offline_after` calls in a row whose every try timed out)
  or comes back (any reply, exception included). A unit that goes offline is
  returned so the session can fail its queued calls at once;
- `gap`: on RTU the seconds of silence the line needs before each request
  (3.5 character times, 1.75 ms above 19200 baud); 0 on modbus-tcp.
Round-robin by unit is the queue's (`calls.LaneQueue`, the unit being the lane).
"""

from __future__ import annotations

from typing import Any

import structlog

from verld.codec.modbus import EXCEPTION_NAMES, check_request, rtu_misframed
from verld.config import Config
from verld.errors import ErrorCode
from verld.session.calls import Call

log = structlog.get_logger("verld.session.bus")

#: the outcomes of `verld_modbus_unit_calls_total{unit,outcome}`
OUTCOMES = ("ok", "exception", "timeout", "offline", "error")


def exception_message(code: int) -> str:
    """`modbus exception 0x02 (illegal data address)`."""
    name = EXCEPTION_NAMES.get(code)
    return f"modbus exception 0x{code:02x}" + (f" ({name})" if name else "")


_BROADCAST = 0


def silent_gap(cfg: Config) -> float:
    """3.5 character times at the device's settings (1.75 ms above 19200 baud)."""
    dev = cfg.device
    if dev.baudrate > 19200:
        return 0.00175
    bits = 1 + dev.bytesize + (0 if dev.parity == "none" else 1) + dev.stopbits
    return 3.5 * bits / dev.baudrate


class Unit:
    """One unit's counts and offline state."""

    __slots__ = ("calls", "in_row", "offline", "outcomes", "probe", "retry_at", "silent")

    def __init__(self) -> None:
        self.calls = 0
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.in_row = 0  #: calls in a row whose every try timed out
        self.offline = False
        self.retry_at = 0.0  #: while offline: when the next call may go as a probe
        self.probe: Call | None = None  #: the probe on its way, if any
        self.silent = False  #: its last try timed out (its turns on the bus are one call)

    def status(self, unit: int) -> dict[str, Any]:
        o = self.outcomes
        return {
            "unit": unit,
            "calls": self.calls,
            "ok": o["ok"],
            "exceptions": o["exception"],
            "timeouts": o["timeout"] + o["offline"],
            "offline": self.offline,
            "errors": o["error"],
        }


class Bus:
    """The units on one Modbus link."""

    def __init__(self, cfg: Config, *, rtu: bool) -> None:
        self.rtu = rtu
        self.units: dict[int, Unit] = {}
        self.configure(cfg)

    def configure(self, cfg: Config) -> None:
        """Take the `modbus` settings and the line's timing (at start and on reload)."""
        mb = cfg.modbus
        self.turnaround = mb.turnaround
        self.offline_after = mb.offline_after
        self.backoff = mb.offline_backoff
        self.gap = silent_gap(cfg) if self.rtu else 0.0

    def unit(self, unit: int) -> Unit:
        state = self.units.get(unit)
        if state is None:
            state = self.units[unit] = Unit()
        return state

    def is_broadcast(self, call: Call) -> bool:
        return self.rtu and call.unit == _BROADCAST

    # --- a call's way --------------------------------------------------------------------
    def check(self, call: Call) -> str | None:
        """Why a call is not a Modbus request (`bad_request`), or None. Tags the call
        with its unit; a broadcast (unit 0 on RTU) holds the bus for
        `modbus.turnaround` and is never retried."""
        reason = check_request(call.payload, rtu=self.rtu)
        if reason is None and self.rtu:
            reason = rtu_misframed(call.payload)
        if reason is not None:
            return reason
        unit = call.unit = call.payload[0]
        if self.rtu and unit == _BROADCAST:
            call.timeout, call.retry = self.turnaround, 0  # nobody answers: no retry
        return None

    def offline(self, call: Call, now: float) -> str | None:
        """Why a call to an offline unit fails at once ("unit N offline"), or None.

        Once the unit's backoff is over, one call goes through as its probe (no
        retry). A call refused here is counted here (outcome `offline`) and leaves
        with its unit cleared, so `finished` does not count it again.
        """
        state = self.units.get(call.unit)
        if state is None or not state.offline:
            return None
        if state.probe is None and now >= state.retry_at:
            state.probe = call  # the backoff is over: this call finds out
            call.retry = 0
            return None
        unit = call.unit
        self.count_offline(call)
        return f"unit {unit} offline"

    def count_offline(self, call: Call) -> None:
        """A call to an offline unit fails without going out: count it, once."""
        state = self.unit(call.unit)
        state.calls += 1
        state.outcomes["offline"] += 1
        call.unit = -1

    def finished(self, call: Call, error: str | None, now: float) -> int | None:
        """A call to `call.unit` ended; the unit, when this took it offline."""
        state = self.unit(call.unit)
        state.calls += 1
        probe = state.probe is call
        if probe:
            state.probe = None
        if error is None or error == ErrorCode.DEVICE_ERROR:  # a reply: the unit is there
            state.outcomes["ok" if error is None else "exception"] += 1
            self.replied(call.unit)
            return None
        if error != ErrorCode.TIMEOUT:
            state.outcomes["error"] += 1
            return None
        state.outcomes["timeout"] += 1
        state.in_row += 1
        if probe:
            state.retry_at = now + self.backoff  # still silent: back off again
        elif not state.offline and state.in_row >= self.offline_after:
            state.offline = True
            state.retry_at = now + self.backoff
            return call.unit
        return None

    def replied(self, unit: int) -> None:
        """The unit answered (a call or a heartbeat ping): it is there."""
        state = self.units.get(unit)
        if state is None:
            return
        if state.offline:
            log.info("modbus_unit_online", unit=unit)
        state.in_row = 0
        state.offline = state.silent = False

    def try_timed_out(self, call: Call) -> None:
        """A try to `call.unit` got no answer: until one comes, its turns are one call."""
        self.unit(call.unit).silent = True

    def heavy(self, unit: int) -> bool:
        """Whether a unit's turn on the bus is one call (`calls.LaneQueue`)."""
        state = self.units.get(unit)
        return state is not None and state.silent

    # --- figures -------------------------------------------------------------------------
    def status(self) -> list[dict[str, Any]]:
        """`status.units`: each unit called so far, by unit id."""
        return [self.units[u].status(u) for u in sorted(self.units)]

    def unit_calls(self) -> dict[tuple[int, str], int]:
        """(unit, outcome) → calls, for `verld_modbus_unit_calls_total`."""
        return {
            (u, outcome): n
            for u in sorted(self.units)
            for outcome, n in self.units[u].outcomes.items()
        }
