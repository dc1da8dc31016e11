"""What a front is to the daemon and to the core: the shapes, no machinery.

`Front` is the small protocol the daemon drives every front by (claim, start,
reload, stop accepting, status, close); `Listener` is what a front hears from the
device through the core; `FrontCounts` its calls by outcome; `CannotServe` how a
front says it cannot serve, naming what is in the way; `FrontFigures` how its part
of `status` reads as metrics and as verlctl's rows (light: verlctl imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from verld.config import Config
from verld.errors import ServeError
from verld.links.link import Transition
from verld.metrics import Family

#: rows of `verlctl status`: (label, text)
Rows = list[tuple[str, str]]


class Listener(Protocol):
    """What a front hears from the device and the link."""

    def device_event(self, data: bytes, text: str | None, generation: int) -> None: ...

    def link_event(self, transition: Transition) -> None: ...


class Front(Protocol):
    """A way in for programs (the JSON API, virtual ports, Modbus TCP, ...): the
    daemon keeps a list of them (`verld.fronts.registry.FRONTS`), each made as
    `Front(cfg, core)`, and drives each through these steps only. Making one does
    nothing outside it: no file, socket or lock until `claim`."""

    #: its one name ("api", "modbus", "port", "network"): the `front` of its
    #: `programs` rows and `verld_front_calls_total`'s label, its counts' (`core.front`)
    name: str

    async def claim(self) -> None:
        """Take what another verld could own (a socket path's lock, a listen
        address), before anything is created; raise `ServeError` (`CannotServe` to
        name what is in the way) when it is taken."""
        ...

    async def start(self) -> None:
        """Serve (claims made); raise `ServeError` (or OSError) when it cannot."""
        ...

    def reload(self, cfg: Config, changed: list[str]) -> None:
        """Take a reloaded config (`changed`: its changed keys); any task this starts
        is the front's own, and `close` ends it."""
        ...

    def stop_accepting(self) -> None:
        """verld is stopping: take no new programs (stop listening); those connected
        are still answered while the calls on the link finish, until `close`."""
        ...

    def status(self) -> dict[str, Any]:
        """Its keys in `status` (docs/protocol.md): the Modbus front's "modbus" (null
        while it does not listen), the ports front's "ports", the API front's
        "clients", "lease", ...; always the same keys."""
        ...

    def programs(self) -> list[dict[str, Any]]:
        """One row per program it serves now (docs/protocol.md, `programs`): `front`,
        `who`, `calls`, `ok`, `failed`, `waiting`, and what else tells them apart."""
        ...

    async def close(self) -> None:
        """Stop serving and remove what it made, claims included (safe before
        `claim` and `start`, and twice)."""
        ...


class StreamFigures(TypedDict):
    """A byte-stream program's figures (`ProgramStream.figures`), part of each
    `status.ports` and `status.network` entry (docs/protocol.md)."""

    calls: int
    ok: int
    failed: dict[str, int]
    dropped: int
    ignored: int
    bad_frames: int


class CannotServe(ServeError):
    """A front cannot serve: the message says why, `fields` what (socket=PATH,
    listen=HOST:PORT, link=PATH) for the log line; `exit_code` 2 for a setup that
    cannot work until the config changes (systemd's unit does not restart on 2:
    RestartPreventExitStatus=2), else 1."""

    def __init__(self, error: str, *, exit_code: int = 1, **fields: str) -> None:
        super().__init__(error)
        self.fields, self.exit_code = fields, exit_code


class FrontCounts:
    """One front's calls by outcome ("ok" or the error code). A call made by
    `Core.make_call` is counted by the session as it ends; `add` counts one the
    front refused without submitting it."""

    __slots__ = ("name", "outcomes")

    def __init__(self, name: str) -> None:
        self.name = name
        self.outcomes: dict[str, int] = {}

    def add(self, outcome: str) -> None:
        """Count a call that ended before reaching the core (refused by the front)."""
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


@dataclass(frozen=True)
class FrontFigures:
    """How a front's part of the `status` reply reads, from that reply alone (no I/O,
    nothing of the front's machinery): verld makes the front's metrics with it and
    verlctl its rows of `verlctl status`. Each front's lives next to it
    (`verld/fronts/NAME/figures.py`, with the TypedDict of its part that the front's
    `status` returns: `PortStatus`, `EntryStatus`, `ModbusStatus`), and
    `verld.fronts.figures.FIGURES` lists them. They read the reply as verlctl gets
    it, JSON from the wire: defensively, not trusting that shape."""

    #: the front's one name (`Front.name`)
    name: str
    #: its metric families, from the `status` reply (after the daemon's own)
    metrics: Callable[[Mapping[str, Any]], list[Family]]
    #: its rows of `verlctl status`, from the `status` reply, every text in it escaped
    #: already (`verld.ctl.render.safe`); none while it has nothing to show
    rows: Callable[[Mapping[str, Any]], Rows]


def entries_of(st: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """The entries of a list part of the `status` reply (`ports`, `network`), read
    defensively as it came off the wire: the mappings in it, none if it is no list."""
    found = st.get(key)
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []
