"""An independent `verl` device, written from docs/protocol.md (§3, "Link codecs") alone.

Nothing here imports verld: the COBS coder, the CRC framing and the frame reader
are written again, byte by byte, so that interop tests pit two implementations of
the frozen format against each other instead of one implementation against itself.

Run as a program it serves a pty pair: it opens one, makes the slave raw, points
`--link` at the slave (the daemon's `device.port`) and keeps its own slave fd open
so the daemon may open and close the port freely. It answers every request:
an empty request (a ping) with status 0x00, any other with status 0x00 plus the
request's payload (an echo). A repeated request (same seq and payload as one it
answered, i.e. a retry) is answered again from a cache of recent replies.

Control: one command per line on stdin, one JSON line back on stdout (the first
stdout line is `READY <link>`). Faults apply to frames written after the command:
    garbage N       a random burst (zeros included) before each of the next N replies
    corrupt N       flip a CRC bit in the next N echo replies (pings are spared)
    delay MS...     hold the replies to the next echo requests MS ms each, in order
    jitter MS       delay every reply by a random 0..MS ms (replies overtake each other)
    event HEX [SEQ] send one event (kind 0x13) with this payload and seq (default 0)
    raw HEX         write these bytes as they are
    reset           every fault off (counters stay)
    stats           counters (`peak`: most frames waiting to be written at once), and
                    the seq and payload size of every request seen
    quit            exit 0 (so do EOF on stdin and SIGTERM)
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import select
import signal
import sys
import time
import tty
import zlib
from collections import OrderedDict
from typing import Any

REQUEST, REPLY, EVENT = 0x11, 0x12, 0x13  #: type bytes: version 1, kinds 1..3
HEADER = 3  #: type u8 + seq u16
CRC_SIZE = 4


# --- COBS (Cheshire & Baker), one byte at a time -------------------------------------
def cobs_encode(data: bytes) -> bytes:
    """Stuff `data` so that it holds no zero; a final full run gets its trailing 01 code."""
    out = bytearray([0])
    code_at, code = 0, 1
    for byte in data:
        if byte == 0:
            out[code_at] = code
            code_at, code = len(out), 1
            out.append(0)
            continue
        out.append(byte)
        code += 1
        if code == 0xFF:
            out[code_at] = code
            code_at, code = len(out), 1
            out.append(0)
    out[code_at] = code
    return bytes(out)


def cobs_decode(data: bytes) -> bytes:
    """Undo `cobs_encode`; accepts a final full run with or without its 01 code."""
    if not data or 0 in data:
        raise ValueError("not a COBS block sequence")
    out = bytearray()
    pos = 0
    while pos < len(data):
        code = data[pos]
        end = pos + code
        if end > len(data):
            raise ValueError(f"COBS code {code} at {pos} runs past the end")
        out += data[pos + 1 : end]
        pos = end
        if code != 0xFF and pos < len(data):
            out.append(0)
    return bytes(out)


# --- frames ------------------------------------------------------------------------------
def frame_body(kind: int, seq: int, payload: bytes) -> bytes:
    """type, seq (BE), payload, CRC-32 (BE) over everything before it."""
    head = bytes([kind, seq >> 8, seq & 0xFF]) + payload
    return head + zlib.crc32(head).to_bytes(4, "big")


def encode_frame(kind: int, seq: int, payload: bytes, *, bad_crc: bool = False) -> bytes:
    """`00 COBS(body) 00`; with `bad_crc`, one CRC bit is flipped (the framing stays intact)."""
    body = bytearray(frame_body(kind, seq, payload))
    if bad_crc:
        body[-1] ^= 0x01
    return b"\x00" + cobs_encode(bytes(body)) + b"\x00"


def decode_body(chunk: bytes, max_payload: int, accept: frozenset[int]) -> tuple[int, int, bytes]:
    """(type, seq, payload) of one chunk between zeros; ValueError when it is not a frame."""
    body = cobs_decode(chunk)
    if len(body) < HEADER + CRC_SIZE:
        raise ValueError("body shorter than 7 bytes")
    kind = body[0]
    if kind not in accept:
        raise ValueError(f"type {kind:#04x} not accepted")
    payload = body[HEADER:-CRC_SIZE]
    if zlib.crc32(body[:-CRC_SIZE]) != int.from_bytes(body[-CRC_SIZE:], "big"):
        raise ValueError("bad CRC")
    limit = max_payload + 1 if kind == REPLY else max_payload
    if len(payload) > limit or (kind == REPLY and not payload):
        raise ValueError("payload size out of range")
    return kind, body[1] << 8 | body[2], payload


class FrameReader:
    """Cuts a byte stream at zeros and keeps the chunks that are frames this side accepts."""

    def __init__(self, max_payload: int, accept: frozenset[int]) -> None:
        self.max_payload = max_payload
        self.accept = accept
        self.bad_frames = 0
        self._tail = b""
        # a chunk longer than this cannot be a frame: COBS adds one byte per 254
        body = max_payload + 1 + HEADER + CRC_SIZE
        self._max_chunk = body + body // 254 + 2

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        chunks = (self._tail + data).split(b"\x00")
        self._tail = chunks.pop()
        if len(self._tail) > self._max_chunk:
            self._tail = b""  # noise with no end in sight: keep the buffer bounded
            self.bad_frames += 1
        frames = []
        for chunk in chunks:
            if not chunk:
                continue  # a run of zeros is one delimiter
            try:
                frames.append(decode_body(chunk, self.max_payload, self.accept))
            except ValueError:
                self.bad_frames += 1
        return frames


# --- the device -------------------------------------------------------------------------------
class Device:
    """Answers requests; owns the fault settings and the write schedule (sans-I/O)."""

    def __init__(self, max_payload: int, rng: random.Random) -> None:
        self.reader = FrameReader(max_payload, frozenset({REQUEST}))
        self.rng = rng
        self.garbage = 0
        self.corrupt = 0
        self.delays: list[float] = []
        self.jitter = 0.0
        self.cache: OrderedDict[tuple[int, bytes], bytes] = OrderedDict()
        self.seqs: list[tuple[int, int]] = []
        self.counters = dict.fromkeys(
            (
                "requests",
                "pings",
                "replies",
                "events",
                "duplicates",
                "corrupted",
                "delayed",
                "garbage_bursts",
                "garbage_chunks",
                "peak",
            ),
            0,
        )
        self._queue: list[tuple[float, int, bytes]] = []
        self._order = 0

    def schedule(self, due: float, data: bytes) -> None:
        self._order += 1
        heapq.heappush(self._queue, (due, self._order, data))
        # replies not yet written = requests the daemon still has outstanding
        self.counters["peak"] = max(self.counters["peak"], len(self._queue))

    def due(self, now: float) -> tuple[list[bytes], float | None]:
        """Bytes to write now, and when the next write is due (None: nothing waits)."""
        out = []
        while self._queue and self._queue[0][0] <= now:
            out.append(heapq.heappop(self._queue)[2])
        return out, (self._queue[0][0] if self._queue else None)

    def received(self, data: bytes, now: float) -> None:
        for _kind, seq, payload in self.reader.feed(data):
            self._answer(seq, payload, now)

    def _answer(self, seq: int, payload: bytes, now: float) -> None:
        c = self.counters
        c["requests"] += 1
        self.seqs.append((seq, len(payload)))
        key = (seq, payload)
        cached = self.cache.get(key)
        if cached is not None:
            c["duplicates"] += 1
            self.schedule(now, cached)
            return
        ping = not payload
        c["pings"] += ping
        good = encode_frame(REPLY, seq, b"\x00" + payload)
        self.cache[key] = good
        if len(self.cache) > 256:
            self.cache.popitem(last=False)
        frame = good
        if self.corrupt and not ping:
            self.corrupt -= 1
            c["corrupted"] += 1
            frame = encode_frame(REPLY, seq, b"\x00" + payload, bad_crc=True)
        delay = self.rng.uniform(0, self.jitter) if self.jitter else 0.0
        if self.delays and not ping:
            delay += self.delays.pop(0)
            c["delayed"] += 1
        c["replies"] += 1
        self.schedule(now + delay, self._with_garbage(frame))

    def _with_garbage(self, frame: bytes) -> bytes:
        if not self.garbage:
            return frame
        self.garbage -= 1
        burst = self.rng.randbytes(self.rng.randint(1, 40))
        self.counters["garbage_bursts"] += 1
        # the frame's leading zero ends the burst: each zero-free run is one chunk to drop
        self.counters["garbage_chunks"] += sum(1 for part in burst.split(b"\x00") if part)
        return burst + frame

    def command(self, line: str, now: float) -> dict[str, Any]:
        """Apply one control command; its answer."""
        word, *args = line.split()
        if word == "garbage":
            self.garbage = int(args[0])
        elif word == "corrupt":
            self.corrupt = int(args[0])
        elif word == "delay":
            self.delays = [int(ms) / 1000 for ms in args]
        elif word == "jitter":
            self.jitter = int(args[0]) / 1000
        elif word == "event":
            seq = int(args[1]) if len(args) > 1 else 0
            self.counters["events"] += 1
            self.schedule(now, encode_frame(EVENT, seq, bytes.fromhex(args[0])))
        elif word == "raw":
            self.schedule(now, bytes.fromhex(args[0]))
        elif word == "reset":
            self.garbage = self.corrupt = 0
            self.delays, self.jitter = [], 0.0
        elif word == "stats":
            return {
                "ok": True,
                **self.counters,
                "bad_frames": self.reader.bad_frames,
                "seqs": self.seqs,
            }
        else:
            return {"ok": False, "error": f"unknown command {word!r}"}
        return {"ok": True}


# --- I/O: a pty, stdin for control ------------------------------------------------------------
def open_pty(link: str) -> tuple[int, int]:
    """A raw pty pair; `link` becomes a symlink to the slave. Returns (master, slave)."""
    master, slave = os.openpty()
    tty.setraw(slave)
    tmp = f"{link}.{os.getpid()}.tmp"
    os.symlink(os.ttyname(slave), tmp)
    os.replace(tmp, link)
    return master, slave


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve(device: Device, master: int) -> None:
    """Until `quit`, EOF on stdin or SIGTERM: read requests and commands, write due frames."""
    control = sys.stdin.fileno()
    pending = b""
    next_due: float | None = None
    while True:
        wait = None if next_due is None else max(0.0, next_due - time.monotonic())
        readable, _, _ = select.select([master, control], [], [], wait)
        now = time.monotonic()
        if master in readable:
            device.received(os.read(master, 65536), now)
        if control in readable:
            data = os.read(control, 4096)
            if not data:
                return
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                text = line.decode().strip()
                if text == "quit":
                    return
                if text:
                    answer = device.command(text, now)
                    sys.stdout.write(json.dumps(answer) + "\n")
                    sys.stdout.flush()
        out, next_due = device.due(time.monotonic())
        for data in out:
            write_all(master, data)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="An independent verl device on a pty.")
    p.add_argument("--link", required=True, help="symlink to create for the device port")
    p.add_argument("--max-payload", type=int, default=4096)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    master, slave = open_pty(args.link)
    try:
        print(f"READY {args.link}", flush=True)
        serve(Device(args.max_payload, random.Random(args.seed)), master)
    finally:
        for fd in (master, slave):
            os.close(fd)
        try:
            os.unlink(args.link)
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
