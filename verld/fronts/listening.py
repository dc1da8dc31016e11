"""Binding the TCP listeners of the fronts (the Modbus TCP server, the network ports).

Strategy: one function, `bind_listen`, owns what every front's listening socket
shares: "HOST:PORT" resolved to each of its addresses, the reuse options
`loop.create_server` would set (SO_REUSEADDR, IPV6_V6ONLY), listening at once, and
the error text naming the address ("cannot listen on HOST:PORT: ..."). The fronts
serve the sockets it returns; it keeps none.
"""

from __future__ import annotations

import asyncio
import socket

from verld.config.model import host_port


async def bind_listen(listen: str, *, dual_stack: bool = False) -> list[socket.socket]:
    """`listen` ("HOST:PORT") bound and listening, one socket per address the
    host resolves to, as `loop.create_server` binds them (SO_REUSEADDR, IPV6_V6ONLY).

    Listening at once, not only bound: on Linux two sockets with SO_REUSEADDR may
    bind the same address while neither listens, so a bind alone would let two
    starting verlds both think they have it. OSError ("cannot listen on
    HOST:PORT: ...") when any address cannot be had; nothing stays open then.
    `dual_stack`: an IPv6 socket takes IPv4 clients too (as ::ffff:a.b.c.d).
    """
    host, port = host_port(listen)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {listen}: {exc.strerror or exc}") from None
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual_stack else 1)
            sock.bind(address)
            sock.listen(100)
            sock.setblocking(False)
    except OSError as exc:
        for sock in socks:
            sock.close()
        raise OSError(exc.errno, f"cannot listen on {listen}: {exc.strerror or exc}") from None
    if not socks:
        raise OSError(f"cannot listen on {listen}: no address for {host}")
    return socks
