"""`Tasks`: the owner of a set of tasks, an `asyncio.TaskGroup` that can also be ended.

A TaskGroup awaits every task started in it and, when one fails, cancels the rest
and raises the failures (an ExceptionGroup) from its `async with`. What it lacks is
a way to end tasks that run until cancelled (a reconnect loop, a broker reader)
once the owner is done with them; `cancel()` is that way (trio's
`nursery.cancel_scope.cancel()`): every task still running is cancelled, and the
`async with` then awaits them as usual. So no task outlives its owner's block.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["Tasks"]

T = TypeVar("T")


class Tasks:
    """A TaskGroup plus `cancel()`; see the module docstring. Entered once."""

    def __init__(self) -> None:
        self._group = asyncio.TaskGroup()
        self._running: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> Tasks:
        await self._group.__aenter__()
        return self

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._group.__aexit__(et, exc, tb)

    def start(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Run `coro` as a task of this owner."""
        task = self._group.create_task(coro, name=name)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    def cancel(self) -> None:
        """Cancel every task still running (the `async with` awaits them)."""
        for task in self._running:
            task.cancel()

    def __len__(self) -> int:
        """Tasks still running."""
        return len(self._running)
