"""API server behaviours: leases, taps, limits, slow subscribers (real daemon, real pty)."""

from __future__ import annotations

import base64
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, wait_for, write_config

from verld.client import Client, ClientError

pytestmark = pytest.mark.timeout(60)


def start(tmp_path: Path, sim: SimProc, **overrides: Any) -> DaemonProc:
    return DaemonProc(write_config(tmp_path, sim.link, overrides))


class TestLease:
    def test_holder_calls_pass_others_get_busy(self, daemon: DaemonProc) -> None:
        """While leased, the holder's calls go through and another client's get busy."""
        holder, other = daemon.client(), daemon.client()
        token = holder.request("lease", seconds=10)["lease"]
        assert isinstance(token, str) and token
        assert holder.call(b"\x01mine").data == b"mine"
        with pytest.raises(ClientError) as info:
            other.call(b"\x01x")
        assert info.value.code == "busy"
        lease = daemon.status()["lease"]
        assert lease["pid"] > 0 and 0 < lease["seconds_left"] <= 10

    def test_waiting_call_goes_through_after_release(self, daemon: DaemonProc) -> None:
        """A call with wait: true waits for the lease to end, then runs."""
        holder, other = daemon.client(), daemon.client()
        token = holder.request("lease", seconds=10)["lease"]
        other.send(
            {
                "op": "call",
                "id": 1,
                "data": base64.b64encode(b"\x01w").decode(),
                "wait": True,
                "timeout": 5,
            }
        )
        holder.request("release", lease=token)
        msg = other.receive()
        assert (msg["id"], msg["ok"], base64.b64decode(msg["data"])) == (1, True, b"w")

    def test_disconnect_frees_the_device(self, daemon: DaemonProc) -> None:
        """Closing the holder's connection releases the lease at once."""
        holder, other = daemon.client(), daemon.client()
        holder.request("lease", seconds=30)
        holder.close()
        wait_for(lambda: daemon.status()["lease"] is None, 5, "lease released")
        assert other.call(b"\x01free").data == b"free"

    def test_lease_expires(self, daemon: DaemonProc) -> None:
        """A lease ends by itself after its seconds."""
        daemon.client().request("lease", seconds=1)
        wait_for(lambda: daemon.status()["lease"] is None, 5, "lease expiry")

    @pytest.mark.parametrize("seconds", [0, -1, 61, "5", True, None])
    def test_bad_seconds(self, daemon: DaemonProc, seconds: object) -> None:
        """seconds outside 1..lease_max, or not a number, is bad_request."""
        with pytest.raises(ClientError) as info:
            daemon.client().request("lease", seconds=seconds)
        assert info.value.code == "bad_request"

    def test_second_lease_is_busy(self, daemon: DaemonProc) -> None:
        """Another client asking for a held lease gets busy."""
        daemon.client().request("lease", seconds=10)
        with pytest.raises(ClientError) as info:
            daemon.client().request("lease", seconds=10)
        assert info.value.code == "busy"


class TestTaps:
    def test_traffic_shows_request_and_reply_with_matching_seq(self, daemon: DaemonProc) -> None:
        """traffic subscribers see each request and its reply, same seq, payload hex."""
        mon = daemon.client()
        mon.subscribe(["traffic"])
        daemon.client().call(b"\x01\xaa\xbb")
        tx, rx = None, None
        for ev in mon.events():
            if ev["dir"] == "tx" and ev["kind"] == "request":
                tx = ev
            elif ev["dir"] == "rx" and ev["kind"] == "reply":
                rx = ev
            if tx and rx:
                break
        assert tx is not None and rx is not None
        assert (tx["hex"], tx["len"]) == ("01aabb", 3)
        assert (rx["seq"], rx["status"], rx["hex"]) == (tx["seq"], 0, "aabb")

    def test_wire_shows_garbage_and_bad_frames_count(
        self, daemon: DaemonProc, sim: SimProc
    ) -> None:
        """Garbage on the line appears in the raw wire view and in bad_frames."""
        mon = daemon.client()
        mon.subscribe(["wire"])
        before = daemon.status()["counters"]["bad_frames"]
        sim.control("garbage 40")
        daemon.client().call(b"\x01after")
        seen = b""
        for ev in mon.events():
            if ev["dir"] == "rx":
                seen += bytes.fromhex(ev["hex"])
            if b"after" in seen or len(seen) > 40:
                break
        assert len(seen) >= 40
        wait_for(lambda: daemon.status()["counters"]["bad_frames"] > before, 5, "bad frame")


class TestLimits:
    def test_max_clients_refuses_with_busy(self, tmp_path: Path, sim: SimProc) -> None:
        """A connection beyond max_clients gets busy (id null) and is closed."""
        with start(tmp_path, sim, api={"max_clients": 2}) as d:
            d.client()
            d.client()
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(d.socket)
            head = s.recv(4)
            body = s.recv(struct.unpack(">I", head)[0])
            assert b'"busy"' in body and b'"id":null' in body
            assert s.recv(1) == b""
            s.close()

    def test_client_queue_share_gives_busy(self, tmp_path: Path, sim: SimProc) -> None:
        """A client past its share of waiting/in-flight calls gets busy for the excess."""
        with start(tmp_path, sim, api={"client_queue": 4}) as d:
            c = d.client()
            delay = b"\x03" + struct.pack(">H", 300)
            for i in range(8):
                c.send({"op": "call", "id": i, "data": base64.b64encode(delay).decode()})
            codes = []
            for _ in range(8):
                msg = c.receive()
                codes.append("ok" if msg["ok"] else msg["error"]["code"])
            assert codes.count("busy") == 4 and codes.count("ok") == 4

    def test_slow_subscriber_never_slows_others(self, tmp_path: Path, sim: SimProc) -> None:
        """A subscriber that never reads: others' calls succeed; it is dropped or overflows."""
        with start(tmp_path, sim, api={"max_backlog": 200_000}) as d:
            slow = Client(d.socket, timeout=10).connect()
            slow.subscribe(["traffic", "wire", "events"])
            worker = d.client()
            for _ in range(30):
                assert worker.call(b"\x06\x00\x64").status == 0  # 100 events each
            for i in range(200):
                assert worker.call(b"\x01" + bytes([i]) * 200).status == 0
            st = d.status()
            assert st["events_dropped"] > 0 or st["clients"] == 2
            slow.close()

    @pytest.mark.timeout(30)
    def test_small_max_backlog_still_drops_a_client_that_never_reads(
        self, tmp_path: Path, sim: SimProc
    ) -> None:
        """max_backlog below the 64 KiB high-water mark: a non-reader is dropped past it."""
        with start(tmp_path, sim, api={"max_backlog": 8192}) as d:
            raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            raw.connect(d.socket)
            body = b'{"op":"status","id":1}'
            status = struct.pack(">I", len(body)) + body
            try:
                for _ in range(40):  # ~1 KiB of reply per status request, never read
                    raw.send(status * 20)
            except OSError:
                pass  # dropped already
            wait_for(
                lambda: d.status()["limits_hit"].get("max_backlog", 0) >= 1,
                10,
                "the non-reader dropped",
            )
            assert d.client().call(b"\x01still here").data == b"still here"
            raw.close()


class TestAbandonedCalls:
    def test_departed_clients_call_frees_the_window(self, tmp_path: Path, sim: SimProc) -> None:
        """verl: a client that leaves with calls on the link frees their window slots at once."""
        with start(tmp_path, sim, device={"window": 2}) as d:
            gone = Client(d.socket, timeout=5).connect()
            slow = b"\x03" + struct.pack(">H", 2000)
            for i in range(2):
                gone.send(
                    {"op": "call", "id": i, "data": base64.b64encode(slow).decode(), "timeout": 60}
                )
            wait_for(lambda: d.status()["inflight"] == 2, 5, "two calls on the link")
            gone.close()
            r = d.client().call(b"\x01next", timeout=1)
            assert r.data == b"next" and r.ms < 1500

    def test_length_abandoned_call_runs_out_within_device_timeout(self, tmp_path: Path) -> None:
        """length: a departed client's long call holds the device no longer than device.timeout."""
        with (
            SimProc(tmp_path, codec="length") as sim,
            DaemonProc(
                write_config(tmp_path, sim.link, {"device": {"codec": "length", "timeout": 0.5}})
            ) as d,
        ):
            gone = Client(d.socket, timeout=5).connect()
            sim.control("set drop 1")  # the device never answers this one
            gone.send(
                {
                    "op": "call",
                    "id": 1,
                    "data": base64.b64encode(b"\x01lost").decode(),
                    "timeout": 600,
                }
            )
            wait_for(lambda: d.status()["inflight"] == 1, 5, "the call on the link")
            sim.control("reset")
            gone.close()
            r = d.client().call(b"\x01after", timeout=2, wait=True)
            assert r.data == b"after"
