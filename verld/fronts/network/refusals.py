"""Refused connections: counted every time, logged at most once a second per reason.

Strategy: a flood of connects must not become a flood of WARNING lines (nor of
records in the `logs` ring). The first refusal of a reason is logged at once with
`count=1`; later ones within the second are only counted, and when the second is
up a timer logs one line for them all, with `count` (refused since the last line)
and the fields of the last one (its address). `counts` holds every refusal by
reason (`status`, metrics). `flush` logs what is held and cancels the timers (an
entry closing). Its memory is one slot per reason, whatever the flood. It runs in the
event loop (the running one's clock and timers); network entries and the Modbus TCP
front each have one.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: seconds between two lines of one reason
INTERVAL = 1.0


class Refusals:
    """One listener's refusals (see the module docstring): `refuse(why, **fields)`
    logs `event` at WARNING with `{key: why, count: N, **fields}`."""

    def __init__(self, log: Any, event: str, key: str = "why") -> None:
        self.log, self.event, self.key = log, event, key
        self.counts: dict[str, int] = {}
        self._last: dict[str, float] = {}  #: when each reason was last logged
        self._held: dict[str, tuple[int, dict[str, Any], asyncio.TimerHandle]] = {}

    def refuse(self, why: str, **fields: Any) -> None:
        """Count one refusal; log it now, or with the others at the end of the second."""
        self.counts[why] = self.counts.get(why, 0) + 1
        held = self._held.get(why)
        if held is not None:
            self._held[why] = (held[0] + 1, fields, held[2])
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        last = self._last.get(why)
        if last is None or now - last >= INTERVAL:
            self._line(why, 1, fields, now)
            return
        timer = loop.call_at(last + INTERVAL, self._due, why)
        self._held[why] = (1, fields, timer)

    def _due(self, why: str) -> None:
        count, fields, _ = self._held.pop(why)
        self._line(why, count, fields, asyncio.get_running_loop().time())

    def _line(self, why: str, count: int, fields: dict[str, Any], now: float | None) -> None:
        if now is not None:
            self._last[why] = now
        self.log.warning(self.event, **{self.key: why, "count": count}, **fields)

    def flush(self) -> None:
        """Log what is held now (no timer left behind)."""
        held, self._held = self._held, {}
        for why, (count, fields, timer) in held.items():
            timer.cancel()
            self._line(why, count, fields, None)
