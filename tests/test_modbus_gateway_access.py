"""Who may connect to verld's Modbus TCP gateway: `modbus.allow`, `modbus.tls`, and the
rule that keeps a writable gateway off the open network.

The rig is tests/test_modbus_gateway.py's: a pymodbus RTU slave on a socat pty pair
(holding register a of unit u = 100*u + a) behind a real verld; the masters are
pymodbus's `ModbusTlsClient` (Modbus/TCP Security: MBAP over TLS) and
`ModbusTcpClient`. Certificates come from tests/pki.py's throwaway CA (with the
extensions strict verification asks for). The docs' YAML blocks pass
`verld --check-config` as files.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pki import Pki
from pymodbus.client import ModbusTcpClient, ModbusTlsClient
from pymodbus.exceptions import ModbusException
from support import free_port, need
from test_modbus_gateway import Gateway

from verld.testing import stop_process, wait_for, write_config

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "modbus-gateway.md"


def client_context(pki: Pki, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    """A strict TLS client context trusting `pki`'s CA, with `cert` (PEM, key) if given
    (no host name check: pymodbus's TLS client passes none; the chain is verified)."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.check_hostname = False
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def tls_gateway(tmp: Path, pki: Pki, **modbus: object) -> Gateway:
    cert, key = pki.server()
    return Gateway(tmp, tls={"cert": str(cert), "key": str(key), "ca": str(pki.ca)}, **modbus)


def check_config(tmp: Path, modbus: dict[str, object]) -> subprocess.CompletedProcess[str]:
    config = write_config(tmp, "sim", {"device": {"codec": "modbus-rtu"}, "modbus": modbus})
    return run_check(config)


def records(g: Gateway, event: str) -> list[dict[str, Any]]:
    """The gateway's log records (JSON lines) of `event`."""
    lines = g.daemon.log_path.read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("event") == event]


def refusals(g: Gateway) -> list[dict[str, Any]]:
    """The `modbus_refused` records of the gateway's log."""
    return records(g, "modbus_refused")


def run_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verld", "--check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


class TestTls:
    def test_a_client_with_a_certificate_reads_registers_over_tls(self, tmp_path: Path) -> None:
        """ModbusTlsClient with a certificate from the CA reads registers; its subject is logged."""
        pki = Pki(tmp_path / "pki")
        g = tls_gateway(tmp_path, pki)
        try:
            ctx = client_context(pki, pki.client())
            c = ModbusTlsClient("127.0.0.1", port=g.port, sslctx=ctx, timeout=3, retries=0)
            try:
                assert c.connect()  # type: ignore[no-untyped-call]
                r = c.read_holding_registers(0, count=5, device_id=1)
                assert r.registers == [100, 101, 102, 103, 104]
            finally:
                c.close()  # type: ignore[no-untyped-call]
            st = g.daemon.status()["modbus"]
            assert st["refused"] == {} and st["calls"] == 1
            assert [r.get("subject") for r in records(g, "modbus_connected")] == [
                "commonName=bench-client"
            ]
        finally:
            g.close()

    def test_a_client_without_a_certificate_is_refused_and_counted(self, tmp_path: Path) -> None:
        """No client certificate: no register is read; refused["tls"] counts it, logged."""
        pki = Pki(tmp_path / "pki")
        g = tls_gateway(tmp_path, pki)
        try:
            ctx = client_context(pki, None)
            c = ModbusTlsClient("127.0.0.1", port=g.port, sslctx=ctx, timeout=2, retries=0)
            try:
                c.connect()  # type: ignore[no-untyped-call]
                with pytest.raises((ModbusException, OSError)):
                    c.read_holding_registers(0, count=1, device_id=1)
            finally:
                c.close()  # type: ignore[no-untyped-call]
            wait_for(lambda: g.daemon.status()["modbus"]["refused"] == {"tls": 1}, 5, "refused tls")
            assert g.daemon.status()["modbus"]["calls"] == 0
            assert [(r["why"], r["peer"].rpartition(":")[0]) for r in refusals(g)] == [
                ("tls", "127.0.0.1")
            ]
        finally:
            g.close()

    def test_a_plain_client_gets_nothing_from_a_tls_gateway(self, tmp_path: Path) -> None:
        """With `tls`, `listen` speaks TLS only: a plain Modbus TCP read gets no answer."""
        pki = Pki(tmp_path / "pki")
        g = tls_gateway(tmp_path, pki)
        try:
            c = ModbusTcpClient("127.0.0.1", port=g.port, timeout=2, retries=0)
            try:
                c.connect()  # type: ignore[no-untyped-call]
                with pytest.raises((ModbusException, OSError)):
                    c.read_holding_registers(0, count=1, device_id=1)
            finally:
                c.close()  # type: ignore[no-untyped-call]
            wait_for(lambda: g.daemon.status()["modbus"]["refused"] == {"tls": 1}, 5, "refused tls")
        finally:
            g.close()

    def test_unfinished_handshakes_count_toward_max_connections(self, tmp_path: Path) -> None:
        """Silent connects take the 2 slots (a third: why limit); once gone, a master reads."""
        pki = Pki(tmp_path / "pki")
        g = tls_gateway(tmp_path, pki, max_connections=2)
        try:
            silent = [g.raw(), g.raw()]
            third = g.raw()
            assert third.recv(100) == b""
            third.close()
            wait_for(lambda: g.daemon.status()["modbus"]["refused"] == {"limit": 1}, 5, "limit")
            for s in silent:
                s.close()
            ctx = client_context(pki, pki.client())

            def reads() -> bool:
                c = ModbusTlsClient("127.0.0.1", port=g.port, sslctx=ctx, timeout=3, retries=0)
                try:
                    c.connect()  # type: ignore[no-untyped-call]
                    return bool(
                        c.read_holding_registers(0, count=1, device_id=1).registers == [100]
                    )
                except (ModbusException, OSError):
                    return False
                finally:
                    c.close()  # type: ignore[no-untyped-call]

            wait_for(reads, 10, "a slot free again")
        finally:
            g.close()

    def test_a_reload_changing_tls_closes_the_connections(self, tmp_path: Path) -> None:
        """A reload dropping tls.ca closes the TLS connection; then no certificate is needed."""
        pki = Pki(tmp_path / "pki")
        g = tls_gateway(tmp_path, pki)
        try:
            ctx = client_context(pki, pki.client())
            conn = ctx.wrap_socket(g.raw())
            wait_for(lambda: g.daemon.status()["modbus"]["connections"] == 1, 5, "connected")
            cfg = yaml.safe_load(g.daemon.config.read_text())
            del cfg["modbus"]["tls"]["ca"]
            g.daemon.config.write_text(yaml.safe_dump(cfg))
            assert g.daemon.client().request("reload")["changed"] == ["modbus.tls.ca"]
            try:
                assert conn.recv(100) == b""
            except (ssl.SSLError, OSError):
                pass  # (closed: how the TLS layer says so)
            conn.close()
            anonymous = ModbusTlsClient(
                "127.0.0.1", port=g.port, sslctx=client_context(pki, None), timeout=3, retries=0
            )
            try:
                assert anonymous.connect()  # type: ignore[no-untyped-call]
                r = anonymous.read_holding_registers(0, count=1, device_id=1)
                assert r.registers == [100]
            finally:
                anonymous.close()  # type: ignore[no-untyped-call]
        finally:
            g.close()


class TestAllow:
    def test_an_address_outside_allow_is_refused_and_counted(self, tmp_path: Path) -> None:
        """allow [127.0.0.1/32]: a master from 127.0.0.2 is refused (why allow); 127.0.0.1 reads."""
        g = Gateway(tmp_path, allow=["127.0.0.1/32"])
        try:
            outsider = ModbusTcpClient(
                "127.0.0.1",
                port=g.port,
                source_address=("127.0.0.2", 0),
                timeout=2,
                retries=0,
            )
            try:
                outsider.connect()  # type: ignore[no-untyped-call]
                with pytest.raises((ModbusException, OSError)):
                    outsider.read_holding_registers(0, count=1, device_id=1)
            finally:
                outsider.close()  # type: ignore[no-untyped-call]
            wait_for(
                lambda: g.daemon.status()["modbus"]["refused"] == {"allow": 1}, 5, "refused allow"
            )
            assert g.master().read_holding_registers(0, count=1, device_id=1).registers == [100]
            assert [(r["why"], r["peer"].rpartition(":")[0]) for r in refusals(g)] == [
                ("allow", "127.0.0.2")
            ]
            text = g.daemon.client().request("metrics")["text"]
            assert 'verld_modbus_refused_total{why="allow"} 1' in text
        finally:
            g.close()

    def test_a_reload_narrowing_allow_closes_connections_no_longer_allowed(
        self, tmp_path: Path
    ) -> None:
        """A reload to allow [127.0.0.2/32] closes the open 127.0.0.1 connection."""
        g = Gateway(tmp_path, allow=["127.0.0.1/32"])
        try:
            open_conn = g.raw()
            wait_for(lambda: g.daemon.status()["modbus"]["connections"] == 1, 5, "connected")
            text = g.daemon.config.read_text()
            assert "127.0.0.1/32" in text
            g.daemon.config.write_text(text.replace("127.0.0.1/32", "127.0.0.2/32"))
            assert g.daemon.client().request("reload")["changed"] == ["modbus.allow"]
            assert open_conn.recv(100) == b""
            open_conn.close()
            wait_for(lambda: g.daemon.status()["modbus"]["connections"] == 0, 5, "closed")
        finally:
            g.close()


class TestTheWritableGatewayRule:
    def test_a_writable_gateway_beyond_loopback_without_allow_is_refused(
        self, tmp_path: Path
    ) -> None:
        """read_only false on 0.0.0.0:1502, no allow or tls.ca: exit 2 naming modbus.allow."""
        out = check_config(tmp_path, {"listen": "0.0.0.0:1502", "read_only": False})
        assert out.returncode == 2, out.stderr
        assert "modbus.allow: [YOUR LAN CIDR]" in out.stderr
        assert '["0.0.0.0/0", "::/0"]' in out.stderr

    @pytest.mark.parametrize(
        "access",
        [
            {"allow": ["192.168.1.0/24"]},
            {"allow": ["0.0.0.0/0", "::/0"]},
            {"tls": {"cert": "server.pem", "key": "server.key", "ca": "ca.pem"}},
        ],
    )
    def test_allow_or_a_ca_makes_it_valid(self, tmp_path: Path, access: dict[str, object]) -> None:
        """The same gateway with a non-empty allow, or tls.ca, passes check-config."""
        out = check_config(tmp_path, {"listen": "0.0.0.0:1502", "read_only": False, **access})
        assert out.returncode == 0, out.stderr

    @pytest.mark.parametrize(
        "modbus",
        [
            {"listen": "0.0.0.0:1502"},  # read-only
            {"listen": "127.0.0.1:1502", "read_only": False},
            {"listen": "[::1]:1502", "read_only": False},
            {"listen": "localhost:1502", "read_only": False},
        ],
    )
    def test_a_read_only_or_loopback_gateway_needs_neither(
        self, tmp_path: Path, modbus: dict[str, object]
    ) -> None:
        """Read-only anywhere, or writable on loopback: valid without allow or tls."""
        out = check_config(tmp_path, modbus)
        assert out.returncode == 0, out.stderr

    def test_tls_without_a_key_is_a_config_error(self, tmp_path: Path) -> None:
        """modbus.tls is checked as a network entry's: cert and key are required."""
        out = check_config(tmp_path, {"listen": "127.0.0.1:802", "tls": {"cert": "a.pem"}})
        assert out.returncode == 2
        assert "TLS needs cert and key" in out.stderr


def activated_exit(tmp: Path, modbus: dict[str, object]) -> tuple[int, str]:
    """verld under systemd-socket-activate with a socket named `modbus` bound to
    0.0.0.0 (the first connection starts it): its exit status and output."""
    need("systemd-socket-activate", "systemd")
    port = free_port()
    config = write_config(tmp, "sim", {"device": {"codec": "modbus-rtu"}, "modbus": modbus})
    verld = [sys.executable, "-m", "verld", "--config", str(config)]
    proc = subprocess.Popen(
        ["systemd-socket-activate", "-l", f"0.0.0.0:{port}", "--fdname=modbus", *verld],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: tcp_listening(port), 10, "systemd-socket-activate to listen")
        with socket.create_connection(("127.0.0.1", port)):
            pass
        code = proc.wait(20)
        assert proc.stdout is not None
        return code, proc.stdout.read().decode(errors="replace")
    finally:
        stop_process(proc)


def tcp_listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_a_writable_gateways_passed_socket_beyond_loopback_is_exit_2(tmp_path: Path) -> None:
    """A passed `modbus` socket on 0.0.0.0, writable, no allow: exit 2 naming the remedy."""
    code, out = activated_exit(tmp_path, {"read_only": False})
    assert code == 2, out
    assert "modbus.allow: [YOUR LAN CIDR]" in out


def _yaml_blocks() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [body for _, body in re.findall(r"^( *)```yaml\n(.*?)^\1```", text, re.S | re.M)]


def test_the_guides_yaml_blocks_pass_check_config(tmp_path: Path) -> None:
    """Every ```yaml block of docs/modbus-gateway.md passes `verld --check-config`."""
    blocks = _yaml_blocks()
    assert any("allow:" in b for b in blocks), "the guide shows no modbus.allow"
    for i, block in enumerate(blocks, 1):
        path = tmp_path / f"block{i}.yaml"
        path.write_text(block)
        done = run_check(path)
        assert done.returncode == 0, (
            f"docs/modbus-gateway.md, yaml block {i}:\n{block}\n{done.stderr}"
        )
