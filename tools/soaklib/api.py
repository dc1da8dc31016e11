"""The client API, raw: framing, status polling, and connections that account for every reply.

The raw protocol (not `AsyncClient`) is used on purpose: it sees every reply, so a
duplicate or a reply for an id never sent is counted, not hidden.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import subprocess
import time
from base64 import b64decode, b64encode
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

OUTCOMES = ("ok", "timeout", "link_down", "busy", "other")
_HEADER = struct.Struct(">I")


@dataclass
class Tally:
    """What the clients saw."""

    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    other_codes: Counter[str] = field(default_factory=Counter)
    misrouted: int = 0
    duplicates: int = 0
    no_reply: int = 0
    abandoned: int = 0
    connections: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.examples) < 10:
            self.examples.append(text)


def encode(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return _HEADER.pack(len(body)) + body


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any]:
    header = await reader.readexactly(4)
    msg: dict[str, Any] = json.loads(await reader.readexactly(_HEADER.unpack(header)[0]))
    return msg


async def request(sock: str, op: str, timeout: float = 5.0) -> dict[str, Any]:
    """One request on a fresh connection (status polling)."""
    reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(sock), timeout)
    try:
        writer.write(encode({"op": op, "id": 1}))
        while True:
            msg = await asyncio.wait_for(read_message(reader), timeout)
            if msg.get("id") == 1:
                return msg
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def link_state(sock: str) -> tuple[str, dict[str, Any]]:
    try:
        st = await request(sock, "status")
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return "unreachable", {}
    return str(st["link"]["state"]), st


async def wait_up(sock: str, proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"verld exited with {proc.returncode}")
        state, st = await link_state(sock)
        if state == "up":
            return st
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the link was not up within {timeout:g} s")


@dataclass
class Pending:
    expected: bytes
    replies: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Conn:
    """One API connection that accounts for every reply it receives."""

    def __init__(self, tally: Tally, name: str) -> None:
        self.tally = tally
        self.name = name
        self.calls: dict[int, Pending] = {}
        self.next_id = 1
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None
        self.broken = False

    async def open(self, sock: str) -> None:
        self.reader, self.writer = await asyncio.open_unix_connection(sock)
        self.task = asyncio.create_task(self._read())
        self.tally.connections += 1

    async def _read(self) -> None:
        assert self.reader is not None
        try:
            while True:
                self.on_message(await read_message(self.reader))
        except (asyncio.IncompleteReadError, OSError):
            self.broken = True
            for pending in self.calls.values():
                pending.done.set()

    def on_message(self, msg: dict[str, Any]) -> None:
        if "event" in msg and "id" not in msg:
            return
        req_id = msg.get("id")
        pending = self.calls.get(req_id) if isinstance(req_id, int) else None
        tally = self.tally
        if pending is None:
            tally.misrouted += 1
            tally.note(f"{self.name}: reply for an id never sent: {str(msg)[:200]}")
            return
        pending.replies += 1
        if pending.replies > 1:
            tally.duplicates += 1
            tally.note(f"{self.name}: duplicate reply for id {req_id}: {str(msg)[:200]}")
            return
        pending.done.set()
        if msg.get("ok"):
            tally.outcomes["ok"] += 1
            if b64decode(msg.get("data", "")) != pending.expected:
                tally.misrouted += 1
                tally.note(f"{self.name}: id {req_id} got data of another call: {str(msg)[:200]}")
            return
        code = str((msg.get("error") or {}).get("code"))
        if code in OUTCOMES:
            tally.outcomes[code] += 1
        else:
            tally.outcomes["other"] += 1
            tally.other_codes[code] += 1

    def send_call(self, data: bytes, **fields: Any) -> Pending:
        assert self.writer is not None
        req_id = self.next_id
        self.next_id += 1
        pending = self.calls[req_id] = Pending(data[1:])
        msg = {"op": "call", "id": req_id, "data": b64encode(data).decode(), **fields}
        self.writer.write(encode(msg))
        return pending

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def settle(self) -> None:
        """Count this connection's calls that never got a reply."""
        for req_id, pending in self.calls.items():
            if pending.replies == 0:
                self.tally.no_reply += 1
                self.tally.note(f"{self.name}: id {req_id} never got a reply")
