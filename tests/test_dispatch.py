"""The API's dispatcher driven with in-memory peers: no socket, no framing, no loop.

The seam between the JSON API and its transport: `Dispatcher` over the real core of
the session rig (link up, time a `ManualClock`), given message bodies by hand with
a `MemoryPeer` for the client, which keeps what it is sent, byte for byte.
"""

from __future__ import annotations

import ast
import asyncio
import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verld import wire
from verld.fronts.api.dispatch import Dispatcher
from verld.fronts.api.ops import OPS
from verld.roles import ROLE_RANK
from verld.session.calls import Call
from verld.testing.session import SessionRig

pytestmark = pytest.mark.timeout(20)

CFG = (
    "device: {port: /dev/fake, timeout: 1.0, retry: 0}\n"
    "heartbeat: {interval: 0}\n"  # (no pings on the wire but the handshake's)
    "api: {socket: /tmp/verld.sock}\n"
)
API = Path(__file__).resolve().parents[1] / "verld" / "fronts" / "api"


class MemoryPeer:
    """A client with no transport: replies and events kept as the bytes it was sent."""

    def __init__(self, name: str, role: str = "controller") -> None:
        self.pid, self.uid = 4242, 1000
        self.name = ""
        self.ok = self.failed = 0
        self.role, self.rank = role, ROLE_RANK[role]
        self.closed = False
        self.replies: list[bytes] = []
        self.events: list[bytes] = []
        self._repr = f"memory:{name}"

    def __repr__(self) -> str:
        return self._repr

    def send(self, obj: dict[str, Any]) -> None:
        self.replies.append(wire.encode(obj))

    def write(self, data: bytes) -> None:
        self.replies.append(data)

    def send_event(self, data: bytes) -> None:
        self.events.append(data)

    def reply(self) -> dict[str, Any]:
        """The last reply, decoded."""
        parsed: dict[str, Any] = json.loads(self.replies[-1][4:])
        return parsed


class Api:
    """A dispatcher over the rig's core, and the rig."""

    def __init__(self) -> None:
        self.rig = SessionRig(CFG, core=True)
        self.rig.connect()
        self.dispatcher = Dispatcher(self.rig.cfg, self.rig.core, OPS)
        self.dispatcher.start()
        self._ids = 0

    def ask(self, peer: MemoryPeer, op: str, **fields: Any) -> dict[str, Any]:
        """One request from `peer`, the device answering what reached it; the reply."""
        self._ids += 1
        sent = len(peer.replies)
        self.dispatcher.request(peer, wire.encode({"op": op, "id": self._ids, **fields})[4:])
        self.rig.answer()
        assert len(peer.replies) == sent + 1
        return peer.reply()


@pytest.fixture
def api() -> Iterator[Api]:
    api = Api()
    yield api
    asyncio.run(api.dispatcher.close())  # (the log ring's listener, too)


def test_a_call_is_answered_on_its_peer_alone(api: Api) -> None:
    """A call's reply goes to the peer that asked, in the API's bytes, and is counted."""
    asker, other = MemoryPeer("asker"), MemoryPeer("other")
    api.dispatcher.request(asker, b'{"op":"call","id":7,"data":"AWhp"}')
    api.rig.answer()
    ms = json.loads(asker.replies[0][4:])["ms"]
    body = b'{"id":7,"ok":true,"status":0,"data":"aGk=","ms":%.3f,"generation":1}' % ms
    assert asker.replies == [len(body).to_bytes(4, "big") + body]
    assert (asker.ok, asker.failed, other.replies) == (1, 0, [])


def test_an_answered_call_is_freed_without_the_garbage_collector(api: Api) -> None:
    """A call and its answer hold no reference cycle: freed as they end, GC off."""
    peer = MemoryPeer("asker")
    gc.collect()
    gc.disable()
    try:
        for i in range(50):
            api.dispatcher.request(peer, b'{"op":"call","id":%d,"data":"AWhp"}' % i)
            api.rig.answer()
        left = sum(isinstance(o, Call) and o.owner is peer for o in gc.get_objects())
    finally:
        gc.enable()
    assert (peer.ok, left) == (50, 0)


def test_refusals_are_error_replies_on_the_peer(api: Api) -> None:
    """An unknown op and an op above the peer's role are answered with their errors."""
    peer = MemoryPeer("observer", role="observer")
    assert api.ask(peer, "nope") == {
        "id": 1,
        "ok": False,
        "error": {"code": "unknown_op", "message": "unknown op 'nope'"},
    }
    assert api.ask(peer, "call", data="AWhp")["error"] == {
        "code": "forbidden",
        "message": "'call' needs role controller; you are observer",
    }
    assert api.dispatcher.api_errors == {"unknown_op": 1, "forbidden": 1}


def test_a_subscriber_gets_device_events_until_it_leaves(api: Api) -> None:
    """A subscribed peer gets each device event; one that did not subscribe, or left, not."""
    listener, bystander = MemoryPeer("listener"), MemoryPeer("bystander")
    assert api.ask(listener, "subscribe", topics=["link", "events"]) == {
        "id": 1,
        "ok": True,
        "topics": ["events", "link"],
    }
    api.rig.wire.deliver(api.rig.wire.event(b"\x07up"))
    event = {"event": "device", "data": wire.b64(b"\x07up"), "generation": 1}
    assert listener.events == [wire.encode(event)]
    assert bystander.events == []
    api.dispatcher.leave(listener)
    api.rig.wire.deliver(api.rig.wire.event(b"\x07again"))
    assert len(listener.events) == 1


def test_a_lease_is_the_peers_until_released(api: Api) -> None:
    """A peer's lease keeps the others' calls off the device, shows in status, and ends."""
    holder, other = MemoryPeer("holder"), MemoryPeer("other")
    api.ask(holder, "hello", client="flasher")
    token = api.ask(holder, "lease", seconds=5)["lease"]
    assert api.ask(other, "call", data="AWhp")["error"] == {
        "code": "busy",
        "message": "the device is leased to another client",
    }
    assert api.ask(other, "lease", seconds=5)["error"] == {
        "code": "busy",
        "message": "the device is leased to memory:holder",
    }
    assert api.ask(holder, "call", data="AWhp")["ok"] is True
    api.rig.clock.advance(1)
    assert api.rig.core.lease_status() == {
        "pid": 4242,
        "uid": 1000,
        "client": "flasher",
        "seconds_left": 4.0,
    }
    assert api.ask(holder, "release", lease=token) == {"id": 6, "ok": True}
    assert api.ask(other, "call", data="AWhp")["ok"] is True


def test_a_peer_leaving_ends_its_lease(api: Api) -> None:
    """`leave` ends the lease of the peer that went away: the others are served again."""
    holder, other = MemoryPeer("holder"), MemoryPeer("other")
    api.ask(holder, "lease", seconds=5)
    api.dispatcher.leave(holder)
    assert api.ask(other, "call", data="AWhp")["ok"] is True


def test_a_programs_row_per_peer_counts_its_calls(api: Api) -> None:
    """Each peer's `programs` row shows who it is and how its calls ended."""
    peer = MemoryPeer("row", role="admin")
    api.ask(peer, "hello", client="tool")
    api.ask(peer, "call", data="AWhp")
    assert api.dispatcher.programs([peer]) == [
        {
            "front": "api",
            "who": "pid 4242 tool",
            "pid": 4242,
            "uid": 1000,
            "name": "tool",
            "role": "admin",
            "calls": 1,
            "ok": 1,
            "failed": 0,
            "waiting": 0,
        }
    ]


def test_the_dispatchers_modules_know_no_transport() -> None:
    """dispatch, ops, peer, fanout and inhibit import no socket module and no asyncio transport."""
    for name in ("dispatch", "ops", "peer", "fanout", "inhibit"):
        tree = ast.parse((API / f"{name}.py").read_text())
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not modules & {"verld.fronts.api.conn", "verld.fronts.api.server"}, name
        used = {
            n.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            if n.value.id == "asyncio"
        }
        assert not {u for u in used if u.endswith(("Transport", "Protocol"))}, name
