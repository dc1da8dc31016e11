"""The fleet family's load generator (`gen` kind `mqtt`): callers of N devices.

Strategy: `callers` callers, each keeping `inflight` calls outstanding, spread
round-robin over `targets` (device name → verld socket or request topic). Every
call's data is unique (`<caller>.<seq>.<device>.` then filler) and every reply is
checked: status 0 and the echoed bytes (so the right request), on the device the
request went to, each correlation answered once — a second reply is a duplicate,
one still missing after the drain is lost. Per device, the replies counted here
are compared by the orchestrator with that verld's own `calls_ok`.

- `direct`: verld's Unix socket with the Python client, lock-step with the
  blocking `verld.client.Client` (callers × inflight = 1), else `AsyncClient`s in
  one event loop (uvloop where installed), one connection per caller and device;
- `bridge` / `echo`: paho-mqtt MQTT 5 clients (one connection per caller) driven
  by one select loop in this thread (paho's external-loop calls, no paho thread,
  so nothing but the socket wakes it), publishing `{"hex", "transaction"}` with a
  Response Topic and Correlation Data at QoS 1; `bridge` checks verld-mqtt's JSON
  reply, `echo` that the payload came back byte for byte.

The window and the RESULT line are `gen`'s, as for every generator.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from paho.mqtt import client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from benchlib.meter import Meter
from verld.client import AsyncClient, Client, ClientError

Window = Callable[[], tuple[int, int]]


@dataclass(frozen=True)
class FleetSpec:
    kind: str  #: direct | bridge | echo
    targets: list[list[str]]  #: [device name, socket path or request topic]
    callers: int
    inflight: int
    size: int = 32  #: echoed data bytes per call
    port: int = 0  #: the broker's (bridge, echo)
    reply_base: str = "bench/reply"
    tag: str = "w"
    qos: int = 1
    drain: float = 15.0
    nodelay: bool = True  #: TCP_NODELAY on the callers' sockets (paho leaves Nagle on)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> FleetSpec:
        return cls(**json.loads(text))


def body(spec: FleetSpec, caller: int, seq: int, device: str) -> bytes:
    head = f"{spec.tag}.{caller}.{seq}.{device}.".encode()
    return head + b"x" * max(0, spec.size - len(head))


@dataclass
class Tally:
    """The meter, plus the replies per device (in the window or not)."""

    meter: Meter = field(default_factory=Meter)
    per_device: dict[str, int] = field(default_factory=dict)

    def good(self, device: str, ns: int) -> None:
        self.meter.good(ns)
        self.per_device[device] = self.per_device.get(device, 0) + 1


# --- direct: verld's socket ----------------------------------------------------------------


def direct_lockstep(spec: FleetSpec, tally: Tally, window: Window) -> int:
    clients = [(name, Client(path, timeout=10.0).connect()) for name, path in spec.targets]
    seq = 0
    try:
        tally.meter.t0, tally.meter.t1 = window()
        t1 = tally.meter.t1
        while time.monotonic_ns() < t1:
            name, client = clients[seq % len(clients)]
            seq += 1
            data = body(spec, 0, seq, name)
            tally.meter.sent += 1
            t0 = time.monotonic_ns()
            try:
                reply = client.call(b"\x01" + data)
            except ClientError as exc:
                tally.meter.error(f"{name}: {exc}")
                continue
            ns = time.monotonic_ns() - t0
            if reply.status == 0 and reply.data == data:
                tally.good(name, ns)
            else:
                tally.meter.error(f"{name}: got {reply.status} {reply.data[:40]!r}")
    finally:
        for _, client in clients:
            client.close()
    return 0


async def direct_pipelined(spec: FleetSpec, tally: Tally, window: Window) -> int:
    meter = tally.meter
    conns = [
        [(name, await AsyncClient(path).connect()) for name, path in spec.targets]
        for _ in range(spec.callers)
    ]
    meter.t0, meter.t1 = window()  # (blocks the loop: nothing runs on it yet)

    async def slot(caller: int, turn: itertools.count[int], seqs: itertools.count[int]) -> None:
        mine = conns[caller]
        while not meter.stopping:
            name, client = mine[next(turn) % len(mine)]
            data = body(spec, caller, next(seqs), name)
            meter.sent += 1
            t0 = time.monotonic_ns()
            try:
                reply = await client.call(b"\x01" + data)
            except ClientError as exc:
                meter.error(f"{name}: {exc}")
                continue
            ns = time.monotonic_ns() - t0
            if reply.status == 0 and reply.data == data:
                tally.good(name, ns)
            else:
                meter.error(f"{name}: got {reply.status} {reply.data[:40]!r}")

    tasks = []
    for caller in range(spec.callers):
        turn, seqs = itertools.count(caller), itertools.count(1)
        tasks += [asyncio.create_task(slot(caller, turn, seqs)) for _ in range(spec.inflight)]
    # until T1 (a timer may ring a little early: polled, once or twice)
    while (left := meter.t1 - time.monotonic_ns()) > 0:  # noqa: ASYNC110
        await asyncio.sleep(left / 1e9 + 0.001)
    meter.stopping = True
    _, pending = await asyncio.wait(tasks, timeout=spec.drain)
    for task in pending:
        task.cancel()
    for mine in conns:
        for _, client in mine:
            await client.close()
    return len(pending)


# --- bridge / echo: MQTT 5 --------------------------------------------------------------------


class Caller:
    """One paho MQTT 5 connection, its outstanding calls by Correlation Data."""

    def __init__(self, spec: FleetSpec, number: int, tally: Tally) -> None:
        self.spec, self.number, self.tally = spec, number, tally
        self.reply_topic = f"{spec.reply_base}/c{number}"
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2,
            protocol=paho.MQTTv5,
            client_id=f"bench-{spec.tag}-c{number}",
        )
        self.client.on_message = self._on_message
        self.client.on_connect = lambda *a: setattr(self, "connected", True)
        self.client.on_subscribe = lambda *a: setattr(self, "subscribed", True)
        self.connected = self.subscribed = False
        #: correlation → (sent at, device, payload, expected reply check value)
        self.outstanding: dict[bytes, tuple[int, str, bytes, str]] = {}
        self.inbox: list[tuple[int, bytes, bytes]] = []
        self.seq = 0
        self.turn = number

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        corr = getattr(msg.properties, "CorrelationData", None) or b""
        self.inbox.append((time.monotonic_ns(), corr, msg.payload))

    def send(self) -> None:
        targets = self.spec.targets
        name, topic = targets[self.turn % len(targets)]
        self.turn += 1
        self.seq += 1
        data = body(self.spec, self.number, self.seq, name)
        payload = b'{"hex":"01%s","transaction":%d}' % (data.hex().encode(), self.seq)
        corr = b"%s-%d-%d" % (self.spec.tag.encode(), self.number, self.seq)
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic = self.reply_topic
        props.CorrelationData = corr
        self.tally.meter.sent += 1
        self.outstanding[corr] = (time.monotonic_ns(), name, payload, data.hex())
        self.client.publish(topic, payload, qos=self.spec.qos, properties=props)

    def settle(self) -> int:
        """Check the replies read; how many calls finished."""
        done, self.inbox = self.inbox, []
        meter = self.tally.meter
        for at, corr, payload in done:
            call = self.outstanding.pop(corr, None)
            if call is None:
                meter.stale += 1
                meter.error(
                    f"c{self.number}: a reply to no outstanding call ({corr!r}): "
                    "a duplicate or a stranger"
                )
                continue
            t0, name, sent, hexed = call
            if self._right(payload, sent, hexed, corr):
                self.tally.good(name, at - t0)
            else:
                meter.error(f"{name} {corr!r}: got {payload[:120]!r}")
        return len(done)

    def _right(self, payload: bytes, sent: bytes, hexed: str, corr: bytes) -> bool:
        if self.spec.kind == "echo":
            return payload == sent
        try:
            reply = json.loads(payload)
        except ValueError:
            return False
        return bool(
            reply.get("ok") is True
            and reply.get("status") == 0
            and reply.get("hex") == hexed
            and reply.get("transaction") == int(corr.rsplit(b"-", 1)[1])
        )


class Pump:
    """paho's external-loop calls over every caller's socket, in one select loop."""

    def __init__(self, callers: list[Caller]) -> None:
        self.callers = callers
        self.sel = selectors.DefaultSelector()
        self.writing: set[int] = set()
        self.misc_at = time.monotonic() + 1

    def register(self, caller: Caller) -> None:
        sock = caller.client.socket()
        assert sock is not None
        self.sel.register(sock, selectors.EVENT_READ, caller)

    def once(self, timeout: float, refill: bool) -> None:
        for key, mask in self.sel.select(timeout):
            caller: Caller = key.data
            if mask & selectors.EVENT_READ:
                caller.client.loop_read(64)
                finished = caller.settle()
                if refill:
                    for _ in range(finished):
                        caller.send()
            if mask & selectors.EVENT_WRITE:
                caller.client.loop_write()
        for caller in self.callers:
            self._want_write(caller)
        if time.monotonic() >= self.misc_at:
            self.misc_at = time.monotonic() + 1
            for caller in self.callers:
                caller.client.loop_misc()

    def _want_write(self, caller: Caller) -> None:
        sock = caller.client.socket()
        if sock is None:
            return
        fd = sock.fileno()
        want = caller.client.want_write()
        if want != (fd in self.writing):
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self.sel.modify(sock, events, caller)
            (self.writing.add if want else self.writing.discard)(fd)

    def until(self, what: str, done: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit(f"fleet worker: timed out waiting for {what}")
            self.once(0.05, refill=False)


def mqtt(spec: FleetSpec, tally: Tally, window: Window) -> int:
    callers = [Caller(spec, n, tally) for n in range(spec.callers)]
    pump = Pump(callers)
    for caller in callers:
        caller.client.connect("127.0.0.1", spec.port, keepalive=60, clean_start=True)
        sock = caller.client.socket()
        if spec.nodelay and isinstance(sock, socket.socket):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pump.register(caller)
    pump.until("the callers' CONNACKs", lambda: all(c.connected for c in callers))
    for caller in callers:
        caller.client.subscribe(caller.reply_topic, qos=spec.qos)
    pump.until("the callers' SUBACKs", lambda: all(c.subscribed for c in callers))
    meter = tally.meter
    meter.t0, meter.t1 = window()
    for caller in callers:
        for _ in range(spec.inflight):
            caller.send()
    while (left := meter.t1 - time.monotonic_ns()) > 0:
        pump.once(min(left / 1e9, 0.25), refill=True)
    deadline = time.monotonic() + spec.drain
    while any(c.outstanding for c in callers) and time.monotonic() < deadline:
        pump.once(0.05, refill=False)
    missing = sum(len(c.outstanding) for c in callers)
    for caller in callers:
        caller.client.disconnect()
    return missing


def main(text: str, window: Window) -> dict[str, Any]:
    """Connect, wait for the window, call until T1, drain: the RESULT object."""
    spec = FleetSpec.from_json(text)
    tally = Tally()
    if spec.kind == "direct" and spec.callers * spec.inflight == 1:
        missing = direct_lockstep(spec, tally, window)
    elif spec.kind == "direct":
        try:
            import uvloop
        except ImportError:
            missing = asyncio.run(direct_pipelined(spec, tally, window))
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                missing = runner.run(direct_pipelined(spec, tally, window))
    else:
        missing = mqtt(spec, tally, window)
    extra = {"per_device": tally.per_device, "duplicates": tally.meter.stale}
    return tally.meter.result(missing, extra)
