"""verld.testing's owner of a test's processes: `Processes` (the `procs` fixture)."""

from __future__ import annotations

import sys

import pytest

from verld.testing import Processes, running

pytestmark = pytest.mark.timeout(30)


class Thing:
    """A stand-in for a rig: its stop is recorded in `log`, or fails with `fails`."""

    def __init__(self, name: str, log: list[str], fails: bool = False) -> None:
        self.name, self.log, self.fails = name, log, fails

    def stop(self) -> None:
        self.log.append(self.name)
        if self.fails:
            raise RuntimeError(f"{self.name} would not stop")


class TestProcesses:
    def test_stops_what_it_owns_newest_first(self) -> None:
        """At the end of its with block each thing it owns is stopped, the newest first."""
        log: list[str] = []
        with Processes() as owner:
            first = owner.own(Thing("sim", log))
            owner.own(Thing("daemon", log))
            assert first.name == "sim" and log == []
        assert log == ["daemon", "sim"]

    def test_stops_them_all_when_the_block_fails(self) -> None:
        """A with block ended by an exception still stops everything, and the exception stands."""
        log: list[str] = []
        with pytest.raises(ZeroDivisionError), Processes() as owner:
            owner.own(Thing("sim", log))
            _ = 1 / 0
        assert log == ["sim"]

    def test_one_failed_stop_keeps_none_of_the_others_running(self) -> None:
        """A stop that fails does not keep the others from stopping; its error comes after."""
        log: list[str] = []
        owner = Processes()
        owner.own(Thing("a", log))
        owner.own(Thing("b", log, fails=True))
        owner.own(Thing("c", log))
        with pytest.raises(RuntimeError, match="b would not stop"):
            owner.stop()
        assert log == ["c", "b", "a"]
        owner.stop()  # nothing left: a second stop stops nothing again
        assert log == ["c", "b", "a"]

    def test_popen_is_reaped_and_leaves_the_registry(self) -> None:
        """A program started by `popen` is one of `running()` until the owner stops it."""
        with Processes() as owner:
            proc = owner.popen([sys.executable, "-c", "import time; time.sleep(60)"])
            assert proc.pid in running() and proc.poll() is None
        assert proc.returncode is not None and proc.pid not in running()
