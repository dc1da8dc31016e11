"""The load: clients keeping calls in flight, and an abandoner that hangs up on its calls."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from base64 import b64encode
from collections.abc import Callable
from typing import Any

from soaklib.api import Conn, Tally
from verld import wire

REPLY_BOUND = 60.0  #: a call without a reply after this long counts as lost


def call_fields(rng: random.Random) -> dict[str, Any]:
    """Per-call options: mostly the daemon's defaults, sometimes others, sometimes wait."""
    fields: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.1:
        fields["wait"] = True
    elif roll < 0.2:
        fields["timeout"] = rng.choice((0.2, 1.0))
        fields["retry"] = rng.choice((0, 1, 5))
    return fields


async def client(
    index: int, sock: str, depth: int, until: float, rng: random.Random, tally: Tally
) -> None:
    """Keep `depth` calls in flight until `until`; reconnect every few hundred calls."""
    serial = 0
    while time.monotonic() < until:
        conn = Conn(tally, f"client{index}")
        try:
            await conn.open(sock)
        except OSError:
            await asyncio.sleep(0.2)
            continue
        budget = rng.randint(100, 1500)

        async def worker(conn: Conn = conn) -> None:
            nonlocal serial, budget
            while budget > 0 and time.monotonic() < until and not conn.broken:
                budget -= 1
                serial += 1
                tag = f"c{index}:{serial}:".encode() + rng.randbytes(rng.randint(0, 200))
                pending = conn.send_call(b"\x01" + tag, **call_fields(rng))
                tally.calls += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(pending.done.wait(), REPLY_BOUND)

        await asyncio.gather(*(worker() for _ in range(depth)))
        await asyncio.sleep(0.3)  # a late duplicate would arrive now
        await conn.close()
        conn.settle()


def _verl_payload(i: int, rng: random.Random) -> bytes:
    return b"\x01abandoned" + bytes([i])


async def abandoner(
    sock: str,
    until: float,
    rng: random.Random,
    tally: Tally,
    payload: Callable[[int, random.Random], bytes] = _verl_payload,
) -> None:
    """Send a few calls (`payload(i, rng)` each) and hang up at once: the daemon must
    forget the dead owner."""
    while time.monotonic() < until:
        await asyncio.sleep(rng.uniform(0.2, 1.0))
        try:
            reader, writer = await asyncio.open_unix_connection(sock)
        except OSError:
            continue
        for i in range(rng.randint(1, 8)):
            fields = {"wait": True, "timeout": 2.0} if rng.random() < 0.3 else {}
            data = b64encode(payload(i, rng)).decode()
            writer.write(wire.encode({"op": "call", "id": i, "data": data, **fields}))
            tally.abandoned += 1
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        del reader
