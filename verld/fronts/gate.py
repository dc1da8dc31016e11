"""Who gets in at a TCP listener: a network entry's, the Modbus TCP gateway's.

Strategy: each listening socket has an accept task (`loop.sock_accept`), so a
connection is judged before anything is spent on it: an address outside `allow`,
a listener full (its `busy` says why, or `max_connections` taken), a TLS listener
with `SOURCE_HANDSHAKES` handshakes in progress from that address — each is closed at
once, counted in `refused` by why and logged with the address (`refusals.Refusals`: at
most a line a second per why). An accepted socket gets keepalive, then becomes the
listener's connection (`make`: an asyncio protocol with a `peer`) through
`loop.connect_accepted_socket` (with the TLS handshake, given `HANDSHAKE_TIMEOUT`, when
the gate has an `ssl` context; a failed or late handshake is refused, why `tls`). Until
the listener takes it (its `connection_made` calls `made`, then asks `full`) it is
pending, and pending ones count toward `max_connections` like connections: a handshake
in progress holds an fd and the TLS layer's buffers (uvloop: 256 KiB each), so
connects that never send a ClientHello can take no more than the listener's slots.

The gate owns its accept and handshake tasks: `close` cancels them and `wait_closed`
awaits them. Nothing but cancelling ends an accept loop: an exception it does not
expect (a bug met by one connection, say) is logged at ERROR (`PREFIX_accept_crashed`),
the connection it met is closed and accepting goes on, as asyncio's own listeners
(the API front's) keep listening after an error. The listener owns its settings
(`allow`, `ssl`, `max_connections`, set on it at start and reload) and its connections.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

from verld.fronts.network.access import allowed, host_of, keepalive
from verld.fronts.network.refusals import Refusals
from verld.tlserrors import handshake_error

#: seconds a TLS handshake may take before the connection is closed (why `tls`)
HANDSHAKE_TIMEOUT = 10.0
#: TLS handshakes one source address may have in progress (more: refused, why `limit`)
SOURCE_HANDSHAKES = 4
#: seconds an accept loop waits after an accept that failed (so it does not spin)
ACCEPT_PAUSE = 0.5


class Incoming(Protocol):
    """A connection a gate makes: an asyncio protocol told its peer ("HOST:PORT")."""

    @property
    def peer(self) -> str: ...

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...


C = TypeVar("C", bound=Incoming)


def _never_busy() -> str | None:
    return None


class Gate(Generic[C]):
    """One listener's door (see the module docstring). `make(peer)` builds a
    connection; `taken()` counts the listener's connections toward
    `max_connections`; `busy()` says why it takes none now (None: it may)."""

    def __init__(
        self,
        log: Any,
        prefix: str,
        make: Callable[[str], C],
        taken: Callable[[], int],
        busy: Callable[[], str | None] = _never_busy,
    ) -> None:
        self.log, self.prefix = log, prefix
        self._make, self._taken, self._busy = make, taken, busy
        self.allow: Sequence[str] = ()
        self.ssl: ssl.SSLContext | None = None
        self.max_connections = 1
        #: fields of every log line (a network entry's name)
        self.where: dict[str, str] = {}
        self._accepting: set[asyncio.Task[None]] = set()  #: (kept until `wait_closed`)
        self._handshakes: set[asyncio.Task[None]] = set()  #: (each leaves the set as it ends)
        self._pending: dict[C, str | None] = {}  #: not yet made → host if in _sources
        self._sources: dict[str, int] = {}  #: handshakes in progress by host (TLS)
        self._refusals = Refusals(log, f"{prefix}_refused")
        #: refusals by why
        self.refused = self._refusals.counts

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def serve(self, socks: Sequence[socket.socket], label: str) -> None:
        """Accept on `socks` (bound and listening); `label` names the tasks."""
        for sock in socks:
            sock.setblocking(False)
            task = self.loop.create_task(self._accept(sock), name=f"{label} accept")
            self._accepting.add(task)

    async def _accept(self, sock: socket.socket) -> None:
        """Accept on `sock` until cancelled (see the module docstring)."""
        while True:
            try:
                conn, address = await self.loop.sock_accept(sock)
            except OSError as exc:  # (EMFILE and the like: wait, do not spin)
                self.log.warning(f"{self.prefix}_accept_failed", **self.where, error=str(exc))
                await asyncio.sleep(ACCEPT_PAUSE)
                continue
            except Exception as exc:
                self._crashed(exc, f"accepting again in {ACCEPT_PAUSE} s")
                await asyncio.sleep(ACCEPT_PAUSE)
                continue
            try:
                self._accepted(conn, address)
            except Exception as exc:
                conn.close()
                self._crashed(exc, "that connection closed, accepting goes on", peer=str(address))

    def _crashed(self, exc: Exception, then: str, **where: str) -> None:
        """What accepting did not expect (a bug): logged, without a traceback; `then`
        says what happens next."""
        self.log.error(
            f"{self.prefix}_accept_crashed", **self.where, error=repr(exc), then=then, **where
        )

    def _accepted(self, sock: socket.socket, address: Any) -> None:
        host, peer = host_of(address)
        if not allowed(self.allow, host):
            self.refuse(sock, peer, "allow")
            return
        why = self.full(host)
        if why is not None:
            self.refuse(sock, peer, why)
            return
        keepalive(sock)
        conn = self._make(peer)
        self._pending[conn] = host if self.ssl is not None else None
        if self.ssl is not None:
            self._sources[host] = self._sources.get(host, 0) + 1
        task = self.loop.create_task(self._connect(sock, conn, self.ssl))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    def full(self, host: str | None = None) -> str | None:
        """Why a new connection (from `host`: its handshakes in progress count too)
        cannot be served now (None: it can)."""
        why = self._busy()
        if why is not None:
            return why
        if len(self._pending) + self._taken() >= self.max_connections:
            return "limit"
        if host is not None and self._sources.get(host, 0) >= SOURCE_HANDSHAKES:
            return "limit"
        return None

    def made(self, conn: C) -> None:
        """`conn` is no longer pending (made, or its handshake failed)."""
        host = self._pending.pop(conn, None)
        if host is not None:
            left = self._sources.pop(host) - 1
            if left > 0:
                self._sources[host] = left

    def refuse(self, sock: socket.socket | None, peer: str, why: str, error: str = "") -> None:
        """Count and log one refusal (`sock`, if given, closed)."""
        self._refusals.refuse(why, **self.where, peer=peer, **({"error": error} if error else {}))
        if sock is not None:
            sock.close()

    async def _connect(self, sock: socket.socket, conn: C, ctx: ssl.SSLContext | None) -> None:
        try:
            protocol = cast(asyncio.BaseProtocol, conn)  # (an `Incoming` is one)
            if ctx is None:
                await self.loop.connect_accepted_socket(lambda: protocol, sock)
            else:
                await self.loop.connect_accepted_socket(
                    lambda: protocol, sock, ssl=ctx, ssl_handshake_timeout=HANDSHAKE_TIMEOUT
                )
        except (OSError, ssl.SSLError, TimeoutError, EOFError) as exc:
            self.refuse(
                sock, conn.peer, "tls" if ctx is not None else "error", handshake_error(exc)
            )
        except Exception as exc:
            sock.close()
            self._crashed(exc, "that connection closed, accepting goes on", peer=conn.peer)
        finally:
            self.made(conn)

    def stop_accepting(self) -> None:
        """Cancel the accept loops (`wait_closed` awaits them)."""
        for task in self._accepting:
            task.cancel()

    def close(self) -> None:
        """Stop accepting, cancel the handshakes in progress, log the refusals held;
        `wait_closed` awaits the tasks."""
        self.stop_accepting()
        for task in self._handshakes:
            task.cancel()
        self._refusals.flush()

    async def wait_closed(self) -> None:
        """After `close`: its accept loops and handshakes have ended."""
        tasks = [*self._accepting, *self._handshakes]
        self._accepting.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
