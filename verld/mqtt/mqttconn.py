"""One broker connection: paho-mqtt's client driven by the asyncio loop, no thread.

Strategy: paho-mqtt does the protocol (MQTT 5 and 3.1.1, QoS flows, keepalive, the
will, TLS through an `ssl.SSLContext`), and this module does its I/O on the event
loop. paho's own socket loop would read each packet a byte at a time (a syscall for
the type, one per length byte, one for the rest) and send each packet on its own;
here the socket is read with one `recv` per readiness event and paho parses out of
that buffer (its `_sock_recv`), and what paho sends is gathered (its `_sock_send`)
and written with one `send` per loop turn, after whatever else that turn published.
So a request and its PUBACK, or a burst of replies, cost a syscall each way, and
nothing crosses a thread: paho's callbacks (a message, an acknowledgement) run in
the loop's reader callback, and the 1-second timer runs its keepalive (`loop_misc`).

The blocking part of paho, `connect` (DNS, TCP connect, the TLS handshake), runs
once per connection in a worker thread; the CONNECT it queues is written from the
loop once it returns, and `connect` then awaits the CONNACK. Nothing else blocks.
The TLS context verifies strictly (`VERIFY_X509_STRICT`, as Python 3.13's default
does, on every Python), and a broker certificate it refuses is named with what it
lacks (`handshake_error`: "the broker's CA certificate lacks keyUsage").

What paho sends is accepted at once, so its `want_write` is always false and the
unsent bytes are here (`pending`): the bridge stops handing out publishes while they
pile up (a slow broker), which bounds them. Acknowledged publishes are reported to
`on_published` (QoS 0: when written). `lost` resolves with a reason when the
connection ends for any cause (the broker closed it, a socket error, no PINGRESP
within the keepalive, a protocol error); a bug in a callback sets it to that error.

Works with paho-mqtt 2.x (`CallbackAPIVersion.VERSION2`) and 1.6 (Debian 12's): the
callbacks take `*args` and read only the positions both versions share. The private
names of paho's this relies on are all used in `_Paho`, listed in `PAHO_PRIVATE` with
the versions they were read against (`PAHO_CHECKED`), and pinned by a test.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import Callable
from typing import Any

from paho.mqtt import client as paho
from paho.mqtt import reasoncodes
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from verld.tlserrors import handshake_error

__all__ = ["MqttConnection", "MqttError", "Will"]

RECV_SIZE = 65536  #: (below malloc's mmap threshold: no mmap/munmap per read)
MISC_SECONDS = 1.0
#: paho 2 wants its callback API version first; 1.6 has none
_API: tuple[Any, ...] = (
    (paho.CallbackAPIVersion.VERSION2,) if hasattr(paho, "CallbackAPIVersion") else ()
)
#: paho 2's ReasonCode; 1.6's ReasonCodes (a deprecated alias in 2.x)
_ReasonCode: Any = getattr(reasoncodes, "ReasonCode", None) or reasoncodes.ReasonCodes
_AGAIN = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class MqttError(Exception):
    """The broker connection failed or ended; the text says why."""


Will = tuple[str, bytes, int, bool]  #: topic, payload, qos, retain


#: paho-mqtt's private names `_Paho` relies on → the positional arguments they are called
#: with (by paho, for the two it overrides; by `_Paho`, for `_sock_close`). paho has no
#: public way to hand it bytes read elsewhere or to take what it would send: every read
#: and write it makes goes through `_sock_recv` and `_sock_send` (1.6 and 2.x alike), so
#: those are the seam, and `_sock_close` is its one way to drop the socket with its state
#: and callbacks (`on_socket_close`, `on_disconnect`) following. They are private: read
#: against the versions in PAHO_CHECKED, and tests/test_mqtt_paho.py pins both (on the
#: paho verld-mqtt runs on, 1.6.1 in nox's `mqtt_paho16` session too).
PAHO_PRIVATE: dict[str, int] = {"_sock_recv": 1, "_sock_send": 1, "_sock_close": 0}
#: on paho 1.6 also (its MQTT 5 DISCONNECT fix, `_Paho._handle_disconnect`), which reads
#: `_in_packet["packet"]` and `_protocol` besides
PAHO16_PRIVATE: dict[str, int] = {"_handle_disconnect": 0, "_loop_rc_handle": 1}
#: the paho-mqtt versions the names above were read against (1.6.1: Debian 12's; 2.1.0:
#: Debian 13's, the three methods as in 2.2.0 but for `_sock_send`'s annotation)
PAHO_CHECKED = ("1.6.1", "2.1.0", "2.2.0")


class _Paho(paho.Client):
    """paho's client reading from and writing to buffers kept here (module docstring).
    Every private name of paho's this module uses is used here, and only here (see
    PAHO_PRIVATE); `MqttConnection` talks to it through the methods below."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in = b""  #: bytes read from the socket, paho's from `_at` on
        self._at = 0
        self._out: list[bytes] = []  #: what paho sent, not written to the socket yet

    # --- paho's socket I/O, overridden -------------------------------------------------
    def _sock_recv(self, bufsize: int) -> bytes:
        at = self._at
        if at >= len(self._in):
            raise BlockingIOError
        self._at = at + bufsize
        return self._in[at : at + bufsize]

    def _sock_send(self, buf: bytes | bytearray) -> int:
        self._out.append(bytes(buf))
        return len(buf)

    if not _API:  # paho 1.6 only

        def _handle_disconnect(self) -> int:  # type: ignore[override]
            """paho 1.6 reads an MQTT 5 DISCONNECT's reason code only when properties follow
            it, so the broker's reason without them (mosquitto's "Session taken over") went
            unseen until the broker closed the socket: read it, as paho 2 does."""
            packet = self._in_packet["packet"]
            if self._protocol == paho.MQTTv5 and 1 <= len(packet) <= 2:
                try:
                    reason = _ReasonCode(PacketTypes.DISCONNECT, identifier=packet[0])
                except (AssertionError, KeyError, ValueError):
                    pass  # (a code MQTT 5 does not define: left to paho, as before)
                else:
                    self._loop_rc_handle(reason)
                    return 0
            handle: Callable[[], Any] = super()._handle_disconnect
            return int(handle())

    # --- what MqttConnection uses --------------------------------------------------------
    def received(self, data: bytes) -> None:
        """Bytes read from the socket, after those paho has not read yet; paho reads every
        whole packet they complete (a failure closes the socket: `on_socket_close`)."""
        self._in = self._in[self._at :] + data if self._at < len(self._in) else data
        self._at = 0
        while self._at < len(self._in) and self.socket() is not None:
            self.loop_read()

    @property
    def unsent(self) -> int:
        """Bytes paho sent that are not written to the socket yet."""
        return sum(map(len, self._out))

    def take_unsent(self) -> bytes:
        """What paho sent, all of it, now to be written (b"" when nothing)."""
        out = self._out
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return data

    def put_back(self, data: bytes) -> None:
        """What the socket did not take, to be written first next time."""
        self._out.insert(0, data)

    def close_socket(self) -> None:
        """Close the socket as paho does (`on_socket_close`, then `on_disconnect`)."""
        self._sock_close()


class _Correlation(Properties):
    """PUBLISH properties holding only a Correlation Data, packed at once: all paho asks
    of them is `pack()` (a `Properties` costs about 20 µs to build and pack)."""

    def __init__(self, data: bytes) -> None:  # (Properties.__init__ is what is saved)
        body = b"\x09" + struct.pack("!H", len(data)) + data  # (9: Correlation Data)
        object.__setattr__(self, "packetType", PacketTypes.PUBLISH)
        object.__setattr__(self, "_packed", _varint(len(body)) + body)

    def pack(self) -> bytes:
        packed: bytes = self.__dict__["_packed"]
        return packed


def _varint(n: int) -> bytes:
    """MQTT's Variable Byte Integer."""
    out = bytearray()
    while True:
        n, byte = n >> 7, n & 0x7F
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _code(rc: Any) -> int:
    """A paho result or reason code (int, ReasonCode(s)) as a number."""
    return rc if isinstance(rc, int) else int(getattr(rc, "value", 0x80))


class MqttConnection:
    """One connection to the broker; see the module docstring."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        client_id: str,
        mqtt5: bool,
        keepalive: int,
        will: Will,
        username: str | None = None,
        password: str | None = None,
        tls: ssl.SSLContext | None = None,
        on_message: Callable[[paho.MQTTMessage], None],
        on_published: Callable[[int], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.host, self.port, self.keepalive, self.mqtt5 = host, port, keepalive, mqtt5
        self.lost: asyncio.Future[str] = self._loop.create_future()
        self.on_published = on_published
        # A fresh session each time, ended with the connection (MQTT 5: clean start and
        # no Session Expiry Interval; 3.1.1: clean session).
        session: dict[str, Any] = {"protocol": paho.MQTTv5}
        if not mqtt5:
            session = {"protocol": paho.MQTTv311, "clean_session": True}
        c = _Paho(*_API, client_id=client_id, **session)
        c.max_inflight_messages_set(0)  # (unlimited: the bridge keeps its own window)
        if username is not None:
            c.username_pw_set(username, password)
        if tls is not None:  # RFC 5280's rules on every Python (3.13's default has them)
            tls.verify_flags |= ssl.VERIFY_X509_STRICT
            c.tls_set_context(tls)
        c.will_set(*will)
        c.on_message = lambda _c, _u, msg: on_message(msg)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_publish = self._on_publish
        c.on_subscribe = self._on_subscribe
        c.on_socket_open = self._on_socket_open
        c.on_socket_close = self._on_socket_close
        self._c = c
        self._sock: Any = None
        self._reason: str | None = None
        self._connack: asyncio.Future[None] = self._loop.create_future()
        self._subacks: dict[int, asyncio.Future[None]] = {}
        self._acks: dict[int, asyncio.Future[None]] = {}
        self._flush_due = False
        self._writing = False  #: add_writer is on (the socket was full)
        self._timer: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> int:
        """Bytes handed over by paho and not yet written to the socket."""
        return self._c.unsent

    # --- connect and close -----------------------------------------------------------
    async def connect(self, timeout: float) -> None:  # noqa: ASYNC109 (the CONNACK's)
        """Connect and wait for the CONNACK; MqttError if refused or lost."""
        c = self._c
        start = self._loop.run_in_executor(None, self._blocking_connect)
        try:
            await asyncio.shield(start)
        except asyncio.CancelledError:
            start.add_done_callback(lambda _f: self.close())  # (a socket made too late)
            raise
        except (OSError, ValueError) as exc:
            raise MqttError(handshake_error(exc, "broker")) from exc  # (verify: why)
        self._sock = sock = c.socket()
        if sock is None:
            raise MqttError(self._reason or "the connection closed at once")
        c.on_socket_register_write = lambda *_a: self._flush_soon()
        self._loop.add_reader(sock.fileno(), self._readable)
        self._timer = self._loop.call_later(MISC_SECONDS, self._misc)
        self._flush()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.wait((self._connack, self.lost), return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            self.close()
            raise MqttError("no CONNACK from the broker") from None
        if self.lost.done():
            raise MqttError(self.lost.result())
        self._connack.result()  # (MqttError when refused)

    def _blocking_connect(self) -> None:
        if self.mqtt5:
            self._c.connect(self.host, self.port, self.keepalive, clean_start=True)
        else:
            self._c.connect(self.host, self.port, self.keepalive)

    async def disconnect(self) -> None:
        """A clean DISCONNECT (so the broker does not publish the will), then close."""
        if not self.lost.done():
            self._reason = "disconnected"
            self._c.disconnect()  # (queues DISCONNECT; paho closes once it is written)
            self._flush()
        self.close()

    def close(self) -> None:
        """Close the socket now (idempotent)."""
        if self._c.socket() is not None:
            self._c.close_socket()  # (through _on_socket_close)
        else:
            self._ended(self._reason or "closed")

    # --- MQTT operations ---------------------------------------------------------------
    def publish(
        self, topic: str, payload: bytes, qos: int, retain: bool, correlation: bytes | None
    ) -> int:
        """Queue one PUBLISH (written this loop turn); its message id."""
        props = _Correlation(correlation) if correlation is not None and self.mqtt5 else None
        info = self._c.publish(topic, payload, qos, retain, props)
        if info.rc:
            raise MqttError(paho.error_string(info.rc))
        return int(info.mid)

    async def published(self, mid: int) -> None:
        """Wait for publish `mid`'s acknowledgement (QoS 0: its write)."""
        fut = self._acks[mid] = self._loop.create_future()
        await self._until(fut)

    async def subscribe(self, topic: str, qos: int, *, as_sent: bool = False) -> None:
        """MQTT 5 `as_sent`: none of our own publishes back, the retain flag as published."""
        options = SubscribeOptions(qos, as_sent, as_sent) if self.mqtt5 and as_sent else None
        rc, mid = self._c.subscribe(topic, qos if options is None else 0, options)
        if rc or mid is None:
            raise MqttError(paho.error_string(rc))
        fut = self._subacks[mid] = self._loop.create_future()
        await self._until(fut)

    async def _until(self, fut: asyncio.Future[None]) -> None:
        await asyncio.wait((fut, self.lost), return_when=asyncio.FIRST_COMPLETED)
        if not fut.done():
            fut.cancel()
            raise MqttError(self.lost.result() if not self.lost.exception() else "crashed")
        fut.result()

    # --- I/O -----------------------------------------------------------------------
    def _readable(self) -> None:
        sock, c = self._sock, self._c
        try:
            data = sock.recv(RECV_SIZE)
            while getattr(sock, "pending", None) and sock.pending():  # (TLS: decrypted, unread)
                data += sock.recv(RECV_SIZE)
        except _AGAIN:
            return
        except OSError as exc:
            self._reason = str(exc) or type(exc).__name__
            self.close()
            return
        if not data:
            self._reason = "the broker closed the connection"
            self.close()
            return
        try:
            c.received(data)
        except Exception as exc:  # a bug in a callback: the bridge fails with it
            if not self.lost.done():
                self.lost.set_exception(exc)
            self.close()
            return
        self._flush_soon()  # (after the calls those requests started: their verld
        # writes go first, the PUBACKs in the same turn)

    def _flush_soon(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            self._loop.call_soon(self._flush_if_due)

    def _flush_if_due(self) -> None:
        if self._flush_due:
            self._flush()

    def _flush(self) -> None:
        """Everything paho queued → one send (the rest when the socket can take it)."""
        self._flush_due = False
        c = self._c
        if c.socket() is not None:
            c.loop_write()
        if self._writing or self._sock is None:
            return
        data = c.take_unsent()
        if data:
            self._send(data)

    def _send(self, data: bytes) -> None:
        try:
            sent = self._sock.send(data)
        except _AGAIN:
            sent = 0
        except OSError as exc:
            self._reason = str(exc) or type(exc).__name__
            self.close()
            return
        if sent < len(data):
            self._c.put_back(data[sent:])
            if not self._writing:
                self._writing = True
                self._loop.add_writer(self._sock.fileno(), self._writable)

    def _writable(self) -> None:
        data = self._c.take_unsent()
        if data:
            self._send(data)
        if not self._c.unsent and self._writing:
            self._writing = False
            self._loop.remove_writer(self._sock.fileno())

    def _misc(self) -> None:
        self._timer = self._loop.call_later(MISC_SECONDS, self._misc)
        self._c.loop_misc()  # (pings; closes the socket when a PINGRESP is overdue)
        self._flush()

    # --- paho's callbacks --------------------------------------------------------------
    def _on_socket_open(self, _c: Any, _u: Any, sock: Any) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (no 40 ms Nagle waits)

    def _on_socket_close(self, _c: Any, _u: Any, sock: Any) -> None:
        data = self._c.take_unsent()
        if data:  # (a DISCONNECT, say): best effort, the socket closes now
            try:
                sock.send(data)
            except (OSError, ValueError):
                pass
        if self._sock is not None:
            self._loop.remove_reader(self._sock.fileno())
            if self._writing:
                self._loop.remove_writer(self._sock.fileno())
        self._sock, self._writing = None, False
        # (paho tells on_disconnect why right after this: wait for its reason)
        self._loop.call_soon(lambda: self._ended(self._reason or "the connection was lost"))

    def _ended(self, reason: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.lost.done():
            self.lost.set_result(reason)
        if not self._connack.done():
            self._connack.set_exception(MqttError(reason))
            self._connack.exception()  # (retrieved: connect reads `lost` first)

    def _on_connect(self, _c: Any, _u: Any, _flags: Any, rc: Any, *_rest: Any) -> None:
        if self._connack.done():
            return
        if _code(rc) == 0:
            self._connack.set_result(None)
        else:
            self._reason = f"refused: {_words(rc, PacketTypes.CONNACK)}"
            self._connack.set_exception(MqttError(self._reason))

    def _on_disconnect(self, _c: Any, _u: Any, *args: Any) -> None:
        # paho 2: (flags, reason, properties); 1.6: (rc) or, on MQTT 5, (rc, properties),
        # rc a ReasonCodes from the broker's DISCONNECT, else paho's own MQTT_ERR_* int
        rc = args[1] if _API else args[0]
        if self._reason is None and _code(rc) != 0:
            disconnect = PacketTypes.DISCONNECT
            self._reason = paho.error_string(rc) if isinstance(rc, int) else _words(rc, disconnect)

    def _on_publish(self, _c: Any, _u: Any, mid: int, *_rest: Any) -> None:
        fut = self._acks.pop(mid, None)
        if fut is not None and not fut.done():
            fut.set_result(None)
        self.on_published(mid)

    def _on_subscribe(self, _c: Any, _u: Any, mid: int, granted: Any, *_rest: Any) -> None:
        fut = self._subacks.pop(mid, None)
        if fut is None or fut.done():
            return
        codes = [_code(g) for g in granted]
        if any(code >= 0x80 for code in codes):
            words = [_words(g, PacketTypes.SUBACK) for g in granted]
            fut.set_exception(MqttError(f"subscribe refused: {words}"))
        else:
            fut.set_result(None)


def _words(rc: Any, packet: int) -> str:
    """A reason code in a `packet` (CONNACK, SUBACK, DISCONNECT) as words, as paho 2 names
    it. paho 1.6 gives some as an int: a 3.1.1 CONNACK's return code (1-5), or an MQTT 5
    code (132, Unsupported protocol version, for a broker without MQTT 5; a 3.1.1 SUBACK's
    128)."""
    if isinstance(rc, int):
        if packet == PacketTypes.CONNACK and rc < 6:
            return paho.connack_string(rc)
        try:
            rc = _ReasonCode(packet, identifier=rc)
        except (AssertionError, KeyError, ValueError):
            return f"[code:{rc}]"
    return f"[code:{_code(rc)}] {rc}"
