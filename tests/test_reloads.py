"""`verld.reloads.Serialised`: a reload's work run one piece after the other, each
awaited, a failure logged and not raised, nothing left running after `close`."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine
from typing import Any

import pytest
from structlog.testing import capture_logs

from verld.reloads import Serialised

pytestmark = pytest.mark.timeout(10)


def others() -> set[asyncio.Task[object]]:
    """The tasks running besides the test's own."""
    return asyncio.all_tasks() - {asyncio.current_task()}


class TestSerialised:
    def test_pieces_run_one_after_the_other_in_the_order_given(self) -> None:
        """A piece starts when the one handed before it has ended, even a shorter one."""
        steps: list[str] = []

        async def piece(name: str, seconds: float) -> None:
            steps.append(f"{name} starts")
            await asyncio.sleep(seconds)
            steps.append(f"{name} ends")

        async def main() -> None:
            work = Serialised("test")
            work.run(piece("a", 0.03))
            work.run(piece("b", 0.0))
            await asyncio.sleep(0.01)  # (a is under way when c is handed)
            work.run(piece("c", 0.01))
            await work.close()

        asyncio.run(main())
        assert steps == ["a starts", "a ends", "b starts", "b ends", "c starts", "c ends"]

    def test_a_piece_that_raises_is_logged_and_the_next_still_runs(self) -> None:
        """A failing piece is one `reload_crashed` error record; `close` does not raise it."""
        ran: list[str] = []

        async def broken() -> None:
            raise OSError("injected")

        async def fine() -> None:
            ran.append("fine")

        async def main() -> None:
            work = Serialised("modbus")
            work.run(broken())
            work.run(fine())
            await work.close()

        with capture_logs() as logs:
            asyncio.run(main())
        assert ran == ["fine"]
        [record] = [r for r in logs if r["event"] == "reload_crashed"]
        assert record["log_level"] == "error"
        assert record["owner"] == "modbus"
        assert record["error"] == "OSError('injected')"
        assert isinstance(record["exc_info"], OSError)

    def test_close_awaits_what_runs_and_what_waits_its_turn(self) -> None:
        """After `close` every piece handed has ended and no task of the owner is left."""
        ended: list[int] = []

        async def piece(n: int) -> None:
            await asyncio.sleep(0.01)
            ended.append(n)

        async def main() -> set[asyncio.Task[object]]:
            work = Serialised("test")
            for n in range(3):
                work.run(piece(n))
            await work.close()
            return others()

        assert asyncio.run(main()) == set()
        assert ended == [0, 1, 2]

    def test_close_awaits_a_piece_handed_while_it_waits(self) -> None:
        """A piece handed during `close` (a reload meanwhile) is run and awaited too."""
        ended: list[str] = []

        async def main() -> set[asyncio.Task[object]]:
            work = Serialised("test")

            async def later() -> None:
                ended.append("later")

            async def first() -> None:
                await asyncio.sleep(0.01)
                work.run(later())
                ended.append("first")

            work.run(first())
            await work.close()
            return others()

        assert asyncio.run(main()) == set()
        assert ended == ["first", "later"]

    def test_close_with_nothing_handed_returns_and_is_safe_twice(self) -> None:
        """`close` with nothing handed returns at once, and a second `close` too."""

        async def main() -> None:
            work = Serialised("test")
            await work.close()
            await work.close()

        asyncio.run(main())

    def test_a_cancelled_close_cancels_the_piece_and_closes_those_not_started(self) -> None:
        """A `close` cancelled (a timeout) cancels the running piece; the rest never start."""
        waiting: list[Coroutine[Any, Any, None]] = []
        started: list[str] = []

        async def forever() -> None:
            started.append("forever")
            await asyncio.Event().wait()

        async def never() -> None:
            started.append("never")

        async def main() -> set[asyncio.Task[object]]:
            work = Serialised("test")
            work.run(forever())
            waiting.append(never())
            work.run(waiting[0])
            await asyncio.sleep(0)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(work.close(), 0.05)
            await asyncio.sleep(0)
            return others()

        assert asyncio.run(main()) == set()
        assert started == ["forever"]
        assert inspect.getcoroutinestate(waiting[0]) == inspect.CORO_CLOSED
