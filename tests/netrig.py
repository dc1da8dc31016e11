"""Network ports for tests: a daemon with `network:` entries, and programs on them.

Used by tests/test_network_hostile.py and tests/test_network_neighbours.py. What is
here:

- `NetRig`: a verld-sim and a verld serving it with `network:` entries, each entry
  given a name and a free port on 127.0.0.1 (`rig.port(name)`, `rig.entry(name)` its
  `status.network` row);
- `Program`: a program on a network port over a real TCP socket, speaking the device's
  codec (framing from tests/neighbours.py: `port_request`, `Answers`), optionally over
  telnet (what it sends IAC-escaped, what it reads parsed by verld's own telnet codec,
  client side, which also counts verld's negotiation commands);
- `Maker`: one connection's recognisable calls (its own tag, its own data, on Modbus
  its own register), and the answer that is its own;
- `throwaway_cert`, `keepalive_timers` (a connection's keepalive timer as the kernel
  shows it in /proc/net/tcp) and `free_port`.

Every socket a `Program` opens is closed by its `close()`; `NetRig.stop()` stops the
processes it started, by pid.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neighbours import FRAME_HEADS, Answer, Answers, Payload, port_request
from pki import self_signed

from verld.codec.telnet import ComPort, Data, Telnet, escape
from verld.testing import DaemonProc, HarnessError, SimProc, wait_for, write_config

__all__ = [
    "Answer",
    "Expect",
    "Maker",
    "NetRig",
    "Payload",
    "Program",
    "free_port",
    "free_ports",
    "keepalive_timers",
    "throwaway_cert",
    "wait_entry",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (now)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports on 127.0.0.1 nobody listens on (now): all held while
    picked, so none is picked twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def throwaway_cert(tmp: Path) -> tuple[Path, Path]:
    """A self-signed P-256 certificate and its key for a day: (cert, key) (tests/pki.py)."""
    return self_signed(tmp)


def keepalive_timers(local_port: int) -> dict[int, tuple[int, float]]:
    """Established IPv4 TCP sockets bound to `local_port` (verld's accepted ones), by
    remote port: (the kernel's `timer_active`, seconds until it fires). `timer_active`
    2 is the keepalive timer (/proc/net/tcp; its `tm->when` is in USER_HZ ticks)."""
    out: dict[int, tuple[int, float]] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, timer = fields[1], fields[2], fields[3], fields[5]
        if state != "01" or int(local.split(":")[1], 16) != local_port:
            continue
        active, when = timer.split(":")
        out[int(remote.split(":")[1], 16)] = (int(active, 16), int(when, 16) / 100)
    return out


# --- the rig ---------------------------------------------------------------------------------


class NetRig:
    """verld-sim and verld with `network:` entries.

    `entries`: each a `network:` entry with a `name` and no `listen` (a free port on
    127.0.0.1 is given to it). `overrides` go to `write_config` as they are (sections
    merged; `network` is set here). `tcp`: the sim listens on TCP (verld on `tcp://`).
    """

    def __init__(
        self,
        tmp: Path,
        entries: Iterable[Mapping[str, Any]],
        *,
        codec: str = "verl",
        overrides: Mapping[str, Any] | None = None,
        sim_args: Iterable[str] = (),
        tcp: bool = False,
    ) -> None:
        self.codec = codec
        self.ports: dict[str, int] = {}
        entries = list(entries)
        self.sim = SimProc(tmp, *sim_args, codec=codec, tcp=tcp)
        try:
            for attempt in range(3):
                # a port free when picked may be an outgoing connection's by the time verld
                # binds it (the ephemeral range is shared): then pick others
                network = []
                for entry, port in zip(entries, free_ports(len(entries)), strict=True):
                    self.ports[str(entry["name"])] = port
                    network.append({"listen": f"127.0.0.1:{port}", **entry})
                config = write_config(
                    tmp,
                    self.sim.address if tcp else self.sim.link,
                    {**(overrides or {}), "network": network},
                )
                try:
                    self.daemon = DaemonProc(config)
                    break
                except HarnessError as exc:
                    if attempt == 2 or "Address already in use" not in str(exc):
                        raise
        except BaseException:
            self.sim.stop()
            raise

    def port(self, name: str) -> int:
        return self.ports[name]

    def status(self) -> dict[str, Any]:
        return self.daemon.status()

    def entry(self, name: str, status: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Entry `name`'s row of `status.network` (from `status` when given)."""
        rows = (status or self.status())["network"]
        for row in rows:
            if row["name"] == name:
                return dict(row)
        raise AssertionError(f"no network entry {name!r} in status: {rows}")

    def program(self, name: str, **kw: Any) -> Program:
        """A `Program` connected to entry `name` (in the rig's codec unless told)."""
        kw.setdefault("codec", self.codec)
        return Program(self.port(name), **kw)

    def check_alive(self) -> None:
        for what, proc in (("verld", self.daemon.proc), ("verld-sim", self.sim.proc)):
            assert proc.poll() is None, f"{what} exited {proc.returncode}:\n{self.log()}"

    def log(self) -> str:
        return self.daemon.log()[-4000:]

    def stop(self) -> None:
        try:
            self.daemon.stop()
        finally:
            self.sim.stop()


# --- a program on a network port -----------------------------------------------------------


class CountingTelnet(Telnet):
    """verld's telnet codec as the client side, counting the negotiation verbs
    (WILL/WONT/DO/DONT) it reads."""

    def __init__(self) -> None:
        super().__init__(server=False, comport=True)
        self.verbs = 0
        self.commands: list[ComPort] = []  #: the COM-PORT subnegotiations it read

    def _negotiate(self, verb: int, option: int) -> Any:
        self.verbs += 1
        return super()._negotiate(verb, option)


class Program:
    """A program on a network port: requests in the device's framing, answers framed
    back (`Answers`). With `telnet`, what it sends is IAC-escaped (`send_raw` is not)
    and what it reads goes through a client-side telnet first; its own negotiation
    answers are never sent (a client that ignores verld's offers)."""

    def __init__(
        self,
        port: int,
        *,
        codec: str,
        telnet: bool = False,
        rcvbuf: int | None = None,
        timeout: float = 5.0,
        connect: bool = True,
    ) -> None:
        self.codec = codec
        self.answers = Answers(codec)
        self.telnet = CountingTelnet() if telnet else None
        self.inbox: deque[Answer] = deque()
        self.received = 0  #: bytes read from the socket
        self.eof = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        if connect:
            try:
                self.sock.connect(("127.0.0.1", port))
            except BaseException:
                self.sock.close()
                raise

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def local_port(self) -> int:
        return int(self.sock.getsockname()[1])

    # out
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, data: bytes) -> None:
        """Stream bytes (IAC-escaped under telnet)."""
        self.sock.sendall(escape(data) if self.telnet is not None else data)

    def request(self, payload: Payload, tag: int = 0) -> None:
        self.send(port_request(self.codec, payload, tag))

    # in
    def _feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.telnet is None:
            self.inbox.extend(self.answers.feed(chunk))
            return
        for event in self.telnet.feed(chunk):
            if isinstance(event, Data):
                self.inbox.extend(self.answers.feed(event.data))
            elif isinstance(event, ComPort):
                self.telnet.commands.append(event)
        self.telnet.take_output()  # (never answered: a client that ignores the offers)

    def pump(self, timeout: float) -> bool:
        """Read once (waiting at most `timeout` s); False when nothing came (or EOF)."""
        if self.eof:
            return False
        self.sock.settimeout(max(timeout, 0.001))
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError:
            return False
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self._feed(chunk)
        return True

    def next_answer(self, timeout: float) -> Answer | None:
        """The next answer, waiting at most `timeout` s (None: none came)."""
        deadline = time.monotonic() + timeout
        while not self.inbox:
            left = deadline - time.monotonic()
            if left <= 0 or (not self.pump(left) and self.eof):
                break
        return self.inbox.popleft() if self.inbox else None

    def quiet(self, seconds: float) -> list[Answer]:
        """Every answer that comes within `seconds` (read the whole time)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not self.eof:
            self.pump(left)
        out = list(self.inbox)
        self.inbox.clear()
        return out

    def closed_by_verld(self, timeout: float = 5.0) -> bool:
        """True once verld closed the connection (what it sent before is read)."""
        deadline = time.monotonic() + timeout
        while not self.eof and (left := deadline - time.monotonic()) > 0:
            self.pump(left)
        return self.eof

    def close(self, *, abrupt: bool = False) -> None:
        if abrupt:
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


# --- one connection's calls ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Expect:
    """One call and the answer that is its own."""

    payload: Payload
    tag: int  #: verl seq, MBAP transaction id, frame seq (0 where the framing has none)
    data: bytes  #: the answer's data (Modbus: unit + PDU; frame: after the header)
    skip: int = 0  #: frame: the answer's header, before `data`

    def own(self, answer: Answer, codec: str) -> bool:
        tagged = codec in ("verl", "modbus-tcp", "frame")
        return (
            answer.status == 0
            and answer.data[self.skip :] == self.data
            and (not tagged or answer.tag == self.tag)
        )


class Maker:
    """The calls of one connection, each recognisably its own: `ECHO WHO-n` on line,
    the sim's echo (`01` + `WHO-n`) on verl and length (after the header on a `frame`
    variant, `codec` then the variant's `framing`), a write of n to the
    connection's own holding `register` of unit 1 on the Modbus codecs (the sim
    echoes a write)."""

    def __init__(self, codec: str, who: str, register: int = 10) -> None:
        self.codec, self.who, self.register = codec, who, register
        self.n = 0

    def next(self, *, delay_ms: int = 0) -> Expect:
        """The next call; `delay_ms`: answered that much later (the sim's delay command;
        none on Modbus)."""
        self.n += 1
        n, codec = self.n, self.codec
        tag = f"{self.who}-{n}"
        seq = 1 + (n - 1) % 65535
        if codec == "line":
            text = f"DELAY {delay_ms} {tag}" if delay_ms else f"ECHO {tag}"
            return Expect(Payload(text.encode(), text), 0, tag.encode())
        if codec in ("verl", "length"):
            head = b"\x03" + struct.pack(">H", delay_ms) if delay_ms else b"\x01"
            return Expect(Payload(head + tag.encode()), seq if codec == "verl" else 0, tag.encode())
        if codec in FRAME_HEADS:
            header = FRAME_HEADS[codec][0]
            command = b"\x03" + struct.pack(">H", delay_ms) if delay_ms else b"\x01"
            seq = 1 + (n - 1) % 255 if codec == "frame" else 0  # (a seq byte on `frame`)
            payload = Payload(header + command + tag.encode())
            return Expect(payload, seq, tag.encode(), skip=len(header))
        write = struct.pack(">BBHH", 1, 6, self.register, n & 0xFFFF)
        return Expect(Payload(write), (n & 0xFFFF) if codec == "modbus-tcp" else 0, write)


def wait_entry(
    rig: NetRig, name: str, pred: Any, timeout: float = 10.0, what: str = ""
) -> dict[str, Any]:
    """Wait until `pred(row)` holds for entry `name`'s status row; that row."""
    seen: dict[str, Any] = {}

    def check() -> bool:
        nonlocal seen
        seen = rig.entry(name)
        return bool(pred(seen))

    wait_for(check, timeout, lambda: f"{what or 'entry ' + name} (last seen {seen})")
    return seen
