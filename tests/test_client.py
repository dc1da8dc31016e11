"""The blocking client library against a real verld."""

from __future__ import annotations

import asyncio
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
