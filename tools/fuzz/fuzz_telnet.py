#!/usr/bin/env python3
"""Fuzz target: the telnet / RFC 2217 decoder (`verld.codec.telnet.Telnet`), both sides.

Invariants, for any bytes from a peer:
- `feed` never raises, on a server or a client end, with or without COM-PORT-OPTION;
- cutting the stream differently never changes the data, the COM-PORT commands, the
  options agreed, the answers queued or the `ignored` count;
- the data is never longer than the input, and a subnegotiation never grows past
  `MAX_SUBNEG` bytes of value;
- negotiation answers are whole `IAC verb option` triples;
- escaped data comes back unchanged;
- an `rfc2217://` link's client side (`ComPortClient`) and a network port's server
  side (`ComPortServer`, shared and passthrough without a port) take the same bytes
  without raising, the client whatever the cuts, and every answer the server makes is
  a server code with a value of the command's size.

Run: `tools/fuzz/fuzz_telnet.py -max_total_time=60` (or `tools/fuzz/run`).
"""

from __future__ import annotations

import _harness

from verld.codec.rfc2217 import SERVER
from verld.codec.telnet import (
    COM_PORT,
    DO,
    DONT,
    IAC,
    MAX_SUBNEG,
    SB,
    SE,
    WILL,
    WONT,
    ComPort,
    Data,
    Event,
    Telnet,
    escape,
)
from verld.config import DeviceConfig
from verld.fronts.network.comport import ComPortServer
from verld.links.rfc2217 import ComPortClient

Outcome = tuple[bytes, list[Event], bytes, int]


def check(data: bytes) -> None:
    """Every invariant above."""
    control, stream = _harness.split(data)
    pieces = _harness.cut(stream, control)
    for server in (True, False):
        for comport in (True, False):
            whole = _run(server, comport, [stream])
            assert whole == _run(server, comport, pieces)
            plain, events, answers, _ = whole
            assert len(plain) <= len(stream)
            assert len(answers) % 3 == 0
            for i in range(0, len(answers), 3):
                assert answers[i] == IAC and answers[i + 1] in (WILL, WONT, DO, DONT)
            for event in events:
                if isinstance(event, ComPort):
                    assert comport and len(event.value) < MAX_SUBNEG
    t = Telnet(server=True, comport=True)
    assert b"".join(e.data for e in t.feed(escape(stream)) if isinstance(e, Data)) == stream
    assert _client(pieces) == _client([stream])
    for apply in (False, True):
        answering = ComPortServer(DeviceConfig(), apply=apply)
        for event in Telnet(server=True, comport=True).feed(stream):
            if isinstance(event, ComPort):
                for code, value in answering.handle(event.code, event.value):
                    assert code >= SERVER
                    assert code == SERVER or len(value) == (4 if code == SERVER + 1 else 1)


def _client(chunks: list[bytes]) -> tuple[bytes, dict[str, bool], dict[int, bytes], int]:
    client = ComPortClient()
    plain = b"".join(client.feed(chunk) for chunk in chunks)
    assert len(plain) <= sum(map(len, chunks))
    return plain, client.modem, client.answers, client.ignored + client.telnet.ignored


def _run(server: bool, comport: bool, chunks: list[bytes]) -> Outcome:
    t = Telnet(server=server, comport=comport)
    plain = b""
    events: list[Event] = []
    for chunk in chunks:
        for event in t.feed(chunk):
            if isinstance(event, Data):
                plain += event.data
            else:
                events.append(event)
    answers = t.take_output()
    return plain, events, answers, t.ignored


def seeds() -> list[bytes]:
    """Negotiation, a COM-PORT command with IAC in its value, a long subnegotiation, garbage."""
    return [
        b"data" + bytes((IAC, IAC)) + b"more",
        bytes((IAC, WILL, 0, IAC, DO, 0, IAC, WILL, COM_PORT, IAC, DO, 3, IAC, DO, 1)),
        bytes((IAC, SB, COM_PORT, 1, 0, 1, 0xC2, IAC, IAC, IAC, SE)) + b"x",
        bytes((IAC, SB, COM_PORT, 0)) + b"s" * (MAX_SUBNEG + 5) + bytes((IAC, SE)),
        bytes((IAC, 7, IAC, SE, IAC, SB, COM_PORT, IAC, 9, IAC)),
    ]


if __name__ == "__main__":
    _harness.main(check, seeds(), "telnet")
