"""The neighbour battery: one misbehaving client beside one well-behaved one, on every
codec and every front, and what the well-behaved one saw (docs/reliability.md, "Neighbours").

verld promises that a reply goes only to the client that asked and that no client can
hurt another. A **case** is a codec variant × a front × a neighbour behaviour:

- variants (`VARIANTS`): `verl`, `verl:tcp`, `length`, `length:tcp`, `line` (no
  heartbeat ping: `heartbeat.payload` empty), `line:ping` (`PING`, answered `PONG`),
  `line:tcp` (`PING`), `modbus-rtu`, `modbus-tcp`, `frame` (configs/frame.yaml's
  declaration: "STX len seq cmd data CRC ETX", pipelined by its seq byte) and
  `frame:match` (no seq: one call at a time, a reply told by its device-id byte,
  `match`); `:tcp` is verld-sim listening on TCP and verld on `tcp://` (modbus-tcp is
  always on TCP);
- fronts (`FRONTS`): `api` (the JSON API on the Unix socket), `port` (a virtual
  serial port), `modbus` (the Modbus TCP server; Modbus codecs only), `mqtt`
  (verld-mqtt through a real mosquitto on loopback);
- behaviours (`BEHAVIOURS`): `terminators` (two requests in one: `"ECHO a\\nECHO b"`
  on line), `silent` (requests the device never answers), `malformed` (bad JSON, bad
  base64, garbage bytes, bad CRCs, malformed MBAP), `oversize` (over `max_payload`,
  over `api.max_message`, overlong lines and frames), `flood` (its whole queue share,
  `api.client_queue`, in flight, and more), `lease` (API only: a lease of
  `api.lease_max`, taken again as soon as it ends), `slow_reader` (reads nothing
  while replies and events pile up), `churn` (connect/disconnect as fast as it can),
  `abrupt` (calls in flight, then an abrupt close); and on `line` and `length` only
  (`TEXT_BEHAVIOURS`: the codecs without request ids, which take `reply: false`):
  `late_answer` (requests the device answers after the call's timeout: a short
  `timeout` of its own on the API and MQTT, `device.timeout` on a port) and
  `no_reply` (set commands that get no answer: `reply: false`, or on `line`
  `device.line.no_reply` matching `SET `; not on a `length` port, where nothing can
  say so).

The neighbour and the good client use the same front. `run_case` runs the neighbour
(in a thread with an event loop of its own, so its busy loops cannot stall the good
client's) beside the good client (in the caller's loop) for a few seconds, with a
monitor on the API following the link. The good client calls in a loop, one call at
a time, each recognisably its own (`ECHO <unique>` on line, the sim's echo command
0x01 + unique bytes on verl/length, after the frame's header on frame, a write of a
fresh value to its own holding register and a read back on the Modbus codecs), and
counts:

- **wrong**: an answer that is not its own (another call's data, an id or correlation
  it never used);
- **lost**: a call not answered exactly once with its own answer or the documented
  error (`busy` under the neighbour's lease); a port or Modbus front answers a failure
  with silence or a gateway exception, so there a missing answer is lost too;
- **dropped**: link `down` events and generation changes during the case;
- the latency of every call (p50, p99, max), measured, never asserted.

For `no_reply` the neighbour's commands are judged too: a subscriber of verld's
`traffic` tap counts each one written to the device, and one written twice is
**duplicated** (not clean); one answered `ok` on the API or MQTT but never written is a
problem. verld's own counts during the case (`timeouts`, `stale`, the late lines
dropped, `status.link.late`, and the lines dropped after a no-reply call,
`status.link.unexpected`) go to the report.

`Rig` is one variant's processes: verld-sim, verld with every front configured (two
virtual ports, the good client's with `events: false` and the neighbour's; the Modbus
TCP server on the Modbus codecs) and, once a case needs it, verld-mqtt on a broker
(tests/mqttrig.py). Cases share a rig: `run_case` waits for the link to be up and the
queue empty first, and judges each case by what happened during it.

Used by tests/test_neighbours.py (a representative case per codec × front) and by
`tools/soak --neighbours` (every case, N seconds each; tools/soaklib/neighbours.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import re
import secrets
import socket
import struct
import termios
import threading
import time
import tty
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
from mqttrig import BridgeProc, Broker
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from support import free_port

from verld import wire
from verld.codec.frame.frames import FrameFormat, FrameReader
from verld.codec.length import LengthDecoder
from verld.codec.length import encode as length_encode
from verld.codec.line import LineSplitter
from verld.codec.modbus import crc16, mbap_frame, rtu_frame, rtu_response_length
from verld.codec.verl import FrameDecoder, encode_frame
from verld.config import Config, parse_config
from verld.testing import DaemonProc, HarnessError, SimProc, write_config

__all__ = [
    "BEHAVIOURS",
    "FRONTS",
    "VARIANTS",
    "Case",
    "Result",
    "Rig",
    "all_cases",
    "behaviours_of",
    "fronts_of",
    "run_case",
]

# --- the settings every rig runs with ---------------------------------------------------

TIMEOUT = 0.5  #: device.timeout: one try (retry 0)
#: the late answerer's own `timeout` on the API and MQTT (on a port device.timeout holds)
LATE_TIMEOUT = 0.1
#: the late answerer's delays (ms), by (on a port, with a ping): past its timeout, and as
#: late as verld promises to keep them off the next call. Without a ping that is the quiet
#: time after a try that ran out (until device.timeout after the write, or the guard after
#: the timeout); later is the documented gap (docs/config.md: set heartbeat.payload).
#: With a ping the link resyncs after that time: later answers too, while the pings of
#: the resync (heartbeat.timeout each, `misses` of them) keep the link.
LATE_MS = {
    (False, False): (200, 300, 400),
    (False, True): (300, 750),
    (True, False): (520,),
    (True, True): (750,),
}
NO_REPLY = "^SET "  #: device.line.no_reply on line: the set commands' prefix
GUARD = 0.1  #: device.guard
CLIENT_QUEUE = 16  #: api.client_queue: one client's share, small so a flood is cheap
LEASE_MAX = 2  #: api.lease_max
MAX_PAYLOAD = 1024  #: device.max_payload
MAX_MESSAGE = 65536  #: api.max_message
MAX_BACKLOG = 65536  #: api.max_backlog: a stopped reader is cut off soon
HEARTBEAT = {"interval": 1.0, "misses": 3, "timeout": 0.3}
#: verld-sim's --max-payload on length: a length prefix above 2 × 64 + 64 is noise to it,
#: dropped unanswered (docs/sim.md): the one request the sim never answers on length
SIM_LENGTH_MAX_PAYLOAD = 64
LENGTH_SILENT = b"\xff" * 200
#: the `frame` variants' declarations (device.frame), by variant name: configs/frame.yaml's
#: (seq at header byte 1, cmd at 2, events cmd 0x80), and one without seq whose replies
#: are told by the device-id byte (header byte 0) they share with their request
FRAMES: dict[str, dict[str, Any]] = {
    "frame": {
        "start": "02",
        "header": 3,
        "length": {"offset": 0, "size": 1},
        "check": {"kind": "CRC-16/MODBUS", "order": "little"},
        "end": "03",
        "seq": {"offset": 1, "size": 1},
        "event": {"offset": 2, "values": ["80"]},
    },
    "frame:match": {
        "start": "aa 55",
        "header": 2,
        "length": {"offset": 1, "size": 1},
        "check": {"kind": "sum8"},
        "match": [0],
    },
}
#: the headers a call's data starts with, by variant: the good client's, the neighbour's
#: (frame: len and seq, verld writes them; cmd 01. frame:match: device ids G and N, len)
FRAME_HEADS = {"frame": (b"\x00\x00\x01", b"\x00\x00\x01"), "frame:match": (b"G\x00", b"N\x00")}
MODBUS_PING = "010400000001"  #: unit 1, input register 0 (fc 4: no client here uses it)
GOOD_UNIT, GOOD_REGISTER = 1, 10  #: the good client's holding register (nobody else writes it)
NB_UNIT = 2  #: the neighbour's unit
SILENT_UNIT = 9  #: served by nobody
UNITS = "1,2"
#: how long the good client waits for one answer: no answer by then is a lost call
CALL_DEADLINE = 5.0
DEVICE = "dev"  #: the device's name on the bridge

FRONTS = ("api", "port", "modbus", "mqtt")
BEHAVIOURS = (
    "terminators",
    "silent",
    "malformed",
    "oversize",
    "flood",
    "lease",
    "slow_reader",
    "churn",
    "abrupt",
    "late_answer",
    "no_reply",
)
#: behaviours only on `line` and `length` (no request ids; `reply: false` is theirs)
TEXT_BEHAVIOURS = ("late_answer", "no_reply")


@dataclass(frozen=True, slots=True)
class Variant:
    """A codec as the battery runs it: on a pty or on TCP, with or without a ping."""

    name: str
    codec: str
    tcp: bool = False
    ping: str = ""  #: heartbeat.payload

    @property
    def family(self) -> str:
        """`binary` (verl, length), `line`, `modbus` or `frame`: how requests are made."""
        if self.codec.startswith("modbus"):
            return "modbus"
        if self.codec == "frame":
            return "frame"
        return "line" if self.codec == "line" else "binary"

    @property
    def framing(self) -> str:
        """How a program frames its requests on a port: the codec, or on `frame` the
        variant (its declaration)."""
        return self.name if self.codec == "frame" else self.codec

    def sim_args(self) -> tuple[str, ...]:
        if self.family == "modbus":
            return ("--units", UNITS)
        if self.codec == "length":
            return ("--max-payload", str(SIM_LENGTH_MAX_PAYLOAD))
        return ()


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("verl", "verl"),
        Variant("verl:tcp", "verl", tcp=True),
        Variant("length", "length"),
        Variant("length:tcp", "length", tcp=True),
        Variant("line", "line"),
        Variant("line:ping", "line", ping="PING"),
        Variant("line:tcp", "line", tcp=True, ping="PING"),
        Variant("modbus-rtu", "modbus-rtu", ping=MODBUS_PING),
        Variant("modbus-tcp", "modbus-tcp", tcp=True, ping=MODBUS_PING),
        Variant("frame", "frame", ping="000001"),
        Variant("frame:match", "frame", ping="5000"),
    )
}


def _frame_config(name: str) -> Config:
    frame = json.dumps(FRAMES[name])  # (JSON is YAML)
    return parse_config(f"device: {{port: /dev/null, codec: frame, frame: {frame}}}\n")


#: each `frame` variant's framing, made ready
FORMS: dict[str, FrameFormat] = {}
for _name in FRAMES:
    _declared = _frame_config(_name).device.frame
    assert _declared is not None
    FORMS[_name] = FrameFormat(_declared, MAX_PAYLOAD)


def _frame_event(framing: str, data: bytes) -> bool:
    """A `frame` variant's event: cmd 0x80 (frame), device id 0 (frame:match)."""
    return data[2] == 0x80 if framing == "frame" else data[0] == 0


@dataclass(frozen=True, slots=True)
class Case:
    variant: str
    front: str
    behaviour: str

    @property
    def id(self) -> str:
        return f"{self.variant}/{self.front}/{self.behaviour}"


def fronts_of(variant: str) -> tuple[str, ...]:
    """The fronts a variant has (the Modbus TCP server only on the Modbus codecs)."""
    if VARIANTS[variant].family == "modbus":
        return FRONTS
    return tuple(f for f in FRONTS if f != "modbus")


def behaviours_of(front: str, variant: str | None = None) -> tuple[str, ...]:
    """The neighbour behaviours a front has (a lease is an API op; the Modbus front has no
    `TEXT_BEHAVIOURS`), on `variant` if given (those only on `line` and `length`, and
    `no_reply` on a port only on `line`, where `device.line.no_reply` says which)."""
    out = BEHAVIOURS if front == "api" else tuple(b for b in BEHAVIOURS if b != "lease")
    codec = VARIANTS[variant].codec if variant is not None else None
    if front == "modbus" or codec not in (None, "line", "length"):
        out = tuple(b for b in out if b not in TEXT_BEHAVIOURS)
    if front == "port" and codec == "length":
        out = tuple(b for b in out if b != "no_reply")
    return out


def all_cases() -> list[Case]:
    """Every case, variant by variant (so cases that share a rig follow each other)."""
    return [Case(v, f, b) for v in VARIANTS for f in fronts_of(v) for b in behaviours_of(f, v)]


# --- requests, as each family makes them ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Payload:
    """What one call carries: bytes, and on line the text they are."""

    data: bytes
    text: str | None = None

    def api(self) -> dict[str, Any]:
        if self.text is not None:
            return {"text": self.text}
        return {"data": base64.b64encode(self.data).decode()}

    def mqtt(self) -> dict[str, Any]:
        return {"text": self.text} if self.text is not None else {"hex": self.data.hex()}


def _text(text: str) -> Payload:
    return Payload(text.encode(), text)


def _read(unit: int, address: int, count: int = 1) -> bytes:
    return struct.pack(">BBHH", unit, 3, address, count)


def _write(unit: int, address: int, value: int) -> bytes:
    return struct.pack(">BBHH", unit, 6, address, value)


class Dialect:
    """The neighbour's requests on one variant (each kind it needs)."""

    def __init__(self, variant: Variant, nonce: str) -> None:
        self.variant, self.codec, self.family = variant, variant.codec, variant.family
        self.nonce = nonce
        #: frame: the header every request starts with (the sim's commands follow it)
        self.head = FRAME_HEADS[variant.name][1] if self.family == "frame" else b""

    def own(self, n: int) -> Payload:
        """An ordinary request, answered at once."""
        if self.family == "line":
            return _text(f"ECHO N{self.nonce}x{n}")
        if self.family == "modbus":
            if n % 2:
                return Payload(_write(NB_UNIT, 20 + n % 10, n & 0xFFFF))
            return Payload(_read(NB_UNIT, 0, 4))
        return Payload(self.head + b"\x01" + f"N{self.nonce}x{n}".encode())

    def silent(self, n: int) -> Payload:
        """A request the device never answers (verl: answered long after the timeout)."""
        if self.family == "line":
            return _text(" " * (n % 3))  # a blank line: the sim ignores it
        if self.family == "modbus":
            return Payload(_read(SILENT_UNIT, 0))
        if self.codec in ("verl", "frame"):
            late = b"\x03" + struct.pack(">H", int(TIMEOUT * 3000)) + b"late"
            return Payload(self.head + late)
        return Payload(LENGTH_SILENT)

    def two_in_one(self, n: int) -> list[Payload]:
        """Requests with a second request inside: a terminator in the middle on line."""
        tag = f"N{self.nonce}x{n}"
        if self.family == "line":
            return [
                _text(f"ECHO {tag}a\nECHO {tag}b"),
                _text(f"ECHO {tag}c\rECHO {tag}d"),
                _text(f"ECHO {tag}e\n\n"),
            ]
        if self.family == "modbus":
            # a write whose values are a whole request (to the good client's register),
            # and two requests in one (a PDU whose length fits neither: a slave that
            # frames by function code may lose step on RTU)
            inner = _write(GOOD_UNIT, GOOD_REGISTER, 0xDEAD)
            inner = rtu_frame(inner) if self.codec == "modbus-rtu" else mbap_frame(1, inner)
            inner += b"\0" * (len(inner) % 2)
            count = len(inner) // 2
            carrier = struct.pack(">BBHHB", NB_UNIT, 0x10, 30, count, len(inner)) + inner
            return [Payload(carrier), Payload(_read(NB_UNIT, 0) + _read(NB_UNIT, 1))]
        if self.family == "frame":  # a whole frame inside a call's payload
            inner = self.head + b"\x01" + tag.encode()
            return [Payload(inner + FORMS[self.variant.name].encode(inner, 7))]
        second = (
            encode_frame(0x11, 7, b"\x01" + tag.encode())
            if self.codec == "verl"
            else length_encode(b"\x01" + tag.encode())
        )
        return [Payload(b"\x01" + tag.encode() + b"\x00" + second)]

    def events(self) -> Payload | None:
        """A request after which the device sends events (None where an event could pass
        for the next call's reply: length has no way to tell them apart)."""
        if self.codec in ("verl", "frame"):
            return Payload(self.head + b"\x06\x00\x14")
        if self.family == "line":
            return _text("EVENTS 20")  # (device.line.event makes them events)
        return None

    def slow(self, n: int) -> Payload:
        """A request answered within the timeout, but not at once."""
        if self.family == "line":
            return _text(f"DELAY 50 N{self.nonce}x{n}")
        if self.codec in ("verl", "frame"):
            return Payload(self.head + b"\x03\x00\xc8" + f"N{self.nonce}x{n}".encode())
        if self.codec == "length":
            return Payload(b"\x03\x00\x32" + f"N{self.nonce}x{n}".encode())
        return self.own(n)

    def late(self, n: int, *, port: bool = False) -> Payload:
        """A request answered after its call's timeout (`LATE_TIMEOUT`, or on a `port`
        device.timeout), tagged `N<nonce>x<n>` (line and length)."""
        delays = LATE_MS[port, bool(self.variant.ping)]
        ms = delays[n % len(delays)]
        if self.family == "line":
            return _text(f"DELAY {ms} N{self.nonce}x{n}")
        return Payload(b"\x03" + struct.pack(">H", ms) + f"N{self.nonce}x{n}".encode())

    def set_command(self, n: int) -> tuple[Payload, dict[str, Any]]:
        """A command the device does not answer, and the call's fields that say so
        (`reply: false`; on line every other one leaves it to `device.line.no_reply`).
        verld-sim answers anyway, at once (a careless instrument): verld drops that."""
        if self.family == "line":
            return _text(f"SET N{self.nonce}x{n}"), ({"reply": False} if n % 2 else {})
        return Payload(b"\x01" + f"N{self.nonce}x{n}".encode()), {"reply": False}

    def oversize(self) -> Payload:
        """A call over max_payload (Modbus: a PDU over 253 bytes)."""
        if self.family == "line":
            return _text("ECHO " + "x" * MAX_PAYLOAD)
        if self.family == "modbus":
            return Payload(bytes((NB_UNIT, 0x10)) + bytes(300))
        return Payload(self.head + b"\x01" + b"x" * MAX_PAYLOAD)


@dataclass(slots=True)
class GoodCall:
    """One call of the good client and the answers that are its own."""

    n: int
    payload: Payload
    accept: frozenset[bytes]
    any_read: bool = False  #: a Modbus read while the register's value is unknown
    write: int | None = None  #: Modbus: the value written
    skip: int = 0  #: frame: the reply's header, before the answer proper

    def matches(self, status: int, data: bytes) -> bool:
        if status != 0:
            return False
        if data[self.skip :] in self.accept:
            return True
        head = bytes((GOOD_UNIT, 3, 2))
        return self.any_read and len(data) == 5 and data.startswith(head)


class GoodCalls:
    """The good client's calls, one after another, each recognisably its own."""

    def __init__(self, variant: Variant, nonce: str) -> None:
        self.family, self.nonce = variant.family, nonce
        #: frame: the header every call starts with (the sim's commands follow it)
        self.head = FRAME_HEADS[variant.name][0] if self.family == "frame" else b""
        self.n = 0
        #: Modbus: what the register may hold (None: unknown)
        self.values: set[int] | None = None
        self._base = random.randrange(1 << 16)

    def next(self) -> GoodCall:
        n = self.n
        self.n += 1
        tag = f"G{self.nonce}x{n}"
        if self.family == "line":
            return GoodCall(n, _text(f"ECHO {tag}"), frozenset({tag.encode()}))
        if self.family in ("binary", "frame"):
            payload = Payload(self.head + b"\x01" + tag.encode())
            return GoodCall(n, payload, frozenset({tag.encode()}), skip=len(self.head))
        if n % 2 == 0:
            value = (self._base + n) & 0xFFFF
            data = _write(GOOD_UNIT, GOOD_REGISTER, value)
            return GoodCall(n, Payload(data), frozenset({data}), write=value)
        read = _read(GOOD_UNIT, GOOD_REGISTER)
        if self.values is None:
            return GoodCall(n, Payload(read), frozenset(), any_read=True)
        accept = frozenset(bytes((GOOD_UNIT, 3, 2)) + struct.pack(">H", v) for v in self.values)
        return GoodCall(n, Payload(read), accept)

    def settled(self, call: GoodCall, answered: bool) -> None:
        """A call ended: a write's value is the register's (or may be, if unanswered)."""
        if call.write is None:
            return
        if answered:
            self.values = {call.write}
        elif self.values is not None:
            self.values.add(call.write)


# --- framing on a port, and answers on a port or the Modbus front -----------------------------


def port_request(codec: str, payload: Payload, tag: int) -> bytes:
    """The bytes a program writes to its port for `payload` (verl seq / MBAP id / frame
    seq `tag`); `codec` a variant's `framing`."""
    form = FORMS.get(codec)
    if form is not None:
        return form.encode(payload.data, tag)  # (a seq field, if declared, takes `tag`)
    if codec == "line":
        return payload.data + b"\n"
    if codec == "length":
        return length_encode(payload.data)
    if codec == "verl":
        return encode_frame(0x11, tag & 0xFFFF, payload.data)
    if codec == "modbus-rtu":
        return rtu_frame(payload.data)
    return mbap_frame(tag & 0xFFFF, payload.data)


@dataclass(frozen=True, slots=True)
class Answer:
    tag: int | None  #: verl seq, MBAP transaction id; None where the framing has none
    status: int  #: the status byte (Modbus: the exception code, 0 for a normal response)
    data: bytes  #: the reply's data (Modbus: unit + PDU)


class Answers:
    """Answers in a byte stream, framed as a program (or a Modbus TCP master) reads them."""

    def __init__(self, codec: str) -> None:
        self.codec = codec  #: a variant's `framing`
        self.events = 0
        self.junk = 0  #: bytes that framed nothing
        self._buf = bytearray()
        self._lines = LineSplitter(b"\n", 1 << 16)
        self._length = LengthDecoder(1 << 20)
        self._verl = FrameDecoder(1 << 16, frozenset({0x12, 0x13}))
        form = FORMS.get(codec)
        self._frames = None if form is None else FrameReader(form)

    def feed(self, data: bytes) -> list[Answer]:
        codec = self.codec
        if self._frames is not None:  # frame: a reply's data is its header and payload
            found = []
            for piece in self._frames.feed(data):
                if _frame_event(codec, piece):
                    self.events += 1
                else:
                    found.append(Answer(self._frames.form.seq_of(piece), 0, piece))
            return found
        if codec == "line":
            out = []
            for line in self._lines.feed(data):
                if line.startswith(b"EVENT "):
                    self.events += 1
                else:
                    out.append(Answer(None, 0, line))
            return out
        if codec == "length":
            return [
                Answer(None, f[0], f[1:]) if f else Answer(None, -1, b"")
                for f in self._length.feed(data)
            ]
        if codec == "verl":
            answers = []
            for frame in self._verl.feed(data):
                if frame.kind == 0x13:
                    self.events += 1
                elif frame.payload:
                    answers.append(Answer(frame.seq, frame.payload[0], frame.payload[1:]))
            return answers
        self._buf += data
        return self._rtu() if codec == "modbus-rtu" else self._mbap()

    def _rtu(self) -> list[Answer]:
        buf, out = self._buf, []
        while len(buf) >= 5:
            size = rtu_response_length(buf)
            if size is None:
                del buf[:1]
                self.junk += 1
                continue
            if len(buf) < size:
                break
            frame = bytes(buf[:size])
            if crc16(frame[:-2]) != int.from_bytes(frame[-2:], "little"):
                del buf[:1]
                self.junk += 1
                continue
            del buf[:size]
            out.append(_modbus_answer(None, frame[:-2]))
        return out

    def _mbap(self) -> list[Answer]:
        buf, out = self._buf, []
        while len(buf) >= 6:
            tid, _protocol, length = struct.unpack_from(">HHH", buf)
            if len(buf) < 6 + length:
                break
            out.append(_modbus_answer(tid, bytes(buf[6 : 6 + length])))
            del buf[: 6 + length]
        return out


def _modbus_answer(tag: int | None, unit_pdu: bytes) -> Answer:
    if len(unit_pdu) >= 3 and unit_pdu[1] & 0x80:
        return Answer(tag, unit_pdu[2] or 0x100, unit_pdu)
    return Answer(tag, 0, unit_pdu)


# --- the client API, raw ---------------------------------------------------------------------


class ApiConn:
    """One API connection: requests by id, replies to their futures, events to a list.

    Raw (not `verld.client`): it sees every message, so a second reply to one id
    (`duplicates`) or a reply to an id never sent (`strangers`) is counted, not hidden.
    Messages with an id this connection did not ask for (or null) go to `inbox`.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.answered: set[int] = set()
        self.events: list[dict[str, Any]] = []
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.duplicates = 0
        self.strangers: list[dict[str, Any]] = []
        self.next_id = 1
        self.closed = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, path: str) -> ApiConn:
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 20)
        return cls(reader, writer)

    async def _read(self) -> None:
        decoder = wire.MessageDecoder(1 << 24)
        try:
            while True:
                data = await self.reader.read(1 << 16)
                if not data:
                    break
                for body in decoder.feed(data):
                    self._message(json.loads(body))
        except (OSError, ValueError):
            pass
        finally:
            self.closed.set()
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("the connection closed"))

    def _message(self, msg: dict[str, Any]) -> None:
        if "event" in msg and "id" not in msg:
            self.events.append(msg)
            return
        req_id = msg.get("id")
        fut = self.pending.pop(req_id, None) if isinstance(req_id, int) else None
        if fut is not None:
            self.answered.add(req_id)  # type: ignore[arg-type]
            if not fut.done():
                fut.set_result(msg)
        elif isinstance(req_id, int) and req_id in self.answered:
            self.duplicates += 1
        elif isinstance(req_id, int) and req_id < self.next_id and req_id > 0:
            self.strangers.append(msg)  # (an id of ours that was never pending: cannot be)
        else:
            self.inbox.put_nowait(msg)

    def request(self, op: str, **fields: Any) -> asyncio.Future[dict[str, Any]]:
        req_id = self.next_id
        self.next_id += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieved)  # (a caller may never look: no warning then)
        self.pending[req_id] = fut
        self.send(wire.encode({"op": op, "id": req_id, **fields}))
        return fut

    def send(self, frame: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(frame)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def _retrieved(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def frame(body: bytes) -> bytes:
    """`body` framed as an API message (any bytes: for malformed messages)."""
    return len(body).to_bytes(4, "big") + body


# --- a program on a virtual serial port ------------------------------------------------------


class Pty:
    """A program's end of a virtual serial port: raw, non-blocking, driven by the loop."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        try:
            tty.setraw(self.fd, termios.TCSANOW)
        except termios.error:
            pass
        self.loop = asyncio.get_running_loop()
        self.data: asyncio.Queue[bytes] = asyncio.Queue()
        self.reading = False

    def start_reading(self) -> None:
        self.reading = True
        self.loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.loop.remove_reader(self.fd)
            self.reading = False
        self.data.put_nowait(chunk)

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                ready = self.loop.create_future()
                self.loop.add_writer(self.fd, ready.set_result, None)
                try:
                    await ready
                finally:
                    self.loop.remove_writer(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            if self.reading:
                self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1


# --- MQTT 3.1.1, raw, for the neighbours ---------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _mqtt_str(data: bytes) -> bytes:
    return len(data).to_bytes(2, "big") + data


def _packet(head: int, body: bytes) -> bytes:
    return bytes((head,)) + _varint(len(body)) + body


class RawMqtt:
    """A minimal MQTT 3.1.1 client (QoS 0) for neighbours: cheap to open, to flood with,
    to stop reading and to drop without a DISCONNECT. Replies to its calls come on
    `<base>/<device>/call/response`, matched by `transaction`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.messages: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, port: int, subscribe: tuple[str, ...] = (), *, read: bool = True
    ) -> RawMqtt:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client_id = f"nb-{secrets.token_hex(6)}".encode()
        connect = _mqtt_str(b"MQTT") + bytes((4, 0x02)) + (60).to_bytes(2, "big")
        writer.write(_packet(0x10, connect + _mqtt_str(client_id)))
        for pid, topic in enumerate(subscribe, 1):
            writer.write(_packet(0x82, pid.to_bytes(2, "big") + _mqtt_str(topic.encode()) + b"\0"))
        self = cls(reader, writer)
        async with asyncio.timeout(5):
            head = await reader.readexactly(4)  # CONNACK
        if head[0] != 0x20 or head[3] != 0:
            raise ConnectionError(f"the broker refused the connection: {head.hex()}")
        if read:
            self._task = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        reader = self.reader
        with contextlib.suppress(asyncio.IncompleteReadError, OSError):
            while True:
                head = (await reader.readexactly(1))[0]
                length, shift = 0, 0
                while True:
                    byte = (await reader.readexactly(1))[0]
                    length |= (byte & 0x7F) << shift
                    shift += 7
                    if not byte & 0x80:
                        break
                body = await reader.readexactly(length)
                if head >> 4 == 3:  # PUBLISH
                    size = int.from_bytes(body[:2], "big")
                    topic = body[2 : 2 + size].decode(errors="replace")
                    skip = 2 + size + (2 if head & 0x06 else 0)
                    self.messages.put_nowait((topic, body[skip:]))

    def publish(self, topic: str, payload: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(_packet(0x30, _mqtt_str(topic.encode()) + payload))

    async def drain(self) -> None:
        await self.writer.drain()

    async def close(self, *, abrupt: bool = False) -> None:
        if not abrupt and not self.writer.is_closing():
            self.writer.write(b"\xe0\x00")
        if abrupt:
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


# --- the rig ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RigInfo:
    """Where a rig's fronts are (all a neighbour or a good client needs)."""

    variant: Variant
    socket: str
    good_port: str
    nb_port: str
    modbus: tuple[str, int] | None
    broker_port: int | None
    base: str

    @property
    def call_topic(self) -> str:
        return f"{self.base}/{DEVICE}/call"

    @property
    def response_topic(self) -> str:
        return f"{self.base}/{DEVICE}/call/response"


class Rig:
    """One variant's processes: verld-sim, verld with every front, and (`mqtt`) verld-mqtt.

    `stop()` ends every process it started, by pid.
    """

    def __init__(self, tmp: Path, variant: str, *, seed: int = 1) -> None:
        self.tmp = tmp
        self.variant = v = VARIANTS[variant]
        self.bridge: BridgeProc | None = None
        self.broker: Broker | None = None
        self.base = f"nb/{secrets.token_hex(3)}/{variant.replace(':', '-')}"
        args = v.sim_args()
        if v.family == "frame":  # the sim reads the declaration from a file of its own
            declared = tmp / "frame.yaml"
            declared.write_text(json.dumps(FRAMES[v.name]))
            args += ("--frame", str(declared))
        # shared: the pool keeps the rig across tests
        self.sim = SimProc(tmp, "--seed", str(seed), *args, codec=v.codec, tcp=v.tcp, shared=True)
        self.good_port, self.nb_port = str(tmp / "good.tty"), str(tmp / "nb.tty")
        self.modbus_port = free_port() if v.family == "modbus" else None
        try:
            self.daemon = DaemonProc(
                write_config(tmp, self.sim.address if v.tcp else self.sim.link, self.config()),
                shared=True,
            )
        except BaseException:
            self.sim.stop()
            raise

    def config(self) -> dict[str, Any]:
        v = self.variant
        device: dict[str, Any] = {
            "codec": v.codec,
            "timeout": TIMEOUT,
            "retry": 0,
            "guard": GUARD,
            "max_payload": MAX_PAYLOAD,
        }
        if v.codec == "line":
            device["line"] = {"event": "^EVENT ", "no_reply": NO_REPLY}
        if v.family == "frame":
            device["frame"] = FRAMES[v.name]
        cfg: dict[str, Any] = {
            "device": device,
            "heartbeat": {**HEARTBEAT, "payload": v.ping, **_expect(v)},
            "api": {
                "client_queue": CLIENT_QUEUE,
                "lease_max": LEASE_MAX,
                "max_message": MAX_MESSAGE,
                "max_backlog": MAX_BACKLOG,
            },
            "ports": [{"link": self.good_port, "events": False}, {"link": self.nb_port}],
            "log": {"level": "INFO", "format": "json"},
        }
        if self.modbus_port is not None:
            cfg["modbus"] = {
                "listen": f"127.0.0.1:{self.modbus_port}",
                "read_only": False,
                "max_connections": 8,
                "offline_backoff": 1.0,
            }
        return cfg

    def mqtt(self, broker: Broker) -> None:
        """Start verld-mqtt for this daemon on `broker` (once)."""
        if self.bridge is not None:
            return
        self.broker = broker
        self.bridge = BridgeProc(
            self.tmp,
            broker,
            {DEVICE: self.daemon.socket},
            base=self.base,
            broker={"client_id": f"nb-bridge-{secrets.token_hex(4)}"},
            log={"level": "INFO", "format": "json"},
        )

    def info(self) -> RigInfo:
        return RigInfo(
            self.variant,
            self.daemon.socket,
            self.good_port,
            self.nb_port,
            ("127.0.0.1", self.modbus_port) if self.modbus_port is not None else None,
            self.broker.port if self.broker is not None and self.bridge is not None else None,
            self.base,
        )

    def check_alive(self) -> None:
        for name, proc in (("verld", self.daemon.proc), ("verld-sim", self.sim.proc)):
            if proc.poll() is not None:
                raise HarnessError(f"{name} exited {proc.returncode}:\n{self.daemon.log()[-3000:]}")
        bridge = self.bridge
        if bridge is not None and bridge.proc is not None and bridge.proc.poll() is not None:
            raise HarnessError(f"verld-mqtt exited:\n{bridge.log()[-3000:]}")

    def stop(self) -> None:
        if self.bridge is not None:
            self.bridge.stop()
        self.daemon.stop()
        self.sim.stop()


# --- the good client --------------------------------------------------------------------------


@dataclass
class Tally:
    """What the good client saw."""

    calls: int = 0
    ok: int = 0
    wrong: int = 0
    lost: int = 0
    late: int = 0  #: answers to calls already counted lost
    allowed: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)  #: ms, every answered call
    generations: set[int] = field(default_factory=set)  #: carried by its replies
    examples: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.examples) < 8:
            self.examples.append(text[:300])


class Good:
    """The well-behaved client on one front: `open`, `run` until stopped, `close`."""

    def __init__(self, info: RigInfo, case: Case) -> None:
        self.info, self.case = info, case
        self.codec = info.variant.framing
        self.nonce = secrets.token_hex(3)
        self.calls = GoodCalls(info.variant, self.nonce)
        self.tally = Tally()
        #: error codes that are the documented answer in this case
        self.allowed = frozenset({"busy"}) if case.behaviour == "lease" else frozenset()

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def one(self, call: GoodCall) -> None:
        raise NotImplementedError

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            call = self.calls.next()
            self.tally.calls += 1
            await self.one(call)

    # the outcomes, for every front
    def ok(self, call: GoodCall, started: float) -> None:
        self.tally.ok += 1
        self.tally.latencies.append((time.perf_counter() - started) * 1000)
        self.calls.settled(call, True)

    def wrong(self, call: GoodCall, what: str) -> None:
        self.tally.wrong += 1
        self.tally.note(f"call {call.n} ({call.payload.data[:40]!r}): {what}")
        self.calls.settled(call, False)

    def failed(self, call: GoodCall, code: str, started: float, what: str = "") -> None:
        if code in self.allowed:
            self.tally.allowed[code] += 1
            self.tally.latencies.append((time.perf_counter() - started) * 1000)
        else:
            self.tally.lost += 1
            self.tally.errors[code] += 1
            self.tally.note(f"call {call.n} ({call.payload.data[:40]!r}): {code} {what}")
        self.calls.settled(call, False)

    def judge(self, call: GoodCall, reply: dict[str, Any], started: float) -> None:
        """A JSON reply (the API's, verld-mqtt's): its own data, another's, or an error."""
        if isinstance(reply.get("generation"), int):
            self.tally.generations.add(reply["generation"])
        if reply.get("ok"):
            data = base64.b64decode(reply.get("data", ""))
            if call.matches(0, data):
                self.ok(call, started)
            else:
                self.wrong(call, f"got {str(reply)[:200]}")
            return
        error = reply.get("error") or {}
        self.failed(call, str(error.get("code")), started, str(error.get("message")))


class GoodApi(Good):
    """On the JSON API: every other call asks to wait."""

    async def open(self) -> None:
        self.conn = await ApiConn.open(self.info.socket)

    async def one(self, call: GoodCall) -> None:
        started = time.perf_counter()
        fut = self.conn.request("call", **call.payload.api(), wait=bool(call.n % 2))
        try:
            reply = await asyncio.wait_for(asyncio.shield(fut), CALL_DEADLINE)
        except TimeoutError:
            self.failed(call, "no reply", started, f"within {CALL_DEADLINE:g} s")
            fut.add_done_callback(self._late)
            return
        except ConnectionError:
            self.failed(call, "connection closed", started)
            await self.open()
            return
        self.judge(call, reply, started)

    def _late(self, fut: asyncio.Future[dict[str, Any]]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.tally.late += 1

    async def close(self) -> None:
        conn = self.conn
        self.tally.lost += conn.duplicates
        if conn.duplicates:
            self.tally.note(f"{conn.duplicates} second replies to one call")
        self.tally.wrong += len(conn.strangers)
        for msg in conn.strangers[:3]:
            self.tally.note(f"a reply to an id never sent: {str(msg)[:200]}")
        await conn.close()


class GoodStream(Good):
    """A port program or a Modbus TCP master: requests written, answers framed from the
    byte stream. A failure is silence (a port) or a gateway exception (Modbus TCP)."""

    tagged = False  #: answers carry the request's tag (verl seq, MBAP transaction id)

    def __init__(self, info: RigInfo, case: Case) -> None:
        super().__init__(info, case)
        self.answers = Answers(self.codec)
        self.queue: asyncio.Queue[Answer] = asyncio.Queue()
        self.abandoned: dict[int, GoodCall] = {}  #: calls counted lost or wrong, by n

    def feed(self, data: bytes) -> None:
        for answer in self.answers.feed(data):
            self.queue.put_nowait(answer)

    def tag_of(self, call: GoodCall) -> int:
        return 1 + call.n % (255 if self.codec == "frame" else 65535)  # (frame: a seq byte)

    def frame(self, call: GoodCall) -> bytes:
        return port_request(self.codec, call.payload, self.tag_of(call))

    async def send(self, data: bytes) -> None:
        raise NotImplementedError

    async def one(self, call: GoodCall) -> None:
        tag = self.tag_of(call)
        started = time.perf_counter()
        await self.send(self.frame(call))
        deadline = started + CALL_DEADLINE
        while True:
            try:
                answer = await asyncio.wait_for(self.queue.get(), deadline - time.perf_counter())
            except TimeoutError:
                self.failed(call, "no answer", started, f"within {CALL_DEADLINE:g} s")
                self.abandoned[call.n] = call
                return
            own = not self.tagged or answer.tag == tag
            if own and call.matches(answer.status, answer.data):
                self.ok(call, started)
                return
            if self._late(answer):
                continue
            if own and answer.status:
                self.failed(call, f"exception {answer.status:#04x}", started, str(answer))
                return
            self.wrong(call, f"got {answer}")
            if own:  # (taken for its answer: its own, if it comes, is late)
                self.abandoned[call.n] = call
                return

    def _late(self, answer: Answer) -> bool:
        """An answer to a call already given up on (counted lost or wrong before)."""
        for n, old in list(self.abandoned.items()):
            if answer.tag == self.tag_of(old) if self.tagged else old.matches(0, answer.data):
                del self.abandoned[n]
                self.tally.late += 1
                return True
        return False


class GoodPort(GoodStream):
    """A program on its own virtual serial port (events off), in the device's framing."""

    async def open(self) -> None:
        self.tagged = self.codec in ("verl", "modbus-tcp", "frame")
        self.pty = Pty(self.info.good_port)
        self.pty.start_reading()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            chunk = await self.pty.data.get()
            if not chunk:
                return
            self.feed(chunk)

    async def send(self, data: bytes) -> None:
        await self.pty.write(data)

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        self.pty.close()


class GoodModbus(GoodStream):
    """A Modbus TCP master on verld's Modbus TCP server."""

    tagged = True

    async def open(self) -> None:
        assert self.info.modbus is not None
        self.reader, self.writer = await asyncio.open_connection(*self.info.modbus)
        self.writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.answers = Answers("modbus-tcp")
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := await self.reader.read(1 << 16):
                self.feed(chunk)

    def tag_of(self, call: GoodCall) -> int:
        return call.n & 0xFFFF

    def frame(self, call: GoodCall) -> bytes:
        return mbap_frame(self.tag_of(call), call.payload.data)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class GoodMqtt(Good):
    """An MQTT 5 client: each call with a Response Topic of its own and Correlation Data."""

    async def open(self) -> None:
        info = self.info
        assert info.broker_port is not None
        self.client = aiomqtt.Client(
            "127.0.0.1",
            info.broker_port,
            identifier=f"nb-good-{self.nonce}",
            protocol=aiomqtt.ProtocolVersion.V5,
            socket_options=((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),),
        )
        await self.client.__aenter__()
        self.reply_topic = f"nbgood/{self.nonce}/reply"
        self.state_topic = f"{info.base}/{DEVICE}/state"
        self.pending: dict[bytes, asyncio.Future[dict[str, Any]]] = {}
        self.answered: set[bytes] = set()
        self.up = asyncio.Event()
        self._reader = asyncio.create_task(self._read())
        await self.client.subscribe(self.reply_topic, qos=1)
        await self.client.subscribe(self.state_topic, qos=1)
        try:
            async with asyncio.timeout(20):  # the bridge subscribed to calls, the link up
                await self.up.wait()
        except TimeoutError:
            await self.close()
            raise HarnessError(f"verld-mqtt did not say {self.state_topic} is up") from None

    async def _read(self) -> None:
        async for message in self.client.messages:
            payload = message.payload if isinstance(message.payload, bytes) else b""
            try:
                body = json.loads(payload)
            except ValueError:
                body = None
            if message.topic.value == self.state_topic:
                if isinstance(body, dict) and body.get("state") == "up":
                    self.up.set()
                continue
            corr = getattr(message.properties, "CorrelationData", None)
            fut = self.pending.pop(corr, None) if isinstance(corr, bytes) else None
            if fut is not None and isinstance(body, dict):
                self.answered.add(corr)  # type: ignore[arg-type]
                fut.set_result(body)
            elif isinstance(corr, bytes) and corr in self.answered:
                self.tally.lost += 1
                self.tally.note(f"a second reply for {corr!r}: {payload[:200]!r}")
            else:
                self.tally.wrong += 1
                self.tally.note(f"a reply that is not for a call of ours: {payload[:200]!r}")

    async def one(self, call: GoodCall) -> None:
        corr = f"{self.nonce}-{call.n}".encode()
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[corr] = fut
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ResponseTopic = self.reply_topic
        props.CorrelationData = corr
        body = json.dumps({**call.payload.mqtt(), "transaction": call.n})
        started = time.perf_counter()
        await self.client.publish(self.info.call_topic, body, qos=1, properties=props)
        try:
            reply = await asyncio.wait_for(asyncio.shield(fut), CALL_DEADLINE)
        except TimeoutError:
            self.failed(call, "no reply", started, f"within {CALL_DEADLINE:g} s")
            return
        if reply.get("transaction") != call.n:
            self.wrong(call, f"transaction {reply.get('transaction')!r} in {str(reply)[:200]}")
            return
        self.judge(call, reply, started)

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
            await self._reader
        with contextlib.suppress(aiomqtt.MqttError):
            await self.client.__aexit__(None, None, None)


GOOD: dict[str, type[Good]] = {
    "api": GoodApi,
    "port": GoodPort,
    "modbus": GoodModbus,
    "mqtt": GoodMqtt,
}


# --- the neighbours ------------------------------------------------------------------------


@dataclass
class NbStats:
    """What the neighbour did (for the report; it is not judged)."""

    sent: int = 0  #: requests, messages or writes made
    answers: Counter[str] = field(default_factory=Counter)  #: by outcome / error code
    connections: int = 0
    closed_by_verld: int = 0
    #: no_reply: its commands seen written (the `traffic` tap), those written more than
    #: once, and those answered ok (`"reply": false`) but never seen written
    written: int = 0
    duplicated: int = 0
    unwritten: int = 0
    problem: str | None = None  #: what kept its counts from being whole


class Neighbour:
    """What a behaviour gets: where the fronts are, its requests, its counters."""

    def __init__(self, info: RigInfo) -> None:
        self.info = info
        self.nonce = secrets.token_hex(3)
        self.dialect = Dialect(info.variant, self.nonce)
        self.codec = info.variant.framing
        self.stats = NbStats()
        self.n = 0
        self._transactions: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.acks: set[int] = set()  #: no_reply: the commands answered ok, not awaited

    def next(self) -> int:
        self.n += 1
        return self.n

    def count(self, reply: dict[str, Any]) -> None:
        if reply.get("ok"):
            self.stats.answers["ok"] += 1
        else:
            self.stats.answers[str((reply.get("error") or {}).get("code"))] += 1

    async def api(self) -> ApiConn:
        self.stats.connections += 1
        return await ApiConn.open(self.info.socket)

    async def call(self, conn: ApiConn, payload: Payload, **fields: Any) -> None:
        """One API call, waited for and counted (a closed connection ends the wait)."""
        self.stats.sent += 1
        try:
            self.count(await conn.request("call", **payload.api(), **fields))
        except ConnectionError:
            self.stats.answers["connection closed"] += 1

    # no_reply: what verld said, and what it wrote
    def acked(self, n: int, reply: dict[str, Any]) -> None:
        """Command `n`'s reply, counted: ok with `"reply": false` is one not awaited."""
        if reply.get("ok") and reply.get("reply") is False:
            self.stats.answers["ok, not awaited"] += 1
            self.acks.add(n)
        else:
            self.count(reply)

    async def tap(self) -> ApiConn:
        """A subscriber of verld's `traffic` tap: each frame verld writes to the device."""
        conn = await ApiConn.open(self.info.socket)
        reply = await conn.request("subscribe", topics=["traffic"])
        if not reply.get("ok"):
            raise HarnessError(f"the traffic tap refused: {reply}")
        return conn

    def writes(self, tap: ApiConn) -> None:
        """Count the commands `tap` saw written (tagged `N<nonce>x<n>`): each once."""
        tag = re.compile(b"N" + self.nonce.encode() + rb"x(\d+)")
        seen: Counter[int] = Counter()
        for event in tap.events:
            if event.get("dir") != "tx" or event.get("kind") not in ("request", "retry"):
                continue
            for found in tag.finditer(bytes.fromhex(event.get("hex") or "")):
                seen[int(found.group(1))] += 1
        stats = self.stats
        stats.written = len(seen)
        stats.duplicated = sum(1 for times in seen.values() if times > 1)
        stats.unwritten = len(self.acks - set(seen))
        if tap.closed.is_set():
            stats.problem = "verld closed the traffic tap: the commands' count is not whole"
        elif stats.unwritten:
            stats.problem = f"{stats.unwritten} commands answered ok were never written"

    # ports
    def port_request(self, payload: Payload) -> bytes:
        return port_request(self.codec, payload, self.next())

    async def drain_port(
        self, pty: Pty, answers: Answers, got: asyncio.Event | None = None
    ) -> None:
        """Read the port for ever, counting answers."""
        pty.start_reading()
        while chunk := await pty.data.get():
            found = answers.feed(chunk)
            self.stats.answers["answer"] += len(found)
            if found and got is not None:
                got.set()

    # MQTT
    async def mqtt(self, *, read: bool = True, subscribe: tuple[str, ...] = ()) -> RawMqtt:
        assert self.info.broker_port is not None
        self.stats.connections += 1
        topics = (self.info.response_topic, *subscribe) if read else subscribe
        client = await RawMqtt.open(self.info.broker_port, topics, read=read)
        if read:
            asyncio.create_task(self._replies(client))  # noqa: RUF006 - ends with the client
        return client

    async def _replies(self, client: RawMqtt) -> None:
        while True:
            _topic, payload = await client.messages.get()
            with contextlib.suppress(ValueError):
                body = json.loads(payload)
                fut = self._transactions.pop(str(body.get("transaction")), None)
                if fut is not None and not fut.done():
                    fut.set_result(body)

    def publish(
        self, client: RawMqtt, fields: dict[str, Any] | bytes
    ) -> asyncio.Future[dict[str, Any]] | None:
        """One call request: fields (a transaction is added, and the future gets the
        reply on call/response), or raw bytes (no future: nothing to match a reply by)."""
        self.stats.sent += 1
        if isinstance(fields, bytes):
            client.publish(self.info.call_topic, fields)
            return None
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        transaction = f"nb-{self.nonce}-{self.next()}"
        self._transactions[transaction] = fut
        client.publish(
            self.info.call_topic, json.dumps({**fields, "transaction": transaction}).encode()
        )
        return fut

    async def answered(
        self, futs: list[asyncio.Future[dict[str, Any]]], within: float = 3.0
    ) -> None:
        """Wait for these replies (at most `within` s), counting them."""
        if not futs:
            return
        done, _ = await asyncio.wait(futs, timeout=within)
        for fut in done:
            self.count(fut.result())
        self.stats.answers["no reply"] += len(futs) - len(done)

    async def modbus(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        assert self.info.modbus is not None
        self.stats.connections += 1
        return await asyncio.open_connection(*self.info.modbus)


async def _close_writer(writer: asyncio.StreamWriter, *, abrupt: bool = False) -> None:
    if abrupt:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


# API neighbours


async def api_terminators(nb: Neighbour) -> None:
    conn = await nb.api()
    try:
        while True:
            n = nb.next()
            await asyncio.gather(*(nb.call(conn, p) for p in nb.dialect.two_in_one(n)))
    finally:
        await conn.close()


async def api_silent(nb: Neighbour) -> None:
    conn = await nb.api()

    async def one() -> None:
        while True:
            await nb.call(conn, nb.dialect.silent(nb.next()))

    try:
        await asyncio.gather(*(one() for _ in range(4)))
    finally:
        await conn.close()


def _bad_messages(n: int) -> list[bytes]:
    """Frames each answered with an error; none of them closes the connection."""
    call = {"op": "call", "id": n}
    ones = [
        b"{not json",
        b"[1, 2]",
        b'"just a string"',
        b"\xff\xfe\x00",
        b"",
        b'{"op": "call"}',
        b'{"op": "call", "id": true, "data": "AQ=="}',
        b'{"op": "call", "id": 1.5, "data": "AQ=="}',
        b'{"op": "call", "id": 7, "timeout": NaN, "data": "AQ=="}',
        b'{"op": "call", "id": 8, "text": "\\ud800"}',
        b'{"id": 1e999999, "op": "call"}',
        b"[" * 20000 + b"]" * 20000,
    ]
    objs: list[dict[str, Any]] = [
        {**call, "data": "@@@@"},
        {**call, "data": "AQ"},
        {**call, "data": "AQ==", "text": "x"},
        {**call, "data": "AQ==", "timeout": -1},
        {**call, "data": "AQ==", "retry": "x"},
        {**call, "data": "AQ==", "wait": "yes"},
        {**call, "data": None},
        {"op": "no such op", "id": n},
        {"op": "lease", "id": n, "seconds": 100000},
        {"op": "subscribe", "id": n, "topics": ["nothing"]},
    ]
    return ones + [json.dumps(o).encode() for o in objs]


async def api_malformed(nb: Neighbour) -> None:
    conn = await nb.api()
    try:
        while True:
            for body in _bad_messages(1 << 30):
                if conn.closed.is_set():
                    nb.stats.closed_by_verld += 1
                    await conn.close()
                    conn = await nb.api()
                nb.stats.sent += 1
                conn.send(frame(body))
                try:
                    async with asyncio.timeout(2):
                        reply = await conn.inbox.get()
                    nb.count(reply)
                except TimeoutError:
                    nb.stats.answers["no reply"] += 1
    finally:
        await conn.close()


async def api_oversize(nb: Neighbour) -> None:
    conn = await nb.api()
    try:
        while True:
            await nb.call(conn, nb.dialect.oversize())
            nb.stats.sent += 1
            conn.send(wire.encode({"op": "call", "id": 0, "text": "x" * MAX_MESSAGE}))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    nb.count(await conn.inbox.get())
                    await conn.closed.wait()
                    nb.stats.closed_by_verld += 1
            await conn.close()
            conn = await nb.api()
    finally:
        await conn.close()


async def api_flood(nb: Neighbour) -> None:
    conn = await nb.api()

    async def worker(extra: bool) -> None:
        while True:
            await nb.call(conn, nb.dialect.own(nb.next()))
            if extra:
                await asyncio.sleep(0.005)

    try:  # its whole share in flight, and one more call now and then (busy)
        await asyncio.gather(*(worker(i == CLIENT_QUEUE) for i in range(CLIENT_QUEUE + 1)))
    finally:
        await conn.close()


async def api_lease(nb: Neighbour) -> None:
    conn = await nb.api()
    try:
        while True:
            nb.stats.sent += 1
            reply = await conn.request("lease", seconds=LEASE_MAX)
            nb.count(reply)
            if not reply.get("ok"):
                await asyncio.sleep(0.05)
                continue
            until = time.monotonic() + LEASE_MAX  # held to the end, then taken again
            while time.monotonic() < until:
                await nb.call(conn, nb.dialect.own(nb.next()))
                await asyncio.sleep(min(0.05, max(0.0, until - time.monotonic())))
    finally:
        await conn.close()


async def api_slow_reader(nb: Neighbour) -> None:
    """Subscribes to every tap (each frame of everyone's becomes an event for it),
    makes calls (and device events where that is safe) and never reads."""
    trigger = nb.dialect.events()
    while True:
        nb.stats.connections += 1
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, nb.info.socket)
            topics = ["events", "link", "logs", "traffic", "wire"]
            sock.send(wire.encode({"op": "subscribe", "id": 1, "topics": topics}))
            started = time.monotonic()
            while time.monotonic() - started < 5.0:
                n = nb.next()
                batch = [nb.dialect.own(n)] * 2 + ([trigger] if trigger and n % 4 == 0 else [])
                data = b"".join(
                    wire.encode({"op": "call", "id": n * 8 + i, **p.api()})
                    for i, p in enumerate(batch)
                )
                try:
                    async with asyncio.timeout(1.0):  # (verld stopped reading it: done)
                        await asyncio.get_running_loop().sock_sendall(sock, data)
                    nb.stats.sent += len(batch)
                except (TimeoutError, OSError):
                    nb.stats.closed_by_verld += 1
                    break
                await asyncio.sleep(0.01)
        finally:
            sock.close()


async def api_churn(nb: Neighbour) -> None:
    while True:
        n = nb.next()
        conn = await nb.api()
        try:
            if n % 2:
                nb.stats.sent += 1
                nb.count(await conn.request("hello", client="churn"))
            if n % 3 == 0:
                nb.stats.sent += 1
                conn.request("call", **nb.dialect.own(n).api())
        finally:
            await conn.close()
        await asyncio.sleep(0.002)


async def api_abrupt(nb: Neighbour) -> None:
    while True:
        conn = await nb.api()
        for i in range(8):
            n = nb.next()
            nb.stats.sent += 1
            payload = nb.dialect.slow(n) if i % 2 else nb.dialect.own(n)
            conn.request("call", **payload.api())
        await asyncio.sleep(random.uniform(0, 0.01))
        await conn.close()  # (its calls in flight: their replies have nowhere to go)
        await asyncio.sleep(0.005)


async def api_late_answer(nb: Neighbour) -> None:
    conn = await nb.api()

    async def one() -> None:
        while True:
            await nb.call(conn, nb.dialect.late(nb.next()), timeout=LATE_TIMEOUT)

    try:
        await asyncio.gather(one(), one())
    finally:
        await conn.close()


async def api_no_reply(nb: Neighbour) -> None:
    tap = await nb.tap()
    conn = await nb.api()

    async def one() -> None:
        while True:
            n = nb.next()
            payload, fields = nb.dialect.set_command(n)
            nb.stats.sent += 1
            try:
                nb.acked(n, await conn.request("call", **payload.api(), **fields))
            except ConnectionError:
                nb.stats.answers["connection closed"] += 1
                return

    try:
        await asyncio.gather(one(), one())
    finally:
        nb.writes(tap)
        await conn.close()
        await tap.close()


# port neighbours


@contextlib.asynccontextmanager
async def _port(nb: Neighbour, *, read: bool = True) -> Any:
    """The neighbour's port, open (and read and counted, with `read`)."""
    pty = Pty(nb.info.nb_port)
    nb.stats.connections += 1
    got = asyncio.Event()
    reader = asyncio.create_task(nb.drain_port(pty, Answers(nb.codec), got)) if read else None
    try:
        yield pty, got
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        pty.close()


async def port_terminators(nb: Neighbour) -> None:
    async with _port(nb) as (pty, _got):
        while True:
            n = nb.next()
            for payload in nb.dialect.two_in_one(n):
                nb.stats.sent += 1
                await pty.write(nb.port_request(payload))
            if nb.dialect.family == "line":  # two lines in one write: two calls
                nb.stats.sent += 1
                await pty.write(f"ECHO N{n}a\nECHO N{n}b\n".encode())
            await asyncio.sleep(0.02)


async def port_silent(nb: Neighbour) -> None:
    async with _port(nb) as (pty, _got):
        while True:
            nb.stats.sent += 1
            await pty.write(nb.port_request(nb.dialect.silent(nb.next())))
            await asyncio.sleep(TIMEOUT / 2)


def _broken_frame(nb: Neighbour) -> bytes:
    """A request framed for the codec with a flaw the framing must catch."""
    own = nb.port_request(nb.dialect.own(nb.next()))
    codec = nb.codec
    if codec == "verl":
        return own[:-3] + bytes((own[-3] ^ 0x55 or 1,)) + own[-2:]  # bad CRC
    if codec == "modbus-rtu":
        return own[:-1] + bytes((own[-1] ^ 0xFF,))
    if codec == "modbus-tcp":
        return own[:2] + b"\x00\x07" + own[4:]  # protocol id 7
    if codec == "length":
        return b"\x7f\xff\xff\xff" + own
    form = FORMS.get(codec)
    if form is not None:  # its first payload byte changed: a bad check
        at = len(form.start) + form.header
        return own[:at] + bytes((own[at] ^ 0x55,)) + own[at + 1 :]
    return bytes(random.randrange(0x80, 0x100) for _ in range(40)) + b"\n"


async def port_malformed(nb: Neighbour) -> None:
    async with _port(nb) as (pty, _got):
        while True:
            for _ in range(3):
                nb.stats.sent += 1
                await pty.write(os.urandom(64))
                await pty.write(_broken_frame(nb))
                await asyncio.sleep(0.01)
            await asyncio.sleep(GUARD * 1.5)  # quiet: the port takes requests again
            nb.stats.sent += 1
            await pty.write(nb.port_request(nb.dialect.own(nb.next())))
            await asyncio.sleep(0.05)


def _overlong(nb: Neighbour) -> bytes:
    codec = nb.codec
    if codec == "line":
        return b"x" * (MAX_PAYLOAD * 2)
    if codec == "length":
        return (MAX_PAYLOAD + 1).to_bytes(4, "big") + b"x" * (MAX_PAYLOAD + 1)
    if codec == "verl":
        return encode_frame(0x11, 9, b"\x01" + b"x" * (MAX_PAYLOAD + 10))
    if codec == "modbus-tcp":
        return struct.pack(">HHH", 1, 0, 300) + bytes(300)
    form = FORMS.get(codec)
    if form is not None:  # a frame announcing 200 bytes that never come: the guard drops it
        return form.encode(nb.dialect.head + b"\x01" + b"x" * 199, 9)[:-20]
    return bytes((NB_UNIT, 0x10)) + os.urandom(300)


async def port_oversize(nb: Neighbour) -> None:
    async with _port(nb) as (pty, _got):
        while True:
            nb.stats.sent += 1
            await pty.write(_overlong(nb))
            await asyncio.sleep(GUARD * 1.5)
            nb.stats.sent += 1
            await pty.write(nb.port_request(nb.dialect.own(nb.next())))
            await asyncio.sleep(0.05)


async def port_flood(nb: Neighbour) -> None:
    async with _port(nb) as (pty, got):
        while True:
            batch = [nb.port_request(nb.dialect.own(nb.next())) for _ in range(CLIENT_QUEUE + 2)]
            nb.stats.sent += len(batch)
            await pty.write(b"".join(batch))
            got.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await got.wait()
            await asyncio.sleep(0.01)


async def port_slow_reader(nb: Neighbour) -> None:
    trigger = nb.dialect.events()
    async with _port(nb, read=False) as (pty, _got):
        while True:
            n = nb.next()
            batch = [nb.dialect.own(n)] * 2 + ([trigger] if trigger and n % 4 == 0 else [])
            nb.stats.sent += len(batch)
            await pty.write(b"".join(nb.port_request(p) for p in batch))
            await asyncio.sleep(0.01)


async def port_churn(nb: Neighbour) -> None:
    while True:
        n = nb.next()
        pty = Pty(nb.info.nb_port)
        nb.stats.connections += 1
        try:
            if n % 2:
                nb.stats.sent += 1
                await pty.write(nb.port_request(nb.dialect.own(n)))
            await asyncio.sleep(random.uniform(0, 0.02))
        finally:
            pty.close()
        await asyncio.sleep(random.uniform(0.005, 0.03))


async def port_abrupt(nb: Neighbour) -> None:
    while True:
        pty = Pty(nb.info.nb_port)
        nb.stats.connections += 1
        try:
            for i in range(8):
                n = nb.next()
                nb.stats.sent += 1
                await pty.write(nb.port_request(nb.dialect.slow(n) if i % 2 else nb.dialect.own(n)))
            await asyncio.sleep(random.uniform(0.05, 0.15))  # (verld sees the open, then not)
        finally:
            pty.close()
        await asyncio.sleep(0.02)


async def port_late_answer(nb: Neighbour) -> None:
    """Requests answered after device.timeout (a program has no timeout of its own)."""
    async with _port(nb) as (pty, _got):
        while True:
            nb.stats.sent += 1
            await pty.write(nb.port_request(nb.dialect.late(nb.next(), port=True)))
            await asyncio.sleep(TIMEOUT)


async def port_no_reply(nb: Neighbour) -> None:
    """Set commands (`line`: `device.line.no_reply` matches them): written once, nothing
    comes back on the port."""
    tap = await nb.tap()
    try:
        async with _port(nb) as (pty, _got):
            while True:
                nb.stats.sent += 1
                await pty.write(nb.port_request(nb.dialect.set_command(nb.next())[0]))
                await asyncio.sleep(GUARD * 1.5)
    finally:
        nb.writes(tap)
        await tap.close()


# Modbus TCP front neighbours


async def _mbap_reader(nb: Neighbour, reader: asyncio.StreamReader, got: asyncio.Event) -> None:
    answers = Answers("modbus-tcp")
    with contextlib.suppress(OSError):
        while chunk := await reader.read(1 << 16):
            found = answers.feed(chunk)
            for answer in found:
                nb.stats.answers["ok" if not answer.status else f"exception {answer.status}"] += 1
            if found:
                got.set()
    nb.stats.closed_by_verld += 1


@contextlib.asynccontextmanager
async def _master(nb: Neighbour) -> Any:
    reader, writer = await nb.modbus()
    got = asyncio.Event()
    task = asyncio.create_task(_mbap_reader(nb, reader, got))
    try:
        yield writer, got
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await _close_writer(writer)


async def _pipeline(nb: Neighbour, make: Callable[[int], Payload], depth: int) -> None:
    async with _master(nb) as (writer, got):
        while True:
            frames = [mbap_frame(nb.next() & 0xFFFF, make(nb.n).data) for _ in range(depth)]
            nb.stats.sent += depth
            writer.write(b"".join(frames))
            got.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2 * TIMEOUT + 0.5):
                    await got.wait()
            if writer.is_closing():
                return


async def modbus_terminators(nb: Neighbour) -> None:
    async with _master(nb) as (writer, got):
        while True:
            twos = [p.data for p in nb.dialect.two_in_one(nb.next())]
            own = [nb.dialect.own(nb.next()).data for _ in range(2)]
            nb.stats.sent += len(twos) + 2  # (and two requests in one write)
            writer.write(b"".join(mbap_frame(nb.next() & 0xFFFF, d) for d in [*twos, *own]))
            got.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2 * TIMEOUT + 0.5):
                    await got.wait()
            await asyncio.sleep(0.01)


async def modbus_silent(nb: Neighbour) -> None:
    while True:
        await _pipeline(nb, nb.dialect.silent, 4)


async def modbus_malformed(nb: Neighbour) -> None:
    bad = [
        struct.pack(">HHHB", 1, 7, 6, NB_UNIT) + b"\x03\x00\x00\x00\x01",  # protocol id 7
        struct.pack(">HHHB", 2, 0, 1, NB_UNIT),  # length 1
        struct.pack(">HHH", 3, 0, 0),  # length 0
        os.urandom(32),
    ]
    while True:
        for junk in bad:
            reader, writer = await nb.modbus()
            try:
                nb.stats.sent += 1
                writer.write(junk)
                with contextlib.suppress(TimeoutError, OSError):
                    async with asyncio.timeout(1.0):
                        if not await reader.read(1 << 16):
                            nb.stats.closed_by_verld += 1
            finally:
                await _close_writer(writer)
            await asyncio.sleep(0.005)


async def modbus_oversize(nb: Neighbour) -> None:
    while True:
        async with _master(nb) as (writer, got):
            too_many = _read(NB_UNIT, 0, 200)  # quantity above 125: exception 03
            big = bytes((NB_UNIT, 0x10)) + struct.pack(">HHB", 0, 123, 246) + bytes(246)
            nb.stats.sent += 3
            writer.write(mbap_frame(1, too_many) + mbap_frame(2, big))
            got.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2 * TIMEOUT + 0.5):
                    await got.wait()
            writer.write(struct.pack(">HHH", 3, 0, 300) + bytes(300))  # length 300: closed
            await asyncio.sleep(0.05)


async def modbus_flood(nb: Neighbour) -> None:
    while True:
        await _pipeline(nb, nb.dialect.own, CLIENT_QUEUE + 2)


async def modbus_slow_reader(nb: Neighbour) -> None:
    while True:
        _reader, writer = await nb.modbus()
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            started = time.monotonic()
            while time.monotonic() - started < 5.0 and not writer.is_closing():
                nb.stats.sent += 4
                writer.write(
                    b"".join(
                        mbap_frame(nb.next() & 0xFFFF, nb.dialect.own(nb.n).data) for _ in range(4)
                    )
                )
                await asyncio.sleep(0.01)
        finally:
            await _close_writer(writer, abrupt=True)


async def modbus_churn(nb: Neighbour) -> None:
    while True:
        _reader, writer = await nb.modbus()
        n = nb.next()
        if n % 2:
            nb.stats.sent += 1
            writer.write(mbap_frame(n & 0xFFFF, nb.dialect.own(n).data))
        await asyncio.sleep(random.uniform(0, 0.005))
        await _close_writer(writer)
        await asyncio.sleep(0.002)


async def modbus_abrupt(nb: Neighbour) -> None:
    while True:
        _reader, writer = await nb.modbus()
        nb.stats.sent += 8
        writer.write(
            b"".join(mbap_frame(nb.next() & 0xFFFF, nb.dialect.own(nb.n).data) for _ in range(8))
        )
        await asyncio.sleep(random.uniform(0, 0.01))
        await _close_writer(writer, abrupt=True)
        await asyncio.sleep(0.005)


# MQTT neighbours (MQTT 3.1.1: their replies come on call/response)


async def _mqtt_loop(
    nb: Neighbour, make: Callable[[int], list[dict[str, Any] | bytes]], pause: float = 0.0
) -> None:
    client = await nb.mqtt()
    try:
        while True:
            futs = [nb.publish(client, item) for item in make(nb.next())]
            await client.drain()
            await nb.answered([f for f in futs if f is not None])
            await asyncio.sleep(pause)
    finally:
        await client.close()


async def mqtt_terminators(nb: Neighbour) -> None:
    await _mqtt_loop(nb, lambda n: [p.mqtt() for p in nb.dialect.two_in_one(n)], 0.01)


async def mqtt_silent(nb: Neighbour) -> None:
    await _mqtt_loop(nb, lambda n: [nb.dialect.silent(n + i).mqtt() for i in range(4)])


def _bad_mqtt(n: int) -> list[dict[str, Any] | bytes]:
    return [
        b"{not json",
        b"[1, 2]",
        b"",
        b"\xff\xfe",
        {"data": "@@@@"},
        {"data": "AQ"},
        {"hex": "zz"},
        {"hex": "abc"},
        {"data": "AQ==", "text": "x"},
        {"tex": "x"},
        {"text": 5},
        {"text": "x", "timeout": -1},
        {"text": "x", "retry": "x"},
        b'{"text": "x", "transaction": ' + b"[" * 40 + b"]" * 40 + b"}",
    ]


async def mqtt_malformed(nb: Neighbour) -> None:
    await _mqtt_loop(nb, _bad_mqtt, 0.01)


async def mqtt_oversize(nb: Neighbour) -> None:
    def make(n: int) -> list[dict[str, Any] | bytes]:
        return [nb.dialect.oversize().mqtt(), {"hex": "01" * 100_000}]

    await _mqtt_loop(nb, make, 0.02)


async def mqtt_flood(nb: Neighbour) -> None:
    await _mqtt_loop(
        nb, lambda n: [nb.dialect.own(n * 100 + i).mqtt() for i in range(CLIENT_QUEUE + 2)]
    )


async def mqtt_slow_reader(nb: Neighbour) -> None:
    """Subscribes to everything of the bridge's, publishes calls, and never reads."""
    trigger = nb.dialect.events()
    while True:
        client = await nb.mqtt(read=False, subscribe=(f"{nb.info.base}/#",))
        sock = client.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            started = time.monotonic()
            while time.monotonic() - started < 5.0 and not client.writer.is_closing():
                n = nb.next()
                nb.publish(client, nb.dialect.own(n).mqtt())
                if trigger is not None and n % 4 == 0:
                    nb.publish(client, trigger.mqtt())
                await asyncio.sleep(0.01)
        finally:
            await client.close(abrupt=True)


async def mqtt_churn(nb: Neighbour) -> None:
    while True:
        client = await nb.mqtt(read=False)
        n = nb.next()
        if n % 2:
            nb.publish(client, nb.dialect.own(n).mqtt())
        await client.close()
        await asyncio.sleep(0.005)


async def mqtt_abrupt(nb: Neighbour) -> None:
    """Calls, then gone without a DISCONNECT. (Quick calls only: the bridge cannot know a
    publisher left, so its calls all run, unlike an API client's or a port's.)"""
    while True:
        client = await nb.mqtt(read=False)
        for _ in range(4):
            nb.publish(client, nb.dialect.own(nb.next()).mqtt())
        await client.drain()
        await asyncio.sleep(random.uniform(0, 0.01))
        await client.close(abrupt=True)
        await asyncio.sleep(0.05)


async def mqtt_late_answer(nb: Neighbour) -> None:
    def make(n: int) -> list[dict[str, Any] | bytes]:
        return [{**nb.dialect.late(n + i).mqtt(), "timeout": LATE_TIMEOUT} for i in range(2)]

    await _mqtt_loop(nb, make)


async def mqtt_no_reply(nb: Neighbour) -> None:
    """Set commands with `"reply": false` (the bridge's replies echo it), two at a time."""
    tap = await nb.tap()
    client = await nb.mqtt()
    try:
        while True:
            sent = []
            for _ in range(2):
                n = nb.next()
                payload, _fields = nb.dialect.set_command(n)
                fut = nb.publish(client, {**payload.mqtt(), "reply": False})
                assert fut is not None
                sent.append((n, fut))
            await client.drain()
            done, _ = await asyncio.wait([fut for _, fut in sent], timeout=3.0)
            for n, fut in sent:
                if fut in done:
                    nb.acked(n, fut.result())
                else:
                    nb.stats.answers["no reply"] += 1
    finally:
        nb.writes(tap)
        await client.close()
        await tap.close()


Behaviour = Callable[[Neighbour], Coroutine[Any, Any, None]]
NEIGHBOURS: dict[tuple[str, str], Behaviour] = {
    (front, name): globals()[f"{front}_{name}"] for front in FRONTS for name in behaviours_of(front)
}


class NeighbourThread:
    """A behaviour run in a thread with its own event loop until `stop`."""

    def __init__(self, info: RigInfo, behaviour: Behaviour) -> None:
        self.nb = Neighbour(info)
        self.behaviour = behaviour
        self.error: str | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="neighbour", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise HarnessError("the neighbour's thread did not start")

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        task = asyncio.create_task(self.behaviour(self.nb))
        stop = asyncio.create_task(self._stop.wait())
        await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            exc = task.exception()
            self.error = f"the neighbour stopped early: {exc!r}" if exc else "it returned"
        task.cancel()
        stop.cancel()
        await asyncio.gather(task, stop, return_exceptions=True)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # (its loop already ended)
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)
        if self._thread.is_alive():
            self.error = "the neighbour's thread did not stop"


# --- one case -----------------------------------------------------------------------------


@dataclass
class Result:
    """One case: what the good client saw (and, for the report, the neighbour and verld)."""

    case: str
    seconds: float
    calls: int
    ok: int
    wrong: int
    lost: int
    dropped: int
    late: int
    allowed: dict[str, int]
    errors: dict[str, int]
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    generation: list[int]  #: at the start and at the end
    link_events: list[str]
    neighbour: dict[str, Any]
    daemon: dict[str, int]  #: counters during the case
    examples: list[str]
    problem: str | None = None  #: the case could not be run as meant (the rig, the neighbour)
    duplicated: int = 0  #: no_reply: the neighbour's commands written more than once

    @property
    def clean(self) -> bool:
        return (
            self.problem is None
            and self.wrong == 0
            and self.lost == 0
            and self.dropped == 0
            and self.duplicated == 0
            and self.calls > 0
        )

    def describe(self) -> str:
        lines = [
            f"{self.case}: {self.calls} calls, {self.ok} ok, wrong {self.wrong}, lost {self.lost}, "
            f"dropped {self.dropped}, late {self.late}, allowed {self.allowed}, errors "
            f"{self.errors}, p99 {self.p99_ms} ms, generation {self.generation}"
            + (f", DUPLICATED {self.duplicated}" if self.duplicated else ""),
            f"  link events: {self.link_events}",
            f"  neighbour: {self.neighbour}",
            f"  verld: {self.daemon}",
        ]
        if self.problem:
            lines.insert(1, f"  PROBLEM: {self.problem}")
        lines += [f"  - {e}" for e in self.examples]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "clean": self.clean}


def percentile(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))], 3)


COUNTERS = ("timeouts", "stale", "bad_frames", "reconnects", "pings", "calls_failed")
#: status.link's counters: late lines dropped after a try ran out, lines dropped after a
#: call with no reply (reported as `late_lines` and `unexpected`)
LINK_COUNTERS = {"late": "late_lines", "unexpected": "unexpected"}


async def _status(path: str) -> dict[str, Any]:
    conn = await ApiConn.open(path)
    try:
        async with asyncio.timeout(5):
            return await conn.request("status")
    finally:
        await conn.close()


async def settle(info: RigInfo, *, quiet: float) -> None:
    """Wait until the link is up, nothing is queued and the device answers a call (a
    device confused by the last case may be deaf for a while), then `quiet` seconds."""
    deadline = time.monotonic() + 60
    probe = GoodCalls(info.variant, "settle").next()
    seen: Any = None
    while time.monotonic() < deadline:
        conn = await ApiConn.open(info.socket)
        try:
            async with asyncio.timeout(5):
                st = await conn.request("status")
                seen = (st["link"], st["queue"])
                if st["link"]["state"] == "up" and st["queue"] == 0:
                    seen = await conn.request("call", **probe.payload.api())
                    if seen.get("ok"):
                        await asyncio.sleep(quiet)
                        return
        except TimeoutError:
            pass
        finally:
            await conn.close()
        await asyncio.sleep(0.05)
    raise HarnessError(f"the rig did not settle within 60 s: last seen {seen}")


async def run_case(
    rig: Rig, case: Case, seconds: float, *, quiet: float = TIMEOUT + GUARD
) -> Result:
    """Run one case on `rig` (of its variant) for `seconds`: the good client's verdict.

    It starts once the link is up, nothing is queued and `quiet` seconds have passed
    (by default a call the previous case left on the link has run out by then).
    """
    rig.check_alive()
    info = rig.info()
    if case.front == "mqtt" and info.broker_port is None:
        raise HarnessError("an MQTT case needs the rig's verld-mqtt: call rig.mqtt(broker)")
    await settle(info, quiet=quiet)
    monitor = await ApiConn.open(info.socket)
    problem: str | None = None
    try:
        await monitor.request("subscribe", topics=["link"])
        before = await monitor.request("status")
        good = GOOD[case.front](info, case)
        await good.open()
        neighbour = NeighbourThread(info, NEIGHBOURS[case.front, case.behaviour])
        try:
            neighbour.start()
            stop = asyncio.Event()
            runner = asyncio.create_task(good.run(stop))
            try:
                await asyncio.wait_for(asyncio.shield(runner), seconds)
            except TimeoutError:
                pass
            stop.set()
            try:
                await asyncio.wait_for(runner, CALL_DEADLINE + 5)
            except TimeoutError:
                problem = "the good client did not finish its last call"
        finally:
            await asyncio.to_thread(neighbour.stop)
            await good.close()
        problem = problem or neighbour.error or neighbour.nb.stats.problem
        await asyncio.sleep(0.1)  # (a link event on its way)
        after = await monitor.request("status")
    finally:
        await monitor.close()
    rig.check_alive()
    tally = good.tally
    link = [
        f"{e.get('state')} g{e.get('generation')} ({e.get('reason')})"
        for e in monitor.events
        if e.get("event") == "link"
    ]
    downs = sum(1 for e in monitor.events if e.get("event") == "link" and e.get("state") == "down")
    gens = [before["link"]["generation"], after["link"]["generation"]]
    stray = sorted(tally.generations - {gens[0]})
    if stray:
        tally.note(f"replies carried generation(s) {stray}, the case began at {gens[0]}")
    nbs = neighbour.nb.stats
    daemon = {k: after["counters"][k] - before["counters"][k] for k in COUNTERS}
    for key, name in LINK_COUNTERS.items():
        daemon[name] = after["link"].get(key, 0) - before["link"].get(key, 0)
    nb_report = {
        "sent": nbs.sent,
        "answers": dict(nbs.answers),
        "connections": nbs.connections,
        "closed_by_verld": nbs.closed_by_verld,
    }
    if case.behaviour == "no_reply":
        nb_report.update(written=nbs.written, duplicated=nbs.duplicated, unwritten=nbs.unwritten)
    return Result(
        case=case.id,
        seconds=seconds,
        calls=tally.calls,
        ok=tally.ok,
        wrong=tally.wrong,
        lost=tally.lost,
        dropped=max(downs, gens[1] - gens[0]),
        late=tally.late,
        allowed=dict(tally.allowed),
        errors=dict(tally.errors),
        p50_ms=percentile(tally.latencies, 50),
        p99_ms=percentile(tally.latencies, 99),
        max_ms=round(max(tally.latencies), 3) if tally.latencies else None,
        generation=gens,
        link_events=link,
        neighbour=nb_report,
        daemon=daemon,
        examples=tally.examples,
        problem=problem,
        duplicated=nbs.duplicated,
    )


def run_case_sync(
    rig: Rig, case: Case, seconds: float, *, quiet: float = TIMEOUT + GUARD
) -> Result:
    """`run_case` from synchronous code (a test, the soak's loop)."""
    return asyncio.run(run_case(rig, case, seconds, quiet=quiet))


class QuickBroker(Broker):
    """mosquitto as tests/mqttrig.py runs it, with `set_tcp_nodelay true` (as tools/bench-fleet
    runs it): with Nagle on, each MQTT call waits for delayed ACKs, about 40 ms a call that
    would hide what verld and verld-mqtt take."""

    def start(self) -> None:
        text = self.conf.read_text()
        if "set_tcp_nodelay" not in text:
            self.conf.write_text(text + "set_tcp_nodelay true\n")
        super().start()


class RigPool:
    """Rigs made on demand, one variant at a time (the previous one is stopped when
    another is asked for), and one broker for all, made when a case needs MQTT.

    `need_broker` makes the broker (tests/mqttrig.py: a skip, or under CI=true a failure,
    when mosquitto is missing).
    """

    def __init__(self, tmp: Path, make_broker: Callable[[Path], Broker] = QuickBroker) -> None:
        self.tmp = tmp
        self.make_broker = make_broker
        self.broker: Broker | None = None
        self.rig: Rig | None = None
        self._serial = 0

    def get(self, variant: str, *, mqtt: bool = False) -> Rig:
        if self.rig is not None and self.rig.variant.name != variant:
            self.rig.stop()
            self.rig = None
        if self.rig is None:
            self._serial += 1
            d = self.tmp / f"r{self._serial}"
            d.mkdir()
            self.rig = Rig(d, variant)
        if mqtt:
            self.rig.mqtt(self.need_broker())
        return self.rig

    def need_broker(self) -> Broker:
        """The broker, started on first use."""
        if self.broker is None:
            d = self.tmp / "broker"
            d.mkdir(exist_ok=True)
            self.broker = self.make_broker(d)
        return self.broker

    def run(self, case: Case, seconds: float) -> Result:
        fresh = self.rig is None or self.rig.variant.name != case.variant
        rig = self.get(case.variant, mqtt=case.front == "mqtt")
        return run_case_sync(rig, case, seconds, quiet=0.05 if fresh else TIMEOUT + GUARD)

    def stop(self) -> None:
        if self.rig is not None:
            self.rig.stop()
            self.rig = None
        if self.broker is not None:
            self.broker.stop()
            self.broker = None


def cases_by_variant(cases: list[Case]) -> Iterator[tuple[str, list[Case]]]:
    """`cases` grouped by variant, in first-seen order."""
    order: dict[str, list[Case]] = {}
    for case in cases:
        order.setdefault(case.variant, []).append(case)
    yield from order.items()


def _expect(v: Variant) -> dict[str, str]:
    """`heartbeat.expect` of a line variant with a ping: only `PONG` answers `PING`."""
    return {"expect": "^PONG$"} if v.codec == "line" and v.ping else {}
