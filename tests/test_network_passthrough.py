"""Passthrough beyond the pty: a tcp:// link, a port that vanishes mid-relay, the taps.

Strategy: as tests/test_network.py (verld on a verld-sim, line codec, real sockets),
with the sim on TCP for the `tcp://` case and its control socket's `unplug` for
the vanishing port; the taps are read by an API client subscribed to `traffic` and
`wire`, as `verlctl monitor` reads them. A line setting the pty refuses (even
parity: `tcsetattr` fails EINVAL) is asked by pyserial's `rfc2217://` client, and the
pty's termios read back from outside.
"""

from __future__ import annotations

import json
import os
import pty
import socket
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import serial
from support import free_port

from verld.client import ClientError
from verld.testing import DaemonProc, SimProc, write_config

pytestmark = pytest.mark.timeout(60)


def line_reply(s: socket.socket) -> bytes:
    s.settimeout(5)
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(100)
        if not chunk:
            break
        data += chunk
    return data


class Held:
    """A sim (pty or TCP) and a verld with one raw passthrough entry."""

    def __init__(self, tmp: Path, *, tcp: bool = False, **entry: Any) -> None:
        self.port = free_port()
        self.sim = SimProc(tmp, codec="line", tcp=tcp)
        net = [
            {
                "listen": f"127.0.0.1:{self.port}",
                "name": "hold",
                "mode": "passthrough",
                "allow": ["127.0.0.0/8"],
                **entry,
            }
        ]
        link = self.sim.address if tcp else self.sim.link
        try:
            self.d = DaemonProc(
                write_config(tmp, link, {"device": {"codec": "line"}, "network": net})
            )
        except BaseException:
            self.sim.stop()
            raise

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port))
        self.d.wait_state("inhibited")
        return s

    def stop(self) -> None:
        self.d.stop()
        self.sim.stop()


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Held]:
    rig = Held(tmp_path)
    yield rig
    rig.stop()


def test_passthrough_over_a_tcp_link_relays_and_gives_the_link_back(tmp_path: Path) -> None:
    """On a tcp:// link the passthrough relays raw bytes; its close brings the link back."""
    rig = Held(tmp_path, tcp=True)
    try:
        gen = rig.d.status()["link"]["generation"]
        with rig.connect() as s:
            s.sendall(b"PING\n")
            assert line_reply(s) == b"PONG\n"
        rig.d.wait_state("up")
        assert rig.d.status()["link"]["generation"] > gen
    finally:
        rig.stop()


def test_a_port_that_fails_mid_relay_closes_the_connection(held: Held) -> None:
    """An unplug during the relay closes the connection; the link reconnects after replug."""
    with held.connect() as s:
        held.sim.control("unplug 0.5")
        s.settimeout(5)
        assert s.recv(100) == b""
    assert "network_passthrough_port_failed" in held.d.log()
    held.d.wait_state("up", timeout=15)


def test_relayed_bytes_show_on_the_traffic_and_wire_taps(held: Held) -> None:
    """Relayed bytes reach wire subscribers raw and traffic subscribers as passthrough."""
    client = held.d.client()
    client.subscribe(["traffic", "wire"])
    with held.connect() as s:
        s.sendall(b"PING\n")
        assert line_reply(s) == b"PONG\n"
    seen: list[tuple[str, str, str]] = []
    for ev in client.events():
        if ev.get("event") in ("traffic", "wire"):
            seen.append((ev["event"], ev["dir"], ev.get("kind", "")))
            if ("traffic", "rx", "passthrough") in seen and ("wire", "rx", "") in seen:
                break
    assert ("traffic", "tx", "passthrough") in seen
    assert ("wire", "tx", "") in seen


def test_a_silent_passthrough_connection_is_closed_after_idle_timeout(tmp_path: Path) -> None:
    """A passthrough connection silent for idle_timeout is closed and the link comes back."""
    rig = Held(tmp_path, idle_timeout=0.5)
    try:
        with rig.connect() as s:
            s.settimeout(5)
            assert s.recv(100) == b""
        rig.d.wait_state("up")
        assert rig.d.status()["network"][0]["holder"] is None
    finally:
        rig.stop()


def test_a_passthrough_connection_ends_a_lease_and_an_inhibit_is_busy(held: Held) -> None:
    """A lease ends when a passthrough connection takes the port; an inhibit then gets busy."""
    leaser = held.d.client()
    leaser.request("lease", seconds=30)
    with held.connect():
        assert held.d.status()["lease"] is None
        with pytest.raises(ClientError) as info:
            held.d.client().inhibit()
        assert info.value.code == "busy"
        assert info.value.message.startswith("already inhibited by network hold 127.0.0.1:")
    held.d.wait_state("up")


def _pty_refuses_even_parity() -> bool:
    master, slave = pty.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[2] |= termios.PARENB
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
    except termios.error:
        return True
    finally:
        os.close(slave)
        os.close(master)
    return False


def _cflag_and_speed(link: str) -> tuple[int, int]:
    fd = os.open(link, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        attrs = termios.tcgetattr(fd)
        return int(attrs[2]), int(attrs[4])
    finally:
        os.close(fd)


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::DeprecationWarning:serial.rfc2217")
@pytest.mark.skipif(not _pty_refuses_even_parity(), reason="this kernel's ptys take even parity")
def test_a_setting_the_port_refuses_keeps_the_connection_and_is_not_reapplied(
    tmp_path: Path,
) -> None:
    """Even parity refused by the pty: answered N, warned once, the next 9600 applies alone."""
    rig = Held(tmp_path, protocol="rfc2217")
    try:
        url = f"rfc2217://127.0.0.1:{rig.port}?ign_set_control"
        with serial.serial_for_url(url, baudrate=115200, timeout=3) as port:
            answers: list[bytes] = []  # (the server's SET-PARITY answers, as pyserial gets them)
            item = cast(Any, port)._rfc2217_port_settings["parity"]
            check = item.check_answer

            def answered(value: bytes) -> None:
                answers.append(bytes(value))
                check(value)

            item.check_answer = answered
            with pytest.raises(ValueError, match="remote rejected value for option 'parity'"):
                port.parity = serial.PARITY_EVEN
            assert answers == [b"\x01"]  # NONE: the parity in effect
            # (pyserial keeps E and sends it again with the baud rate: refused again, and the
            # baud rate applies without it)
            with pytest.raises(ValueError, match="remote rejected value for option 'parity'"):
                port.baudrate = 9600
            assert answers == [b"\x01", b"\x01"]
            cflag, speed = _cflag_and_speed(rig.sim.link)
            assert speed == termios.B9600
            assert not cflag & termios.PARENB
            port.write(b"PING\n")
            assert port.readline() == b"PONG\n"  # (the connection stayed)
            log = rig.d.log()
            assert log.count("network_setting_refused") == 1
            line = json.loads(next(ln for ln in log.splitlines() if "setting_refused" in ln))
            assert (line["level"], line["name"], line["setting"], line["value"]) == (
                "warning",
                "hold",
                "parity",
                "even",
            )
            assert line["error"] == "[Errno 22] Invalid argument"
        rig.d.wait_state("up")
        assert _cflag_and_speed(rig.sim.link)[1] == termios.B115200
    finally:
        rig.stop()
