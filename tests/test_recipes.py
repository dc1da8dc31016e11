"""docs/architecture.md's recipes, walked: a front and a codec added exactly as the
recipes say, registered in the test, and working end to end.

A test cannot add a line to a source file, so where a recipe says "one line in
`FRONTS`" (or `_SPECS`, `FIGURES`) the test puts its registration where the daemon,
Core and verlctl read those lists; nothing else of verld is touched. If a recipe
needs a step it does not name, these tests fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from verld import cmdline
from verld import daemon as daemon_module
from verld.codec import registry
from verld.codec.base import PortRequest
from verld.codec.spec import CodecSpec
from verld.config import Config, parse_config
from verld.ctl import render
from verld.fronts import base as base_module
from verld.fronts import figures as figures_module
from verld.fronts import registry as fronts_registry
from verld.fronts.base import Core
from verld.fronts.protocol import FrontFigures, Rows
from verld.fronts.stream import ProgramStream
from verld.metrics import Family
from verld.session.calls import CallResult
from verld.sim.device import make_personality
from verld.sim.personality import Request
from verld.testing.session import SessionRig

# --- a throwaway front: one hex line per call over a Unix socket ----------------------


class HexLineFront:
    """A program writes a request's payload as a hex line and reads the reply's status
    and data back as one: the smallest front the recipe makes."""

    name = "hexline"

    def __init__(self, cfg: Config, core: Core, path: Path) -> None:
        self.cfg, self.core, self.path = cfg, core, path
        self.counts = core.front(self.name)
        self.server: asyncio.AbstractServer | None = None
        self.clients: set[asyncio.StreamWriter] = set()
        self.lines = 0

    async def claim(self) -> None:
        if self.path.exists():
            raise OSError(f"{self.path} is taken")

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._serve, str(self.path))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.add(writer)
        loop = asyncio.get_running_loop()
        try:
            while line := await reader.readline():
                self.lines += 1
                answer: asyncio.Future[CallResult] = loop.create_future()
                call = self.core.make_call(
                    self.counts, writer, bytes.fromhex(line.decode()), answer.set_result
                )
                self.core.submit(call)
                result = await answer
                out = result.error or f"{result.status:02x} {result.data.hex()}"
                writer.write(out.encode() + b"\n")
        finally:
            self.core.forget(writer)
            self.clients.discard(writer)
            writer.close()

    def reload(self, cfg: Config, changed: list[str]) -> None:
        self.cfg = cfg

    def stop_accepting(self) -> None:
        if self.server is not None:
            self.server.close()

    def status(self) -> dict[str, Any]:
        return {"hexline": {"clients": len(self.clients), "lines": self.lines}}

    def programs(self) -> list[dict[str, Any]]:
        return [
            {"front": self.name, "who": "hexline", "calls": self.lines, "ok": 0, "failed": 0}
            for _ in self.clients
        ]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for writer in list(self.clients):
            writer.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def hexline_metrics(st: Mapping[str, Any]) -> list[Family]:
    """Its metric: the lines it read."""
    family = Family("verld_hexline_lines_total", "counter", "Lines a hexline program wrote.")
    family.add(st.get("hexline", {}).get("lines", 0))
    return [family]


def hexline_rows(st: Mapping[str, Any]) -> Rows:
    """Its row of `verlctl status`."""
    part = st.get("hexline") or {}
    return [("hexline", f"{part.get('clients', 0)} clients, {part.get('lines', 0)} lines")]


HEXLINE_FIGURES = FrontFigures("hexline", hexline_metrics, hexline_rows)


async def _walk_the_front(tmp_path: Path) -> dict[str, Any]:
    cfg = parse_config(f"device:\n  port: sim\napi:\n  socket: {tmp_path / 'verld.sock'}\n")
    d = daemon_module.Daemon(cfg, None)
    async with contextlib.AsyncExitStack() as stack:
        await d.start(stack)
        assert d.core is not None
        core = d.core
        running = asyncio.create_task(d.run())
        for _ in range(400):
            if core.status()["link"]["state"] == "up":
                break
            await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "hex.sock"))
        writer.write(b"0168690a\n")  # the sim's echo action: "hi\n" back
        answer = await asyncio.wait_for(reader.readline(), 20)
        st, programs, text = core.status(), core.programs(), core.metrics_text()
        writer.close()
        await writer.wait_closed()
        d.stopping.set()
        code = await running
    return {"answer": answer, "status": st, "programs": programs, "metrics": text, "code": code}


@pytest.mark.timeout(60)
def test_a_front_added_as_the_recipe_says_serves_and_shows_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A front in FRONTS and FIGURES alone serves calls and shows in status, metrics, rows."""
    reg = fronts_registry.Registration(
        lambda cfg, core: HexLineFront(cfg, core, tmp_path / "hex.sock"), fails="cannot_hexline"
    )
    fronts = (*fronts_registry.FRONTS, reg)
    monkeypatch.setattr(fronts_registry, "FRONTS", fronts)
    monkeypatch.setattr(daemon_module, "FRONTS", fronts)  # (the daemon's name for it)
    figures = (*figures_module.FIGURES, HEXLINE_FIGURES)
    monkeypatch.setattr(figures_module, "FIGURES", figures)
    monkeypatch.setattr(base_module, "FIGURES", figures)  # (Core's and verlctl's names)
    monkeypatch.setattr(render, "FIGURES", figures)
    seen = asyncio.run(_walk_the_front(tmp_path))
    assert seen["answer"] == b"00 68690a\n"
    assert seen["status"]["hexline"] == {"clients": 1, "lines": 1}
    assert {"front": "hexline", "who": "hexline", "calls": 1, "ok": 0, "failed": 0} in seen[
        "programs"
    ]["programs"]
    assert "verld_hexline_lines_total 1" in seen["metrics"]
    assert 'verld_front_calls_total{front="hexline",outcome="ok"} 1' in seen["metrics"]
    assert "1 clients, 1 lines" in render.render_status(seen["status"])
    assert seen["code"] == 0
    assert not (tmp_path / "hex.sock").exists()  # closed with the daemon


# --- a throwaway codec: the `tag8` plugin's module, registered as a built-in ------------
# (tests/plugins/verld-tag8: kind, length, body, xor of the body; all three sides). The
# plugin tests install it as a package; here its module is added the built-in way.
_TAG8_FILE = Path(__file__).parent / "plugins" / "verld-tag8" / "verld_tag8.py"
_found = importlib.util.spec_from_file_location("recipe_tag8", _TAG8_FILE)
assert _found is not None and _found.loader is not None
tag8_module = importlib.util.module_from_spec(_found)
_found.loader.exec_module(tag8_module)
TAG8: CodecSpec = tag8_module.TAG8
REQ, REP = tag8_module.REQUEST, tag8_module.REPLY
tag8 = tag8_module.frame


class Program:
    """A program on a virtual port: the edge of its `ProgramStream`."""

    def __init__(self) -> None:
        self.out = bytearray()

    def write(self, data: bytes | bytearray) -> int:
        self.out += data
        return len(data)

    def want_writable(self, want: bool) -> None:
        return None


def test_a_codec_added_as_the_recipe_says_runs_on_every_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A codec in the registry alone is a config choice, the sim's device and a port's framing."""
    monkeypatch.setitem(registry.CODECS, "tag8", TAG8)  # (its line in `_SPECS`)
    assert "tag8" in cmdline.parser().format_help()
    cfg = parse_config(
        "device: {port: /dev/fake, codec: tag8, max_payload: 64, timeout: 1.0}\n"
        "heartbeat: {interval: 0}\napi: {socket: /tmp/verld.sock}\n"
    )
    sim = make_personality("tag8", 64)  # the simulator's device, over TAG8.commands
    host = TAG8.host(cfg)

    def device(request: PortRequest) -> tuple[int, bytes]:
        """The sim answers what the session wrote; its framing read by the host side."""
        framed = sim.decode(tag8(REQ, request.payload))
        (reply,) = host.feed(b"".join(sim.respond(Request(0, framed[0].payload)).reply), True)
        assert reply.status is not None
        return reply.status, reply.data

    rig = SessionRig(cfg, core=True)
    rig.connect(device)
    program = Program()
    stream = ProgramStream(
        rig.core, cfg, program, rig.clock, kind="port", where={"link": "/tmp/x"}, write=True
    )
    stream.attach()
    stream.feed(b"\x00" + tag8(REQ, b"\x01hi"))  # noise, then the sim's echo command
    rig.answer(device)
    assert program.out == tag8(REP, b"\x00hi")
    assert stream.figures()["ok"] == 1
    rig.wire.deliver(rig.wire.event(b"tick"))  # a device event reaches the listeners
    assert rig.events[-1][0] == b"tick"
