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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from verld import daemon as daemon_module
from verld.config import Config, parse_config
from verld.ctl import render
from verld.fronts import base as base_module
from verld.fronts import figures as figures_module
from verld.fronts import registry as fronts_registry
from verld.fronts.base import Core
from verld.fronts.protocol import FrontFigures, Rows
from verld.metrics import Family
from verld.session.calls import CallResult

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
