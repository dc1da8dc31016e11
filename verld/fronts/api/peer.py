"""`Peer`: one client of the JSON API as the dispatcher sees it, whatever carries it.

The dispatcher (`dispatch.py`), the ops, the fan-out and inhibit know a client only
through this protocol: replies and events go out through it, its role is read from
it, and `repr(peer)` names it in logs and messages. The transport that carries the
bytes (`conn.ClientConn` on the Unix socket, or a test's list) implements it and
owns everything else: framing, back-pressure, credentials.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Protocol


class Peer(Hashable, Protocol):
    """One client: its identity, its role, and the way back to it; hashable, for it
    is the owner of its calls and lease in Core."""

    #: its process and user, as `status` and `programs` show them (-1: unknown)
    pid: int
    uid: int
    name: str  #: the name it gave in `hello` ("" until then)
    ok: int  #: its calls that ended answered (`programs`)
    failed: int  #: its calls that ended failed

    @property
    def role(self) -> str:
        """ "observer", "controller" or "admin" (the transport decides, see `roles`)."""

    @property
    def rank(self) -> int:
        """`ROLE_RANK[role]`, compared with an op's on every request."""

    @property
    def closed(self) -> bool:
        """It went away: nothing more is sent to it."""

    def send(self, obj: dict[str, Any]) -> None:
        """A reply, encoded here."""

    def write(self, data: bytes) -> None:
        """A reply already encoded (`wire.encode`)."""

    def send_event(self, data: bytes) -> None:
        """An event already encoded; it may be dropped (and counted) while the peer
        lags, and an `overflow` event tells it how many later."""
