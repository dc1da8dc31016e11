"""ser2net beside verld, serving a family's pty: the network and links families' relay.

`ser2net_yaml` is ser2net 4's config for one accepter on loopback serving the pty
as its man page's example does (one client at a time, a new one kicks the old; the
serial side with no modem lines): raw TCP (`tcp,127.0.0.1,PORT`) or RFC 2217
(`telnet(rfc2217),tcp,127.0.0.1,PORT`), with its default `chardelay` (after bytes
from the port it waits 2 characters' time, at least 1 ms, for more) or without
(each read sent on at once), with Nagle's algorithm on its TCP socket (the default)
or not (`tcp(nodelay)`: a reply longer than one of ser2net's reads of the pty, such
as a 1 KiB echo, goes out in two sends, and with Nagle on the second waits for the
peer's ACK, which Linux delays: 44 ms a call). `start_ser2net` flushes the pty,
writes that config and starts ser2net on it, ready once its socket listens: read
from /proc/net/tcp, since a probe connection would open the pty, and the relay
might still be closing it when the program connects. `ser2net_info` is the version
for a family's `info`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from benchlib.engine import Run
from benchlib.host import output, which
from benchlib.procs import BenchError, Server, flush_pty, free_port, tail


def ser2net_yaml(
    port: int, device: str, *, chardelay: bool = True, rfc2217: bool = False, nodelay: bool = False
) -> str:
    """One accepter on loopback for `device` (raw TCP, or RFC 2217's telnet), one client
    at a time, the serial side with no modem lines; `chardelay` false sends what it
    reads from the port on at once, `nodelay` sets TCP_NODELAY on ser2net's socket."""
    telnet, tcp = "telnet(rfc2217)," if rfc2217 else "", "tcp(nodelay)" if nodelay else "tcp"
    return (
        "connection: &bench\n"
        f"  accepter: {telnet}{tcp},127.0.0.1,{port}\n"
        f"  connector: serialdev,{device},115200n81,local\n"
        "  options:\n"
        "    kickolduser: true\n" + ("" if chardelay else "    chardelay: false\n")
    )


def start_ser2net(
    run: Run, link: str, *, chardelay: bool = True, rfc2217: bool = False, nodelay: bool = False
) -> tuple[Server, int]:
    """ser2net serving the pty `link` on a free loopback port as `ser2net_yaml` says,
    listening: (it, the port)."""
    binary = which("ser2net")
    assert binary is not None  # (its paths need it: the engine left them out otherwise)
    flush_pty(link)
    where, port = run.dir("ser2net"), free_port()
    where.mkdir(parents=True)
    conf = where / "ser2net.yaml"
    device = os.path.realpath(link)
    conf.write_text(
        ser2net_yaml(port, device, chardelay=chardelay, rfc2217=rfc2217, nodelay=nodelay)
    )
    relay = Server(run.procs, [binary, "-n", "-d", "-c", str(conf)], where / "ser2net.log")
    _await_listen(relay, port)
    return relay, port


def _await_listen(relay: Server, port: int) -> None:
    """ser2net listens: its socket in /proc/net/tcp (see the module docstring)."""
    want = f":{port:04X} "
    deadline = time.monotonic() + 10
    while True:
        with open("/proc/net/tcp") as f:  # st 0A: LISTEN
            if any(want in line and line.split()[3] == "0A" for line in f):
                return
        if relay.proc.poll() is not None or time.monotonic() > deadline:
            raise BenchError(f"ser2net did not listen on 127.0.0.1:{port}:\n{tail(relay.log_path)}")
        time.sleep(0.01)


def ser2net_info() -> dict[str, Any]:
    """ser2net's version (None if not installed), and the section's `versions` words."""
    binary = which("ser2net")
    version = output([binary, "-v"], "version").rpartition(" ")[2] if binary else ""
    return {
        "ser2net": version or None,
        "versions": f"ser2net {version}" if version else "**no ser2net path**: not installed",
    }
