"""The session in-process (the shipped rig, the real transport), on a real pty with the
real simulator: logs, counters, taps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs
from support import SimProc

from verld.config import parse_config
from verld.links.link import LinkState, Transition
from verld.session.calls import Call, CallResult
from verld.session.session import Session
from verld.testing.session import SessionRig

pytestmark = pytest.mark.timeout(30)


async def with_session(sim: SimProc, body: Any, debug: bool = False) -> list[Transition]:
    cfg = parse_config(
        f"device: {{port: {sim.link}, timeout: 1.0, retry: 0}}\n"
        "heartbeat: {interval: 0.2, misses: 3, timeout: 0.5}\n"
        "reconnect: {initial: 0.05, max: 0.2}\n"
    )
    rig = SessionRig(cfg, clock=asyncio.get_running_loop(), port=sim.link)
    session, supervisor, seen = rig.session, rig.supervisor, rig.transitions
    session.set_debug(debug)
    runner = asyncio.create_task(supervisor.run())
    try:
        for _ in range(200):
            if session.link.state is LinkState.UP:
                break
            await asyncio.sleep(0.01)
        await body(session)
    finally:
        await supervisor.close(1.0)
        runner.cancel()
        try:
            await runner
        except asyncio.CancelledError:
            pass
    return seen


async def call(session: Session, payload: bytes, **kw: Any) -> CallResult:
    fut: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()
    session.submit(
        Call(
            "me",
            payload,
            fut.set_result,
            timeout=kw.get("timeout", 1.0),
            retry=kw.get("retry", 0),
            req_id=kw.get("req_id"),
        )
    )
    return await fut


class TestSession:
    def test_link_up_is_logged_with_generation(self, sim: SimProc) -> None:
        """Coming up logs link_up at INFO with the port and generation 1."""

        async def body(session: Session) -> None:
            assert session.link.state is LinkState.UP

        with capture_logs() as logs:
            seen = asyncio.run(with_session(sim, body))
        up = [e for e in logs if e["event"] == "link_up"]
        assert up and up[0]["generation"] == 1 and up[0]["log_level"] == "info"
        assert [t.state for t in seen][:2] == [LinkState.CONNECTING, LinkState.UP]

    def test_debug_logs_the_call_chain(self, sim: SimProc) -> None:
        """At DEBUG a call logs received, sent and done, with its request id and ms."""
        # Nothing else waits and the window has room, so it goes straight out: no
        # `call_queued` line (a call that has to wait logs one).

        async def body(session: Session) -> None:
            assert (await call(session, b"\x01hi", req_id=42)).data == b"hi"

        with capture_logs() as logs:
            asyncio.run(with_session(sim, body, debug=True))
        chain = [e["event"] for e in logs if e.get("request_id") == 42]
        assert chain == ["call_received", "call_sent", "call_done"]
        assert "ms" in next(e for e in logs if e["event"] == "call_done")

    def test_no_per_call_lines_without_debug(self, sim: SimProc) -> None:
        """Without DEBUG, a call writes no log line at all (the hot path stays quiet)."""

        async def body(session: Session) -> None:
            await call(session, b"\x01hi", req_id=7)

        with capture_logs() as logs:
            asyncio.run(with_session(sim, body))
        assert not [e for e in logs if e.get("request_id") == 7]

    def test_heartbeat_pings_an_idle_link(self, sim: SimProc) -> None:
        """An idle link is pinged every heartbeat.interval; pings are not counted as calls."""

        async def body(session: Session) -> None:
            await asyncio.sleep(0.7)
            assert session.counters.pings >= 3
            assert session.counters.calls == 0

        asyncio.run(with_session(sim, body))

    def test_traffic_tap_sees_both_directions(self, sim: SimProc) -> None:
        """The traffic tap gets the request and its reply with the same seq."""
        frames: list[tuple[str, str, int | None, int | None, bytes]] = []

        async def body(session: Session) -> None:
            session.set_taps(lambda *f: frames.append(f), None)
            await call(session, b"\x01ab")
            session.set_taps(None, None)

        asyncio.run(with_session(sim, body))
        tx = [f for f in frames if f[0] == "tx" and f[1] == "request"]
        rx = [f for f in frames if f[0] == "rx" and f[1] == "reply"]
        assert tx[0][4] == b"\x01ab" and rx[0][2] == tx[0][2] and rx[0][4] == b"ab"
