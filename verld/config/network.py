"""The `network:` list: network ports, each checked alone and against the others.

Strategy: one entry is a `Section` like any other (its keys, their checkers); the
list checker adds what needs the whole entry or the whole list: a `listen` that is
required, names unique (two entries on one port number need a `name`), and the
access rule: an entry open beyond loopback, and every `passthrough` entry, needs a
non-empty `allow` or a `tls.ca` (whoever reaches a passthrough port can reflash
the device). `exposed` is the same rule for a socket systemd passed, at start.
`allow_list` and `tls_settings` check `modbus.allow` and `modbus.tls` too, and
`modbus_exposed` is the Modbus TCP gateway's rule: a writable one beyond loopback
needs a non-empty `allow` or `tls.ca` (at check-config, and for a passed socket).
"""

from __future__ import annotations

import ipaddress
import re

from verld.config import leaves
from verld.config.model import NET_MODES, NET_PROTOCOLS, ModbusConfig, NetworkConfig, TlsConfig
from verld.config.validate import BadValue, Item, Section, build, entries, expected, given

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _cidr(item: Item) -> str:
    """A client network: `192.168.1.0/24`, `::1/128`, or one address; no IPv6 scope id
    (peers are matched by address alone) and no IPv4-mapped network (never matched:
    IPv4 peers are compared as IPv4), each refused saying what to write instead."""
    text = leaves.string(item, "a network such as 192.168.1.0/24")
    if "%" in text:
        bare = re.sub(r"%[^/]*", "", text.strip())
        raise BadValue(
            f"expected a network without an IPv6 scope id, got {text!r}: allow "
            f"matches addresses on every interface; write {bare}"
        )
    try:
        net = ipaddress.ip_network(text.strip())
    except ValueError as exc:
        hint = ""
        try:
            hint = f"; did you mean {ipaddress.ip_network(text.strip(), strict=False)}?"
        except ValueError:
            pass
        raise BadValue(
            f"expected a network such as 192.168.1.0/24, got {text!r}: {exc}{hint}"
        ) from None
    mapped = net.network_address.ipv4_mapped if net.version == 6 else None
    if mapped is not None and net.prefixlen >= 96:
        ipv4 = ipaddress.ip_network(f"{mapped}/{net.prefixlen - 96}")
        raise BadValue(
            f"{text!r} is an IPv4-mapped IPv6 network, which never matches: "
            f"IPv4 clients (of a [::] listener too) are matched as IPv4; "
            f"write the IPv4 form {ipv4}"
        )
    return str(net)


def allow_list(item: Item) -> tuple[str, ...]:
    """An `allow` list (a network entry's, `modbus.allow`): client networks."""
    if isinstance(item.value, str):
        raise BadValue(f"expected a list of networks, got {given(item)}; write [{item.value}]")
    found: list[str] = []
    for child in item.items():
        try:
            found.append(_cidr(child))
        except BadValue as exc:
            item.ctx.error(child, str(exc))
    return tuple(found)


def _name(item: Item) -> str:
    text = leaves.string(item, "a name of letters, digits, '_', '.' or '-'")
    if not _NAME.fullmatch(text):
        raise BadValue(
            f"expected a name of up to 64 letters, digits, '_', '.' or '-' "
            f"(it is also the socket-activation fd name net-NAME), got {text!r}"
        )
    return text


def _file(item: Item) -> str:
    return leaves.string(item, "a file path") if item.value else _missing(item)


def _missing(item: Item) -> str:
    raise expected(item, "a PEM file path")


def tls_settings(item: Item) -> TlsConfig:
    """A `tls` mapping (a network entry's, `modbus.tls`): cert and key required."""
    tls: TlsConfig = build(item, _TLS)
    if not tls.cert or not tls.key:
        raise BadValue("TLS needs cert and key (PEM files): tls: {cert: PATH, key: PATH, ca: null}")
    return tls


_TLS = Section(
    TlsConfig,
    {"cert": _file, "key": _file, "ca": leaves.optional(_file)},
)
ENTRY = Section(
    NetworkConfig,
    {
        "listen": leaves.listener("127.0.0.1:4000"),
        "name": leaves.optional(_name),
        "protocol": leaves.choice(NET_PROTOCOLS),
        "mode": leaves.choice(NET_MODES),
        "write": leaves.boolean,
        "events": leaves.boolean,
        "max_connections": leaves.integer(1),
        "allow": allow_list,
        "idle_timeout": leaves.optional(leaves.seconds(zero_ok=True)),
        "tls": leaves.optional(tls_settings),
    },
)


def loopback(host: str) -> bool:
    """`host` (of a `listen`, or a bound socket's address) is a loopback address."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def guarded(allow: tuple[str, ...], tls: TlsConfig | None) -> bool:
    """A listener with this `allow` and `tls` lets in only whom it names: a non-empty
    `allow`, or client certificates (`tls.ca`)."""
    return bool(allow) or (tls is not None and bool(tls.ca))


def exposed(entry: NetworkConfig, host: str) -> str | None:
    """Why `entry`, listening on `host`, may not serve as configured (None: it may):
    beyond loopback, or in passthrough, it needs a non-empty `allow` or `tls.ca`."""
    if guarded(entry.allow, entry.tls):
        return None
    if entry.mode == "passthrough":
        return (
            "a passthrough port hands the device over (whoever holds it can reflash it): "
            "add allow: [CIDR, ...] or tls.ca (client certificates)"
        )
    if not loopback(host):
        return (
            f"{host} is not a loopback address: anyone who reaches it could use the device; "
            'add allow: [CIDR, ...] or tls.ca (allow: ["0.0.0.0/0", "::/0"] lets in anyone)'
        )
    return None


def modbus_exposed(modbus: ModbusConfig, host: str) -> str | None:
    """Why the Modbus TCP gateway, listening on `host`, may not serve as configured
    (None: it may): a writable gateway beyond loopback needs a non-empty `allow` or
    `tls.ca` (Modbus TCP has no authentication: a write moves real equipment)."""
    if modbus.read_only or guarded(modbus.allow, modbus.tls) or loopback(host):
        return None
    return (
        f"a writable Modbus gateway (read_only: false) on {host}, beyond loopback, lets "
        "anyone who reaches it write to the equipment: add modbus.allow: [YOUR LAN CIDR] "
        "or modbus.tls with a ca (client certificates); "
        'modbus.allow: ["0.0.0.0/0", "::/0"] keeps an open gateway on purpose'
    )


def network(item: Item) -> tuple[NetworkConfig, ...]:
    """The `network` list: each entry an `ENTRY` mapping with a `listen`; names unique;
    the access rule above."""
    found: list[NetworkConfig] = []
    first: dict[str, int] = {}
    needs = "a network port needs listen: HOST:PORT, e.g. listen: 127.0.0.1:4000"
    for child, entry in entries(
        item, ENTRY, noun="network port", key="listen", example="127.0.0.1:4000", needs=needs
    ):
        if entry.label in first:
            item.ctx.error(
                child,
                f"name {entry.label!r} is already the name of the entry on "
                f"line {first[entry.label]}; give one of them a name",
            )
            continue
        why = exposed(entry, entry.listen.rpartition(":")[0].strip("[]"))
        if why is not None and f"{child.path}.allow" not in item.ctx.bad:
            item.ctx.error(child, why)
            continue
        first[entry.label] = child.line
        found.append(entry)
    return tuple(found)
