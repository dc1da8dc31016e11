"""A crashed task takes a real verld process down: logged, drained, socket removed, exit 1.

The crash is injected into a real daemon: a `python -c` script wraps
`verld.session.supervisor.Supervisor.run` so that the real connect loop runs (the link comes
up on the simulated device) until the test touches a trigger file, then the link's
task raises. Everything else is the unchanged `verld.daemon.main`.

(SIGTERM without a crash giving exit 0 is tests/test_e2e.py,
TestLifecycle.test_sigterm_exits_zero_and_removes_the_socket.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import SimProc, stop_process, wait_for, write_config

from verld.client import Client, Unreachable

CRASHING_DAEMON = """
import asyncio, os, sys
import verld.daemon, verld.session.supervisor

config, trigger = sys.argv[1], sys.argv[2]
real_run = verld.session.supervisor.Supervisor.run
connect_loops = []  # the real loops, kept referenced until they end

async def crashing_run(self):
    connect_loops.append(asyncio.ensure_future(real_run(self)))
    while not os.path.exists(trigger):
        await asyncio.sleep(0.01)
    raise RuntimeError("injected crash")

verld.session.supervisor.Supervisor.run = crashing_run
sys.exit(verld.daemon.main(["--config", config]))
"""

TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Crashed:
    """How the crashing daemon ended."""

    code: int
    stdout: str
    stderr: str
    records: list[dict[str, Any]]  #: stderr, one JSON record per line
    socket: str
    socket_was_served: bool

    def events(self) -> list[str]:
        return [str(r.get("event")) for r in self.records]

    def crash_records(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == "task_crashed"]


def run_crashing_daemon(tmp_path: Path, sim: SimProc, event_loop: str) -> Crashed:
    """Start the crashing daemon, wait for its link to be up, pull the trigger, wait for exit."""
    config = write_config(tmp_path, sim.link)
    socket_path: str = yaml.safe_load(config.read_text())["api"]["socket"]
    trigger = tmp_path / "crash-now"
    out_path, err_path = tmp_path / "verld.out", tmp_path / "verld.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHING_DAEMON, str(config), str(trigger)],
            stdout=out,
            stderr=err,
            env={**os.environ, "VERLD_EVENT_LOOP": event_loop},
        )
    try:

        def link_up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"verld exited early:\n{err_path.read_text()}")
            try:
                with Client(socket_path, timeout=2.0) as c:
                    return bool(c.status()["link"]["state"] == "up")
            except (OSError, Unreachable):  # not listening yet
                return False

        wait_for(link_up, 15.0, "verld's link to come up")
        served = os.path.exists(socket_path)
        trigger.touch()
        code = proc.wait(20)
    finally:
        stop_process(proc)
    stderr = err_path.read_text(errors="replace")
    lines = [line for line in stderr.splitlines() if line.strip()]
    records: list[dict[str, Any]] = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"a stderr line that is not a JSON log record: {line!r}\n{stderr}")
        assert isinstance(record, dict), line
        records.append(record)
    return Crashed(
        code=code,
        stdout=out_path.read_text(errors="replace"),
        stderr=stderr,
        records=records,
        socket=socket_path,
        socket_was_served=served,
    )


@pytest.fixture(scope="class", params=["uvloop", "asyncio"])
def crashed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Crashed:
    """A real verld (on each event loop) whose link task crashed; one run per class."""
    event_loop: str = request.param
    tmp = tmp_path_factory.mktemp(f"crash-{event_loop}")
    sim = SimProc(tmp)
    try:
        return run_crashing_daemon(tmp, sim, event_loop)
    finally:
        sim.stop()


@pytest.mark.timeout(60)
class TestTaskCrash:
    def test_exits_one(self, crashed: Crashed) -> None:
        """A crashed link task makes verld exit 1 (systemd's Restart=on-failure restarts it)."""
        assert crashed.code == 1, crashed.stderr

    def test_logs_task_crashed_with_the_error(self, crashed: Crashed) -> None:
        """The crash is one `task_crashed` record at level error naming the exception."""
        [record] = crashed.crash_records()
        assert record["level"] == "error"
        assert record["error"] == "RuntimeError('injected crash')"
        assert "injected crash" in crashed.stderr

    def test_drains_and_stops_in_order_after_the_crash(self, crashed: Crashed) -> None:
        """After the crash verld drains (`stopping`), closes the link, and `stopped` is last."""
        events = crashed.events()
        assert "ready" in events and "link_up" in events
        crash = events.index("task_crashed")
        assert events.index("link_up") < crash
        after = events[crash + 1 :]
        assert after[0] == "stopping"
        assert "link_closed" in after
        assert after[-1] == "stopped"

    def test_removes_the_api_socket(self, crashed: Crashed) -> None:
        """The API socket file, served until the crash, is gone after exit."""
        assert crashed.socket_was_served
        assert not os.path.exists(crashed.socket)

    def test_only_structured_records_reach_stderr(self, crashed: Crashed) -> None:
        """stderr holds JSON records only: no raw traceback, none outside the crash record."""
        assert crashed.stdout == ""
        # (every line parsed as a JSON record in run_crashing_daemon)
        others = [r for r in crashed.records if r.get("event") != "task_crashed"]
        assert not [r for r in others if TRACEBACK in json.dumps(r)]
        assert crashed.stderr.count(TRACEBACK) <= len(crashed.crash_records())
        assert not [r for r in others if r.get("level") == "error"]

    def test_crash_record_carries_the_traceback(self, crashed: Crashed) -> None:
        """The task_crashed record holds the traceback, down to the line that raised."""
        [record] = crashed.crash_records()
        text = json.dumps(record)
        assert TRACEBACK in text and "crashing_run" in text
