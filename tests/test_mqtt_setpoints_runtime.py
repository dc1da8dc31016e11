"""verld-mqtt's setpoints in `Entities` on a stand-in device (no broker, no verld): a set runs
its call then polls, what is refused runs nothing, a set that misfits the codec is an error
logged once, a select's polled value is published as its label."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

from structlog.testing import capture_logs

from verld.mqtt.config import parse_bridge_config
from verld.mqtt.device import FairSlots
from verld.mqtt.entities import Entities
from verld.mqtt.outbox import Outbox
from verld.mqtt.tasks import Tasks
from verld.mqtt.topics import DeviceState, Topics

T = Topics("verld/h")
LIMIT, RANGE = parse_bridge_config("""\
devices: {m: /run/m.sock}
entities:
  - {device: m, name: limit, kind: number, poll: {hex: '0103000a0001'},
     value: {register: 0, type: int16, scale: 0.1}, min: -50, max: 50, step: 0.1,
     set: {unit: 1, register: 10, type: int16, scale: 0.1}}
  - {device: m, name: range, kind: select, poll: {hex: '010300320001'},
     value: {register: 0, type: uint16}, options: {low: 1, high: 3},
     set: {unit: 1, register: 50, type: uint16}}
""").entities


class StandIn:
    """What Entities uses of a Device; every call answered with `reply_data`."""

    def __init__(self, codec: str = "modbus-rtu") -> None:
        self.state = DeviceState("up", 4, "/dev/x", codec)
        self.reachable = True
        self.slots = FairSlots(4)
        self.calls: list[bytes] = []
        self.reply_data = bytes.fromhex("0103020003")

    async def call(self, fields: dict[str, Any], size: int) -> dict[str, Any]:
        self.calls.append(base64.b64decode(fields["data"]))
        data = base64.b64encode(self.reply_data).decode()
        return {"ok": True, "status": 0, "generation": 4, "data": data}


def run(
    test: Callable[[Entities, StandIn, Outbox], Awaitable[None]], codec: str = "modbus-rtu"
) -> None:
    async def main() -> None:
        device, outbox = StandIn(codec), Outbox()
        outbox.connect()
        async with Tasks() as tasks:
            subject = Entities((LIMIT, RANGE), cast(Any, {"m": device}), T, outbox, tasks)
            await test(subject, device, outbox)
            tasks.cancel()

    asyncio.run(main())


async def turns(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def values(outbox: Outbox) -> list[tuple[str, Any]]:
    return [
        (item.topic.rsplit("/", 1)[-1], json.loads(item.payload)["value"])
        for item in iter(outbox.pop, None)
        if item.kind == "value"
    ]


def test_a_set_runs_its_call_then_polls() -> None:
    """`-12.3` writes raw -123 with fc 6, then the number is polled at once."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        e.command("m", "limit", b"-12.3", retained=False)
        await turns()
        assert device.calls == [bytes.fromhex("0106000aff85"), bytes.fromhex("0103000a0001")]
        assert e.by_key[("m", "limit")].counts.polls == 1

    run(test)


def test_refused_and_retained_payloads_run_nothing() -> None:
    """Out of range, off the step, a label not an option, a retained value: ignored, no call."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        e.command("m", "limit", b"51", retained=False)
        e.command("m", "limit", b"1.25", retained=False)
        e.command("m", "limit", b"5", retained=True)
        e.command("m", "range", b"mid", retained=False)
        await turns()
        assert device.calls == []
        assert e.by_key[("m", "limit")].counts.ignored == 3
        assert e.by_key[("m", "range")].counts.ignored == 1

    run(test)


def test_a_set_that_misfits_the_codec_is_an_error_logged_once() -> None:
    """A register set on a line device: an error each time, one warning, no call."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        with capture_logs() as logs:
            e.command("m", "limit", b"1", retained=False)
            e.command("m", "limit", b"2", retained=False)
            await turns()
        counts = e.by_key[("m", "limit")].counts
        assert device.calls == [] and (counts.errors, counts.ignored) == (2, 0)
        assert "does not fit the device's codec line" in str(counts.last_error)
        assert [log["event"] for log in logs if log["log_level"] == "warning"] == ["entity_misfit"]

    run(test, codec="line")


def test_a_select_publishes_its_label_and_an_unknown_value_is_an_error() -> None:
    """A read of 3 is published as `high`; a read of 2 (no option) is an error, nothing out."""

    async def test(e: Entities, device: StandIn, outbox: Outbox) -> None:
        live = e.by_key[("m", "range")]
        e.poll_now(live)
        await turns()
        assert values(outbox) == [("range", "high")]
        device.reply_data = bytes.fromhex("0103020002")
        e.poll_now(live)
        await turns()
        assert values(outbox) == [] and live.counts.errors == 1
        assert live.counts.last_error == "2 is not the value of any option"

    run(test)
