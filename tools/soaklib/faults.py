"""The fault driver: random mixes of faults through the sim's control socket."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import Any

from verld.testing import sim_control_async

FAULTS = (
    "latency",
    "jitter",
    "drop",
    "corrupt",
    "garbage",
    "baud",
    "hang",
    "unplug",
    "powercycle",
)

#: faults a codec cannot take, and why: `all` leaves them out, naming one is an error
NOT_ON: dict[str, dict[str, str]] = {
    "modbus-tcp": {
        "corrupt": "Modbus TCP has no checksum: the sim's flipped PDU byte reaches the "
        "client as data, so a wrong value would be the sim's doing, not verld's",
    },
}


def applicable(codec: str, faults: list[str], named: bool) -> tuple[list[str], dict[str, str]]:
    """The faults to drive on `codec`, and those left out (with why). `named`: the user
    listed them (ValueError for one the codec cannot take) rather than asking for all."""
    excluded = NOT_ON.get(codec, {})
    left_out = {name: excluded[name] for name in faults if name in excluded}
    if named and left_out:
        raise ValueError(
            "; ".join(
                f"fault {name} does not apply to {codec}: {why}" for name, why in left_out.items()
            )
        )
    return [name for name in faults if name not in excluded], left_out


class Control:
    """The sim's control socket (verld.testing's client): a RuntimeError when not ok."""

    def __init__(self, path: str) -> None:
        self.path = path

    async def __call__(self, command: str) -> dict[str, Any]:
        answer = await sim_control_async(self.path, command, timeout=10)
        if not answer.get("ok"):
            raise RuntimeError(f"sim control {command!r}: {answer}")
        return answer


def fault_commands(name: str, rng: random.Random) -> list[str]:
    """The control commands that start one fault (`reset` ends them all)."""
    if name == "latency":
        return [f"set latency {rng.randint(20, 400)}"]
    if name == "jitter":
        return [f"set jitter {rng.randint(20, 600)}"]
    if name in ("drop", "corrupt"):
        return [f"set {name} {rng.uniform(0.02, 0.4):.3f}"]
    if name == "garbage":
        return [f"set garbage {rng.uniform(0.05, 0.8):.3f}", f"garbage {rng.randint(1, 20000)}"]
    if name == "baud":
        return [f"set baud {rng.choice((4800, 9600, 19200, 57600, 115200))}"]
    if name == "hang":
        return ["hang"]
    if name == "unplug":
        return ["unplug 0"]
    if name == "powercycle":
        return [f"unplug {rng.uniform(0.05, 2.0):.2f}"]
    raise ValueError(name)


async def fault_driver(
    control: Control, faults: list[str], until: float, rng: random.Random, episodes: Counter[str]
) -> None:
    """Random mixes of 1..3 faults, each mix held 0.5..4 s, then a calm 0.2..1.5 s."""
    while faults and time.monotonic() < until:
        mix = rng.sample(faults, rng.randint(1, min(3, len(faults))))
        for name in mix:
            episodes[name] += 1
            for command in fault_commands(name, rng):
                await control(command)
        hold = rng.uniform(0.5, 4.0)
        while hold > 0 and time.monotonic() < until:
            await asyncio.sleep(min(hold, 0.5))
            hold -= 0.5
            if "garbage" in mix and rng.random() < 0.5:
                await control(f"garbage {rng.randint(1, 20000)}")
        await control("reset")
        await asyncio.sleep(rng.uniform(0.2, 1.5))
    await control("reset")
