"""`Serialised`: the work a reload leaves to run, one piece after the other, owned.

A reload is synchronous (a SIGHUP handler, the `reload` op), but some of what it
asks for has to wait: a listener rebound, a network entry bound, the built-in sim
restarted for a new codec. Each such piece is a coroutine handed to `run`; one task
at a time runs them in the order given, so a second reload's work starts when the
first's has ended (two rebinds never race for one address). A piece that raises is
logged (`reload_crashed`, at ERROR with its traceback, as the daemon logs
`task_crashed`) and the next one runs: a reload's failure never reaches the caller
of `run` nor `close`. `close` awaits what runs and what waits its turn: each piece
is finite (a bind, a sim that starts or fails within seconds), so no task outlives
its owner's `close`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Coroutine
from typing import Any

import structlog

__all__ = ["Serialised"]

log = structlog.get_logger("verld.reloads")


class Serialised:
    """Coroutines run one after another in a task of this owner (see the module
    docstring); `owner` names it in the log."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._waiting: deque[Coroutine[Any, Any, None]] = deque()
        self._task: asyncio.Task[None] | None = None

    def run(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` once what was handed before it has ended."""
        self._waiting.append(work)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._drain(), name=f"{self.owner} reload"
            )

    async def _drain(self) -> None:
        try:
            while self._waiting:
                work = self._waiting.popleft()
                try:
                    await work
                except Exception as exc:
                    log.error("reload_crashed", owner=self.owner, error=repr(exc), exc_info=exc)
        finally:  # (cancelled from outside: what had not started never will)
            while self._waiting:
                self._waiting.popleft().close()

    async def close(self) -> None:
        """Await every piece handed so far, and any handed meanwhile (their exceptions
        were logged, not raised)."""
        while self._task is not None and not self._task.done():
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
