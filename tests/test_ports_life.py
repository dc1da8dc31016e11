"""A virtual port's life: start-time errors, reload, exit; and the Modbus codecs on a port.

verld runs as a subprocess on verld-sim; programs are real processes or bare opens
of the link (pyserial where a user's script would use it, pymodbus's own serial
client for Modbus RTU). `TestFrontProtocol` drives `PortsFront` in-process, as the
daemon does, over a stand-in core (no program opens a port there, so no call is made).
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import serial
import yaml

from verld.codec.base import Kind
from verld.codec.modbus import mbap_frame
from verld.codec.verl import FrameDecoder, encode_frame
from verld.config import Config, parse_config
from verld.fronts.base import Core
from verld.fronts.ports.front import PortsFront
from verld.fronts.ports.pty import PortSetupError
from verld.ownership import acquire
from verld.testing import DaemonProc, ManualClock, Processes, SimProc, wait_for, write_config

pytestmark = pytest.mark.timeout(60)


def _config(tmp: Path, sim: SimProc, codec: str, ports: list[dict[str, Any]]) -> Path:
    device: dict[str, Any] = {"codec": codec}
    return write_config(
        tmp, sim.link, {"device": device, "heartbeat": {"interval": 0}, "ports": ports}
    )


def _run_verld(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verld", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def _hung_up(fd: int) -> bool:
    try:
        return os.read(fd, 1) == b""
    except BlockingIOError:
        return False
    except OSError as exc:
        return exc.errno == errno.EIO


# --- start and exit -------------------------------------------------------------------


def test_a_link_whose_directory_is_missing_stops_verld_at_start_with_exit_1(
    tmp_path: Path,
) -> None:
    """ports[].link in a directory that does not exist: verld says so and exits 1."""
    with SimProc(tmp_path, codec="line") as sim:
        result = _run_verld(_config(tmp_path, sim, "line", [{"link": str(tmp_path / "no/ttyV0")}]))
    assert result.returncode == 1
    assert "cannot_create_port" in result.stdout + result.stderr
    assert "does not exist" in result.stdout + result.stderr


def test_a_link_path_holding_another_file_is_left_alone_and_verld_exits_1(
    tmp_path: Path,
) -> None:
    """A regular file where the link should go is not verld's: untouched, exit 1."""
    victim = tmp_path / "ttyV0"
    victim.write_text("precious")
    with SimProc(tmp_path, codec="line") as sim:
        result = _run_verld(_config(tmp_path, sim, "line", [{"link": str(victim)}]))
    assert result.returncode == 1
    assert victim.read_text() == "precious"


def test_links_exist_while_verld_runs_and_are_removed_at_exit(tmp_path: Path) -> None:
    """A link left by an earlier verld is replaced; at SIGTERM every link goes."""
    stale = tmp_path / "ttyA"
    stale.symlink_to("/dev/pts/999")
    links = [tmp_path / "ttyA", tmp_path / "ttyB"]
    with (
        SimProc(tmp_path, codec="line") as sim,
        DaemonProc(_config(tmp_path, sim, "line", [{"link": str(p)} for p in links])) as daemon,
    ):
        for link in links:
            assert os.readlink(link).startswith("/dev/pts/") and link.resolve().exists()
        assert os.readlink(stale) != "/dev/pts/999"
        assert daemon.stop() == 0
    assert not any(os.path.lexists(link) for link in links)


# --- the Front protocol, in-process -------------------------------------------------


def _front(links: list[Path]) -> tuple[PortsFront, Core]:
    """A ports front over a real core (never connected: no program opens a port)."""
    ports = "".join(f"  - link: {link}\n" for link in links)
    cfg: Config = parse_config(f"device: {{port: /dev/fake, codec: line}}\nports:\n{ports}")
    core = Core(cfg, clock=ManualClock())
    return PortsFront(cfg, core), core


class TestFrontProtocol:
    def test_claim_fails_on_the_first_link_it_cannot_own_and_lets_go_of_the_rest(
        self, tmp_path: Path
    ) -> None:
        """A claim that fails names the link, creates nothing and releases the links it took."""
        good, bad = tmp_path / "ttyA", tmp_path / "nodir" / "ttyB"
        front, _ = _front([good, bad])
        with pytest.raises(PortSetupError, match="does not exist") as info:
            asyncio.run(front.claim())
        assert info.value.fields == {"link": str(bad)}
        assert not os.path.lexists(good)
        with acquire(str(good)):  # (free again)
            pass

    def test_start_serves_every_port_and_close_removes_them_twice_over(
        self, tmp_path: Path
    ) -> None:
        """claim, start, status and close, as the daemon drives them; close is idempotent."""
        links = [tmp_path / "ttyA", tmp_path / "ttyB"]
        front, core = _front(links)

        async def life() -> dict[str, Any]:
            await front.close()  # (safe before anything)
            await front.claim()
            await front.start()
            assert core.listeners == [front]
            assert all(os.readlink(link).startswith("/dev/pts/") for link in links)
            status = front.status()
            front.stop_accepting()
            await front.close()
            await front.close()
            return status

        status = asyncio.run(life())
        assert [(p["link"], p["open"], p["calls"]) for p in status["ports"]] == [
            (str(link), False, 0) for link in links
        ]
        assert core.listeners == []
        assert not any(os.path.lexists(link) for link in links)
        assert list(core.front_calls()) == ["port"]  # (its calls' metrics label)
        for link in links:
            with acquire(str(link)):  # every lock let go
                pass


# --- reload ------------------------------------------------------------------------------


class Reloadable:
    """verld with a config file the test rewrites, and `reload` through the API."""

    def __init__(self, tmp: Path, codec: str, ports: list[dict[str, Any]]) -> None:
        self.tmp = tmp
        self.sim = SimProc(tmp, codec=codec)
        self.config = _config(tmp, self.sim, codec, ports)
        try:
            self.daemon = DaemonProc(self.config)
        except BaseException:
            self.sim.stop()
            raise

    def reload(self, **sections: Any) -> None:
        cfg = yaml.safe_load(self.config.read_text())
        for key, value in sections.items():
            cfg[key] = value
        self.config.write_text(yaml.safe_dump(cfg))
        self.daemon.client().request("reload")

    def stop(self) -> None:
        self.daemon.stop()
        self.sim.stop()

    def __enter__(self) -> Reloadable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def test_reload_keeps_unchanged_ports_adds_new_ones_and_hangs_up_removed_ones(
    tmp_path: Path,
) -> None:
    """A reload keeps unchanged ports connected, hangs up removed ones and adds working new ones."""
    # The kept port's program is still connected and answered, the removed port's program sees a
    # hang-up and its link is gone, the new port works.
    a, b, c = (str(tmp_path / n) for n in ("ttyA", "ttyB", "ttyC"))
    with Reloadable(tmp_path, "line", [{"link": a}, {"link": b}]) as rig:
        fd_b = os.open(b, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        try:
            with serial.Serial(a, timeout=2) as port_a:
                pts_a = os.readlink(a)
                rig.reload(ports=[{"link": a, "write": True}, {"link": c}])
                wait_for(
                    lambda: [p["link"] for p in rig.daemon.status()["ports"]] == [a, c],
                    5.0,
                    "the reloaded ports",
                )
                assert os.readlink(a) == pts_a  # the same pty
                port_a.write(b"PING\n")
                assert port_a.readline() == b"PONG\n"
            wait_for(lambda: _hung_up(fd_b), 5.0, "a hang-up on the removed port")
            assert not os.path.lexists(b)
            with serial.Serial(c, timeout=2) as port_c:
                port_c.write(b"PING\n")
                assert port_c.readline() == b"PONG\n"
        finally:
            os.close(fd_b)


def test_reload_applies_a_ports_new_write_and_mode_settings(tmp_path: Path) -> None:
    """A reload applies a port's new write: false and mode 0600 to the same pty."""
    # The pty stays, its node's mode changes, and what the program writes is ignored from then on.
    a = str(tmp_path / "ttyA")
    with Reloadable(tmp_path, "line", [{"link": a}]) as rig:
        pts = os.readlink(a)
        rig.reload(ports=[{"link": a, "write": False, "mode": "0600"}])
        wait_for(lambda: rig.daemon.status()["ports"][0]["write"] is False, 5.0, "write: false")
        assert os.readlink(a) == pts and os.stat(pts).st_mode & 0o777 == 0o600
        with serial.Serial(a, timeout=0.5) as port:
            port.write(b"PING\n")
            assert port.readline() == b""
        wait_for(lambda: rig.daemon.status()["ports"][0]["ignored"] == 5, 5.0, "ignored bytes")


# --- the program's own ids, and Modbus masters, on a port -------------------------------------


def test_a_verl_reply_carries_the_programs_own_seq(tmp_path: Path) -> None:
    """A verl request with seq 0xBEEF gets a reply frame of seq 0xBEEF, whatever seq verld used."""
    # Whatever seq verld used on the link.
    link = str(tmp_path / "ttyV")
    with (
        SimProc(tmp_path, codec="verl") as sim,
        DaemonProc(_config(tmp_path, sim, "verl", [{"link": link}])),
    ):
        with serial.Serial(link, timeout=2) as port:
            port.write(encode_frame(Kind.REQUEST, 0xBEEF, b"\x01hello"))
            frames: list[Any] = []
            decoder = FrameDecoder(4096, frozenset({Kind.REPLY, Kind.EVENT}))
            deadline = time.monotonic() + 5
            while not frames and time.monotonic() < deadline:
                frames += decoder.feed(port.read(64))
        assert [(f.kind, f.seq, f.payload) for f in frames] == [(Kind.REPLY, 0xBEEF, b"\x00hello")]


def test_a_modbus_rtu_master_reads_registers_through_a_port(
    tmp_path: Path, procs: Processes
) -> None:
    """pymodbus's RTU client reads holding registers through a port; a silent unit gets nothing."""
    # It reads the sim's holding registers on the port link; a read of a unit that does not
    # answer gets nothing (pymodbus times out).
    from pymodbus.client import ModbusSerialClient
    from pymodbus.exceptions import ModbusIOException

    sim = procs.sim(tmp_path, "--units", "1", codec="modbus-rtu")
    link = str(tmp_path / "ttyM")
    daemon = procs.daemon(
        write_config(
            tmp_path,
            sim.link,
            {
                "device": {"codec": "modbus-rtu", "timeout": 0.3, "retry": 0},
                "heartbeat": {"interval": 0},
                "ports": [{"link": link}],
            },
        )
    )
    client = ModbusSerialClient(link, baudrate=19200, timeout=1, retries=0)
    try:
        assert client.connect()
        reply = client.read_holding_registers(3, count=4, device_id=1)
        assert not reply.isError() and reply.registers == [3, 4, 5, 6]
        with pytest.raises(ModbusIOException):  # (pymodbus: no response, no retry)
            client.read_holding_registers(0, count=1, device_id=7)
        st = daemon.status()["ports"][0]
        assert st["ok"] == 1 and st["failed"] == {"timeout": 1}
    finally:
        client.close()  # type: ignore[no-untyped-call]


def test_a_modbus_tcp_port_answers_with_the_programs_transaction_id(tmp_path: Path) -> None:
    """MBAP requests written to a modbus-tcp port get responses with their own transaction ids."""
    link = str(tmp_path / "ttyT")
    with (
        SimProc(tmp_path, "--units", "1", codec="modbus-tcp", tcp=True) as sim,
        DaemonProc(
            write_config(
                tmp_path,
                sim.address,
                {
                    "device": {"codec": "modbus-tcp"},
                    "heartbeat": {"interval": 0},
                    "ports": [{"link": link}],
                },
            )
        ),
    ):
        with serial.Serial(link, timeout=2) as port:
            port.write(mbap_frame(0x1234, bytes.fromhex("0103000a0002")))
            port.write(mbap_frame(0x0042, bytes.fromhex("010300000001")))
            got = port.read(2 * (6 + 7)) + port.read(6 + 5)
        assert got.startswith(mbap_frame(0x1234, bytes.fromhex("010304000a000b")))
        assert got.endswith(mbap_frame(0x0042, bytes.fromhex("0103020000")))


def test_verld_waits_for_the_program_without_spinning_after_a_close(
    tmp_path: Path, procs: Processes
) -> None:
    """After a program closed its port, and beside one nobody opens, verld idles near zero CPU."""
    sim = procs.sim(tmp_path, codec="line")
    link = str(tmp_path / "ttyA")
    ports = [{"link": link}, {"link": str(tmp_path / "ttyIdle")}]
    daemon = procs.daemon(_config(tmp_path, sim, "line", ports))
    with serial.Serial(link, timeout=2) as port:
        port.write(b"PING\n")
        assert port.readline() == b"PONG\n"
    wait_for(lambda: daemon.status()["ports"][0]["open"] is False, 5.0, "the close seen")
    stat = Path(f"/proc/{daemon.pid}/stat")

    def cpu() -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before = cpu()
    time.sleep(2.0)
    assert cpu() - before < 0.1
