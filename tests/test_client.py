"""The client library (blocking and asyncio) against a real verld, and a scripted one."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verld.client import (
    AsyncClient,
    Client,
    ClientError,
    Reply,
    Unreachable,
    call_request,
    encode_message,
    reply_from,
)
from verld.client.messages import new_decoder, parse_message
from verld.testing import DaemonProc, SimProc, write_config


class TestTimeout:
    @pytest.mark.timeout(20)
    def test_a_new_timeout_applies_to_an_open_connection(self, daemon: DaemonProc) -> None:
        """Setting `timeout` after connecting changes how long a read waits (event streams)."""
        with Client(daemon.socket, timeout=30.0) as c:
            c.timeout = 0.2
            start = time.monotonic()
            with pytest.raises(ClientError) as info:
                c.receive()  # nothing comes: the read gives up after the new timeout
            assert info.value.code == "timeout"
            assert time.monotonic() - start < 5


# --- calls with no answer: reply=False ------------------------------------------------------
#: the reply verld gives a call it did not await (line devices also carry "text": "")
NOT_AWAITED = {"ok": True, "status": 0, "data": "", "ms": 0.4, "generation": 1, "reply": False}


class OneReplyServer:
    """A Unix socket that takes one request, keeps it, and answers `answer` with its id."""

    def __init__(self, path: Path, answer: dict[str, Any]) -> None:
        self.path = str(path)
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(1)
        self._listener.settimeout(10)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            conn.settimeout(10)
            decoder = new_decoder()
            bodies: list[bytes] = []
            while not bodies:
                bodies = decoder.feed(conn.recv(65536))
            request = parse_message(bodies[0])
            self.requests.append(request)
            conn.sendall(encode_message({**self.answer, "id": request["id"]}))
            conn.recv(1)  # until the client closes

    def close(self) -> None:
        self._thread.join(10)
        self._listener.close()


class TestReplyFalse:
    def test_a_plain_call_request_is_unchanged(self) -> None:
        """A call without `reply` frames exactly the bytes it did before the field existed."""
        framed = encode_message({**call_request(b"ab", None, None, False), "id": 1})
        assert framed == b'\x00\x00\x00"{"op":"call","data":"YWI=","id":1}'
        assert call_request(b"ab", None, None, False, None) == {"op": "call", "data": "YWI="}

    def test_call_request_carries_reply_when_given(self) -> None:
        """`reply=False` / `reply=True` put `"reply": false` / `true` in the request."""
        req = call_request("VOLT 5.0", None, None, False, reply=False)
        assert req == {"op": "call", "text": "VOLT 5.0", "reply": False}
        framed = encode_message({**req, "id": 1})
        assert b'"reply":false' in framed
        assert call_request(b"", 1.0, 2, True, reply=True)["reply"] is True

    def test_reply_from_reads_the_reply_flag(self) -> None:
        """A reply with `"reply": false` gives Reply.reply False; one without the key, True."""
        quiet = reply_from({**NOT_AWAITED, "id": 1, "text": ""})
        assert (quiet.reply, quiet.ok, quiet.data, quiet.text) == (False, True, b"", "")
        awaited = {k: v for k, v in NOT_AWAITED.items() if k != "reply"}
        answered = reply_from({**awaited, "id": 2, "data": "eA=="})
        assert (answered.reply, answered.data) == (True, b"x")

    def test_reply_defaults_to_true_and_keeps_the_field_order(self) -> None:
        """Reply's existing fields keep their order; `reply` comes last, True by default."""
        r = Reply(0, b"x", 0.5, 1)
        assert r.reply is True
        assert [f.name for f in dataclasses.fields(Reply)] == [
            "status",
            "data",
            "ms",
            "generation",
            "text",
            "error",
            "message",
            "reply",
        ]

    @pytest.mark.timeout(20)
    def test_client_call_sends_reply_false(self, tmp_path: Path) -> None:
        """Client.call(b"..", reply=False) sends `"reply": false` and returns Reply.reply False."""
        server = OneReplyServer(tmp_path / "fake.sock", NOT_AWAITED)
        try:
            with Client(server.path, timeout=10) as c:
                r = c.call(b"VOLT 5.0", reply=False)
        finally:
            server.close()
        (request,) = server.requests
        assert request["reply"] is False and request["op"] == "call"
        assert (r.reply, r.status, r.data) == (False, 0, b"")

    @pytest.mark.timeout(20)
    def test_client_call_without_reply_sends_no_reply_key(self, tmp_path: Path) -> None:
        """A call without `reply` sends no `reply` key, leaving the choice to the daemon."""
        server = OneReplyServer(tmp_path / "fake.sock", {**NOT_AWAITED, "reply": True})
        try:
            with Client(server.path, timeout=10) as c:
                assert c.call(b"\x01x").reply is True
        finally:
            server.close()
        assert "reply" not in server.requests[0]

    @pytest.mark.timeout(20)
    def test_async_client_call_sends_reply_false(self, tmp_path: Path) -> None:
        """AsyncClient.call(reply=False) sends `"reply": false` and returns Reply.reply False."""
        server = OneReplyServer(tmp_path / "fake.sock", NOT_AWAITED)

        async def run() -> Reply:
            async with AsyncClient(server.path) as c:
                return await c.call("VOLT 5.0", reply=False)

        try:
            r = asyncio.run(run())
        finally:
            server.close()
        assert server.requests[0]["reply"] is False
        assert server.requests[0]["text"] == "VOLT 5.0"
        assert r.reply is False


def line_daemon(tmp: Path, link: str, line: dict[str, Any] | None = None) -> DaemonProc:
    """verld on a line device (PING answered PONG; no idle pings meanwhile)."""
    overrides: dict[str, Any] = {
        "device": {"codec": "line", "timeout": 0.5, "retry": 0, "line": line or {}},
        "heartbeat": {"interval": 60, "misses": 3, "timeout": 0.5, "payload": "PING"},
    }
    return DaemonProc(write_config(tmp, link, overrides))


@pytest.fixture
def line_sim(tmp_path: Path) -> Iterator[SimProc]:
    """A verld-sim speaking `line` on a pty."""
    s = SimProc(tmp_path, codec="line")
    yield s
    s.stop()


class TestReplyFalseOnADevice:
    @pytest.mark.timeout(30)
    def test_reply_false_is_written_once_and_not_awaited(
        self, tmp_path: Path, line_sim: SimProc
    ) -> None:
        """A line call with reply=False is written once and answered at once with reply False."""
        # The sim answers ECHO anyway: verld's quiet time (device.guard) drops that line, so the
        # next call gets its own answer.
        d = line_daemon(tmp_path, line_sim.link)
        try:
            c = d.client()
            before = line_sim.counters()["requests"]
            r = c.call("ECHO unheard", reply=False)
            assert (r.reply, r.status, r.data, r.text) == (False, 0, b"", "")
            assert r.generation == 1
            assert c.call("ECHO next").text == "next"
            assert line_sim.counters()["requests"] == before + 2
        finally:
            d.stop()

    @pytest.mark.timeout(30)
    def test_no_reply_regex_is_overridden_by_reply_true(
        self, tmp_path: Path, line_sim: SimProc
    ) -> None:
        """A request matching device.line.no_reply is not awaited, unless called with reply=True."""
        d = line_daemon(tmp_path, line_sim.link, {"no_reply": "^ECHO set"})
        try:
            c = d.client()
            assert c.call("ECHO set 1").reply is False
            forced = c.call("ECHO set 2", reply=True)
            assert (forced.reply, forced.text) == (True, "set 2")
            assert c.call("ECHO other").text == "other"
        finally:
            d.stop()

    @pytest.mark.timeout(20)
    def test_reply_false_on_verl_is_bad_request(self, daemon: DaemonProc) -> None:
        """reply=False on the verl codec (every request answered) is a bad_request, unsent."""
        c = daemon.client()
        with pytest.raises(ClientError) as info:
            c.call(b"\x01x", reply=False)
        assert info.value.code == "bad_request"
        assert c.call(b"\x01x", reply=True).data == b"x"


# --- the asyncio client's connection: events to a callback, raw replies, its end --------------
class ScriptedVerld:
    """A Unix socket in the test's own loop whose peer runs `script(reader, writer)`: a
    verld that misbehaves on cue (closes, stays mute, sends garbage)."""

    def __init__(self, path: Path, script: Any) -> None:
        self.path, self.script = str(path), script
        self.writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> ScriptedVerld:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.writers.append(writer)
            await self.script(reader, writer)

        self._server = await asyncio.start_unix_server(serve, self.path)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in self.writers:
            writer.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


async def first_request(reader: asyncio.StreamReader) -> dict[str, Any]:
    decoder = new_decoder()
    while True:
        chunk = await reader.read(65536)
        assert chunk, "the client closed before its request"
        if bodies := decoder.feed(chunk):
            return parse_message(bodies[0])


class TestAsyncConnection:
    @pytest.mark.timeout(30)
    def test_on_event_gets_each_event_as_it_is_read(self, daemon: DaemonProc) -> None:
        """With on_event, each subscribed event is handed to it, in order, and not queued."""

        async def run() -> tuple[list[dict[str, Any]], bool]:
            got: list[dict[str, Any]] = []
            three = asyncio.Event()

            def on_event(event: dict[str, Any]) -> None:
                got.append(event)
                if len(got) == 3:
                    three.set()

            async with AsyncClient(daemon.socket, on_event=on_event) as c:
                await c.subscribe(["events"])
                await c.call(b"\x06\x00\x03")
                await asyncio.wait_for(three.wait(), 10)
                try:
                    await asyncio.wait_for(anext(c.events()), 0.2)
                except TimeoutError:
                    queued = False
                else:
                    queued = True
                return got, queued

        got, queued = asyncio.run(run())
        assert [e["data"] for e in got] == [
            base64.b64encode(b"evt" + i.to_bytes(4, "big")).decode() for i in range(3)
        ]
        assert not queued

    @pytest.mark.timeout(30)
    def test_send_returns_an_error_reply_as_it_came(self, daemon: DaemonProc) -> None:
        """send() gives verld's error reply as a dict, where request() raises ClientError."""

        async def run() -> tuple[dict[str, Any], ClientError]:
            async with AsyncClient(daemon.socket) as c:
                reply = await c.send("no-such-op")
                with pytest.raises(ClientError) as info:
                    await c.request("no-such-op")
                return reply, info.value

        reply, raised = asyncio.run(run())
        assert reply["ok"] is False and reply["error"]["code"] == raised.code

    @pytest.mark.timeout(20)
    def test_verld_closing_fails_waiting_and_later_requests(self, tmp_path: Path) -> None:
        """When verld closes, waiting and later requests fail Unreachable; wait_closed returns."""

        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await first_request(reader)
            writer.close()

        async def run() -> tuple[ClientError, ClientError, list[dict[str, Any]]]:
            async with ScriptedVerld(tmp_path / "v.sock", hang_up) as verld:
                c = await AsyncClient(verld.path).connect()
                async with asyncio.timeout(10):
                    waiting = c.send("status")
                    await c.wait_closed()
                    with pytest.raises(Unreachable) as during:
                        await waiting
                    with pytest.raises(Unreachable) as after:
                        await c.status()
                    events = [ev async for ev in c.events()]
                await c.close()
                return during.value, after.value, events

        during, after, events = asyncio.run(run())
        assert during.message == "verld closed the connection"
        assert after.message == "the connection to verld is closed"
        assert events == []

    @pytest.mark.timeout(20)
    def test_a_frame_that_is_not_a_message_ends_the_connection(self, tmp_path: Path) -> None:
        """A reply that is not JSON fails the waiting request with Unreachable, saying so."""

        async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await first_request(reader)
            writer.write(b"\x00\x00\x00\x05nope!")

        async def run() -> Unreachable:
            async with ScriptedVerld(tmp_path / "v.sock", garbage) as verld:
                async with AsyncClient(verld.path) as c, asyncio.timeout(10):
                    with pytest.raises(Unreachable) as info:
                        await c.status()
                    await c.wait_closed()
                return info.value

        assert "not a message" in asyncio.run(run()).message

    @pytest.mark.timeout(20)
    def test_close_fails_waiting_requests_and_connect_opens_anew(self, tmp_path: Path) -> None:
        """close() fails the requests left waiting; connect() then opens a new connection."""

        heard: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            heard.put_nowait(await first_request(reader))

        async def run() -> tuple[bool, int]:
            async with ScriptedVerld(tmp_path / "v.sock", mute) as verld:
                c = await AsyncClient(verld.path).connect()
                async with asyncio.timeout(10):
                    waiting = c.send("status")
                    await heard.get()
                    await c.close()
                    failed = isinstance(waiting.exception(), Unreachable)
                    await c.connect()
                    again = c.send("status")
                    await heard.get()
                    await c.close()
                    with pytest.raises(Unreachable):
                        await again
                return failed, len(verld.writers)

        assert asyncio.run(run()) == (True, 2)
