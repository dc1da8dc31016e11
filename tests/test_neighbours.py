"""The neighbour battery, the suite's part: a representative case per codec × front.

Each case runs one misbehaving neighbour beside one well-behaved client for a couple of
seconds (tests/neighbours.py says what each does and what is counted): the
well-behaved client must see no wrong reply, no link drop and no lost call. Latency is
measured, never asserted here; `tools/soak --neighbours` runs every case longer and
prints the table (docs/reliability.md, "Neighbours").

Cases share one rig per variant (module scope, made when the first case of a variant
runs and stopped when another variant's is asked for), and one broker for all. Besides
the cases: the two holes the battery found in the fronts verld/mqtt and
verld/fronts/modbus, each with a test of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import os
import socket
import struct
import termios
from collections.abc import Iterator
from pathlib import Path

import neighbours as nb
import pytest
from mqttrig import BridgeProc, Mqtt
from neighbours import Case, RigPool
from support import children

from verld.codec.modbus import mbap_frame
from verld.mqtt.device import FairSlots, in_flight, share_full
from verld.session.calls import Call, FairQueue
from verld.testing import DaemonProc, SimProc, write_config

SECONDS = 1.5  #: each case's run

#: (variant, front, behaviour): every codec × front once, every behaviour at least once,
#: and the known holes where they show (the comment says which)
SUITE = [
    ("verl", "api", "silent"),  # fully timed-out calls must not drop the link (a ping next)
    ("verl", "port", "flood"),
    ("verl", "mqtt", "flood"),  # verld-mqtt: one publisher's flood, another's calls
    ("length", "api", "lease"),
    ("length", "port", "slow_reader"),
    ("length", "mqtt", "malformed"),
    ("length", "api", "late_answer"),  # answered past its own timeout: the quiet guard keeps it
    ("line", "api", "terminators"),  # "one line per call"
    ("line", "port", "silent"),  # no ping: a blank line never answered, link kept
    ("line", "mqtt", "silent"),  # verld-mqtt: its calls queue as one client's
    ("line", "api", "no_reply"),  # reply: false and line.no_reply: each written once
    ("line", "port", "no_reply"),  # a program's SET line (no_reply): written, nothing back
    ("line:tcp", "api", "silent"),  # tcp: a timed-out try is a quiet guard, not a reconnect
    ("line:tcp", "port", "abrupt"),
    ("line:tcp", "mqtt", "terminators"),  # "one line per call" on the MQTT front too
    ("line:tcp", "port", "late_answer"),  # past device.timeout: the ping's resync keeps it
    ("modbus-rtu", "api", "oversize"),
    ("modbus-rtu", "api", "terminators"),  # two RTU requests in one call: bad_request
    ("modbus-rtu", "port", "malformed"),
    ("modbus-rtu", "modbus", "churn"),
    ("modbus-rtu", "mqtt", "abrupt"),
    ("modbus-tcp", "api", "slow_reader"),
    ("modbus-tcp", "port", "churn"),
    ("modbus-tcp", "modbus", "silent"),  # the Modbus front: a turn per connection
    ("modbus-tcp", "mqtt", "oversize"),
    ("frame", "api", "silent"),  # answered past its timeout: a stale seq, never delivered
    ("frame", "port", "oversize"),  # a frame that never ends: dropped after the guard
    ("frame", "mqtt", "terminators"),  # a whole frame inside a call's payload
    ("frame:match", "api", "silent"),  # no seq: the late reply's device id is not the next's
    ("frame:match", "port", "malformed"),
    ("frame:match", "mqtt", "flood"),
]


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RigPool]:
    """Rigs on demand, one variant at a time; at the end nothing of theirs is left."""
    fds, before = len(os.listdir("/proc/self/fd")), children()
    rigs = RigPool(tmp_path_factory.mktemp("nb"))
    yield rigs
    rigs.stop()
    gc.collect()  # (a closed paho client keeps its wake-up socketpair until collected)
    assert children() <= before, "a process of the rigs is still running"
    assert len(os.listdir("/proc/self/fd")) <= fds, "file descriptors left open"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("variant", "front", "behaviour"), SUITE, ids=["/".join(c) for c in SUITE])
def test_neighbour(pool: RigPool, variant: str, front: str, behaviour: str) -> None:
    """The well-behaved client sees no wrong reply, no link drop and no lost call."""
    result = pool.run(Case(variant, front, behaviour), SECONDS)
    assert result.clean, result.describe()


def test_the_suite_covers_every_codec_front_and_behaviour() -> None:
    """Every variant × front pair is in SUITE, every behaviour at least once, each where it runs."""
    pairs = {(v, f) for v, f, _ in SUITE}
    suite_variants = {"verl", "length", "line", "line:tcp", "modbus-rtu", "modbus-tcp", "frame"}
    suite_variants |= {"frame:match"}
    assert pairs == {(v, f) for v in suite_variants for f in nb.fronts_of(v)}
    assert {b for _, _, b in SUITE} == set(nb.BEHAVIOURS)
    assert all(b in nb.behaviours_of(f, v) for v, f, b in SUITE)
    assert len({c.id for c in nb.all_cases()}) == len(nb.all_cases())
    text = {c.variant for c in nb.all_cases() if c.behaviour in nb.TEXT_BEHAVIOURS}
    assert text == {v for v, variant in nb.VARIANTS.items() if variant.codec in ("line", "length")}


# --- the Modbus TCP front: one connection's burst is served a turn at a time ------------------


@pytest.mark.timeout(60)
def test_a_pipelined_burst_does_not_hold_up_another_master(pool: RigPool) -> None:
    """Modbus front: another master's request beats most of a 10000-request burst before it."""
    rig = pool.get("modbus-tcp")
    assert rig.modbus_port is not None
    burst = b"".join(mbap_frame(i, nb._read(nb.NB_UNIT, 0)) for i in range(10000))
    address = ("127.0.0.1", rig.modbus_port)
    with (
        socket.create_connection(address, 5) as flood,
        socket.create_connection(address, 5) as good,
    ):
        flood.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        flood.sendall(burst)  # (not read until the other master has its answer)
        good.sendall(mbap_frame(7, nb._read(nb.GOOD_UNIT, nb.GOOD_REGISTER)))
        answer = b""
        while len(answer) < 6 + 5:  # MBAP + unit 03 02 value
            chunk = good.recv(64)
            assert chunk, "the other master's connection closed"
            answer += chunk
        waiting = struct.unpack("i", fcntl.ioctl(flood, termios.FIONREAD, b"\0" * 4))[0]
    # each answer to the burst is at least 9 bytes (an exception: MBAP + unit, fc, code)
    assert waiting // 9 < 5000, f"{waiting // 9} of the burst's answers came first"


# --- verld-mqtt: calls wait in the bridge in turns, within verld's share ---------------------


@pytest.mark.timeout(60)
def test_the_bridge_learns_a_share_smaller_than_its_calls_in_flight(
    pool: RigPool, tmp_path: Path
) -> None:
    """verld-mqtt: client_queue 2, 24 slow calls at once: all ok, none `busy` (turns kept)."""
    sim = SimProc(tmp_path)
    daemon = bridge = client = None
    try:
        config = write_config(
            tmp_path, sim.link, {"api": {"client_queue": 2}, "log": {"level": "INFO"}}
        )
        daemon = DaemonProc(config)
        broker = pool.need_broker()
        base = "nbshare"
        bridge = BridgeProc(
            tmp_path,
            broker,
            {"dev": daemon.socket},
            base=base,
            broker={"client_id": "nb-share-bridge"},
        )
        client = Mqtt(broker)
        client.subscribe(f"{base}/dev/state")
        client.wait(f"{base}/dev/state", lambda m: bool(m.json) and m.json.get("state") == "up")
        client.subscribe("nbshare-replies")
        slow = (b"\x03\x00\x32" + b"x").hex()  # the sim's delay: 50 ms, then the echo
        for i in range(24):
            body = {"hex": slow, "transaction": i}
            client.publish(
                f"{base}/dev/call", body, response_topic="nbshare-replies", correlation=b"c%d" % i
            )
        replies = client.wait("nbshare-replies", count=24, timeout=20)
        codes = sorted(str(m.json.get("ok") or m.json.get("error")) for m in replies)
        assert codes == ["True"] * 24, codes
    finally:
        if client is not None:
            client.close()
        for proc in (bridge, daemon):
            if proc is not None:
                proc.stop()
        sim.stop()


def test_share_full_is_verlds_word_for_a_full_client_share() -> None:
    """share_full matches verld's busy for a full client share, not a lease's or the queue's."""
    queue = FairQueue(limit=10, share=1)
    owner = object()
    assert queue.admit(Call(owner, b"", lambda r: None, timeout=1.0, retry=0)) is None
    reason = queue.admit(Call(owner, b"", lambda r: None, timeout=1.0, retry=0))
    assert reason is not None
    assert share_full({"ok": False, "error": {"code": "busy", "message": reason}})
    for message in ("the device is leased to another client", "the call queue is full"):
        assert not share_full({"ok": False, "error": {"code": "busy", "message": message}})
    assert not share_full({"ok": True, "status": 0})


def test_in_flight_is_the_window_plus_one() -> None:
    """One call on the link at a time: 2 in flight; verl's window 8: 9; unknown: 256."""
    assert (in_flight(1), in_flight(8), in_flight(None), in_flight(10_000)) == (2, 9, 256, 256)


def test_fair_slots_take_turns_by_requester() -> None:
    """A newcomer's call goes next, not behind the rest of another requester's burst."""

    async def scenario() -> list[str]:
        slots = FairSlots(1)
        order: list[str] = []
        gate = asyncio.Event()

        async def call(who: str, hold: asyncio.Event | None = None) -> None:
            await slots.acquire(who)
            order.append(who)
            if hold is not None:
                await hold.wait()
            slots.release()

        burst = [asyncio.create_task(call("flood", gate))]
        burst += [asyncio.create_task(call("flood")) for _ in range(4)]
        for _ in range(3):
            await asyncio.sleep(0)  # (the first holds the slot, the others wait for it)
        good = asyncio.create_task(call("good"))
        for _ in range(3):
            await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*burst, good)
        return order

    assert asyncio.run(scenario()) == ["flood", "good", "flood", "flood", "flood", "flood"]


def test_fair_slots_shrink_and_a_cancelled_wait_gives_nothing_away() -> None:
    """`shrink` lowers the limit (not below 1); a cancelled waiter leaves no slot held."""

    async def scenario() -> tuple[int, int, bool, int]:
        slots = FairSlots(3)
        for _ in range(3):
            await slots.acquire("a")
        changed = slots.shrink(0)
        waiter = asyncio.create_task(slots.acquire("b"))
        await asyncio.sleep(0)
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        for _ in range(3):
            slots.release()
        await slots.acquire("c")
        return slots.limit, slots.busy, changed, slots.waiting

    assert asyncio.run(scenario()) == (1, 1, True, 0)
