"""What a network entry shares with its connections.

Strategy: a connection needs a few things of its entry — the core, the loop, the
settings (replaced on reload), the entry's share of calls and byte counts — and the
entry owns its connections. So those few things live here, in an `EntryState` the
entry makes and hands to each connection (with its `admit` and `detach` as plain
callbacks): the connections never see the `Entry`, and nothing imports back up.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from verld.config import Config, NetworkConfig
from verld.fronts.stream import Share

if TYPE_CHECKING:
    from verld.fronts.base import Core


class EntryState:
    """One entry's part its connections read and count into."""

    def __init__(
        self, core: Core, loop: asyncio.AbstractEventLoop, cfg: Config, conf: NetworkConfig
    ) -> None:
        self.core = core
        self.loop = loop
        self.cfg = cfg  #: (replaced on reload)
        self.conf = conf  #: the entry's settings (replaced on reload)
        self.share = Share(cfg.api.client_queue)  #: the calls its connections hold together
        self.bytes_in = self.bytes_out = 0  #: from and to its peers, telnet included

    @property
    def label(self) -> str:
        """The entry's name in logs and `status`."""
        return self.conf.label
