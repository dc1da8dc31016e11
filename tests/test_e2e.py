"""verld end to end: real verld-sim on a real pty, real daemon, real Unix socket."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, wait_for, write_config

from verld.client import Client, ClientError, RemoteFailure

pytestmark = pytest.mark.timeout(60)


def raw_send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack(">I", len(payload)) + payload)


def raw_recv(sock: socket.socket) -> dict[str, Any]:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    (n,) = struct.unpack(">I", exact(4))
    msg: dict[str, Any] = json.loads(exact(n))
    return msg


class TestCalls:
    def test_status_shows_link_up(self, daemon: DaemonProc, sim: SimProc) -> None:
        """Once the handshake ping is answered, status says up, generation 1, on the sim's port."""
        st = daemon.status()
        assert st["link"]["state"] == "up"
        assert st["link"]["generation"] == 1
        assert st["link"]["port"] == sim.link
        assert st["clients"] == 1

    def test_echo(self, daemon: DaemonProc) -> None:
        """An echo call returns status 0 and the echoed bytes."""
        r = daemon.client().call(bytes.fromhex("01aabb"))
        assert (r.status, r.data, r.generation) == (0, b"\xaa\xbb", 1)

    @pytest.mark.parametrize("size", [0, 1, 253, 254, 255, 1000, 4095])
    def test_binary_payloads_echo_exactly(self, daemon: DaemonProc, size: int) -> None:
        """Payloads of zeros, 0xFF and random bytes up to max_payload come back unchanged."""
        c = daemon.client()
        for body in (bytes(size), b"\xff" * size, os.urandom(size)):
            assert c.call(b"\x01" + body).data == body

    def test_device_statuses_map_to_errors(self, daemon: DaemonProc) -> None:
        """0xFF is remote_failure, other non-zero statuses are device_error with status and data."""
        c = daemon.client()
        assert c.call(b"\x05\x07xy").status == 7
        c.send({"op": "call", "id": "f", "data": base64.b64encode(b"\x04").decode()})
        msg = c.receive()
        assert msg["error"]["code"] == "remote_failure"
        assert msg["status"] == 0xFF

    def test_execute_keeps_the_reference_shape(self, daemon: DaemonProc) -> None:
        """execute() returns {ok, data} / {ok: False, code, data} and raises on 0xFF."""
        c = daemon.client()
        assert c.execute({"action": "echo", "params": "hi"}) == {"ok": True, "data": b"hi"}
        assert c.execute({"action": "ping", "params": {}}) == {"ok": True, "data": b""}
        assert c.execute({"action": "status", "params": b"\x09"}) == {
            "ok": False,
            "code": 9,
            "data": b"",
        }
        with pytest.raises(RemoteFailure):
            c.execute({"action": "fail"})

    def test_too_large_call_keeps_the_connection(self, daemon: DaemonProc) -> None:
        """A call above max_payload gets too_large and the same connection still works."""
        c = daemon.client()
        with pytest.raises(ClientError) as info:
            c.call(b"\x01" + bytes(4096))
        assert info.value.code == "too_large"
        assert c.call(b"\x01ok").data == b"ok"

    def test_forty_clients_get_only_their_own_replies(self, daemon: DaemonProc) -> None:
        """40 concurrent clients with unique payloads: every reply goes to the caller that asked."""
        errors: list[str] = []

        def worker(n: int) -> None:
            c = Client(daemon.socket, timeout=20)
            try:
                for i in range(25):
                    body = f"client{n}-call{i}-".encode() + os.urandom(8)
                    got = c.call(b"\x01" + body).data
                    if got != body:
                        errors.append(f"{n}/{i}: {got!r} != {body!r}")
            finally:
                c.close()

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(50)
        assert errors == []
        assert daemon.status()["counters"]["calls_ok"] >= 1000

    def test_late_reply_is_stale_never_delivered(self, daemon: DaemonProc) -> None:
        """A reply arriving after its call timed out is stale: dropped, never given to the next."""
        c = daemon.client()
        with pytest.raises(ClientError) as info:
            c.call(b"\x03" + struct.pack(">H", 600) + b"late", timeout=0.2, retry=0)
        assert info.value.code == "timeout"
        r = c.call(b"\x03" + struct.pack(">H", 700) + b"mine", timeout=2)
        assert r.data == b"mine"
        wait_for(lambda: daemon.status()["counters"]["stale"] >= 1, 5, "stale count")

    def test_retry_resends_and_succeeds(self, tmp_path: Path, sim: SimProc) -> None:
        """With drop faults, a retried call still gets exactly one reply."""
        cfg = {"heartbeat": {"misses": 100}, "api": {"max_retry": 12}}
        with DaemonProc(write_config(tmp_path, sim.link, cfg)) as d:
            sim.control("set drop 0.5")
            c = d.client()
            ok = sum(c.call(b"\x01x", timeout=0.2, retry=12).status == 0 for _ in range(20))
            sim.control("reset")
            assert ok == 20
            assert d.status()["counters"]["retries"] > 0


class TestEvents:
    def test_device_events_reach_subscribers(self, daemon: DaemonProc) -> None:
        """Events the device emits are pushed to subscribers with the generation."""
        sub = daemon.client()
        sub.subscribe(["events"])
        daemon.client().call(b"\x06\x00\x03")
        got = []
        for ev in sub.events():
            got.append(ev)
            if len(got) == 3:
                break
        assert [base64.b64decode(e["data"]) for e in got] == [
            b"evt" + i.to_bytes(4, "big") for i in range(3)
        ]
        assert all(e["event"] == "device" and e["generation"] == 1 for e in got)

    def test_unplug_fails_calls_and_replug_comes_back(
        self, daemon: DaemonProc, sim: SimProc
    ) -> None:
        """Unplug: link_down to calls and a down event; on replug, up with generation 2."""
        sub = daemon.client()
        sub.subscribe(["link"])
        sim.control("unplug 0")
        ev = next(sub.events())
        assert (ev["event"], ev["state"], ev["generation"]) == ("link", "down", 1)
        with pytest.raises(ClientError) as info:
            daemon.client().call(b"\x01x")
        assert info.value.code == "link_down"
        sim.control("replug")
        daemon.wait_state("up", min_generation=2)
        assert daemon.client().call(b"\x01back").data == b"back"

    def test_wait_true_waits_for_the_link(self, daemon: DaemonProc, sim: SimProc) -> None:
        """A call with wait: true during an outage goes through once the link is back."""
        sim.control("unplug 0.5")
        daemon.wait_state("down", 5)
        r = daemon.client().call(b"\x01w", wait=True, timeout=5)
        assert (r.data, r.generation) == (b"w", 2)


class TestBadInput:
    def test_malformed_messages_get_errors_and_the_connection_stays(
        self, daemon: DaemonProc
    ) -> None:
        """Invalid JSON, non-objects, unknown ops and calls without data get the spec's errors."""
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(daemon.socket)
        try:
            cases: list[tuple[bytes, str, Any]] = [
                (b"\x00\xff garbage", "bad_request", None),
                (b"{not json", "bad_request", None),
                (b"[1, 2]", "bad_request", None),
                (b'{"op": "nope", "id": 3}', "unknown_op", 3),
                (b'{"op": "call", "id": "c"}', "bad_request", "c"),
                (b'{"op": "call", "id": 1.5, "data": ""}', "bad_request", None),
            ]
            for body, code, req_id in cases:
                raw_send(s, body)
                reply = raw_recv(s)
                assert (reply["ok"], reply["error"]["code"], reply["id"]) == (False, code, req_id)
            raw_send(s, b'{"op": "status", "id": 9}')
            assert raw_recv(s)["ok"] is True
        finally:
            s.close()

    def test_oversize_message_is_too_large_then_closed(self, daemon: DaemonProc) -> None:
        """A length above max_message gets too_large, then close; other clients are unaffected."""
        other = daemon.client()
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(daemon.socket)
        s.sendall(struct.pack(">I", 50_000_000))
        assert raw_recv(s)["error"]["code"] == "too_large"
        assert s.recv(10) == b""
        s.close()
        assert other.call(b"\x01still").data == b"still"


class TestLifecycle:
    def test_second_daemon_does_not_steal_the_socket(
        self, daemon: DaemonProc, tmp_path: Path
    ) -> None:
        """A second verld on a live socket path exits 1 with a clear message."""
        proc = subprocess.run(
            [sys.executable, "-m", "verld", "--config", str(daemon.config)],
            capture_output=True,
            check=False,
            text=True,
            timeout=20,
        )
        assert proc.returncode == 1
        assert "already serving" in proc.stdout + proc.stderr
        assert daemon.status()["link"]["state"] == "up"

    def test_stale_socket_file_is_replaced(self, tmp_path: Path, sim: SimProc) -> None:
        """A socket file left by a crashed run is replaced at start."""
        path = tmp_path / "verld.sock"
        dead = socket.socket(socket.AF_UNIX)
        dead.bind(str(path))
        dead.close()
        with DaemonProc(write_config(tmp_path, sim.link)) as d:
            assert d.status()["link"]["state"] == "up"
            assert d.stop() == 0

    def test_sigterm_exits_zero_and_removes_the_socket(self, daemon: DaemonProc) -> None:
        """SIGTERM stops verld with exit 0 and removes the socket file it created."""
        assert daemon.stop() == 0
        assert not os.path.exists(daemon.socket)

    def test_builtin_sim_port(self, tmp_path: Path) -> None:
        """device.port: sim spawns verld-sim on a pty and serves it like real hardware."""
        with DaemonProc(write_config(tmp_path, "sim")) as d:
            assert d.client().call(b"\x01demo").data == b"demo"
            assert d.status()["link"]["port"].endswith("tty")
            assert d.stop() == 0

    def test_builtin_sim_dies_with_verld(self, tmp_path: Path) -> None:
        """If verld is killed outright, its verld-sim child does not linger."""
        with DaemonProc(write_config(tmp_path, "sim")) as d:
            started = [json.loads(line) for line in d.log().splitlines() if "sim_started" in line]
            sim_pid = started[0]["pid"]
            d.stop(signal.SIGKILL)

        def gone() -> bool:
            try:
                with open(f"/proc/{sim_pid}/stat") as f:
                    return f.read().split()[2] == "Z"
            except FileNotFoundError:
                return True

        wait_for(gone, 10, "verld-sim to exit")


class TestOtherCodecs:
    @pytest.mark.parametrize("codec", ["length", "line"])
    def test_codec_round_trip(self, tmp_path: Path, codec: str) -> None:
        """The length and line codecs carry calls end to end."""
        overrides: dict[str, Any] = {"device": {"codec": codec, "line": {"error": "^ERROR"}}}
        if codec == "line":
            overrides["heartbeat"] = {"payload": "PING"}
        with (
            SimProc(tmp_path, codec=codec) as sim,
            DaemonProc(write_config(tmp_path, sim.link, overrides)) as d,
        ):
            c = d.client()
            if codec == "length":
                assert c.call(b"\x01abc").data == b"abc"
            else:
                r = c.call("ECHO hello")
                assert (r.status, r.text) == (0, "hello")
                assert c.call("FAIL").status == 0xFF

    def test_length_over_tcp_guards_after_a_timeout(self, tmp_path: Path) -> None:
        """On TCP a timed-out length try waits out the guard, which swallows its late reply."""
        # The connection stays (no reconnect, same generation).
        with SimProc(tmp_path, "--tcp", "0", codec="length") as sim:
            target = sim.ready.split()[1]
            device = {"codec": "length", "guard": 0.5}
            with DaemonProc(write_config(tmp_path, target, {"device": device})) as d:
                c = d.client()
                with pytest.raises(ClientError) as info:
                    c.call(b"\x03" + struct.pack(">H", 400) + b"late", timeout=0.2, retry=0)
                assert info.value.code == "timeout"
                mine = c.call(b"\x01mine", wait=True)
                assert (mine.data, mine.generation) == (b"mine", 1)
                assert d.status()["counters"]["reconnects"] == 0
                retried = c.call(b"\x03" + struct.pack(">H", 50) + b"ok", timeout=2, retry=2)
                assert retried.data == b"ok"


class TestEventLoops:
    @pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
    def test_calls_events_and_leases_on_either_loop(
        self, tmp_path: Path, sim: SimProc, loop: str
    ) -> None:
        """Both event loops (stdlib asyncio and uvloop) serve calls, events and peer creds."""
        if loop == "uvloop":
            pytest.importorskip("uvloop")
        with DaemonProc(write_config(tmp_path, sim.link), env={"VERLD_EVENT_LOOP": loop}) as d:
            assert f'"event_loop":"{loop}"' in d.log()
            c = d.client()
            assert c.hello()["role"] == "admin"
            r = c.call(b"\x01" + bytes(300))
            assert r.data == bytes(300)
            assert 0 < r.ms < 1000  # timed with perf_counter: uvloop's clock is in whole ms
            sub = d.client()
            sub.subscribe(["events"])
            c.call(b"\x06\x00\x01")
            assert next(sub.events())["event"] == "device"
            assert c.request("lease", seconds=5)["lease"]
            assert d.stop() == 0


class TestReload:
    def test_reload_moves_to_a_new_device(self, tmp_path: Path, daemon: DaemonProc) -> None:
        """A reload that changes device.port reconnects to the new device, no restart."""
        other_dir = tmp_path / "other"
        other_dir.mkdir()
        with SimProc(other_dir) as other:
            write_config(tmp_path, other.link)  # same file the daemon was started with
            changed = daemon.client().request("reload")["changed"]
            assert "device.port" in changed
            link = daemon.wait_state("up", min_generation=2)
            assert link["port"] == other.link
            assert daemon.client().call(b"\x01moved").data == b"moved"
