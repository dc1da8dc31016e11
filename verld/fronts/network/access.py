"""Who may connect to a network port or the Modbus TCP gateway: the allow list, TLS,
keepalive.

Strategy: plain functions over a listener's `allow` and `tls` settings (a network
entry's, `modbus`'s), no state. `allowed` matches a
peer address against `allow` (an IPv4 client of a dual-stack `[::]` listener comes
as `::ffff:a.b.c.d` and is matched as IPv4); `tls_context` reads the entry's PEM
files once (at start, at reload) into a server context, TLS 1.2 or later, client
certificates required when `ca` is set and verified strictly (`VERIFY_X509_STRICT`, RFC
5280's rules, on every Python: 3.13's default context has it, a bare one has not);
`handshake_error` is a failed handshake's text for the log, with what a certificate
lacks when strict verification refused it ("the client's CA certificate lacks
keyUsage"); `keepalive` makes a vanished peer found
within about a minute, so a half-open connection cannot hold a slot (or the port)
for ever.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Sequence

from verld.config import TlsConfig
from verld.errors import ServeError

#: keepalive: first probe after 30 s of silence, then every 10 s, 3 unanswered: gone
KEEPALIVE = (30, 10, 3)

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def peer_address(host: str) -> _Address | None:
    """A peer's address (an IPv4-mapped IPv6 address as IPv4); None if it is none."""
    try:
        address = ipaddress.ip_address(host.split("%", maxsplit=1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def allowed(allow: Sequence[str], host: str) -> bool:
    """`host` may connect to a listener with `allow` (empty: anyone who reaches it)."""
    if not allow:
        return True
    address = peer_address(host)
    if address is None:
        return False
    return any(address in ipaddress.ip_network(net) for net in allow)


def tls_context(tls: TlsConfig | None, label: str) -> ssl.SSLContext | None:
    """A listener's server TLS context (None without `tls`); `ServeError` naming the
    listener (`label`: "network 4000", "modbus") and the file that cannot be read or used."""
    if tls is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    try:
        ctx.load_cert_chain(tls.cert, tls.key)
    except (OSError, ssl.SSLError) as exc:
        raise ServeError(f"{label}: tls cert {tls.cert} / key {tls.key}: {_why(exc)}") from None
    if tls.ca:
        try:
            ctx.load_verify_locations(tls.ca)
        except (OSError, ssl.SSLError) as exc:
            raise ServeError(f"{label}: tls ca {tls.ca}: {_why(exc)}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _why(exc: OSError) -> str:
    """An OSError's text without its errno; an SSLError's reason."""
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc)
    return exc.strerror or str(exc)


def tls_subject(transport: asyncio.BaseTransport) -> str | None:
    """The TLS client certificate's subject ("commonName=scada-1"), None without one."""
    cert = transport.get_extra_info("peercert")
    if not cert:
        return None
    return ",".join(f"{k}={v}" for rdn in cert.get("subject", ()) for k, v in rdn)


def keepalive(sock: socket.socket) -> None:
    """TCP keepalive (see KEEPALIVE) and no Nagle delay on an accepted socket."""
    idle, interval, count = KEEPALIVE
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass  # (the peer is gone already: the first read says so)


def private_network() -> bool:
    """This process sees no network interface but loopback (systemd's
    PrivateNetwork=yes): a listener it binds is reachable by nobody outside."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return False
    return names == ["lo"]


def peer_host(peer: str) -> str:
    """The host of a "HOST:PORT" peer as `host_of` writes it ("[::1]:5" → "::1")."""
    return peer.rpartition(":")[0].strip("[]")


def host_of(address: tuple[object, ...] | str) -> tuple[str, str]:
    """A socket address as (host, "HOST:PORT") for logs and `status`."""
    if isinstance(address, str) or len(address) < 2:
        return "", str(address)
    host, port = str(address[0]), address[1]
    mapped = peer_address(host)
    if mapped is not None and mapped.version == 4:
        host = str(mapped)
    return host, f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
