"""`rfc2217://` device links against a real ser2net (Debian 12's 4.3, `telnet(rfc2217)`).

Strategy: verld-sim makes the device's pty; ser2net serves that pty
(`connector: serialdev,LINK,9600n81,local`, so it starts at 9600 baud) on a loopback
port in RFC 2217 mode; verld's `device.port` is `rfc2217://127.0.0.1:PORT` with its
own line settings, which must then be on the pty's termios. ser2net is stopped and
started again by pid for the reconnect test. A missing ser2net skips, except under
CI=true (.ci/run installs it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import serial
from support import free_port, need

from verld.testing import DaemonProc, SimProc, stop_process, wait_for, write_config

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:serial.rfc2217"),
]


class Ser2net:
    """ser2net serving `link` in RFC 2217 mode on a loopback port."""

    def __init__(self, tmp: Path, link: str) -> None:
        self.port = free_port()
        self.config = tmp / "ser2net.yaml"
        self.config.write_text(
            "connection: &dev\n"
            f"  accepter: telnet(rfc2217),tcp,127.0.0.1,{self.port}\n"
            f"  connector: serialdev,{link},9600n81,local\n"
            "  options:\n    kickolduser: true\n"
        )
        self.log = tmp / "ser2net.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as log:
            argv = [need("ser2net", "ser2net"), "-n", "-d", "-c", str(self.config)]
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log)
        wait_for(self._listening, 10, "ser2net to listen")

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None


class Rig:
    def __init__(
        self, tmp: Path, codec: str, network: list[dict[str, Any]] | None = None, **device: Any
    ) -> None:
        need("ser2net", "ser2net")
        self.sim = SimProc(tmp, codec=codec)
        self.ser2net: Ser2net | None = None
        self.d: DaemonProc | None = None
        try:
            self.ser2net = Ser2net(tmp, self.sim.link)
            url = f"rfc2217://127.0.0.1:{self.ser2net.port}"
            more = {"device": {"codec": codec, **device}, "network": network or []}
            self.d = DaemonProc(write_config(tmp, url, more))
        except BaseException:
            self.stop()
            raise

    @property
    def daemon(self) -> DaemonProc:
        assert self.d is not None
        return self.d

    def stop(self) -> None:
        if self.d is not None:
            self.d.stop()
        if self.ser2net is not None:
            self.ser2net.stop()
        self.sim.stop()


@pytest.fixture
def verl(tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(tmp_path, "verl")
    yield rig
    rig.stop()


def termios_of(link: str) -> list[Any]:
    fd = os.open(link, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        return termios.tcgetattr(fd)
    finally:
        os.close(fd)


def test_line_settings_reach_the_pty(tmp_path: Path) -> None:
    """19200 baud and 2 stop bits from device reach the pty's termios through ser2net."""
    # (a pty keeps CS8 and no parity whatever it is told: Linux's pty_set_termios)
    rig = Rig(tmp_path, "line", baudrate=19200, stopbits=2)
    try:
        attrs = termios_of(rig.sim.link)
        assert attrs[4] == termios.B19200
        assert attrs[2] & termios.CSTOPB
        assert rig.daemon.status()["link"]["settings"] == "19200 8N2"
    finally:
        rig.stop()


def test_other_data_size_and_parity_are_answered_as_asked(tmp_path: Path) -> None:
    """7E1 is asked and answered as asked (else the link would not come up)."""
    rig = Rig(tmp_path, "line", bytesize=7, parity="even")
    try:
        assert rig.daemon.status()["link"]["state"] == "up"
    finally:
        rig.stop()


def test_verl_calls_with_0xff_payloads(verl: Rig) -> None:
    """verl calls whose payloads are full of 0xFF come back intact."""
    client = verl.daemon.client()
    for payload in (b"\xff", b"\xff\xff\xff", bytes(range(256))):
        assert client.call(b"\x01" + payload).data == payload


def test_length_calls_with_0xff_payloads(tmp_path: Path) -> None:
    """length calls with 0xFF in the payload and in the length prefix come back intact."""
    rig = Rig(tmp_path, "length")
    try:
        client = rig.daemon.client()
        payload = b"\xff" * 300  # (a length of 0x12d; and 0xff bytes)
        assert client.call(b"\x01" + payload).data == payload
    finally:
        rig.stop()


def test_line_calls(tmp_path: Path) -> None:
    """line calls through ser2net get their replies."""
    rig = Rig(tmp_path, "line")
    try:
        assert rig.daemon.client().call(b"ECHO hi there").data == b"hi there"
    finally:
        rig.stop()


def test_modem_lines_are_in_status(verl: Rig) -> None:
    """status.link.modem has the four lines as booleans on an rfc2217:// link."""
    modem = verl.daemon.status()["link"]["modem"]
    assert set(modem) == {"cts", "dsr", "ri", "cd"}
    assert all(isinstance(v, bool) for v in modem.values())


def test_ser2net_restart_brings_the_link_back_with_a_new_generation(verl: Rig) -> None:
    """ser2net stopped: the link goes down; started again: up with a larger generation."""
    assert verl.ser2net is not None
    gen = verl.daemon.status()["link"]["generation"]
    verl.ser2net.stop()
    verl.daemon.wait_state("down")
    time.sleep(0.2)
    verl.ser2net.start()
    verl.daemon.wait_state("up", timeout=15)
    assert verl.daemon.status()["link"]["generation"] > gen
    assert verl.daemon.client().call(b"\x01ok").data == b"ok"


def test_inhibit_hands_over_the_url_to_a_pyserial_client(verl: Rig) -> None:
    """inhibit answers the rfc2217:// URL; pyserial opens it and talks to the device."""
    holder = verl.daemon.client()
    url = holder.inhibit()
    assert url.startswith("rfc2217://127.0.0.1:")
    with serial.serial_for_url(url + "?ign_set_control", baudrate=115200, timeout=3) as port:
        port.write(b"")  # (opened: the negotiation went through)
        assert port.baudrate == 115200
    holder.uninhibit()
    verl.daemon.wait_state("up", timeout=15)


def test_passthrough_forwards_line_settings_to_the_server(tmp_path: Path) -> None:
    """A passthrough client's 9600 baud goes on to ser2net as RFC 2217 and reaches the pty."""
    port = free_port()
    net = [
        {
            "listen": f"127.0.0.1:{port}",
            "name": "pt",
            "protocol": "rfc2217",
            "mode": "passthrough",
            "allow": ["127.0.0.1/32"],
        }
    ]
    rig = Rig(tmp_path, "line", network=net)
    try:
        with serial.serial_for_url(
            f"rfc2217://127.0.0.1:{port}?ign_set_control", baudrate=9600, timeout=3
        ) as client:
            assert termios_of(rig.sim.link)[4] == termios.B9600
            client.write(b"PING\n")
            assert client.readline() == b"PONG\n"
        rig.daemon.wait_state("up", timeout=15)
        assert termios_of(rig.sim.link)[4] == termios.B115200
    finally:
        rig.stop()
