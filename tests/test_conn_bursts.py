"""A large read from one API client is handled a burst per loop turn, in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from verld import wire
from verld.config import default_config
from verld.fronts.api.conn import BURST, ApiStats, ClientConn

pytestmark = pytest.mark.timeout(20)


class Host:
    """What a connection sees of the server: requests recorded with the turn they ran in."""

    def __init__(self) -> None:
        self.cfg = default_config()
        self.stats = ApiStats()
        self.seen: list[tuple[int, bytes]] = []
        self.turn = 0

    def attach(self, conn: ClientConn) -> None:
        return None

    def detach(self, conn: ClientConn) -> None:
        return None

    def request(self, conn: ClientConn, body: bytes) -> None:
        self.seen.append((self.turn, body))

    def requests(self, conn: ClientConn, bodies: list[bytes]) -> None:
        for body in bodies:
            self.request(conn, body)


class Transport:
    def __init__(self) -> None:
        self.reading = True
        self.closed = False

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str) -> Any:
        return None

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data: bytes) -> None:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


def test_a_large_read_is_handled_a_burst_per_turn_in_order() -> None:
    """Five bursts in one read are handled a burst per loop turn, in order, reading paused."""
    # Reading is paused meanwhile and resumed after the last burst.

    async def main() -> None:
        host, transport = Host(), Transport()
        conn = ClientConn(host, 1)
        conn.connection_made(transport)  # type: ignore[arg-type]
        frames = [wire.encode({"op": "status", "id": i}) for i in range(5 * BURST + 3)]
        bodies = [f[4:] for f in frames]
        conn.data_received(b"".join(frames))
        assert len(host.seen) == BURST and not transport.reading
        while len(host.seen) < len(bodies):
            host.turn += 1
            await asyncio.sleep(0)
        assert [body for _, body in host.seen] == bodies
        per_turn = [sum(1 for t, _ in host.seen if t == turn) for turn in range(host.turn + 1)]
        assert max(per_turn) == BURST
        assert transport.reading

    asyncio.run(main())
