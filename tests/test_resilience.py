"""Link resilience: every fault of verld-sim (and a few it cannot make) against a real daemon.

Each test runs the real simulator (or a tiny pty peer of its own) and the real
daemon on real ptys / sockets, injects one fault through the sim's control
socket and checks what a client sees: error codes, `link` events, generations,
timing bounds from the config, and that the daemon neither restarts, leaks fds
nor spins. Margins are generous: the suite shares two cores with other runs.
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import json
import os
import pty
import selectors
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, wait_for, write_config

from verld.client import AsyncClient, Client, ClientError
from verld.codec.length import LengthDecoder
from verld.codec.length import encode as length_encode
from verld.testing import Processes

REPO = Path(__file__).resolve().parents[1]

# write_config's defaults, which the timing bounds below are derived from
HB_INTERVAL, HB_MISSES, HB_TIMEOUT = 1.0, 3, 0.5
RECONNECT_MAX = 0.5
MARGIN = 1.5  # scheduling slack on a busy two-core machine


def start(tmp_path: Path, port: str, **overrides: Any) -> DaemonProc:
    return DaemonProc(write_config(tmp_path, port, overrides))


def call_msg(req_id: int, data: bytes, **fields: Any) -> dict[str, Any]:
    return {"op": "call", "id": req_id, "data": base64.b64encode(data).decode(), **fields}


def delay_call(ms: int, tag: bytes) -> bytes:
    """verld-sim's `delay` command: answer `tag` after `ms` milliseconds."""
    return b"\x03" + struct.pack(">H", ms) + tag


def error_code(c: Client, data: bytes, **kw: Any) -> str:
    """The error code a call fails with (the call must fail)."""
    with pytest.raises(ClientError) as info:
        c.call(data, **kw)
    return info.value.code


def next_link_event(sub: Client) -> dict[str, Any]:
    for ev in sub.events():
        if ev["event"] == "link":
            return ev
    raise AssertionError("event stream ended")


def wait_link_event(sub: Client, state: str) -> tuple[dict[str, Any], list[str]]:
    """Read link events until one in `state`; that event and the states seen before it."""
    seen: list[str] = []
    while True:
        ev = next_link_event(sub)
        if ev["state"] == state:
            return ev, seen
        seen.append(ev["state"])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def echo_many(socket_path: str, tags: list[bytes], **kw: Any) -> list[bytes]:
    """Concurrent echo calls, one per tag; the data each got back, in order."""
    async with AsyncClient(socket_path) as c:
        replies = await asyncio.gather(*(c.call(b"\x01" + tag, **kw) for tag in tags))
    return [r.data for r in replies]


def unique_tags(n: int, size: int = 24) -> list[bytes]:
    return [f"call-{i}-".encode() + os.urandom(size) for i in range(n)]


class TestUnplug:
    @pytest.mark.timeout(30)
    def test_in_flight_call_fails_link_down_within_a_second(
        self, daemon: DaemonProc, sim: SimProc
    ) -> None:
        """A call on the link when the device is pulled fails with link_down within ~1 s."""
        c = daemon.client()
        c.send(call_msg(1, delay_call(5000, b"slow"), timeout=10))
        wait_for(lambda: sim.control("status")["counters"]["requests"] >= 2, 5, "request sent")
        t0 = time.monotonic()
        sim.control("unplug 0")
        reply = c.receive()
        elapsed = time.monotonic() - t0
        assert (reply["id"], reply["ok"], reply["error"]["code"]) == (1, False, "link_down")
        assert elapsed < 1.0 + MARGIN / 2

    @pytest.mark.timeout(30)
    def test_new_calls_fail_link_down_at_once(self, daemon: DaemonProc, sim: SimProc) -> None:
        """While the device is out, a new call fails with link_down immediately."""
        sim.control("unplug 0")
        daemon.wait_state("down", 5)
        c = daemon.client()
        t0 = time.monotonic()
        assert error_code(c, b"\x01x", timeout=5) == "link_down"
        assert time.monotonic() - t0 < 1.0  # at once, not after the 5 s timeout

    @pytest.mark.timeout(30)
    def test_subscriber_sees_down_connecting_up(self, daemon: DaemonProc, sim: SimProc) -> None:
        """A link subscriber sees down (old generation), connecting, then up (next generation)."""
        sub = daemon.client()
        sub.subscribe(["link"])
        sim.control("unplug 0")
        down = next_link_event(sub)
        assert (down["state"], down["generation"]) == ("down", 1)
        assert down["reason"]
        assert next_link_event(sub)["state"] == "connecting"
        sim.control("replug")
        up, before = wait_link_event(sub, "up")
        assert up["generation"] == 2
        assert set(before) <= {"down", "connecting"}

    @pytest.mark.timeout(30)
    def test_replug_is_up_within_reconnect_max(self, daemon: DaemonProc, sim: SimProc) -> None:
        """After a long outage (backoff at its cap) a replug is up within reconnect.max + margin."""
        sub = daemon.client()
        sub.subscribe(["link"])
        sim.control("unplug 0")
        time.sleep(4 * RECONNECT_MAX)  # let the backoff reach its cap
        t0 = time.monotonic()
        sim.control("replug")
        up, _ = wait_link_event(sub, "up")
        assert time.monotonic() - t0 < RECONNECT_MAX + MARGIN
        assert up["generation"] == 2
        r = daemon.client().call(b"\x01back")
        assert (r.data, r.generation) == (b"back", 2)

    @pytest.mark.timeout(30)
    @pytest.mark.parametrize("codec", ["length", "line"])
    def test_replug_on_the_other_codecs(self, tmp_path: Path, codec: str) -> None:
        """length and line links come back after an unplug too, with the next generation."""
        overrides: dict[str, Any] = {"device": {"codec": codec}}
        if codec == "line":
            overrides["heartbeat"] = {"payload": "PING"}
        with (
            SimProc(tmp_path, codec=codec) as sim,
            DaemonProc(write_config(tmp_path, sim.link, overrides)) as d,
        ):
            request = b"\x01abc" if codec == "length" else b"ECHO abc"
            c = d.client()
            assert c.call(request).data == b"abc"
            sim.control("unplug 0")
            d.wait_state("down", 5)
            assert error_code(c, request) == "link_down"
            sim.control("replug")
            d.wait_state("up", 5, min_generation=2)
            assert c.call(request).data == b"abc"

    @pytest.mark.timeout(30)
    def test_power_cycle_comes_back_by_itself(self, daemon: DaemonProc, sim: SimProc) -> None:
        """A short power cycle (unplug with automatic replug) is a new generation, no restart."""
        sim.control("unplug 0.3")
        daemon.wait_state("up", 5, min_generation=2)
        r = daemon.client().call(b"\x01on")
        assert (r.data, r.generation) == (b"on", 2)

    @pytest.mark.timeout(60)
    def test_twenty_cycles_no_restart_no_fd_leak(self, tmp_path: Path, sim: SimProc) -> None:
        """20 unplug/replug cycles: same process, generation 21, calls work, fd count stable."""
        with start(tmp_path, sim.link, reconnect={"initial": 0.02, "max": 0.1}) as d:
            c = d.client()
            assert c.call(b"\x01warm").data == b"warm"
            baseline = d.fd_count()
            for cycle in range(2, 22):
                sim.control("unplug 0")
                d.wait_state("down", 5, min_generation=cycle - 1)
                sim.control("replug")
                d.wait_state("up", 5, min_generation=cycle)
                assert c.call(b"\x01" + bytes([cycle])).generation == cycle
            assert d.proc.poll() is None
            wait_for(lambda: d.fd_count() == baseline, 3, f"fd count back to {baseline}")
            assert d.status()["counters"]["reconnects"] == 20


class TestHang:
    @pytest.mark.timeout(30)
    def test_idle_hang_is_down_within_heartbeat_bound(
        self, daemon: DaemonProc, sim: SimProc
    ) -> None:
        """An idle device that stops answering is down within interval + misses × timeout."""
        sub = daemon.client()
        sub.subscribe(["link"])
        t0 = time.monotonic()
        sim.control("hang")
        down = next_link_event(sub)
        elapsed = time.monotonic() - t0
        assert (down["state"], down["generation"]) == ("down", 1)
        assert "not answering" in down["reason"]
        assert elapsed >= (HB_MISSES - 1) * HB_TIMEOUT  # pings did time out
        assert elapsed < HB_INTERVAL + HB_MISSES * HB_TIMEOUT + MARGIN

    @pytest.mark.timeout(30)
    def test_recovers_after_unhang(self, daemon: DaemonProc, sim: SimProc) -> None:
        """A hung device that answers again brings the link back with a new generation."""
        sim.control("hang")
        daemon.wait_state("down", 10)
        sim.control("unhang")
        daemon.wait_state("up", 5, min_generation=2)
        assert daemon.client().call(b"\x01alive").data == b"alive"

    @pytest.mark.timeout(30)
    def test_hang_under_load_is_down_after_misses_timeouts(self, tmp_path: Path) -> None:
        """With no ping, `misses` timed-out calls in a row, no byte back, declare the link dead."""
        # Not fewer. (A line device without heartbeat.payload has no ping; verl always has.)
        device = {"codec": "line", "retry": 0}
        with (
            SimProc(tmp_path, codec="line") as sim,
            start(tmp_path, sim.link, heartbeat={"interval": 0}, device=device) as d,
        ):
            sub = d.client()
            sub.subscribe(["link"])
            c = d.client()
            assert c.call("ECHO ok").text == "ok"
            sim.control("hang")
            for _ in range(HB_MISSES - 1):
                assert error_code(c, b"ECHO x", timeout=0.3) == "timeout"
                assert d.status()["link"]["state"] == "up"
            assert error_code(c, b"ECHO x", timeout=0.3) == "timeout"
            down = next_link_event(sub)
            assert (down["state"], down["generation"]) == ("down", 1)
            assert f"{HB_MISSES} calls in a row timed out" in down["reason"]
            assert d.status()["counters"]["timeouts"] == HB_MISSES
            sim.control("unhang")
            d.wait_state("up", 5, min_generation=2)

    @pytest.mark.timeout(30)
    def test_pipelined_calls_during_hang_all_end(self, tmp_path: Path, sim: SimProc) -> None:
        """Calls filling the window when the device hangs each end with timeout or link_down."""
        with start(tmp_path, sim.link, heartbeat={"interval": 0}) as d:
            sim.control("hang")
            tags = unique_tags(30)

            async def run() -> list[str]:
                async with AsyncClient(d.socket) as c:
                    results = await asyncio.wait_for(
                        asyncio.gather(
                            *(c.call(b"\x01" + t, timeout=0.4, retry=1) for t in tags),
                            return_exceptions=True,
                        ),
                        15,
                    )
                return [r.code if isinstance(r, ClientError) else repr(r) for r in results]

            codes = asyncio.run(run())
            assert set(codes) <= {"timeout", "link_down"}
            assert "link_down" in codes
            assert d.status()["link"]["state"] in ("down", "connecting")

    @pytest.mark.timeout(30)
    def test_call_queued_behind_a_timed_out_ping_is_sent(
        self, tmp_path: Path, sim: SimProc
    ) -> None:
        """With window 1, a call queued behind an unanswered heartbeat ping goes out after it."""
        with start(
            tmp_path,
            sim.link,
            device={"window": 1},
            heartbeat={"interval": 0.3, "timeout": 1.0, "misses": 3},
        ) as d:
            c = Client(d.socket, timeout=5.0).connect()
            assert c.call(b"\x01warm").data == b"warm"
            sim.control("hang")
            sent = sim.control("status")["counters"]["requests"]
            wait_for(lambda: sim.control("status")["counters"]["requests"] > sent, 5, "a ping")
            c.send(call_msg(1, b"\x01queued", timeout=1.0))  # waits: the ping fills the window
            sim.control("unhang")
            try:
                reply = c.receive()  # due about 1 s later, once the ping has timed out
            finally:
                c.close()
            assert (reply["id"], reply["ok"]) == (1, True)


class TestLineNoise:
    @pytest.mark.timeout(30)
    def test_latency_and_jitter_calls_succeed(self, daemon: DaemonProc, sim: SimProc) -> None:
        """With 50 ms latency and 150 ms jitter (replies overtake), each call gets its own data."""
        sim.control("set latency 50")
        sim.control("set jitter 150")
        tags = unique_tags(40)
        assert asyncio.run(echo_many(daemon.socket, tags, timeout=2.0)) == tags
        assert daemon.status()["counters"]["stale"] == 0

    @pytest.mark.timeout(30)
    def test_drop_is_recovered_by_retries(self, tmp_path: Path, sim: SimProc) -> None:
        """With 30 % of requests dropped, retries get every call its own reply; none misrouted."""
        with start(tmp_path, sim.link, heartbeat={"misses": 1000}, api={"max_retry": 20}) as d:
            sim.control("set drop 0.3")
            tags = unique_tags(40)
            assert asyncio.run(echo_many(d.socket, tags, timeout=0.3, retry=20)) == tags
            assert d.status()["counters"]["retries"] > 0

    @pytest.mark.timeout(30)
    def test_corrupt_replies_are_counted_never_delivered(
        self, tmp_path: Path, sim: SimProc
    ) -> None:
        """Corrupted replies fail their CRC: counted as bad_frames, retried, no wrong data."""
        with start(tmp_path, sim.link, heartbeat={"misses": 1000}, api={"max_retry": 20}) as d:
            sim.control("set corrupt 0.3")
            tags = unique_tags(40)
            assert asyncio.run(echo_many(d.socket, tags, timeout=0.3, retry=20)) == tags
            assert sim.control("status")["counters"]["corrupted"] > 0
            assert d.status()["counters"]["bad_frames"] > 0

    @pytest.mark.timeout(30)
    def test_garbage_bursts_never_give_a_wrong_reply(
        self, daemon: DaemonProc, sim: SimProc
    ) -> None:
        """Random bytes before replies and large bursts between them: every reply is right."""
        sim.control("set garbage 0.5")
        for _ in range(3):
            sim.control("garbage 5000")
            tags = unique_tags(20)
            assert asyncio.run(echo_many(daemon.socket, tags, timeout=1.0, retry=5)) == tags
        assert sim.control("status")["counters"]["garbage_bursts"] > 3
        assert daemon.status()["counters"]["bad_frames"] > 0

    @pytest.mark.timeout(30)
    def test_slow_baud_calls_succeed(self, daemon: DaemonProc, sim: SimProc) -> None:
        """At 9600 baud (paced by the sim) 100-byte echoes arrive intact, taking line time."""
        sim.control("set baud 9600")
        c = daemon.client()
        for _ in range(3):
            body = os.urandom(100)
            r = c.call(b"\x01" + body, timeout=3.0)
            assert r.data == body
            assert r.ms > 50  # ~110 wire bytes at 960 B/s: the pacing is real
        tags = unique_tags(8, 100)
        assert asyncio.run(echo_many(daemon.socket, tags, timeout=5.0)) == tags


class LengthPeer:
    """A tiny `length` device on a pty that can put the stream out of step on request.

    Pings and `01` echoes are answered; request `09` is answered by a length far
    above max_payload, `0a` by an empty reply (both a desync for the daemon).
    """

    def __init__(self, link: str) -> None:
        self.link = link
        self.master, self._slave = pty.openpty()  # our slave fd keeps the master from EIO
        os.set_blocking(self.master, False)
        os.symlink(os.ttyname(self._slave), link)
        self._stop = threading.Event()
        self._decoder = LengthDecoder(1 << 20)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self.master, selectors.EVENT_READ)
            while not self._stop.is_set():
                if not sel.select(0.05):
                    continue
                try:
                    data = os.read(self.master, 65536)
                except (BlockingIOError, OSError):
                    continue
                for request in self._decoder.feed(data):
                    os.write(self.master, self._answer(request))

    @staticmethod
    def _answer(request: bytes) -> bytes:
        if request == b"\x09":
            return b"\xff\xff\xff\xff" + os.urandom(16)
        if request == b"\x0a":
            return b"\x00\x00\x00\x00"
        return length_encode(b"\x00" + request[1:])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        os.unlink(self.link)
        os.close(self.master)
        os.close(self._slave)


class TestOtherLinks:
    @pytest.mark.timeout(30)
    def test_device_absent_at_start_comes_up_when_it_appears(
        self, tmp_path: Path, procs: Processes
    ) -> None:
        """verld started before its device keeps retrying and comes up when it appears."""
        link = str(tmp_path / "dev.tty")
        d = procs.daemon(write_config(tmp_path, link), wait_up=False)
        time.sleep(1.0)
        st = d.status()["link"]
        assert st["state"] in ("down", "connecting")
        assert st["generation"] == 0
        assert "open failed" in st["reason"]
        sim = procs.sim(tmp_path)
        assert sim.link == link
        d.wait_state("up", RECONNECT_MAX + MARGIN + 1, min_generation=1)
        assert d.client().call(b"\x01here").data == b"here"
        assert d.proc.poll() is None

    @pytest.mark.timeout(30)
    def test_port_locked_by_another_process_is_retried(
        self, tmp_path: Path, sim: SimProc, procs: Processes
    ) -> None:
        """A port held (flock) by another program is retried until it is released."""
        fd = os.open(sim.link, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            d = procs.daemon(write_config(tmp_path, sim.link), wait_up=False)
            time.sleep(1.0)
            link = d.status()["link"]
            assert (link["state"], link["generation"]) != ("up", 1)
            assert "locked" in link["reason"]
            os.close(fd)
            fd = -1
            d.wait_state("up", RECONNECT_MAX + MARGIN + 1, min_generation=1)
        finally:
            if fd >= 0:
                os.close(fd)

    @pytest.mark.timeout(30)
    @pytest.mark.parametrize("trigger", [b"\x09", b"\x0a"], ids=["huge-length", "empty-reply"])
    def test_length_desync_reconnects(
        self, tmp_path: Path, trigger: bytes, procs: Processes
    ) -> None:
        """A length-codec stream out of step fails the call with link_down and reopens the link."""
        peer = procs.own(LengthPeer(str(tmp_path / "dev.tty")))
        with start(tmp_path, peer.link, device={"codec": "length"}) as d:
            sub = d.client()
            sub.subscribe(["link"])
            c = d.client()
            assert c.call(b"\x01before").data == b"before"
            assert error_code(c, trigger, timeout=2.0) == "link_down"
            down = next_link_event(sub)
            assert (down["state"], down["generation"]) == ("down", 1)
            assert "out of step" in down["reason"]
            up, _ = wait_link_event(sub, "up")
            assert up["generation"] == 2
            assert c.call(b"\x01after").data == b"after"

    @pytest.mark.timeout(30)
    def test_tcp_link_survives_a_dropped_connection(self, tmp_path: Path) -> None:
        """On tcp://, the device closing the connection is a loss; verld reconnects by itself."""
        with SimProc(tmp_path, tcp=True) as sim, start(tmp_path, sim.address) as d:
            sub = d.client()
            sub.subscribe(["link"])
            c = d.client()
            assert c.call(b"\x01tcp").generation == 1
            sim.control("unplug 0")
            down = next_link_event(sub)
            assert (down["state"], down["generation"]) == ("down", 1)
            assert error_code(c, b"\x01x") == "link_down"
            sim.control("replug")
            up, _ = wait_link_event(sub, "up")
            assert up["generation"] == 2
            r = c.call(b"\x01again")
            assert (r.data, r.generation) == (b"again", 2)

    @pytest.mark.timeout(30)
    def test_tcp_events_before_the_handshake_reply_are_dropped(self, tmp_path: Path) -> None:
        """On tcp://, device events arriving before the handshake reply never reach clients."""
        with SimProc(tmp_path, tcp=True) as sim, start(tmp_path, sim.address) as d:
            sub = d.client()
            sub.subscribe(["link", "events"])
            sim.control("hang")  # the handshake pings go unanswered: verld keeps connecting
            down = next_link_event(sub)
            assert down["state"] == "down"
            for _ in range(30):
                sim.control("event 6561726c79")  # "early", on whatever connection is open
                time.sleep(0.05)
            sim.control("unhang")
            early = []
            for ev in sub.events():
                if ev["event"] == "link" and ev["state"] == "up":
                    break
                if ev["event"] == "device":
                    early.append(ev)
            assert early == []


class TestOutage:
    @pytest.mark.timeout(30)
    def test_wait_true_call_succeeds_after_replug(self, daemon: DaemonProc, sim: SimProc) -> None:
        """A call with wait: true sent during an outage is answered once the device is back."""
        sim.control("unplug 0")
        daemon.wait_state("down", 5)
        c = daemon.client()
        c.send(call_msg(7, b"\x01patient", wait=True, timeout=8))
        time.sleep(0.5)
        sim.control("replug")
        reply = c.receive()
        assert (reply["id"], reply["ok"], reply["generation"]) == (7, True, 2)
        assert base64.b64decode(reply["data"]) == b"patient"

    @pytest.mark.timeout(30)
    def test_wait_true_call_fails_link_down_after_its_timeout(
        self, daemon: DaemonProc, sim: SimProc
    ) -> None:
        """A waiting call whose timeout passes with the link still down fails link_down then."""
        sim.control("unplug 0")
        daemon.wait_state("down", 5)
        c = daemon.client()
        t0 = time.monotonic()
        assert error_code(c, b"\x01x", wait=True, timeout=0.6) == "link_down"
        assert 0.5 <= time.monotonic() - t0 < 0.6 + MARGIN

    @pytest.mark.timeout(30)
    def test_no_busy_loop_while_down(self, daemon: DaemonProc, sim: SimProc) -> None:
        """During a 2 s outage the daemon uses little CPU: no spinning on a hung-up fd."""
        sim.control("unplug 0")
        daemon.wait_state("down", 5)
        before = cpu_seconds(daemon.pid)
        time.sleep(2.0)
        used = cpu_seconds(daemon.pid) - before
        sim.control("replug")
        assert used < 0.5
        daemon.wait_state("up", 5, min_generation=2)


class TestSoak:
    @pytest.mark.timeout(90)
    def test_short_soak_all_faults(self, tmp_path: Path) -> None:
        """4 clients × 15 s under every fault: nothing misrouted or lost, no crash, RSS bounded."""
        out = tmp_path / "soak.json"
        args = ["--clients", "4", "--seconds", "15", "--faults", "all", "--seed", "1", "--json"]
        path = os.pathsep.join(filter(None, [str(REPO / "tools"), os.environ.get("PYTHONPATH")]))
        proc = subprocess.run(
            [sys.executable, "-m", "soaklib", *args, str(out)],  # what tools/soak runs
            env={**os.environ, "PYTHONPATH": path},
            capture_output=True,
            text=True,
            timeout=80,
            check=False,
        )
        assert out.exists(), proc.stdout + proc.stderr
        report: dict[str, Any] = json.loads(out.read_text())
        assert report["calls"] > 100, report
        assert report["outcomes"]["ok"] > 0, report
        assert report["misrouted"] == 0, report
        assert report["no_reply"] == 0 and report["duplicates"] == 0, report
        assert report["daemon_died"] is False, report
        assert report["rss_kb"]["growth_after_warmup"] < 20 * 1024, report
        assert proc.returncode == 0, proc.stdout + proc.stderr
