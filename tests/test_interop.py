"""verld against an independent `verl` device (tests/independent/verl_device.py).

The device was written from docs/protocol.md alone, with its own COBS and CRC framing,
and runs as a subprocess on a real pty pair. These tests check that the two
implementations agree on the wire and that verld keeps its promises when the
device misbehaves: garbage between frames, a corrupted CRC, a reply that arrives
after its call timed out. Faults are counted exactly on both sides, so the
daemon's `bad_frames` and `stale` counters are checked to the unit.
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from independent.verl_device import (
    EVENT,
    REPLY,
    FrameReader,
    cobs_decode,
    cobs_encode,
    encode_frame,
)
from support import DaemonProc, wait_for, write_config

from verld.client import Client, ClientError

DEVICE = Path(__file__).parent / "independent" / "verl_device.py"
MAX_PAYLOAD = 4096


class VerlDevice:
    """The independent device as a subprocess; `command` drives it over stdin."""

    def __init__(self, tmp: Path, seed: int = 1) -> None:
        self.link = str(tmp / "indep.tty")
        cmd = [sys.executable, str(DEVICE), "--link", self.link, "--seed", str(seed)]
        cmd += ["--max-payload", str(MAX_PAYLOAD)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self._lock = threading.Lock()
        line = self._readline()
        if not line.startswith("READY"):
            self.stop()
            raise AssertionError(f"independent device did not start: {line!r}")

    def _readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode()

    def command(self, text: str) -> dict[str, Any]:
        """One control command; its JSON answer."""
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(text.encode() + b"\n")
            self.proc.stdin.flush()
            answer: dict[str, Any] = json.loads(self._readline())
        assert answer["ok"], answer
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def device(tmp_path: Path) -> Iterator[VerlDevice]:
    dev = VerlDevice(tmp_path)
    yield dev
    dev.stop()


@pytest.fixture
def daemon(tmp_path: Path, device: VerlDevice) -> Iterator[DaemonProc]:
    # our uid is admin, so the `reconnect` op is allowed even when tests do not run as root
    roles = {"admin": {"uids": [os.getuid()], "gids": []}}
    d = DaemonProc(write_config(tmp_path, device.link, {"api": {"roles": roles}}))
    yield d
    d.stop()


def counters(d: DaemonProc) -> dict[str, int]:
    result: dict[str, int] = d.status()["counters"]
    return result


def grew(d: DaemonProc, before: dict[str, int], name: str) -> int:
    return counters(d)[name] - before[name]


def full_run_body() -> bytes:
    """An event body (seq 0) whose last 254 bytes, payload tail and CRC, hold no zero."""
    for last in range(1, 256):
        head = bytes([EVENT, 0, 0]) + bytes(range(1, 250)) + bytes([last])
        body = head + zlib.crc32(head).to_bytes(4, "big")
        if 0 not in body[-254:]:
            return body
    raise AssertionError("no such body")


class TestIndependentCodec:
    @pytest.mark.timeout(10)
    def test_matches_the_frozen_vectors(self, verl_vectors: dict[str, Any]) -> None:
        """The independent coder reproduces every vector and drops every reject."""
        for ex in verl_vectors["cobs_examples"]:
            assert cobs_encode(bytes.fromhex(ex["decoded_hex"])).hex() == ex["encoded_hex"]
        for ex in verl_vectors["cobs_examples"] + verl_vectors["cobs_decode_only"]:
            assert cobs_decode(bytes.fromhex(ex["encoded_hex"])).hex() == ex["decoded_hex"]
        for f in verl_vectors["frames"]:
            wire = encode_frame(f["type"], f["seq"], bytes.fromhex(f["payload_hex"]))
            assert wire.hex() == f["wire_hex"], f["name"]
        reader = FrameReader(MAX_PAYLOAD, frozenset({REPLY, EVENT}))
        good = encode_frame(EVENT, 0, b"after")
        for reject in verl_vectors["rejects"]:
            assert reader.feed(bytes.fromhex(reject["wire_hex"]) + good) == [(EVENT, 0, b"after")]
        assert reader.bad_frames == len(verl_vectors["rejects"])


class TestEcho:
    @pytest.mark.timeout(30)
    def test_random_payloads_echo_exactly(self, daemon: DaemonProc, device: VerlDevice) -> None:
        """~50 payloads of 0..max_payload bytes (zeros, 0xFF, random) come back byte for byte."""
        rng = random.Random(20240611)
        edges = [0, 1, 2, 253, 254, 255, 256, 507, 508, 509, 1000, MAX_PAYLOAD - 1, MAX_PAYLOAD]
        sizes = edges + [rng.randrange(MAX_PAYLOAD + 1) for _ in range(12)]
        c = daemon.client()
        cases = [body for n in edges for body in (bytes(n), b"\xff" * n, rng.randbytes(n))]
        cases += [rng.randbytes(n) for n in sizes[len(edges) :]]
        for body in cases:
            r = c.call(body, timeout=5)
            assert (r.status, r.data) == (0, body), f"{len(body)} bytes"
        assert len(cases) == 51
        st = device.command("stats")
        assert st["bad_frames"] == 0
        assert counters(daemon)["bad_frames"] == 0

    @pytest.mark.timeout(15)
    def test_call_above_max_payload_never_reaches_the_device(
        self, daemon: DaemonProc, device: VerlDevice
    ) -> None:
        """max_payload + 1 bytes get too_large from verld; the device sees no request."""
        st = device.command("stats")
        before = st["requests"] - st["pings"]
        c = daemon.client()
        with pytest.raises(ClientError) as info:
            c.call(bytes(MAX_PAYLOAD + 1))
        assert info.value.code == "too_large"
        assert c.call(b"still here").data == b"still here"
        st = device.command("stats")
        assert st["requests"] - st["pings"] == before + 1

    @pytest.mark.timeout(40)
    def test_forty_clients_get_only_their_own_replies(
        self, daemon: DaemonProc, device: VerlDevice
    ) -> None:
        """40 concurrent clients, replies reordered by device jitter: each gets only its own."""
        device.command("jitter 5")
        before = counters(daemon)
        errors: list[str] = []

        def worker(n: int) -> None:
            c = Client(daemon.socket, timeout=30)
            try:
                for i in range(10):
                    body = f"client{n}/call{i}/".encode() + os.urandom(12)
                    got = c.call(body, timeout=10).data
                    if got != body:
                        errors.append(f"{n}/{i}: got {got!r}, sent {body!r}")
            except ClientError as exc:
                errors.append(f"{n}: {exc}")
            finally:
                c.close()

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(35)
        assert errors == []
        assert grew(daemon, before, "calls_ok") == 400
        assert grew(daemon, before, "stale") == 0

    @pytest.mark.timeout(20)
    def test_at_most_window_requests_are_outstanding(
        self, daemon: DaemonProc, device: VerlDevice
    ) -> None:
        """16 slow calls at once: the device never holds more than `window` (8) of them."""
        device.command("delay " + " ".join(["300"] * 16))
        replies: list[bytes] = []

        def worker(n: int) -> None:
            with Client(daemon.socket, timeout=20) as c:
                replies.append(c.call(bytes([1, n]), timeout=5).data)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        assert sorted(replies) == [bytes([1, n]) for n in range(16)]
        assert device.command("stats")["peak"] == 8


class TestFaults:
    @pytest.mark.timeout(30)
    def test_garbage_between_frames_never_gives_a_wrong_reply(
        self, daemon: DaemonProc, device: VerlDevice
    ) -> None:
        """Random bursts before replies are dropped as bad frames; every call still gets its own."""
        before = counters(daemon)
        device.command("garbage 40")
        c = daemon.client()
        rng = random.Random(7)
        for i in range(40):
            body = bytes([i]) + rng.randbytes(rng.randrange(300))
            assert c.call(body, timeout=5).data == body
        device.command("reset")
        chunks = device.command("stats")["garbage_chunks"]
        assert chunks > 0
        wait_for(lambda: grew(daemon, before, "bad_frames") >= chunks, 5, "bad_frames")
        assert grew(daemon, before, "bad_frames") == chunks
        assert grew(daemon, before, "stale") == 0

    @pytest.mark.timeout(20)
    def test_corrupted_reply_is_retried_with_the_same_seq(
        self, daemon: DaemonProc, device: VerlDevice
    ) -> None:
        """A reply with a bad CRC is dropped and counted; the retry (same seq) gets the answer."""
        before = counters(daemon)
        device.command("corrupt 1")
        seen = len(device.command("stats")["seqs"])
        r = daemon.client().call(b"\x01precious", timeout=0.5, retry=2)
        assert (r.status, r.data) == (0, b"\x01precious")
        assert grew(daemon, before, "bad_frames") == 1
        assert grew(daemon, before, "retries") == 1
        st = device.command("stats")
        assert st["corrupted"] == 1 and st["duplicates"] == 1
        mine = [seq for seq, size in st["seqs"][seen:] if size == len(b"\x01precious")]
        assert len(mine) == 2 and mine[0] == mine[1]

    @pytest.mark.timeout(20)
    def test_corrupted_reply_without_retry_times_out(
        self, daemon: DaemonProc, device: VerlDevice
    ) -> None:
        """With retry 0 a corrupted reply is a timeout, never garbage; the next call is clean."""
        before = counters(daemon)
        device.command("corrupt 1")
        c = daemon.client()
        with pytest.raises(ClientError) as info:
            c.call(b"\x01lost", timeout=0.5, retry=0)
        assert info.value.code == "timeout"
        assert c.call(b"\x01next", timeout=5).data == b"\x01next"
        assert grew(daemon, before, "bad_frames") == 1
        assert grew(daemon, before, "timeouts") == 1

    @pytest.mark.timeout(20)
    def test_late_reply_is_stale_never_delivered(
        self, daemon: DaemonProc, device: VerlDevice
    ) -> None:
        """A reply landing after its call timed out, while the next call waits, is stale."""
        before = counters(daemon)
        # first reply due at 1.5 s (its call gives up at 0.5 s); the second call's reply is
        # held until ~3.5 s, so the late one arrives while the second call is outstanding
        device.command("delay 1500 3000")
        c = daemon.client()
        with pytest.raises(ClientError) as info:
            c.call(b"\x01late", timeout=0.5, retry=0)
        assert info.value.code == "timeout"
        r = c.call(b"\x01mine", timeout=8, retry=0)
        assert r.data == b"\x01mine"
        wait_for(lambda: grew(daemon, before, "stale") >= 1, 5, "the stale count")
        assert grew(daemon, before, "stale") == 1
        assert device.command("stats")["delayed"] == 2

    @pytest.mark.timeout(20)
    def test_rejected_frames_are_dropped_and_the_next_survives(
        self, daemon: DaemonProc, device: VerlDevice, verl_vectors: dict[str, Any]
    ) -> None:
        """Every reject of the vectors file and an oversize event count one bad frame each."""
        sub = daemon.client()
        sub.subscribe(["events"])
        before = counters(daemon)
        rejects = [r["wire_hex"] for r in verl_vectors["rejects"]]
        rejects.append(encode_frame(EVENT, 0, bytes(MAX_PAYLOAD + 1)).hex())
        rejects.append(encode_frame(REPLY, 999, bytes(MAX_PAYLOAD + 2)).hex())
        for i, wire in enumerate(rejects):
            device.command(f"raw {wire}")
            device.command(f"event {i:04x} {i * 4661}")  # an event's seq is ignored
        device.command(f"event {'ab' * MAX_PAYLOAD}")  # the largest event is fine
        got = []
        for ev in sub.events():
            got.append(base64.b64decode(ev["data"]))
            if len(got) == len(rejects) + 1:
                break
        assert got == [i.to_bytes(2, "big") for i in range(len(rejects))] + [b"\xab" * MAX_PAYLOAD]
        assert grew(daemon, before, "bad_frames") == len(rejects)
        assert grew(daemon, before, "stale") == 0

    @pytest.mark.timeout(20)
    def test_every_framing_a_device_may_send_is_accepted(
        self, daemon: DaemonProc, device: VerlDevice
    ) -> None:
        """No leading zero, runs of zeros, COBS without its final 01 code: all decode."""
        sub = daemon.client()
        sub.subscribe(["events"])
        before = counters(daemon)
        body = full_run_body()
        with_01 = cobs_encode(body)
        assert with_01[-256] == 0xFF and with_01.endswith(b"\x01")
        variants = [
            encode_frame(EVENT, 0, b"a")[1:],  # no leading zero (the last frame ended in one)
            b"\x00\x00\x00" + encode_frame(EVENT, 0, b"b") + b"\x00\x00",  # runs of zeros
            b"\x00" + with_01[:-1] + b"\x00",  # final full run without its 01 code
            b"\x00" + with_01 + b"\x00",  # and with it
            b"\x5a" * 20000 + encode_frame(EVENT, 0, b"e"),  # a long zero-free burst first
        ]
        for wire in variants:
            device.command(f"raw {wire.hex()}")
        got = []
        for ev in sub.events():
            got.append(base64.b64decode(ev["data"]))
            if len(got) == len(variants):
                break
        assert got == [b"a", b"b", body[3:-4], body[3:-4], b"e"]
        assert grew(daemon, before, "bad_frames") >= 1  # the burst, dropped without a frame


class TestSeqs:
    @pytest.mark.timeout(20)
    def test_seqs_continue_across_a_reconnect(self, daemon: DaemonProc, device: VerlDevice) -> None:
        """Seqs keep counting up across a reconnect, whose handshake is a ping."""
        c = daemon.client()
        for i in range(3):
            c.call(bytes([1, i]))
        old = device.command("stats")["seqs"]
        c.request("reconnect")
        daemon.wait_state("up", min_generation=2)
        for i in range(3):
            assert c.call(bytes([2, i])).generation == 2
        new = device.command("stats")["seqs"][len(old) :]
        assert new[0][1] == 0, "the first request after a reconnect is the handshake ping"
        seqs = [seq for seq, _ in old + new]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert min(seq for seq, _ in new) > max(seq for seq, _ in old)
