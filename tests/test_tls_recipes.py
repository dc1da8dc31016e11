"""The docs' PKI recipes make certificates strict verification accepts; verld names what not.

Strategy: docs/network.md and docs/fleet.md each have one ```sh block with the openssl
commands of their throwaway PKI. Each is run as written (its `cd` left out) by `sh -e`
in a temp dir with the real openssl, and the result carries a TLS session under a
client context with `ssl.VERIFY_X509_STRICT` set explicitly (Python 3.13's default; on
3.11 and 3.12 too, so the test means the same on every Python): network.md's against a
verld network port with `tls: {cert, key, ca}` and alice's client certificate (mallory's,
from the other CA, refused), fleet.md's against mosquitto with the broker's certificate,
verld-mqtt connecting with bridge-vm's client certificate. Then what strict verification
refuses: a CA made without keyUsage (tests/pki.py, `strict=False`, as the recipes were
before) has its client refused by verld, and its broker by verld-mqtt, each log naming
what the CA certificate lacks (verld sets VERIFY_X509_STRICT on its contexts itself).
"""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mqttrig import BridgeProc, Broker, Certs, Fleet
from pki import Pki
from support import free_port, need

from verld.testing import DaemonProc, SimProc, wait_for, write_config

pytestmark = pytest.mark.timeout(120)

DOCS = Path(__file__).resolve().parents[1] / "docs"
LACKS = "CA cert does not include key usage extension"


def recipe(doc: str) -> str:
    """The doc's one ```sh block of openssl commands (the PKI), without its `cd` line."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M) if "openssl " in b]
    assert len(blocks) == 1, f"docs/{doc}: {len(blocks)} ```sh blocks with openssl, want one"
    return re.sub(r"^cd .*\n", "", blocks[0], flags=re.M)


def run_recipe(doc: str, where: Path) -> Path:
    """Run the doc's recipe in `where` (made) with sh -e; `where`."""
    need("openssl", "openssl")
    where.mkdir()
    done = subprocess.run(
        ["sh", "-e", "-c", recipe(doc)],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"docs/{doc}'s recipe failed:\n{done.stderr}"
    return where


def strict(cafile: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """A client context as Python 3.13's default, strict on every Python; `cert`: ours."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


class Port:
    """A verld-sim and a verld with one network entry `tls` (its `tls:` as given)."""

    def __init__(self, tmp: Path, tls: dict[str, str]) -> None:
        self.port = free_port()
        self.sim = SimProc(tmp, codec="line")
        net = [{"listen": f"127.0.0.1:{self.port}", "name": "tls", "tls": tls}]
        try:
            cfg = write_config(tmp, self.sim.link, {"device": {"codec": "line"}, "network": net})
            self.d = DaemonProc(cfg)
        except BaseException:
            self.sim.stop()
            raise

    def refused(self) -> int:
        row: dict[str, Any] = next(e for e in self.d.status()["network"] if e["name"] == "tls")
        return int(row["refused"].get("tls", 0))

    def call(self, ctx: ssl.SSLContext, line: bytes) -> bytes:
        """`line` over TLS and the reply line; b"" when the server closes (refused)."""
        with socket.create_connection(("127.0.0.1", self.port), 5) as raw:
            try:  # (TLS 1.3: a refused certificate shows after the client's handshake)
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.settimeout(5)
                    s.sendall(line)
                    data = b""
                    while not data.endswith(b"\n"):
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    return data
            except (ssl.SSLError, OSError):
                return b""

    def stop(self) -> None:
        self.d.stop()
        self.sim.stop()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[list[Fleet]]:
    """Where a test puts its Fleet (broker, verld, sim): stopped after it."""
    made: list[Fleet] = []
    yield made
    for f in made:
        f.stop()


def bridge_over_tls(tmp: Path, fleet: list[Fleet], certs: Certs, tls: dict[str, Any]) -> Path:
    """mosquitto with `certs` (a client certificate required), a verld, and verld-mqtt
    with broker settings `tls`: verld-mqtt's log."""
    broker = Broker(tmp, certs=certs)
    fleet.append(Fleet(tmp, ("dev",), server=broker, bridge=False))
    fleet[0].bridge = BridgeProc(tmp, broker, fleet[0].sockets(), broker=tls)
    return fleet[0].bridge.log_path


# --- the docs' recipes -------------------------------------------------------------------------


def test_the_network_recipe_gives_a_strict_tls_session_with_alice_and_refuses_mallory(
    tmp_path: Path,
) -> None:
    """docs/network.md's PKI: a strict client with alice's certificate is served; mallory not."""
    pki = run_recipe("network.md", tmp_path / "pki")
    tls = {
        "cert": str(pki / "server.pem"),
        "key": str(pki / "server.key"),
        "ca": str(pki / "ca.pem"),
    }
    port = Port(tmp_path, tls)
    try:
        alice = strict(pki / "ca.pem", pki / "alice.pem", pki / "alice.key")
        assert port.call(alice, b"ECHO strict\n") == b"strict\n"  # (its name checked: 127.0.0.1)
        wait_for(lambda: "commonName=alice" in port.d.log(), 5, "alice's subject in the log")
        mallory = strict(pki / "ca.pem", pki / "mallory.pem", pki / "mallory.key")
        assert port.call(mallory, b"PING\n") == b""
        wait_for(lambda: port.refused() == 1, 5, "mallory refused (tls)")
        assert "unable to get local issuer certificate" in port.d.log()
    finally:
        port.stop()


def test_the_fleet_recipe_gives_a_strict_tls_session_with_the_broker(
    tmp_path: Path, fleet: list[Fleet]
) -> None:
    """docs/fleet.md's PKI: verld-mqtt and a strict client connect to mosquitto with bridge-vm's."""
    pki = run_recipe("fleet.md", tmp_path / "pki")
    files = {
        "ca": "ca.pem",
        "server": "broker.pem",
        "server_key": "broker.key",
        "client": "bridge-vm.pem",
        "client_key": "bridge-vm.key",
    }
    certs = Certs(tmp_path, {k: pki / name for k, name in files.items()})
    tls = {
        "tls": True,
        "ca": str(certs.ca),
        "cert": str(certs.client),
        "key": str(certs.client_key),
    }
    log = bridge_over_tls(tmp_path, fleet, certs, tls)
    wait_for(
        lambda: "mqtt_connected" in log.read_text(errors="replace"),
        20,
        lambda: f"verld-mqtt over TLS; its log: {log.read_text()[-2000:]}",
    )
    ctx = strict(certs.ca, certs.client, certs.client_key)
    port = fleet[0].broker.port
    with (  # (the broker's certificate verified strictly, its name too: localhost)
        socket.create_connection(("127.0.0.1", port), 5) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as s,
    ):
        assert s.version() in ("TLSv1.2", "TLSv1.3")


# --- what strict verification refuses, and says -------------------------------------------------


def test_a_client_whose_ca_lacks_key_usage_is_refused_naming_it(tmp_path: Path) -> None:
    """verld verifies strictly: a client certificate from a CA without keyUsage: refused, named."""
    good, legacy = Pki(tmp_path / "good"), Pki(tmp_path / "legacy", strict=False)
    cert, key = good.server()
    port = Port(tmp_path, {"cert": str(cert), "key": str(key), "ca": str(legacy.ca)})
    try:
        ccert, ckey = legacy.client()
        assert port.call(strict(good.ca, ccert, ckey), b"PING\n") == b""
        wait_for(lambda: port.refused() == 1, 5, "the client refused (tls)")
        log = port.d.log()
        assert LACKS in log
        assert "the client's CA certificate lacks keyUsage" in log
    finally:
        port.stop()


def test_a_broker_whose_ca_lacks_key_usage_is_refused_naming_it(
    tmp_path: Path, fleet: list[Fleet]
) -> None:
    """verld-mqtt verifies strictly: a broker certificate from a CA without keyUsage, named."""
    legacy, good = Pki(tmp_path / "legacy", strict=False), Pki(tmp_path / "good")
    server, server_key = legacy.server()
    client, client_key = good.client()
    certs = Certs(
        tmp_path,
        {
            "ca": good.ca,
            "server": server,
            "server_key": server_key,
            "client": client,
            "client_key": client_key,
        },
    )
    tls = {"tls": True, "ca": str(legacy.ca), "cert": str(client), "key": str(client_key)}
    log = bridge_over_tls(tmp_path, fleet, certs, tls)
    named = "the broker's CA certificate lacks keyUsage"
    wait_for(
        lambda: named in log.read_text(errors="replace"),
        20,
        lambda: f"{named!r} in verld-mqtt's log: {log.read_text()[-2000:]}",
    )
    assert LACKS in log.read_text(errors="replace")
    assert "mqtt_connected" not in log.read_text(errors="replace")
