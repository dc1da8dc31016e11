"""The `network:` config: each key checked, and the access rule across the entry.

Strategy: configs are parsed from YAML text with `parse_config` (the errors carry
`file:line: key: message`), and one test runs `verld --check-config` for its exit
code. The access rule (docs/config.md, `allow`): beyond loopback, or in
passthrough, an entry needs a non-empty `allow` or `tls.ca`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from verld.config import NetworkConfig, parse_config
from verld.config.network import exposed, loopback
from verld.errors import ConfigError


def net(body: str) -> str:
    return "device: {port: sim}\nnetwork:\n" + body


def errors(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    return str(info.value)


def test_defaults_of_an_entry() -> None:
    """An entry with only listen is raw, shared, 8 connections, named by its port."""
    (entry,) = parse_config(net("  - listen: 127.0.0.1:4000\n")).network
    assert (entry.protocol, entry.mode, entry.max_connections) == ("raw", "shared", 8)
    assert (entry.label, entry.idle, entry.allow, entry.tls) == ("4000", 0.0, (), None)


def test_passthrough_idle_timeout_defaults_to_600() -> None:
    """A passthrough entry's null idle_timeout means 600 s."""
    text = net("  - {listen: 127.0.0.1:4000, mode: passthrough, allow: [127.0.0.1/32]}\n")
    assert parse_config(text).network[0].idle == 600.0


def test_listen_is_required() -> None:
    """An entry without listen is an error that shows how to write one."""
    assert "needs listen: HOST:PORT" in errors(net("  - protocol: raw\n"))


def test_non_loopback_without_allow_is_refused() -> None:
    """Listening beyond loopback with neither allow nor tls.ca is an error saying so."""
    msg = errors(net("  - listen: 0.0.0.0:4000\n"))
    assert "not a loopback address" in msg and "allow" in msg


def test_explicit_anyone_is_accepted() -> None:
    """allow: [0.0.0.0/0, ::/0] is the explicit "anyone" beyond loopback."""
    text = net('  - {listen: "0.0.0.0:4000", allow: ["0.0.0.0/0", "::/0"]}\n')
    assert parse_config(text).network[0].allow == ("0.0.0.0/0", "::/0")


def test_passthrough_on_loopback_needs_allow_or_ca() -> None:
    """Every passthrough entry, loopback included, needs allow or tls.ca."""
    assert "reflash" in errors(net("  - {listen: 127.0.0.1:4000, mode: passthrough}\n"))


def test_tls_ca_stands_in_for_allow() -> None:
    """A passthrough entry with tls.ca and no allow is accepted."""
    text = net(
        "  - listen: 0.0.0.0:4000\n    mode: passthrough\n"
        "    tls: {cert: c.pem, key: k.pem, ca: ca.pem}\n"
    )
    assert parse_config(text).network[0].tls is not None


def test_duplicate_names_are_refused() -> None:
    """Two entries on one port number need a name: the second is an error naming the first."""
    msg = errors(net("  - listen: 127.0.0.1:4000\n  - listen: '[::1]:4000'\n"))
    assert "already the name of the entry on line 3" in msg


def test_cidr_with_host_bits_suggests_the_network() -> None:
    """An allow entry with host bits set is an error suggesting the network."""
    msg = errors(net("  - {listen: 127.0.0.1:4000, allow: [192.168.1.5/24]}\n"))
    assert "did you mean 192.168.1.0/24?" in msg


def test_every_bad_field_is_reported_at_once() -> None:
    """Bad protocol, mode, name and tls in one file: every one is reported with its line."""
    msg = errors(
        net(
            "  - listen: 127.0.0.1:4000\n    protocol: rfc2218\n    mode: shard\n"
            "    name: 'a b'\n    tls: {cert: c.pem}\n"
        )
    )
    for line, what in (
        (4, "did you mean 'rfc2217'"),
        (5, "did you mean 'shared'"),
        (6, "net-NAME"),
        (7, "TLS needs cert and key"),
    ):
        assert f":{line}: network[0]." in msg and what in msg


def test_a_mapping_instead_of_a_list_is_explained() -> None:
    """network: as a mapping says to put '- ' before the entry."""
    assert "put a '- ' before" in errors("network:\n  listen: 127.0.0.1:4000\n")


@pytest.mark.parametrize(
    ("host", "is_loop"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.2", False),
        ("example.org", False),
        ("::ffff:127.0.0.1", True),
    ],
)
def test_loopback(host: str, is_loop: bool) -> None:
    """Loopback is 127/8, ::1, localhost and IPv4-mapped loopback; nothing else."""
    assert loopback(host) is is_loop


def test_exposed_is_the_socket_activation_rule_too() -> None:
    """The rule a passed socket is checked by: beyond loopback without allow is refused."""
    entry = NetworkConfig(listen="127.0.0.1:4000", name="x")
    assert exposed(entry, "127.0.0.1") is None
    assert exposed(entry, "192.168.1.2") is not None


@pytest.mark.timeout(30)
def test_check_config_exits_2_on_an_open_entry(tmp_path: Path) -> None:
    """verld --check-config exits 2 for an entry open beyond loopback without allow."""
    path = tmp_path / "v.yaml"
    path.write_text(net("  - listen: 0.0.0.0:4000\n"))
    out = subprocess.run(
        [sys.executable, "-m", "verld", "--check-config", str(path)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "network[0]" in out.stderr


def test_an_ipv6_scope_id_in_allow_is_refused() -> None:
    """allow: [fe80::1%lo/128] is an error saying to write it without the scope id."""
    msg = errors(net('  - {listen: 127.0.0.1:4000, allow: ["fe80::1%lo/128"]}\n'))
    assert "network[0].allow[0]" in msg and "scope id" in msg and "write fe80::1/128" in msg


def test_an_ipv4_mapped_network_in_allow_is_refused() -> None:
    """allow: [::ffff:127.0.0.1/128] (never matched) is an error giving the IPv4 form."""
    msg = errors(net('  - {listen: "[::]:4000", allow: ["::ffff:127.0.0.1/128"]}\n'))
    assert "IPv4-mapped" in msg and "write the IPv4 form 127.0.0.1/32" in msg
    msg = errors(net('  - {listen: "[::]:4000", allow: ["::ffff:10.0.0.0/104"]}\n'))
    assert "write the IPv4 form 10.0.0.0/8" in msg


@pytest.mark.timeout(30)
@pytest.mark.parametrize("cidr", ["fe80::1%lo/128", "::ffff:127.0.0.1/128"])
def test_check_config_exits_2_on_an_allow_that_cannot_match(tmp_path: Path, cidr: str) -> None:
    """verld --check-config exits 2 for a scoped or IPv4-mapped allow entry, naming it."""
    path = tmp_path / "v.yaml"
    path.write_text(net(f'  - {{listen: 127.0.0.1:4000, allow: ["{cidr}"]}}\n'))
    out = subprocess.run(
        [sys.executable, "-m", "verld", "--check-config", str(path)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "network[0].allow[0]" in out.stderr and cidr in out.stderr
