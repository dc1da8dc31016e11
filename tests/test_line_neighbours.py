"""What a new user broke on a `line` device in an hour, replayed on a real daemon.

A real verld-sim on a pty (or TCP), a real verld, real clients on the API socket:
a request with an embedded terminator is refused; a request the device never
answers leaves the link up for everyone, on a pty and on `tcp://`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, write_config

from verld.client import Client, ClientError

pytestmark = pytest.mark.timeout(60)


def line_daemon(tmp: Path, port: str, **heartbeat: Any) -> DaemonProc:
    hb = {"interval": 0.5, "misses": 3, "timeout": 0.5, "payload": "PING", **heartbeat}
    overrides = {"device": {"codec": "line", "timeout": 0.3, "retry": 0}, "heartbeat": hb}
    return DaemonProc(write_config(tmp, port, overrides))


@pytest.fixture
def line_sim(tmp_path: Path) -> Iterator[SimProc]:
    """A verld-sim speaking `line` on a pty."""
    with SimProc(tmp_path, codec="line") as s:
        yield s


def refused(client: Client, data: bytes | str) -> str:
    with pytest.raises(ClientError) as info:
        client.call(data)
    return f"{info.value.code}: {info.value.message}"


class TestOneLinePerCall:
    @pytest.mark.parametrize(
        "data",
        ["READ 1\nREAD 2", b"ECHO a\nECHO b", "ECHO a\n\n", "ECHO a\rECHO b"],
        ids=["text", "data", "blank-second-line", "lone-cr"],
    )
    def test_a_request_with_the_terminator_inside_is_bad_request(
        self, tmp_path: Path, line_sim: SimProc, data: bytes | str
    ) -> None:
        """A call whose request holds a terminator (or a lone CR) is refused, unsent."""
        with line_daemon(tmp_path, line_sim.link, interval=60) as d:  # (no pings meanwhile)
            c = d.client()
            requests = line_sim.counters()["requests"]
            assert refused(c, data).startswith("bad_request: one line per call")
            assert line_sim.counters()["requests"] == requests
            assert c.call("ECHO ok").text == "ok"

    def test_a_trailing_terminator_and_crlf_are_one_line(
        self, tmp_path: Path, line_sim: SimProc
    ) -> None:
        """A request that ends in the terminator, or in CR LF, is still one call."""
        with line_daemon(tmp_path, line_sim.link) as d:
            c = d.client()
            assert c.call("ECHO a\n").text == "a"
            assert c.call("ECHO b\r\n").text == "b"


def good_client_loop(client: Client, stop: threading.Event) -> tuple[int, list[str], int]:
    """ECHO calls with unique words until `stop`: (answered, wrong replies, generation changes)."""
    n, wrong, gens = 0, [], set()
    while not stop.is_set():
        word = f"mine{n}"
        reply = client.call(f"ECHO {word}", timeout=2.0)
        gens.add(reply.generation)
        if reply.text != word:
            wrong.append(f"{word} -> {reply.text}")
        n += 1
    return n, wrong, len(gens) - 1


class TestUnansweredRequests:
    def run_beside(self, d: DaemonProc, neighbour: Client, rounds: int) -> None:
        stop = threading.Event()
        result: list[tuple[int, list[str], int]] = []
        good = d.client()
        t = threading.Thread(target=lambda: result.append(good_client_loop(good, stop)))
        t.start()
        try:
            for _ in range(rounds):
                with pytest.raises(ClientError) as info:
                    neighbour.call(b"", retry=2)  # a blank line: the device ignores it
                assert info.value.code == "timeout"
        finally:
            stop.set()
            t.join(10)
        answered, wrong, changes = result[0]
        assert answered > 0 and wrong == [] and changes == 0
        link = d.status()["link"]
        assert (link["state"], link["generation"]) == ("up", 1)

    def test_a_request_the_device_ignores_leaves_the_link_up(
        self, tmp_path: Path, line_sim: SimProc
    ) -> None:
        """Calls the device never answers leave the link up; a good neighbour gets its replies."""
        # Every try of those calls timed out; every good call got its own reply.
        with line_daemon(tmp_path, line_sim.link) as d:
            self.run_beside(d, d.client(), rounds=4)

    def test_without_a_ping_answered_neighbours_keep_the_link_up(
        self, tmp_path: Path, line_sim: SimProc
    ) -> None:
        """With no ping payload, unanswered calls beside answered ones never make the link dead."""
        with line_daemon(tmp_path, line_sim.link, payload="") as d:
            self.run_beside(d, d.client(), rounds=4)

    def test_on_tcp_a_timed_out_call_never_reconnects(self, tmp_path: Path) -> None:
        """On tcp:// an unanswered call waits out the quiet guard and the connection stays."""
        # Every other client's calls stay too.
        with (
            SimProc(tmp_path, codec="line", tcp=True) as sim,
            line_daemon(tmp_path, sim.address) as d,
        ):
            self.run_beside(d, d.client(), rounds=3)
            assert d.status()["counters"]["reconnects"] == 0


class TestShortTimeouts:
    @pytest.mark.parametrize("tcp", [False, True], ids=["pty", "tcp"])
    def test_a_neighbours_short_timeout_never_hands_its_late_reply_on(
        self, tmp_path: Path, tcp: bool
    ) -> None:
        """A late reply to a neighbour's short-timeout call never goes to the next client's call."""
        # The late answer comes within device.timeout (0.3 s here): the next client's call still
        # gets
        # its own reply.
        with (
            SimProc(tmp_path, codec="line", tcp=tcp) as sim,
            line_daemon(tmp_path, sim.address if tcp else sim.link) as d,
        ):
            neighbour, good = d.client(), d.client()
            for n in range(3):
                with pytest.raises(ClientError) as info:
                    neighbour.call(f"DELAY 150 late{n}", timeout=0.05, retry=0)
                assert info.value.code == "timeout"
                reply = good.call(f"ECHO mine{n}", timeout=2.0)
                assert reply.text == f"mine{n}"
