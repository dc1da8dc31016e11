"""verld-mqtt's task ownership: `Tasks` (a TaskGroup that can be ended), and a device
loop that leaves no task behind when it is cancelled."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from verld.mqtt.device import Device
from verld.mqtt.outbox import Outbox
from verld.mqtt.tasks import Tasks
from verld.mqtt.topics import Topics


def others() -> set[asyncio.Task[object]]:
    """The tasks running besides the test's own."""
    return asyncio.all_tasks() - {asyncio.current_task()}


class TestTasks:
    def test_cancel_ends_tasks_that_run_until_cancelled(self) -> None:
        """cancel() ends the owner's endless tasks, and its block awaits them all."""

        async def main() -> tuple[bool, set[asyncio.Task[object]]]:
            async with Tasks() as tasks:
                forever = tasks.start(asyncio.Event().wait(), name="forever")
                await asyncio.sleep(0)
                tasks.cancel()
            return forever.cancelled(), others()

        assert asyncio.run(main()) == (True, set())

    def test_the_block_awaits_tasks_that_end_on_their_own(self) -> None:
        """Without cancel(), the block ends when every task it started has ended."""

        async def main() -> list[int]:
            done: list[int] = []

            async def work(n: int) -> None:
                await asyncio.sleep(0.01 * n)
                done.append(n)

            async with Tasks() as tasks:
                for n in (3, 1, 2):
                    tasks.start(work(n))
            return done

        assert asyncio.run(main()) == [1, 2, 3]

    def test_a_failing_task_cancels_the_rest_and_is_raised_in_a_group(self) -> None:
        """A task's error cancels its siblings and the block, and comes out as a group."""
        siblings: list[asyncio.Task[bool]] = []

        async def fail() -> None:
            raise OSError("broken")

        async def main() -> None:
            async with Tasks() as tasks:
                siblings.append(tasks.start(asyncio.Event().wait()))
                tasks.start(fail())
                await asyncio.Event().wait()

        with pytest.raises(ExceptionGroup) as info:
            asyncio.run(main())
        assert info.group_contains(OSError, match="broken")
        assert siblings[0].cancelled()

    def test_len_counts_the_tasks_still_running(self) -> None:
        """len() is the number of the owner's tasks that have not ended yet."""

        async def main() -> tuple[int, int]:
            async with Tasks() as tasks:
                tasks.start(asyncio.sleep(0))
                tasks.start(asyncio.Event().wait())
                started = len(tasks)
                await asyncio.sleep(0.01)
                running = len(tasks)
                tasks.cancel()
            return started, running

        assert asyncio.run(main()) == (2, 1)


def test_a_device_cancelled_while_connecting_closes_its_client(tmp_path: Path) -> None:
    """A device loop cancelled before verld answers hello leaves no reader task behind."""
    path = str(tmp_path / "mute.sock")

    async def main() -> set[asyncio.Task[object]]:
        silent: list[asyncio.StreamWriter] = []
        asked = asyncio.Event()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            silent.append(writer)
            await reader.read(1)  # (the hello: the client and its reader task are up)
            asked.set()  # (and never answered)

        server = await asyncio.start_unix_server(accept, path)
        device = Device("dev", path, Topics("verld/test"), Outbox(), status_interval=0)
        loop = asyncio.create_task(device.run())
        await asyncio.wait_for(asked.wait(), 5.0)
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        left = others()
        for writer in silent:
            writer.close()
        server.close()
        await server.wait_closed()
        return left

    assert asyncio.run(main()) == set()
