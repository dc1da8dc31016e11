"""The generator's clients: verl frames on the pty, socat's socket or a verld port, or the API.

Each peer keeps `inflight` calls outstanding, matches replies by seq (verl) or id
(API), checks every reply against its own request, and writes the requests of one
loop turn together (as verld batches its own writes), so the generator stays lean.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import time
from collections.abc import Callable
from typing import cast

from benchlib.meter import ECHO, ApiEcho, Meter, Payloads, Spec
from verld.codec.verl import FrameDecoder, encode_frame

_REQUEST, _REPLY = 0x11, 0x12


# --- verl frames straight to the pty (direct) or over socat's socket ------------------------


class VerlPeer:
    """One verl endpoint keeping `inflight` requests outstanding, matched by seq."""

    def __init__(self, meter: Meter, spec: Spec, rng: random.Random) -> None:
        self.meter = meter
        self.inflight = spec.inflight
        self.payloads = Payloads(0, spec.size, rng)
        self.decoder = FrameDecoder(spec.max_payload, frozenset({_REPLY, 0x13}))
        self.pending: dict[int, tuple[int, bytes]] = {}  #: seq → (sent ns, expected payload)
        self.seq = rng.randrange(0x10000)  # a stale reply from an earlier user rarely matches
        self.write: Callable[[bytes], None] = _unset_writer
        self.alive = True
        self.out: list[bytes] = []  #: requests of this loop turn, written together

    def start(self) -> None:
        for _ in range(self.inflight):
            self.send_next()
        self.flush()

    def flush(self) -> None:
        if self.out:
            self.write(b"".join(self.out))
            self.out.clear()

    def send_next(self) -> None:
        if self.meter.stopping:
            return
        seq = (self.seq + 1) & 0xFFFF
        while seq in self.pending:
            seq = (seq + 1) & 0xFFFF
        self.seq = seq
        data = self.payloads.next()
        self.pending[seq] = (time.monotonic_ns(), b"\x00" + data)
        self.meter.sent += 1
        self.out.append(encode_frame(_REQUEST, seq, ECHO + data))

    def feed(self, data: bytes) -> None:
        now = time.monotonic_ns()
        meter = self.meter
        for frame in self.decoder.feed(data):
            entry = self.pending.pop(frame.seq, None) if frame.kind == _REPLY else None
            if entry is None:
                meter.stale += 1
                continue
            sent, expected = entry
            if frame.payload == expected:
                meter.good(now - sent, now)
            else:
                meter.answered += 1
                meter.error(f"seq {frame.seq}: reply {frame.payload[:16].hex()}… is not the echo")
            self.send_next()
        self.flush()

    def lost(self, why: str) -> None:
        self.alive = False
        self.meter.error(f"link lost: {why}")
        self.meter.stopping = True

    @property
    def outstanding(self) -> int:
        return len(self.pending)


def _unset_writer(data: bytes) -> None:
    raise RuntimeError("writer not attached")


class FdPipe:
    """Non-blocking reads and writes on the pty fd, with partial-write handling."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, peer: VerlPeer) -> None:
        self.loop, self.fd, self.peer = loop, fd, peer
        self.out = bytearray()
        peer.write = self.write
        loop.add_reader(fd, self._readable)

    def write(self, data: bytes) -> None:
        if self.out:
            self.out += data
            return
        try:
            sent = os.write(self.fd, data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            self.out += data[sent:]
            self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        try:
            sent = os.write(self.fd, self.out)
        except BlockingIOError:
            return
        del self.out[:sent]
        if not self.out:
            self.loop.remove_writer(self.fd)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError as exc:
            data = b""
            why = exc.strerror or str(exc)
        else:
            why = "end of file"
        if not data:
            self.loop.remove_reader(self.fd)
            self.peer.lost(why)
            return
        self.peer.feed(data)

    def close(self) -> None:
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        os.close(self.fd)


class VerlProtocol(asyncio.Protocol):
    """A VerlPeer over a stream socket (socat's Unix socket)."""

    def __init__(self, peer: VerlPeer) -> None:
        self.peer = peer
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio's transport, or uvloop's (which is not an asyncio.Transport)
        self.transport = transport = cast(asyncio.Transport, transport)
        self.peer.write = transport.write

    def data_received(self, data: bytes) -> None:
        self.peer.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.peer.meter.stopping or self.peer.outstanding:
            self.peer.lost(str(exc) if exc else "closed by the relay")


# --- verld's API: length-prefixed JSON ---------------------------------------------------


class ApiPeer(asyncio.Protocol):
    """One API connection keeping `inflight` calls outstanding, matched by id.

    A reply laid out as verld writes it today (`{"id":N,"ok":true,"status":0,"data":"…"`)
    is checked by comparing bytes; any other layout is parsed as JSON and checked
    field by field, so a change in verld's key order costs speed, never correctness.
    """

    def __init__(self, meter: Meter, spec: Spec, client: int, rng: random.Random) -> None:
        self.meter = meter
        self.inflight = spec.inflight
        self.payloads = Payloads(spec.client_base + client, spec.size, rng)
        self.echo = ApiEcho(spec)
        self.pending: dict[int, tuple[int, bytes]] = {}  #: id → (sent ns, expected base64)
        self.next_id = 0
        self.buf = bytearray()
        self.out: list[bytes] = []  #: requests of this loop turn, written together
        self.transport: asyncio.Transport | None = None
        self.alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # asyncio's or uvloop's

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        if not self.meter.stopping or self.pending:
            self.meter.error(f"API connection lost: {exc or 'closed by verld'}")

    def start(self) -> None:
        for _ in range(self.inflight):
            self.send_next()
        self.flush()

    def flush(self) -> None:
        if self.out and self.transport is not None and self.alive:
            self.transport.write(b"".join(self.out))
        self.out.clear()

    def send_next(self) -> None:
        if self.meter.stopping or not self.alive:
            return
        self.next_id += 1
        call_id = self.next_id
        data = self.payloads.next()
        request = base64.b64encode(self.echo.request + data)
        body = b'{"op":"call","id":%d,"data":"%s"}' % (call_id, request)
        self.pending[call_id] = (time.monotonic_ns(), self.echo.expected(data))
        self.meter.sent += 1
        self.out.append(len(body).to_bytes(4, "big") + body)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        now = time.monotonic_ns()
        pos, end = 0, len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if end - pos - 4 < size:
                break
            self.reply(bytes(buf[pos + 4 : pos + 4 + size]), now)
            pos += 4 + size
        del buf[:pos]
        self.flush()

    def reply(self, body: bytes, now: int) -> None:
        if body.startswith(b'{"id":'):
            comma = body.find(b",", 6)
            try:
                entry = self.pending.get(int(body[6:comma]))
            except ValueError:
                entry = None
            if entry is not None and self.echo.ok_at(body, comma + 1, entry[1]):
                del self.pending[int(body[6:comma])]
                self.meter.good(now - entry[0], now)
                self.send_next()
                return
        self.slow_reply(body, now)

    def slow_reply(self, body: bytes, now: int) -> None:
        meter = self.meter
        try:
            msg = json.loads(body)
            call_id = msg["id"]
        except (ValueError, KeyError, TypeError):
            meter.error(f"unreadable reply {body[:80]!r}")
            return
        entry = self.pending.pop(call_id, None) if isinstance(call_id, int) else None
        if entry is None:
            meter.stale += 1
            meter.error(f"reply for unknown id {call_id!r}")
            return
        sent, expected = entry
        if self.echo.reply_ok(msg, expected):
            meter.good(now - sent, now)
        else:
            meter.answered += 1
            meter.error(f"id {call_id}: {json.dumps(msg)[:100]}")
        self.send_next()

    @property
    def outstanding(self) -> int:
        return len(self.pending)
