"""Network ports end to end: verld on a verld-sim pty, real TCP clients on the other end.

Strategy: one daemon per test (line codec unless a test needs bytes: length) with
`network:` entries on free loopback ports; the clients are what users run:
pyserial's own `rfc2217://` client, plain sockets for raw TCP and for telnet (with
0xFF in the data), Python's `ssl` for TLS, a socket bound to 127.0.0.2 for the allow
list. Passthrough is checked on the pty itself: the baud rate a client asks for
shows in the sim end's termios while it holds the port, and the configured one
after. tests/test_network_hostile.py and test_network_neighbours.py have the
batteries; tests/test_network_config.py the config rules.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import serial
import yaml
from pki import Pki
from structlog.testing import capture_logs
from support import free_port

from verld.codec.base import Kind
from verld.codec.length import encode as length_encode
from verld.codec.verl import VerlCodec, encode_frame
from verld.config import parse_config
from verld.fronts import gate as gate_module
from verld.fronts.network.entry import Entry
from verld.testing import DaemonProc, SimProc, stop_process, wait_for, write_config
from verld.testing.session import SessionRig

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:serial.rfc2217"),
]

ALLOW = ["127.0.0.1/32"]


def network(d: DaemonProc, name: str) -> dict[str, Any]:
    entry: dict[str, Any] = next(e for e in d.status()["network"] if e["name"] == name)
    return entry


def rfc2217(port: int, **kw: Any) -> serial.Serial:
    return serial.serial_for_url(
        f"rfc2217://127.0.0.1:{port}", **{"baudrate": 115200, "timeout": 3, **kw}
    )


def recv_until(sock: socket.socket, end: bytes, timeout: float = 3.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


class Rig:
    """A sim and a verld with the given network entries (ports chosen here)."""

    def __init__(self, tmp: Path, codec: str, entries: list[dict[str, Any]], **more: Any) -> None:
        self.ports = [free_port() for _ in entries]
        nets = [{"listen": f"127.0.0.1:{p}", **e} for p, e in zip(self.ports, entries, strict=True)]
        self.sim = SimProc(tmp, codec=codec)
        try:
            cfg = write_config(
                tmp, self.sim.link, {"device": {"codec": codec}, "network": nets, **more}
            )
            self.d = DaemonProc(cfg)
        except BaseException:
            self.sim.stop()
            raise

    def stop(self) -> None:
        self.d.stop()
        self.sim.stop()


@pytest.fixture
def line(tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(
        tmp_path,
        "line",
        [
            {"name": "raw"},
            {"name": "tn", "protocol": "telnet"},
            {"name": "com", "protocol": "rfc2217"},
            {"name": "ro", "write": False},
            {"name": "flash", "protocol": "rfc2217", "mode": "passthrough", "allow": ALLOW},
        ],
    )
    yield rig
    rig.stop()


# --- shared: each connection its own replies ------------------------------------------


def test_raw_tcp_client_gets_its_reply(line: Rig) -> None:
    """A raw TCP client's line is a call and the reply line comes back to it."""
    with socket.create_connection(("127.0.0.1", line.ports[0])) as s:
        s.sendall(b"ECHO hello\n")
        assert recv_until(s, b"\n") == b"hello\n"
    wait_for(lambda: network(line.d, "raw")["ok"] == 1)


def test_pyserial_rfc2217_clients_side_by_side_get_their_own_replies(line: Rig) -> None:
    """Several pyserial rfc2217:// clients at once on one shared port each read only theirs."""
    results: dict[str, list[bytes]] = {}

    def run(tag: str) -> None:
        with rfc2217(line.ports[2]) as port:
            got = []
            for i in range(15):
                port.write(f"ECHO {tag}-{i}\n".encode())
                got.append(port.readline())
            results[tag] = got

    threads = [threading.Thread(target=run, args=(t,)) for t in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for tag in ("a", "b", "c"):
        assert results[tag] == [f"{tag}-{i}\n".encode() for i in range(15)]
    assert network(line.d, "com")["ok"] == 45


def test_rfc2217_client_asking_other_settings_is_refused_others_work(line: Rig) -> None:
    """A client asking 9600 baud is refused by pyserial while a 115200 client is served."""
    with rfc2217(line.ports[2]) as good:
        refused = (serial.SerialException, ValueError)  # (pyserial 3.5 raises ValueError)
        with pytest.raises(refused, match=r"rejected value|does not accept"):
            rfc2217(line.ports[2], baudrate=9600)
        good.write(b"PING\n")
        assert good.readline() == b"PONG\n"


def test_rfc2217_modem_state_is_reported(line: Rig) -> None:
    """pyserial sees a NOTIFY-MODEMSTATE (0 on a pty): its cts/dsr read False, no error."""
    with rfc2217(line.ports[2]) as port:
        wait_for(lambda: port.cts is False and port.dsr is False)


def test_telnet_client_data_with_iac_bytes(tmp_path: Path) -> None:
    """On telnet, 0xFF in a length request travels doubled and comes back doubled."""
    rig = Rig(tmp_path, "length", [{"protocol": "telnet"}])
    try:
        with socket.create_connection(("127.0.0.1", rig.ports[0])) as s:
            payload = b"\x01\xff\x00\xff\xff"  # echo these bytes
            s.sendall(length_encode(payload).replace(b"\xff", b"\xff\xff"))
            want = (b"\x00\x00\x00\x05\x00" + payload[1:]).replace(b"\xff", b"\xff\xff")
            wait_for(lambda: want in _read(s), 5, "the doubled reply")
    finally:
        rig.stop()


_seen: dict[int, bytes] = {}


def _read(s: socket.socket) -> bytes:
    s.settimeout(0.1)
    try:
        _seen[s.fileno()] = _seen.get(s.fileno(), b"") + s.recv(4096)
    except TimeoutError:
        pass
    return _seen.get(s.fileno(), b"")


def test_read_only_entry_ignores_writes_and_passes_events(line: Rig) -> None:
    """write: false: what a connection writes is counted ignored; device events reach it."""
    with socket.create_connection(("127.0.0.1", line.ports[3])) as s:
        s.sendall(b"PING\n")
        wait_for(lambda: network(line.d, "ro")["ignored"] == 5)
        line.sim.control("event 48656c6c6f")
        assert recv_until(s, b"\n") == b"Hello\n"
    assert network(line.d, "ro")["calls"] == 0


def test_closing_connection_calls_are_never_answered_elsewhere(line: Rig) -> None:
    """A connection that closes mid-call: its reply goes nowhere, the next one gets its own."""
    a = socket.create_connection(("127.0.0.1", line.ports[0]))
    a.sendall(b"DELAY 300\n")
    time.sleep(0.05)
    a.close()
    with socket.create_connection(("127.0.0.1", line.ports[0])) as b:
        b.sendall(b"ECHO mine\n")
        assert recv_until(b, b"\n") == b"mine\n"
        b.settimeout(0.5)
        with pytest.raises(TimeoutError):
            b.recv(100)


# --- passthrough -----------------------------------------------------------------------


def _ispeed(link: str) -> int:
    fd = os.open(link, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        return int(termios.tcgetattr(fd)[4])
    finally:
        os.close(fd)


def test_passthrough_client_sets_baud_rate_on_the_real_port(line: Rig) -> None:
    """A passthrough client's 9600 baud shows on the pty's termios; 115200 is back after."""
    gen = line.d.status()["link"]["generation"]
    url = f"rfc2217://127.0.0.1:{line.ports[4]}?ign_set_control"
    with serial.serial_for_url(url, baudrate=9600, timeout=3) as port:
        assert _ispeed(line.sim.link) == termios.B9600
        port.write(b"PING\n")
        assert port.readline() == b"PONG\n"  # (raw bytes to the device and back)
        st = line.d.status()
        assert st["link"]["state"] == "inhibited"
        assert st["inhibit"]["front"] == "network"
        assert st["inhibit"]["client"].startswith("network flash 127.0.0.1:")
        assert network(line.d, "flash")["holder"] is not None
    line.d.wait_state("up")
    st = line.d.status()
    assert st["link"]["generation"] > gen
    assert st["inhibit"] is None
    assert _ispeed(line.sim.link) == termios.B115200


def test_passthrough_holder_makes_api_calls_busy(line: Rig) -> None:
    """While a passthrough connection holds the port, an API call fails busy naming it."""
    with serial.serial_for_url(
        f"rfc2217://127.0.0.1:{line.ports[4]}?ign_set_control", baudrate=115200, timeout=3
    ):
        line.d.wait_state("inhibited")
        ctl = [sys.executable, "-m", "verld.ctl", "--socket", line.d.socket]
        out = subprocess.run(
            [*ctl, "call", "--text", "PING"], check=False, capture_output=True, text=True
        )
        assert out.returncode != 0
        assert "inhibited by network flash 127.0.0.1:" in out.stdout + out.stderr


def test_second_passthrough_connection_is_refused_busy(line: Rig) -> None:
    """A second connection to a held passthrough port is closed at once, counted busy."""
    with serial.serial_for_url(
        f"rfc2217://127.0.0.1:{line.ports[4]}?ign_set_control", baudrate=115200, timeout=3
    ):
        line.d.wait_state("inhibited")
        with socket.create_connection(("127.0.0.1", line.ports[4])) as s:
            s.settimeout(3)
            assert s.recv(100) == b""
        assert network(line.d, "flash")["refused"] == {"busy": 1}


def test_uninhibit_closes_the_passthrough_connection(line: Rig) -> None:
    """An admin's uninhibit closes the passthrough connection and the link comes back."""
    with socket.create_connection(("127.0.0.1", line.ports[4])) as s:
        line.d.wait_state("inhibited")
        line.d.client().uninhibit()
        s.settimeout(3)
        while s.recv(4096):
            pass
    line.d.wait_state("up")


# --- access ------------------------------------------------------------------------------


def test_client_outside_allow_is_refused(line: Rig) -> None:
    """A client from 127.0.0.2 on an entry allowing 127.0.0.1/32 is closed, counted allow."""
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", line.ports[4]))
        s.settimeout(3)
        assert s.recv(100) == b""
    assert network(line.d, "flash")["refused"] == {"allow": 1}
    assert '"why":"allow"' in line.d.log()
    assert line.d.status()["link"]["state"] == "up"


def test_tls_with_client_certificates(tmp_path: Path) -> None:
    """TLS with ca: a client with a certificate is served; one without is refused (tls)."""
    pki = Pki(tmp_path / "pki")  # (tests/pki.py: what strict verification wants)
    (cert, key), (ccert, ckey) = pki.server(), pki.client()
    tls = {"cert": str(cert), "key": str(key), "ca": str(pki.ca)}
    rig = Rig(tmp_path, "line", [{"name": "tls", "tls": tls}])
    try:
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        ctx.verify_flags |= ssl.VERIFY_X509_STRICT  # (Python 3.13's default, on every Python)
        ctx.load_cert_chain(str(ccert), str(ckey))
        with (
            socket.create_connection(("127.0.0.1", rig.ports[0])) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
        ):
            s.sendall(b"ECHO secret\n")
            assert recv_until(s, b"\n") == b"secret\n"
        bare = ssl.create_default_context(cafile=str(pki.ca))
        with socket.create_connection(("127.0.0.1", rig.ports[0])) as raw:
            try:  # (TLS 1.3: the refusal comes after the client's side of the handshake)
                with bare.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.settimeout(5)
                    s.sendall(b"PING\n")
                    answer = s.recv(100)
            except (ssl.SSLError, OSError):
                answer = b""
        assert answer == b""
        wait_for(lambda: network(rig.d, "tls")["refused"].get("tls") == 1)
        assert "commonName=bench-client" in rig.d.log()
    finally:
        rig.stop()


def test_max_connections_refuses_beyond(tmp_path: Path) -> None:
    """Beyond max_connections a connection is closed at accept, counted limit."""
    rig = Rig(tmp_path, "line", [{"name": "two", "max_connections": 2}])
    try:
        held = [socket.create_connection(("127.0.0.1", rig.ports[0])) for _ in range(2)]
        wait_for(lambda: network(rig.d, "two")["connections"] == 2)
        with socket.create_connection(("127.0.0.1", rig.ports[0])) as s:
            s.settimeout(3)
            assert s.recv(100) == b""
        assert network(rig.d, "two")["refused"] == {"limit": 1}
        held[0].sendall(b"PING\n")
        assert recv_until(held[0], b"\n") == b"PONG\n"
        for s in held:
            s.close()
    finally:
        rig.stop()


def test_idle_timeout_closes_a_silent_connection(tmp_path: Path) -> None:
    """A connection silent for idle_timeout is closed, and the close is logged."""
    rig = Rig(tmp_path, "line", [{"name": "idle", "idle_timeout": 0.3}])
    try:
        with socket.create_connection(("127.0.0.1", rig.ports[0])) as s:
            s.settimeout(3)
            assert s.recv(100) == b""
        assert "idle_timeout" in rig.d.log()
    finally:
        rig.stop()


def test_metrics_carry_network_series(line: Rig) -> None:
    """The metrics have the per-entry network series and the network front's calls."""
    with socket.create_connection(("127.0.0.1", line.ports[0])) as s:
        s.sendall(b"PING\n")
        recv_until(s, b"\n")
    text = line.d.client().request("metrics")["text"]
    assert 'verld_network_connections{name="raw"}' in text
    assert 'verld_network_calls_total{name="raw",outcome="ok"} 1' in text
    assert 'verld_front_calls_total{front="network",outcome="ok"} 1' in text


# --- binding and socket activation -----------------------------------------------------------


def test_listen_in_use_stops_the_start_naming_it(tmp_path: Path) -> None:
    """A listen address in use: verld exits 1 naming the address."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sim = SimProc(tmp_path, codec="line")
        try:
            net = [{"listen": f"127.0.0.1:{port}"}]
            cfg = write_config(tmp_path, sim.link, {"device": {"codec": "line"}, "network": net})
            out = subprocess.run(
                [sys.executable, "-m", "verld", "--config", str(cfg)],
                check=False,
                capture_output=True,
                text=True,
                timeout=20,
            )
        finally:
            sim.stop()
    assert out.returncode == 1
    assert f"127.0.0.1:{port}" in out.stdout + out.stderr


class Activated:
    """verld under systemd-socket-activate, its socket named FDNAME (entry "dev" in the
    config); the first connection starts it."""

    def __init__(self, tmp: Path, fdname: str, host: str = "127.0.0.1") -> None:
        self.port = free_port()
        self.sim = SimProc(tmp, codec="line")
        net = [{"listen": "127.0.0.1:1", "name": "dev"}]
        cfg = write_config(tmp, self.sim.link, {"device": {"codec": "line"}, "network": net})
        verld = [sys.executable, "-m", "verld", "--config", str(cfg)]
        self.proc = subprocess.Popen(
            ["systemd-socket-activate", "-l", f"{host}:{self.port}", f"--fdname={fdname}", *verld],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        time.sleep(0.2)

    def stop(self) -> None:
        stop_process(self.proc)
        self.sim.stop()


def test_socket_activation_serves_the_named_entry(tmp_path: Path) -> None:
    """A socket passed as net-dev serves entry dev; its own listen is not bound."""
    act = Activated(tmp_path, "net-dev")
    try:
        with socket.create_connection(("127.0.0.1", act.port)) as s:  # (verld starts now)
            s.sendall(b"ECHO activated\n")
            assert recv_until(s, b"\n", 15) == b"activated\n"
        ctl = [sys.executable, "-m", "verld.ctl", "--socket", str(tmp_path / "verld.sock")]
        out = subprocess.run([*ctl, "status", "--json"], check=True, capture_output=True)
        assert json.loads(out.stdout)["network"][0]["listen"] == f"127.0.0.1:{act.port}"
    finally:
        act.stop()


def refused_output(act: Activated) -> bytes:
    """What verld under socket activation printed, once it exited 2 (a connection starts it)."""
    try:
        with socket.create_connection(("127.0.0.1", act.port)):
            pass
        assert act.proc.wait(20) == 2
        assert act.proc.stdout is not None
        return act.proc.stdout.read()
    finally:
        act.stop()


def test_socket_named_for_no_entry_is_exit_2(tmp_path: Path) -> None:
    """A passed socket net-X with no entry named X stops verld with exit 2."""
    assert b"net-nope" in refused_output(Activated(tmp_path, "net-nope"))


def test_a_passed_socket_open_beyond_loopback_without_allow_is_exit_2(tmp_path: Path) -> None:
    """net-dev bound to 0.0.0.0 for an entry with neither allow nor tls.ca: exit 2, saying why."""
    out = refused_output(Activated(tmp_path, "net-dev", host="0.0.0.0"))
    assert b"not a loopback address" in out


# --- reload ------------------------------------------------------------------------------------


def reload_closes(line: Rig, change: Callable[[dict[str, Any]], None]) -> None:
    """With a connection open on entry "raw", reload the config as `change` edits it: the
    connection is closed."""
    with socket.create_connection(("127.0.0.1", line.ports[0])) as s:
        wait_for(lambda: network(line.d, "raw")["connections"] == 1)
        cfg = yaml.safe_load(line.d.config.read_text())
        change(cfg)
        line.d.config.write_text(yaml.safe_dump(cfg))
        line.d.client().request("reload")
        s.settimeout(3)
        assert s.recv(100) == b""


def test_reload_applies_allow_to_open_connections_and_binds_new_entries(line: Rig) -> None:
    """A reload closes connections no longer allowed, and binds an added entry."""
    extra = free_port()

    def change(cfg: dict[str, Any]) -> None:
        cfg["network"][0]["allow"] = ["10.0.0.0/8"]
        cfg["network"].append({"listen": f"127.0.0.1:{extra}", "name": "new"})

    reload_closes(line, change)
    wait_for(lambda: any(e["name"] == "new" for e in line.d.status()["network"]))
    with socket.create_connection(("127.0.0.1", extra)) as s:
        s.sendall(b"PING\n")
        assert recv_until(s, b"\n") == b"PONG\n"


def test_verl_connection_gets_its_seqs_and_bad_frames_are_counted(tmp_path: Path) -> None:
    """verl over raw TCP: the reply carries the program's seq; a corrupt frame is counted."""
    rig = Rig(tmp_path, "verl", [{"name": "v"}])
    try:
        bad = bytearray(encode_frame(Kind.REQUEST, 9, b"\x01xyz"))
        bad[3] ^= 0x55
        with socket.create_connection(("127.0.0.1", rig.ports[0])) as s:
            s.sendall(bytes(bad) + encode_frame(Kind.REQUEST, 77, b"\x01abc"))
            s.settimeout(3)
            codec = VerlCodec(64)
            frames: list[Any] = []
            while not frames:
                frames = codec.feed(s.recv(4096), True)
        assert [(f.kind, f.seq, f.status, f.data) for f in frames] == [(Kind.REPLY, 77, 0, b"abc")]
        assert network(rig.d, "v")["bad_frames"] == 1
    finally:
        rig.stop()


def test_a_client_that_half_closes_still_gets_its_answers(line: Rig) -> None:
    """printf 'PING' | nc: the client shuts its sending side; its answer still comes."""
    with socket.create_connection(("127.0.0.1", line.ports[0])) as s:
        s.sendall(b"DELAY 200\nPING\n")
        s.shutdown(socket.SHUT_WR)
        s.settimeout(5)
        got = b""
        while chunk := s.recv(100):
            got += chunk
    assert got.endswith(b"PONG\n")
    assert network(line.d, "raw")["ok"] == 2


def test_programs_lists_each_connection(line: Rig) -> None:
    """The programs op has a row per network connection, keyed by name and address."""
    with socket.create_connection(("127.0.0.1", line.ports[0])) as s:
        s.sendall(b"PING\n")
        recv_until(s, b"\n")
        rows = line.d.client().request("programs")["programs"]
        mine = [r for r in rows if r["front"] == "network"]
        assert len(mine) == 1
        assert mine[0]["who"] == f"raw 127.0.0.1:{s.getsockname()[1]}"
        assert (mine[0]["calls"], mine[0]["ok"], mine[0]["waiting"]) == (1, 1, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare -n needs root")
def test_a_listener_in_a_private_network_namespace_is_warned_about(tmp_path: Path) -> None:
    """Bound inside a network namespace with only lo (PrivateNetwork=yes): a WARNING says so."""
    sim = SimProc(tmp_path, codec="line")
    try:
        net = [{"listen": f"127.0.0.1:{free_port()}"}]
        cfg = write_config(tmp_path, sim.link, {"device": {"codec": "line"}, "network": net})
        verld = [sys.executable, "-m", "verld", "--config", str(cfg)]
        proc = subprocess.Popen(
            ["unshare", "-n", *verld], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            out = b""
            assert proc.stdout is not None
            while b"network_unreachable" not in out and b'"ready"' not in out:
                line = proc.stdout.readline()
                if not line:
                    break
                out += line
            assert b"network_unreachable" in out
        finally:
            stop_process(proc)
    finally:
        sim.stop()


def test_reload_changing_protocol_closes_the_entrys_connections(line: Rig) -> None:
    """A reload that changes an entry's protocol closes its connections; a new one speaks it."""
    reload_closes(line, lambda cfg: cfg["network"][0].update(protocol="telnet"))
    wait_for(lambda: network(line.d, "raw")["protocol"] == "telnet")
    with socket.create_connection(("127.0.0.1", line.ports[0])) as s:
        s.settimeout(3)
        assert s.recv(3) == b"\xff\xfb\x00"  # (telnet now: WILL BINARY first)


# --- the accept loop, in this process ------------------------------------------------
# An `Entry` over a real core (the session rig's, no device) on a socket listening on
# a free loopback port; the crash is injected by monkeypatching, which a daemon in a
# process of its own would not see.


ENTRY_CONFIG = """
device: {port: /dev/fake, codec: line}
network:
  - {name: crash, listen: '127.0.0.1:4000'}
"""


def _listening(entry: Entry) -> int:
    """`entry` accepting on a free loopback port: the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    entry.serve([sock], passed=False)
    port: int = sock.getsockname()[1]
    return port


async def _closed_by_peer(port: int) -> bool:
    """A client connects to `port`: verld closed the connection (no byte, EOF)."""
    loop = asyncio.get_running_loop()
    with socket.socket() as client:
        client.setblocking(False)
        await loop.sock_connect(client, ("127.0.0.1", port))
        return await asyncio.wait_for(loop.sock_recv(client, 1), 5) == b""


def _others() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}


def test_a_crash_taking_a_connection_is_logged_and_accepting_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug met taking a connection is a `network_accept_crashed` error; the next is taken."""
    cfg = parse_config(ENTRY_CONFIG)
    core = SessionRig(cfg, core=True).core

    def broken(sock: socket.socket) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(gate_module, "keepalive", broken)

    async def main() -> set[asyncio.Task[Any]]:
        entry = Entry(core, cfg, cfg.network[0])
        port = _listening(entry)
        try:
            assert await _closed_by_peer(port)
            assert await _closed_by_peer(port)  # (the loop still accepts)
        finally:
            entry.close("test over")
            await entry.wait_closed()
        return _others()

    with capture_logs() as logs:
        assert asyncio.run(main()) == set()
    crashes = [r for r in logs if r["event"] == "network_accept_crashed"]
    assert len(crashes) == 2
    assert {r["log_level"] for r in crashes} == {"error"}
    assert crashes[0]["error"] == "RuntimeError('injected')"
    assert crashes[0]["then"] == "that connection closed, accepting goes on"
    assert crashes[0]["name"] == "crash" and crashes[0]["peer"].startswith("('127.0.0.1'")


def test_a_crash_of_accept_itself_is_logged_and_accepting_starts_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An accept that raises what it should not is logged; the loop accepts again after a pause."""
    cfg = parse_config(ENTRY_CONFIG)
    core = SessionRig(cfg, core=True).core
    monkeypatch.setattr(gate_module, "ACCEPT_PAUSE", 0.01)
    accepts: list[int] = []

    async def main() -> set[asyncio.Task[Any]]:
        loop = asyncio.get_running_loop()
        real = loop.sock_accept
        again = asyncio.Event()  #: the loop called accept after the crash

        async def flaky(sock: socket.socket) -> tuple[socket.socket, Any]:
            accepts.append(1)
            if len(accepts) == 1:
                raise RuntimeError("injected")
            again.set()
            return await real(sock)

        monkeypatch.setattr(loop, "sock_accept", flaky)
        entry = Entry(core, cfg, cfg.network[0])
        _listening(entry)
        try:
            await again.wait()
        finally:
            entry.close("test over")
            await entry.wait_closed()
        return _others()

    with capture_logs() as logs:
        assert asyncio.run(main()) == set()
    [crash] = [r for r in logs if r["event"] == "network_accept_crashed"]
    assert crash["log_level"] == "error"
    assert crash["error"] == "RuntimeError('injected')"
    assert crash["then"] == "accepting again in 0.01 s"
