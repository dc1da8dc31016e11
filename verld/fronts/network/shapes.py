"""What a network connection needs of the parts around it: its entry and, in
passthrough, its relay (`entry.Entry`, `relay.Relay`), as protocols, so that
`conn` imports neither (a connection is `Any` here: `conn.NetConn`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from verld.config import Config, NetworkConfig
    from verld.fronts.base import Core
    from verld.fronts.stream import Share


class Entry(Protocol):
    """What a connection needs of its entry (`entry.Entry`)."""

    core: Core
    cfg: Config
    conf: NetworkConfig
    label: str
    share: Share
    loop: asyncio.AbstractEventLoop
    bytes_in: int
    bytes_out: int

    def admit(self, conn: Any) -> bool: ...

    def detach(self, conn: Any, reason: str) -> None: ...

    def relay(self, conn: Any) -> Relay: ...


class Relay(Protocol):
    """A passthrough's hold on the real port (`relay.Relay`)."""

    ready: bool

    def start(self) -> None: ...

    def to_port(self, data: bytes) -> None: ...

    def pause_port(self) -> None: ...

    def resume_port(self) -> None: ...

    def purge(self, received: bool, sent: bool) -> None: ...

    def modem_bits(self) -> int | None: ...

    def forward(self, code: int, value: bytes) -> bool: ...

    @property
    def forwards(self) -> bool: ...

    def end(self, reason: str) -> None: ...
