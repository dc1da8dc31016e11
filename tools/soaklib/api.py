"""The client API, raw: status polling, and connections that account for every reply.

The raw protocol (not `AsyncClient`) is used on purpose: it sees every reply, so a
duplicate or a reply for an id never sent is counted, not hidden. The framing
(4-byte big-endian length, then one JSON object; docs/protocol.md, §2.2) is
verld's own, from `verld.wire`.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from base64 import b64decode, b64encode
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from verld import wire

OUTCOMES = ("ok", "timeout", "link_down", "busy", "other")
#: the longest message accepted from verld (its own default api.max_message is 1 MiB)
MAX_MESSAGE = 16 << 20


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


class Messages:
    """The messages arriving on one connection, unframed by `wire.MessageDecoder`."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.decoder = wire.MessageDecoder(MAX_MESSAGE)
        self.bodies: deque[bytes] = deque()

    async def next(self) -> dict[str, Any]:
        """The next message; IncompleteReadError at the end of the stream."""
        while not self.bodies:
            data = await self.reader.read(65536)
            if not data:
                raise asyncio.IncompleteReadError(b"", None)
            self.bodies.extend(self.decoder.feed(data))
        msg = wire.decode_json(self.bodies.popleft())
        if not isinstance(msg, dict):
            raise ValueError(f"verld sent a message that is not an object: {msg!r}")
        return msg


async def request(sock: str, op: str) -> dict[str, Any]:
    """One request on a fresh connection (status polling); bound it with asyncio.timeout."""
    reader, writer = await asyncio.open_unix_connection(sock)
    try:
        writer.write(wire.encode({"op": op, "id": 1}))
        messages = Messages(reader)
        while True:
            msg = await messages.next()
            if msg.get("id") == 1:
                return msg
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def link_state(sock: str) -> tuple[str, dict[str, Any]]:
    """The link's state and the whole status reply; "unreachable" when verld does not answer."""
    try:
        async with asyncio.timeout(5.0):
            st = await request(sock, "status")
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
        return "unreachable", {}
    return str(st["link"]["state"]), st


async def wait_up(sock: str, proc: subprocess.Popen[bytes], seconds: float) -> dict[str, Any]:
    """The status once the link is up; RuntimeError if verld exits or after `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            while proc.poll() is None:
                state, st = await link_state(sock)
                if state == "up":
                    return st
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise RuntimeError(f"the link was not up within {seconds:g} s") from None
    raise RuntimeError(f"verld exited with {proc.returncode}")


@dataclass
class Pending:
    #: the data an ok reply must carry; None: the caller checks the reply (`msg`) itself
    expected: bytes | None
    replies: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    msg: dict[str, Any] | None = None  #: the (first) reply


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
        messages = Messages(self.reader)
        try:
            while True:
                self.on_message(await messages.next())
        except (ValueError, wire.Oversize) as exc:  # verld broke the framing: say so
            self.tally.note(f"{self.name}: unreadable message from verld: {exc}")
        except (asyncio.IncompleteReadError, OSError):
            pass
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
        pending.msg = msg
        pending.done.set()
        if msg.get("ok"):
            tally.outcomes["ok"] += 1
            if pending.expected is not None and b64decode(msg.get("data", "")) != pending.expected:
                tally.misrouted += 1
                tally.note(f"{self.name}: id {req_id} got data of another call: {str(msg)[:200]}")
            return
        code = str((msg.get("error") or {}).get("code"))
        if code in OUTCOMES:
            tally.outcomes[code] += 1
        else:
            tally.outcomes["other"] += 1
            tally.other_codes[code] += 1

    def send_call(self, data: bytes, *, echo: bool = True, **fields: Any) -> Pending:
        """Send one call. `echo`: it is an echo (`01` + x), whose ok reply must carry
        x; otherwise the caller checks the reply, `Pending.msg`, itself."""
        assert self.writer is not None
        req_id = self.next_id
        self.next_id += 1
        pending = self.calls[req_id] = Pending(data[1:] if echo else None)
        msg = {"op": "call", "id": req_id, "data": b64encode(data).decode(), **fields}
        self.writer.write(wire.encode(msg))
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
