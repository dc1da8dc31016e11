"""The Modbus load (`--codec modbus-rtu|modbus-tcp`): register owners whose every answer is checked.

verld-sim serves units 1..4 (`UNITS`); unit 9 (`SILENT`) is not served, so it
stays silent like an offline slave. Holding register i of every unit starts at
i (docs/sim.md). Client k owns holding register k on unit 1 + k % 4 and loops:
write a fresh value (fc 6), read it back (fc 3), and check the answer is the
value it last wrote. Its other `--depth - 1` workers read the registers nobody
writes (96..99: their value is their address). A few calls on purpose go to
the silent unit (they must end in `timeout`, "unit 9 offline" included) or read
beyond the table (they must end in exception 02). Requests are built and
replies decoded with `verld.client.modbus`.

The check, and what counts as `wrong`:
- a write's reply must echo it (`check_write`); a read's must decode
  (`decode_registers`) to a value the register may hold: the value of the last
  write that succeeded, or of a later write that failed (a write whose reply was
  lost may still have been done: the sim writes when it reads the request);
- a read of a fixed register must give its address;
- the silent unit must never answer, a read beyond the table must end in
  exception 02, and nothing else may end in an exception.
Written values are distinct per client (k + 100 n: the last two decimal digits
name the owner, and 96..99 are nobody's), so another register's value never
passes, nor one this register held before its last acknowledged write.
Calls may still fail with `timeout`, `link_down`, `busy` while faults run: only a
wrong answer breaks the soak (and a served unit no call to which ever succeeded).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from base64 import b64decode
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from soaklib.api import Conn, Tally
from soaklib.load import REPLY_BOUND, call_fields
from verld.client.modbus import (
    ModbusException,
    ModbusReplyError,
    Request,
    check_write,
    decode_registers,
)

CODECS = ("modbus-rtu", "modbus-tcp")
UNITS = (1, 2, 3, 4)  #: the units verld-sim serves
SILENT = 9  #: a unit nobody serves: every call to it must end in `timeout`
MAX_CLIENTS = 96  #: client k owns holding register k; 96..99 stay as they started
FIXED = (96, 97, 98, 99)  #: registers nobody writes: each holds its address
BEYOND = 200  #: a read here is out of the sim's table (100 registers): exception 02
ILLEGAL_ADDRESS = 0x02
SILENT_SHARE = 0.03  #: of an owner's rounds: one call to the silent unit instead
BEYOND_SHARE = 0.02  #: of an owner's rounds: one read beyond the table instead
#: the heartbeat: unit 1 reads input register 0, a function code no client uses (so a
#: late ping reply can never pass for a client's reply, nor one of theirs for a ping's)
PING = Request.read_input_registers(UNITS[0], 0, 1)

#: `final`: the reads once the faults stopped (not in the per-unit counts, which are the
#: soak's own: a served unit must have answered rightly while the faults ran)
KINDS = ("write", "read", "fixed", "beyond", "silent", "final")
#: `ok`: the right answer; `exception`: the exception expected (`beyond`); `offline`:
#: `timeout` at once, "unit N offline"; `wrong`: any answer that is not the right one
OUTCOMES = ("ok", "exception", "timeout", "offline", "link_down", "busy", "other", "wrong")


def owner_unit(index: int) -> int:
    return UNITS[index % len(UNITS)]


@dataclass
class ModbusTally:
    """The Modbus calls' outcomes, by kind, and per unit (what the clients saw)."""

    kinds: dict[str, Counter[str]] = field(
        default_factory=lambda: {kind: Counter[str]() for kind in KINDS}
    )
    units: dict[int, Counter[str]] = field(default_factory=dict)

    def count(self, kind: str, unit: int, outcome: str) -> None:
        self.kinds[kind][outcome] += 1
        if kind == "final":
            return
        per_unit = self.units.setdefault(unit, Counter())
        per_unit["calls"] += 1
        per_unit[outcome] += 1

    def total(self, outcome: str) -> int:
        return sum(c[outcome] for c in self.kinds.values())

    def report(self) -> dict[str, Any]:
        return {
            **{outcome: self.total(outcome) for outcome in OUTCOMES},
            "by_kind": {k: {o: c[o] for o in OUTCOMES} for k, c in self.kinds.items()},
            "by_unit": {
                str(u): {"calls": c["calls"], "ok": c["ok"], "wrong": c["wrong"]}
                for u, c in sorted(self.units.items())
            },
        }


def failure(msg: dict[str, Any] | None) -> str | None:
    """The outcome of a reply that carries no answer (an API error), else None."""
    if msg is None:
        return "other"  # no reply at all: `lost` counts it
    if msg.get("ok") or "status" in msg:
        return None  # the unit answered (status 0, or an exception code)
    code = str((msg.get("error") or {}).get("code"))
    if code == "timeout":
        return "offline" if "offline" in str(msg["error"].get("message", "")) else "timeout"
    return code if code in ("link_down", "busy") else "other"


def answer(msg: dict[str, Any]) -> bytes:
    return b64decode(msg.get("data", ""))


class Caller:
    """Calls on one connection, each judged as it ends; `wrong` ones noted."""

    def __init__(
        self, conn: Conn, tally: Tally, mb: ModbusTally, rng: random.Random | None
    ) -> None:
        """`rng`: vary the calls' options (`load.call_fields`); None: the daemon's defaults."""
        self.conn, self.tally, self.mb, self.rng = conn, tally, mb, rng

    async def call(self, data: bytes) -> dict[str, Any] | None:
        """The reply to one call (None: none within the bound, or the connection broke)."""
        fields = call_fields(self.rng) if self.rng is not None else {}
        pending = self.conn.send_call(data, echo=False, **fields)
        self.tally.calls += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pending.done.wait(), REPLY_BOUND)
        return pending.msg

    def wrong(self, kind: str, unit: int, why: str, msg: dict[str, Any]) -> None:
        self.mb.count(kind, unit, "wrong")
        self.tally.note(f"{self.conn.name}: {kind} on unit {unit}: {why}: {str(msg)[:200]}")

    async def checked(
        self, kind: str, data: bytes, judge: Callable[[bytes, dict[str, Any]], str | None]
    ) -> str:
        """Call and count the outcome; `judge` says why an answer is wrong (None: right)."""
        unit = data[0]
        msg = await self.call(data)
        outcome = failure(msg)
        if outcome is not None:
            if msg is not None:
                self.mb.count(kind, unit, outcome)
            return outcome
        assert msg is not None
        try:
            why = judge(data, msg)
        except (ModbusReplyError, ModbusException) as exc:
            why = str(exc)
        if why is not None:
            self.wrong(kind, unit, why, msg)
            return "wrong"
        outcome = "ok" if msg.get("ok") else "exception"
        self.mb.count(kind, unit, outcome)
        return outcome


def ok_status(msg: dict[str, Any]) -> str | None:
    status = msg.get("status")
    return None if msg.get("ok") and status == 0 else f"status {status}, expected an answer"


def judge_fixed(request: bytes, msg: dict[str, Any]) -> str | None:
    why = ok_status(msg)
    if why is None:
        (value,) = decode_registers(request, answer(msg))
        address = int.from_bytes(request[2:4], "big")
        if value != address:
            why = f"read {value} from register {address}, which holds {address}"
    return why


def judge_beyond(request: bytes, msg: dict[str, Any]) -> str | None:
    if msg.get("ok") or msg.get("status") != ILLEGAL_ADDRESS:
        return f"status {msg.get('status')}, expected exception {ILLEGAL_ADDRESS}"
    try:
        decode_registers(request, answer(msg))
    except ModbusException as exc:
        if exc.code == ILLEGAL_ADDRESS:
            return None
        return f"exception {exc.code} in the data, status {ILLEGAL_ADDRESS}"
    return "data of a normal response with an exception status"


def judge_silent(request: bytes, msg: dict[str, Any]) -> str:
    return f"unit {request[0]} is not served, yet status {msg.get('status')} came back"


class Owner:
    """One client's register and what it may hold."""

    def __init__(self, index: int) -> None:
        self.unit = owner_unit(index)
        self.register = index
        #: the values the register may hold now: the last acknowledged write's, plus
        #: those of later writes that failed (done or not, nobody knows)
        self.possible: set[int] = {index}
        self.round = 0

    def fresh(self) -> int:
        """The next value to write: k + 100 n (n = 1..654, then round again)."""
        self.round = self.round % 654 + 1
        return self.register + 100 * self.round

    async def write_read(self, caller: Caller) -> None:
        value = self.fresh()
        write = Request.write_register(self.unit, self.register, value)

        def judge_write(request: bytes, msg: dict[str, Any]) -> str | None:
            why = ok_status(msg)
            if why is None:
                check_write(request, answer(msg))
            return why

        if await caller.checked("write", write, judge_write) == "ok":
            self.possible = {value}
        else:
            self.possible.add(value)  # failed: it may or may not have been done

        def judge_read(request: bytes, msg: dict[str, Any]) -> str | None:
            why = ok_status(msg)
            if why is None:
                (got,) = decode_registers(request, answer(msg))
                if got not in self.possible:
                    return (
                        f"register {self.register} read {got}, "
                        f"it may hold only {sorted(self.possible)}"
                    )
                self.possible = {got}  # every write before this read has been done (or lost)
            return why

        read = Request.read_holding_registers(self.unit, self.register, 1)
        await caller.checked("read", read, judge_read)


async def client(
    index: int,
    sock: str,
    depth: int,
    until: float,
    rng: random.Random,
    tally: Tally,
    mb: ModbusTally,
) -> None:
    """The owner of register `index` plus `depth - 1` readers of the fixed registers,
    until `until`; reconnect every few hundred calls."""
    owner = Owner(index)
    while time.monotonic() < until:
        conn = Conn(tally, f"client{index}")
        try:
            await conn.open(sock)
        except OSError:
            await asyncio.sleep(0.2)
            continue
        budget = rng.randint(100, 1500)
        caller = Caller(conn, tally, mb, rng)

        def more(conn: Conn = conn) -> bool:
            nonlocal budget
            budget -= 1
            return budget >= 0 and time.monotonic() < until and not conn.broken

        async def owning(caller: Caller = caller) -> None:
            while more():
                roll = rng.random()
                if roll < SILENT_SHARE:
                    read = Request.read_holding_registers(SILENT, owner.register, 1)
                    await caller.checked("silent", read, judge_silent)
                elif roll < SILENT_SHARE + BEYOND_SHARE:
                    read = Request.read_holding_registers(owner.unit, BEYOND, 1)
                    await caller.checked("beyond", read, judge_beyond)
                else:
                    await owner.write_read(caller)

        async def reading(caller: Caller = caller) -> None:
            while more():
                read = Request.read_holding_registers(rng.choice(UNITS), rng.choice(FIXED), 1)
                await caller.checked("fixed", read, judge_fixed)

        await asyncio.gather(owning(), *(reading() for _ in range(depth - 1)))
        await asyncio.sleep(0.3)  # a late duplicate would arrive now
        await conn.close()
        conn.settle()


def abandoned_read(i: int, rng: random.Random) -> bytes:
    """What the abandoner sends on Modbus: reads of fixed registers, some to the silent unit."""
    unit = SILENT if rng.random() < 0.2 else rng.choice(UNITS)
    return Request.read_holding_registers(unit, rng.choice(FIXED), 1)


async def final_check(sock: str, tally: Tally, mb: ModbusTally, seconds: float = 10.0) -> bool:
    """Once the faults stop: every served unit answers a read of a fixed register rightly
    (a unit still offline, or a lost try, gets more tries until `seconds` have passed)."""
    conn = Conn(tally, "final")
    await conn.open(sock)
    caller = Caller(conn, tally, mb, None)
    deadline = time.monotonic() + seconds
    right = 0
    try:
        for unit in UNITS:
            read = Request.read_holding_registers(unit, FIXED[-1], 1)
            while True:
                outcome = await caller.checked("final", read, judge_fixed)
                if outcome in ("ok", "wrong") or conn.broken or time.monotonic() > deadline:
                    right += outcome == "ok"
                    break
                await asyncio.sleep(0.3)
    finally:
        await conn.close()
        conn.settle()
    return right == len(UNITS)
