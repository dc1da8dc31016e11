"""The floor for any MQTT bridge: a bare MQTT 5 echo responder on aiomqtt.

`tools/bench --gen echo SPEC` runs it (the fleet family starts it): the same client library,
event loop
(uvloop where installed), QoS and publish pattern as verld-mqtt — subscribe to
`<base>/+/call`, and publish each request's payload back to its Response Topic
with its Correlation Data, each publish a task of its own (as the bridge's writer
does) so an acknowledgement never holds up the next request. No JSON, no device:
what is left is the broker round trip and aiomqtt's own cost. Prints READY once
subscribed; SIGTERM ends it (exit 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


async def serve(port: int, base: str, qos: int, nodelay: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    flying: set[asyncio.Task[None]] = set()
    options = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)] if nodelay else []
    async with aiomqtt.Client(
        "127.0.0.1",
        port,
        identifier="bench-echo",
        protocol=aiomqtt.ProtocolVersion.V5,
        clean_start=True,
        max_inflight_messages=20,
        socket_options=options,
    ) as client:
        await client.subscribe(f"{base}/+/call", qos)
        print("READY", flush=True)

        async def answer() -> None:
            async for message in client.messages:
                props = message.properties
                topic = getattr(props, "ResponseTopic", None)
                if not topic:
                    continue
                reply = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
                reply.CorrelationData = getattr(props, "CorrelationData", b"")
                task = asyncio.create_task(
                    client.publish(topic, message.payload, qos, False, reply)
                )
                flying.add(task)
                task.add_done_callback(flying.discard)

        reader = asyncio.create_task(answer())
        await stop.wait()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


def main(spec: str) -> int:
    cfg = json.loads(spec)
    run = serve(
        int(cfg["port"]), str(cfg["base"]), int(cfg.get("qos", 1)), bool(cfg.get("nodelay", True))
    )
    try:
        import uvloop
    except ImportError:
        asyncio.run(run)
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(run)
    return 0
