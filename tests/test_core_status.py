"""`Core.status`'s own parts over a real link: an `rfc2217://` link's modem lines."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from test_rfc2217_link import Server, server_factory

from verld.codec.rfc2217 import SERVER, Cmd
from verld.codec.telnet import Telnet
from verld.config import parse_config
from verld.fronts.base import Core
from verld.links.link import LinkState, Transition

pytestmark = pytest.mark.timeout(30)
__all__ = ["server_factory"]  # (the scripted server's fixture, used here)


class _Up(asyncio.Event):
    """A `Listener` set once the link is up."""

    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        return None

    def link_event(self, transition: Transition) -> None:
        if transition.state is LinkState.UP:
            self.set()


def test_the_modem_lines_the_server_told_are_in_status(
    server_factory: Callable[..., Server],
) -> None:
    """An rfc2217:// link shows the lines its server last told (CTS on), off before."""
    notify = Telnet(server=True, comport=True).comport(SERVER + Cmd.NOTIFY_MODEMSTATE, b"\x10")
    server = server_factory(greeting=notify)
    cfg = parse_config(f"device: {{port: 'rfc2217://127.0.0.1:{server.port}', codec: line}}\n")

    async def run() -> tuple[dict[str, bool], dict[str, bool]]:
        core = Core(cfg, clock=asyncio.get_running_loop())
        up = _Up()
        core.listeners.append(up)
        before = core.status()["link"]["modem"]
        task = asyncio.create_task(core.run())
        await up.wait()
        told = core.status()["link"]["modem"]
        await core.close(0)
        await task
        return before, told

    before, told = asyncio.run(run())
    assert before == {"cts": False, "dsr": False, "ri": False, "cd": False}
    assert told == {"cts": True, "dsr": False, "ri": False, "cd": False}
