"""verld's Modbus TCP front with real third-party Modbus on both ends.

The device is a pymodbus 3.16 RTU slave on a socat pty pair (units 1 and 2; unit 3
silent; holding register a of unit u = 100*u + a); the masters are pymodbus's
`ModbusTcpClient`, `mbpoll` (a C master) and raw sockets for what a library would
not send (pipelining, malformed headers).
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from modbusrig import PtyCable, PymodbusSlave
from pymodbus.client import ModbusTcpClient

from verld.client import ClientError
from verld.client.modbus import Modbus
from verld.testing import DaemonProc, wait_for, write_config

pytestmark = pytest.mark.timeout(60)
TIMEOUT = 0.3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Gateway:
    """pymodbus RTU slave ← pty ← verld (modbus-rtu) ← Modbus TCP on loopback."""

    def __init__(self, tmp: Path, **modbus: Any) -> None:
        self.cable = PtyCable(tmp)
        self.slave = PymodbusSlave(self.cable.device_path, units=(1, 2), silent=(3,))
        self.port = free_port()
        settings = {
            "listen": f"127.0.0.1:{self.port}",
            "offline_after": 3,
            "offline_backoff": 30,
            **modbus,
        }
        self.daemon = DaemonProc(
            write_config(
                tmp,
                self.cable.host_path,
                {
                    "device": {"codec": "modbus-rtu", "timeout": TIMEOUT, "retry": 0},
                    "heartbeat": {"interval": 0},
                    "modbus": settings,
                },
            )
        )
        self._masters: list[ModbusTcpClient] = []

    def master(self) -> ModbusTcpClient:
        c = ModbusTcpClient("127.0.0.1", port=self.port, timeout=3, retries=0)
        assert c.connect()  # type: ignore[no-untyped-call]
        self._masters.append(c)
        return c

    def raw(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def close(self) -> None:
        for c in self._masters:
            c.close()  # type: ignore[no-untyped-call]
        self.daemon.stop()
        self.slave.stop()
        self.cable.close()


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    g = Gateway(tmp_path)
    try:
        yield g
    finally:
        g.close()


@pytest.fixture
def rw(tmp_path: Path) -> Iterator[Gateway]:
    g = Gateway(tmp_path, read_only=False)
    try:
        yield g
    finally:
        g.close()


def mbap(tid: int, body: bytes) -> bytes:
    return struct.pack(">HHH", tid, 0, len(body)) + body


def recv_frames(s: socket.socket, n: int) -> list[tuple[int, bytes]]:
    """n MBAP frames from `s`: (transaction id, unit + PDU)."""
    out: list[tuple[int, bytes]] = []
    buf = b""
    while len(out) < n:
        while len(buf) < 6 or len(buf) < 6 + int.from_bytes(buf[4:6], "big"):
            chunk = s.recv(4096)
            assert chunk, f"closed after {len(out)} frames"
            buf += chunk
        length = int.from_bytes(buf[4:6], "big")
        out.append((int.from_bytes(buf[:2], "big"), buf[6 : 6 + length]))
        buf = buf[6 + length :]
    return out


class TestReads:
    def test_a_pymodbus_master_reads_registers(self, gw: Gateway) -> None:
        """ModbusTcpClient → verld → the RTU slave: unit 1's registers."""
        r = gw.master().read_holding_registers(0, count=10, device_id=1)
        assert r.registers == [100 + a for a in range(10)]

    def test_mbpoll_reads_registers(self, gw: Gateway) -> None:
        """mbpoll (C, libmodbus) reads unit 2's holding registers 0..2 through verld."""
        out = subprocess.run(
            [
                "mbpoll",
                "-m",
                "tcp",
                "-p",
                str(gw.port),
                "-a",
                "2",
                "-0",
                "-r",
                "0",
                "-c",
                "3",
                "-1",
                "127.0.0.1",
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert "[0]: \t200" in out.stdout and "[2]: \t202" in out.stdout

    def test_an_out_of_range_read_passes_the_slaves_exception(self, gw: Gateway) -> None:
        """The slave's exception 02 reaches the master unchanged."""
        r = gw.master().read_holding_registers(200, count=1, device_id=1)
        assert r.isError() and r.exception_code == 2

    def test_pipelined_requests_are_answered_in_order(self, gw: Gateway) -> None:
        """Five requests in one write: five responses, in request order, each its tid."""
        s = gw.raw()
        with s:
            s.sendall(b"".join(mbap(100 + i, bytes((1, 3, 0, i, 0, 1))) for i in range(5)))
            frames = recv_frames(s, 5)
        assert [tid for tid, _ in frames] == [100, 101, 102, 103, 104]
        assert [int.from_bytes(body[3:5], "big") for _, body in frames] == [100, 101, 102, 103, 104]

    def test_api_clients_and_modbus_masters_share_the_bus(self, gw: Gateway) -> None:
        """An API client and a Modbus TCP master read alternately: both right."""
        api = Modbus(gw.daemon.client())
        master = gw.master()
        for a in range(5):
            assert api.read_holding_registers(1, a, 1) == [100 + a]
            assert master.read_holding_registers(a, count=1, device_id=2).registers == [200 + a]
        calls = gw.daemon.client().request("metrics")["text"]
        assert 'verld_front_calls_total{front="modbus",outcome="ok"} 5' in calls
        assert 'verld_front_calls_total{front="api",outcome="ok"} 5' in calls


class TestWrites:
    def test_read_only_refuses_writes_with_exception_1(self, gw: Gateway) -> None:
        """By default a write is exception 01 and never reaches the slave."""
        r = gw.master().write_register(4, 999, device_id=1)
        assert r.isError() and r.exception_code == 1
        assert Modbus(gw.daemon.client()).read_holding_registers(1, 4, 1) == [104]

    def test_with_read_only_off_concurrent_masters_each_see_their_own_values(
        self, rw: Gateway
    ) -> None:
        """Four masters write and read back their own registers 50 times at once."""
        wrong: list[str] = []

        def master(k: int) -> None:
            c = rw.master()
            for i in range(50):
                value = k * 1000 + i
                w = c.write_register(10 + k, value, device_id=1 + k % 2)
                r = c.read_holding_registers(10 + k, count=1, device_id=1 + k % 2)
                if w.isError() or r.isError() or r.registers != [value]:
                    wrong.append(f"master {k} try {i}: {r}")

        threads = [threading.Thread(target=master, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert wrong == []

    def test_a_broadcast_gets_no_response_and_reaches_every_unit(self, rw: Gateway) -> None:
        """Unit 0: the master hears nothing back; both units hold the value."""
        s = rw.raw()
        with s:
            s.sendall(mbap(1, bytes.fromhex("000600080309")))  # register 8 := 777
            s.sendall(mbap(2, bytes.fromhex("010300080001")))
            ((tid, body),) = recv_frames(s, 1)
        assert tid == 2 and body == bytes.fromhex("0103020309")
        assert Modbus(rw.daemon.client()).read_holding_registers(2, 8, 1) == [777]


def test_a_refused_broadcast_is_not_answered_either(gw: Gateway) -> None:
    """read_only, unit 0 write: refused without an answer (a broadcast never gets one)."""
    s = gw.raw()
    with s:
        s.sendall(mbap(1, bytes.fromhex("000600080309")))
        s.sendall(mbap(2, bytes.fromhex("010300080001")))
        ((tid, body),) = recv_frames(s, 1)
    assert tid == 2 and body == bytes.fromhex("010302006c")  # (register 8 unchanged: 108)


class TestFailures:
    def test_a_silent_unit_is_exception_0b(self, gw: Gateway) -> None:
        """No answer from unit 3: gateway target failed to respond; offline: at once."""
        master = gw.master()
        for _ in range(3):
            r = master.read_holding_registers(0, count=1, device_id=3)
            assert r.isError() and r.exception_code == 0x0B
        t0 = time.monotonic()
        r = master.read_holding_registers(0, count=1, device_id=3)
        assert r.exception_code == 0x0B and time.monotonic() - t0 < TIMEOUT

    def test_a_lease_is_exception_06_for_masters(self, gw: Gateway) -> None:
        """Another client's lease: server device busy."""
        holder = gw.daemon.client()
        holder.request("lease", seconds=5)
        r = gw.master().read_holding_registers(0, count=1, device_id=1)
        assert r.isError() and r.exception_code == 0x06

    def test_an_inhibit_is_exception_0a(self, gw: Gateway) -> None:
        """The port let go of for another program: gateway path unavailable."""
        holder = gw.daemon.client()
        holder.inhibit()
        r = gw.master().read_holding_registers(0, count=1, device_id=1)
        assert r.isError() and r.exception_code == 0x0A

    def test_link_down_is_exception_0a(self, gw: Gateway) -> None:
        """The RTU port unplugged: gateway path unavailable, the connection stays."""
        master = gw.master()
        gw.cable.unplug()
        gw.daemon.wait_state("down")
        r = master.read_holding_registers(0, count=1, device_id=1)
        assert r.isError() and r.exception_code == 0x0A

    def test_a_malformed_header_closes_only_that_connection(self, gw: Gateway) -> None:
        """Protocol id 7: that socket is closed; another master reads on."""
        other = gw.master()
        s = gw.raw()
        with s:
            s.sendall(bytes.fromhex("000100070006010300000001"))
            assert s.recv(100) == b""
        assert other.read_holding_registers(0, count=1, device_id=1).registers == [100]
        assert gw.daemon.status()["modbus"]["closed_malformed"] == 1

    def test_connections_beyond_max_connections_are_closed(self, tmp_path: Path) -> None:
        """max_connections 2: the third is closed at once (refused, why limit); two work."""
        g = Gateway(tmp_path, max_connections=2)
        try:
            a, b = g.raw(), g.raw()
            wait_for(lambda: g.daemon.status()["modbus"]["connections"] == 2, 5, "2 connections")
            c = g.raw()
            assert c.recv(100) == b""
            assert g.daemon.status()["modbus"]["refused"] == {"limit": 1}
            a.sendall(mbap(1, bytes.fromhex("010300000001")))
            assert recv_frames(a, 1)[0][1] == bytes.fromhex("0103020064")
            for s in (a, b, c):
                s.close()
        finally:
            g.close()

    def test_an_idle_connection_is_closed(self, tmp_path: Path) -> None:
        """idle_timeout 0.5: a silent master is closed, a talking one is not."""
        g = Gateway(tmp_path, idle_timeout=0.5)
        try:
            silent, talker = g.raw(), g.raw()
            for i in range(4):
                talker.sendall(mbap(i, bytes.fromhex("010300000001")))
                recv_frames(talker, 1)
                time.sleep(0.25)
            silent.settimeout(2)
            assert silent.recv(100) == b""
            talker.sendall(mbap(9, bytes.fromhex("010300000001")))
            assert recv_frames(talker, 1)[0][0] == 9
            silent.close()
            talker.close()
        finally:
            g.close()


def test_an_offline_unit_costs_other_masters_at_most_one_try(tmp_path: Path) -> None:
    """A master polling a silent unit delays other masters' units by at most one try."""
    # mbusd's users' scenario: a master polls silent unit 3 while three poll units 1 and 2; theirs
    # stays within one try of unit 3's timeout (never taken offline here).
    g = Gateway(tmp_path, offline_after=1000)
    stop = threading.Event()
    worst: list[float] = []

    def dead_poller() -> None:
        c = g.master()
        while not stop.is_set():
            c.read_holding_registers(0, count=1, device_id=3)

    def poller(unit: int) -> None:
        c = g.master()
        slowest = 0.0
        for _ in range(15):
            t0 = time.monotonic()
            r = c.read_holding_registers(0, count=1, device_id=unit)
            slowest = max(slowest, time.monotonic() - t0)
            assert r.registers == [100 * unit]
        worst.append(slowest)

    try:
        dead = threading.Thread(target=dead_poller)
        dead.start()
        time.sleep(0.1)
        threads = [threading.Thread(target=poller, args=(u,)) for u in (1, 2, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(40)
        stop.set()
        dead.join(10)
        assert len(worst) == 3 and max(worst) < TIMEOUT + 0.1 + 0.3  # a try + guard + slack
    finally:
        stop.set()
        g.close()


def test_reload_moves_the_listener(tmp_path: Path) -> None:
    """A reload with a new `modbus.listen`: the old port closes, the new one serves."""
    g = Gateway(tmp_path)
    try:
        old = g.raw()
        new_port = free_port()
        text = g.daemon.config.read_text().replace(f"127.0.0.1:{g.port}", f"127.0.0.1:{new_port}")
        g.daemon.config.write_text(text)
        assert g.daemon.client().request("reload")["changed"] == ["modbus.listen"]
        wait_for(
            lambda: (
                g.daemon.status()["modbus"] is not None
                and g.daemon.status()["modbus"]["listen"] == f"127.0.0.1:{new_port}"
            ),
            5,
            "the new listener",
        )
        assert old.recv(100) == b""
        old.close()
        g.port = new_port
        assert g.master().read_holding_registers(0, count=1, device_id=1).registers == [100]
    finally:
        g.close()


def test_sigterm_during_a_rebind_awaits_it(tmp_path: Path) -> None:
    """SIGTERM during a rebind by reload: the front awaits it, exit 0, neither port listens."""
    g = Gateway(tmp_path)
    old_port, new_port = g.port, free_port()
    try:
        text = g.daemon.config.read_text().replace(f"127.0.0.1:{old_port}", f"127.0.0.1:{new_port}")
        g.daemon.config.write_text(text)
        assert g.daemon.client().request("reload")["changed"] == ["modbus.listen"]
    finally:
        g.close()
    log = g.daemon.log_path.read_text()
    assert g.daemon.proc.returncode == 0, log
    assert "Traceback" not in log
    for port in (old_port, new_port):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_listen_without_a_modbus_codec_is_a_config_error(tmp_path: Path) -> None:
    """`modbus.listen` with codec verl: --check-config says why, exit 2."""
    config = write_config(tmp_path, "sim", {"modbus": {"listen": "127.0.0.1:1502"}})
    verld = Path(sys.executable).parent / "verld"  # the running interpreter's own script
    out = subprocess.run(
        [str(verld), "--check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert out.returncode == 2
    assert "modbus.listen: the Modbus TCP server needs device.codec modbus-rtu" in out.stderr


def test_status_reports_the_front(gw: Gateway) -> None:
    """status.modbus: listen, connections, calls, exceptions by code, closed_malformed, refused."""
    master = gw.master()
    master.read_holding_registers(0, count=1, device_id=1)
    master.write_register(0, 1, device_id=1)
    st = gw.daemon.status()["modbus"]
    assert st == {
        "listen": f"127.0.0.1:{gw.port}",
        "connections": 1,
        "calls": 2,
        "exceptions": {"1": 1},
        "closed_malformed": 0,
        "refused": {},
    }
    with pytest.raises(ClientError):  # (and the API still refuses what is not Modbus)
        gw.daemon.client().call(b"\x01")


def test_mbusds_own_integration_sequence_passes_through_verld(rw: Gateway) -> None:
    """mbusd's integration requests through verld's front each get what the slave holds."""
    # The requests of mbusd's tests/run_itests.py (fc 15, 1, 5, 2, 4, 16, 3, 6), with read_only
    # off.
    c = rw.master()
    bits = [True, False, True, True, False, False, True, False]
    w = c.write_coils(0, bits, device_id=1)
    assert not w.isError() and (w.address, w.count) == (0, 8)
    assert c.read_coils(0, count=8, device_id=1).bits[:8] == bits
    w = c.write_coil(0, not bits[0], device_id=1)
    assert not w.isError() and w.bits[0] is (not bits[0])
    assert c.read_coils(0, count=1, device_id=1).bits[0] is (not bits[0])
    assert c.read_discrete_inputs(0, count=8, device_id=1).bits[:8] == [
        bool((a // 2) % 2) for a in range(8)
    ]
    assert c.read_input_registers(0, count=8, device_id=1).registers == [1000 + a for a in range(8)]
    registers = [3, 1, 4, 1, 5, 9, 2, 6]
    w = c.write_registers(0, registers, device_id=1)
    assert not w.isError() and (w.address, w.count) == (0, 8)
    assert c.read_holding_registers(0, count=8, device_id=1).registers == registers
    w = c.write_register(0, 7, device_id=1)
    assert not w.isError() and w.registers == [7]
    assert c.read_holding_registers(0, count=1, device_id=1).registers == [7]
