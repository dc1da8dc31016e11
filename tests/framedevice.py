"""Binary devices for the `frame` codec's tests, each on a real pty, framing with the
libraries a real program would use, never with verld's own code. Run as its own process
(`FrameDevice` below does it for you):

    python tests/framedevice.py KIND --link PATH [--seed N]

It makes a pty pair, puts the slave in raw mode, points the symlink `--link` at it and
keeps its own slave fd open (as tests/instrument.py does), then prints `READY <link>`.
On SIGTERM it removes the link, prints one JSON line of counts and exits 0.

KIND is one of:

- `ubx`: a u-blox receiver built with pyubx2. NAV-PVT every `measRate` (200 ms: 5 Hz),
  its iTOW advancing by the rate, each followed by NMEA text (GGA, RMC, built with
  pynmeagps) as a real receiver mixes them on one port. A MON-VER poll is answered with
  MON-VER; a CFG message with a payload (a set) with ACK-ACK (CFG-RATE's measRate
  changes the rate), a CFG-RATE poll with CFG-RATE then ACK-ACK; anything else with
  ACK-NAK. Answers come 5..30 ms after the request. Counts: `polls`, `sets`, `navs`,
  `bad` (frames pyubx2 refused).
- `stx`: a controller speaking "STX len seq cmd data CRC-16/MODBUS ETX" (docs/config.md's
  second declaration). Each request is answered after a random 0..`--delay` ms, so
  replies overtake each other, with its seq and cmd and the payload echoed. Before each
  reply goes noise: up to 12 random bytes without STX (`--noise any`: any bytes, and
  half the time a false start, STX and a random length reaching past the reply), and,
  every third reply, a frame with a wrong CRC (no STX after its own); `--noise stuck`:
  only STX FF 00 before each reply, a frame that never completes. Every fifth
  request also brings an event (cmd 0x80, a random seq, payload the event's number).
  Counts: `requests`, `corrupt` (the wrong-CRC frames sent), `events`.
- `slip`: a SLIP device (RFC 1055, framed by sliplib, leading END bytes too): a message
  type byte, the payload, CRC-16/XMODEM (binascii.crc_hqx) big-endian. Each request is
  answered with its type and payload; before the answer comes an unsolicited frame of
  type 0x7E whose payload is its number (4 bytes, big-endian) then C0 DB bytes, and
  every fourth time two bad frames too (a bad escape, a wrong CRC). Counts: `requests`,
  `events`, `corrupt` (the bad frames sent), `bad`.
"""

from __future__ import annotations

import argparse
import binascii
import contextlib
import heapq
import itertools
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
import tty
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from instrument import _die_with_parent
from pynmeagps import NMEAMessage  # type: ignore[import-untyped]
from pyubx2 import GET, UBXMessage, UBXReader  # type: ignore[import-untyped]
from sliplib import END, Driver, ProtocolError, config  # type: ignore[import-untyped]

__all__ = ["SCRIPT", "FrameDevice", "crc16_modbus", "split_stx", "stx_frame"]

SCRIPT = Path(__file__).resolve()
STX, ETX, EVENT_CMD = 0x02, 0x03, 0x80
UNSOLICITED = 0x7E  #: the SLIP device's unsolicited frames' type


def crc16_modbus(data: bytes) -> int:
    """CRC-16/MODBUS (poly 0xA001 reflected, init 0xFFFF)."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


# --- the pty and its timed writes ----------------------------------------------------------


class Wire:
    """The master end of the pty; writes due now or later, each written whole."""

    def __init__(self, link: str) -> None:
        self.link = link
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        tmp = f"{link}.{os.getpid()}.tmp"
        os.symlink(os.ttyname(self.slave), tmp)
        os.replace(tmp, link)
        self._due: list[tuple[float, int, bytes]] = []
        self._order = itertools.count()

    def send(self, data: bytes, delay: float = 0.0) -> None:
        heapq.heappush(self._due, (time.monotonic() + delay, next(self._order), data))

    def flush(self) -> float:
        """Write what is due; the seconds until the next write (1 s if none)."""
        now = time.monotonic()
        while self._due and self._due[0][0] <= now:
            data = heapq.heappop(self._due)[2]
            while data:
                data = data[os.write(self.master, data) :]
        return self._due[0][0] - now if self._due else 1.0

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.link)
        os.close(self.master)
        os.close(self.slave)


class Device:
    """One device's behaviour: bytes in, frames out on the wire; `tick` for its own time."""

    def __init__(self, wire: Wire, rng: random.Random, args: argparse.Namespace) -> None:
        self.wire, self.rng, self.args = wire, rng, args
        self.counts: dict[str, int] = {}
        self.buf = b""

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def feed(self, data: bytes) -> None:
        raise NotImplementedError

    def tick(self, now: float) -> float:
        """Periodic output due by `now`; the seconds until the next."""
        return 1.0


# --- u-blox UBX ----------------------------------------------------------------------------


class Ubx(Device):
    """A u-blox receiver: NAV-PVT and NMEA at the nav rate, polls and CFG answered."""

    def __init__(self, wire: Wire, rng: random.Random, args: argparse.Namespace) -> None:
        super().__init__(wire, rng, args)
        self.rate = 0.2  #: CFG-RATE measRate, seconds
        self.itow = 100_000  #: ms of the GPS week
        self.next_nav = time.monotonic() + self.rate

    def tick(self, now: float) -> float:
        while now >= self.next_nav:
            self.itow += round(self.rate * 1000)
            self.next_nav += self.rate
            pvt = UBXMessage(
                "NAV",
                "NAV-PVT",
                GET,
                iTOW=self.itow,
                year=2026,
                month=12,
                day=4,
                fixType=3,
                gnssFixOK=1,
                numSV=12,
                lon=-0.1234567,
                lat=51.5,
                hMSL=90_000,
            )
            gga = NMEAMessage(
                "GN",
                "GGA",
                GET,
                lat=51.5,
                NS="N",
                lon=-0.1234567,
                EW="W",
                quality=1,
                numSV=12,
                HDOP=0.9,
                alt=90.0,
            )
            rmc = NMEAMessage("GN", "RMC", GET, status="A", lat=51.5, NS="N", lon=-0.12, EW="W")
            self.wire.send(pvt.serialize() + gga.serialize() + rmc.serialize())
            self.count("navs")
        return self.next_nav - now

    def feed(self, data: bytes) -> None:
        self.buf += data
        while True:
            at = self.buf.find(b"\xb5\x62")
            if at < 0:
                self.buf = self.buf[-1:]
                return
            self.buf = self.buf[at:]
            if len(self.buf) < 6:
                return
            size = 8 + int.from_bytes(self.buf[4:6], "little")
            if len(self.buf) < size:
                return
            raw, self.buf = self.buf[:size], self.buf[size:]
            try:
                message = UBXReader.parse(raw)
            except Exception:  # pyubx2's parse errors, a bad checksum among them
                self.count("bad")
                self.buf = raw[1:] + self.buf
                continue
            self.answer(raw, message)

    def answer(self, raw: bytes, message: Any) -> None:
        cls, mid, empty = raw[2], raw[3], len(raw) == 8
        out: list[bytes] = []
        if (cls, mid) == (0x0A, 0x04) and empty:
            self.count("polls")
            payload = b"".join(
                text.ljust(size, b"\0")
                for text, size in (
                    (b"EXT CORE 1.00 (frametests)", 30),
                    (b"00190000", 10),
                    (b"PROTVER=27.11", 30),
                    (b"MOD=FAKE-M9", 30),
                )
            )
            out.append(UBXMessage(b"\x0a", b"\x04", GET, payload=payload).serialize())
        elif (cls, mid) == (0x06, 0x08) and empty:
            self.count("polls")
            rate = UBXMessage(
                "CFG", "CFG-RATE", GET, measRate=round(self.rate * 1000), navRate=1, timeRef=1
            )
            out.append(rate.serialize())
            out.append(UBXMessage("ACK", "ACK-ACK", GET, clsID=cls, msgID=mid).serialize())
        elif cls == 0x06 and not empty:
            self.count("sets")
            if mid == 0x08:
                self.rate = message.measRate / 1000
            out.append(UBXMessage("ACK", "ACK-ACK", GET, clsID=cls, msgID=mid).serialize())
        else:
            out.append(UBXMessage("ACK", "ACK-NAK", GET, clsID=cls, msgID=mid).serialize())
        self.wire.send(b"".join(out), self.rng.uniform(0.005, 0.03))


# --- STX len seq cmd data CRC-16/MODBUS ETX, pipelined -------------------------------------


def stx_frame(seq: int, cmd: int, payload: bytes, *, good: bool = True) -> bytes:
    body = bytes((len(payload), seq, cmd)) + payload
    crc = crc16_modbus(body) ^ (0 if good else 0x5A5A)
    return bytes((STX,)) + body + crc.to_bytes(2, "little") + bytes((ETX,))


def split_stx(buf: bytes) -> tuple[list[tuple[int, int, bytes]], bytes, int]:
    """The STX frames in `buf`: ((seq, cmd, payload) each, the bytes left, the bad frames)."""
    frames: list[tuple[int, int, bytes]] = []
    bad = 0
    while True:
        at = buf.find(bytes((STX,)))
        if at < 0:
            return frames, b"", bad
        buf = buf[at:]
        if len(buf) < 4:
            return frames, buf, bad
        size = 1 + 3 + buf[1] + 2 + 1
        if len(buf) < size:
            return frames, buf, bad
        frame, body = buf[:size], buf[1 : size - 3]
        if frame[-1] != ETX or int.from_bytes(frame[-3:-1], "little") != crc16_modbus(body):
            bad += 1
            buf = buf[1:]
            continue
        buf = buf[size:]
        frames.append((body[1], body[2], body[3:]))


class Stx(Device):
    """A controller answering out of order, noise and bad frames between its replies."""

    def noise(self) -> bytes:
        if self.args.noise == "stuck":  # a false start whose length reaches past the reply
            return bytes((STX, 0xFF, 0x00))
        lowest = 0 if self.args.noise == "any" else 3
        size = self.rng.randint(0, 12)
        data = bytes(self.rng.choice(range(lowest, 256)) for _ in range(size))
        if lowest == 0 and self.rng.random() < 0.5:  # a false start, its length past the reply
            data += bytes((STX, self.rng.randrange(256), self.rng.randrange(256)))
        if self.counts.get("requests", 0) % 3 == 0:
            while True:  # (no STX inside it: exactly one bad frame each)
                payload = bytes(self.rng.choice(range(3, 256)) for _ in range(5))
                bad = stx_frame(0x55, 0x01, payload, good=False)
                if STX not in bad[1:]:
                    break
            data += bad
            self.count("corrupt")
        return data

    def feed(self, data: bytes) -> None:
        frames, self.buf, bad = split_stx(self.buf + data)
        if bad:
            self.counts["bad"] = self.counts.get("bad", 0) + bad
        for seq, cmd, payload in frames:
            self.count("requests")
            delay = self.rng.uniform(0, self.args.delay / 1000)
            self.wire.send(self.noise() + stx_frame(seq, cmd, payload), delay)
            if self.counts["requests"] % 5 == 0:
                number = self.counts.get("events", 0).to_bytes(4, "big")
                event = stx_frame(self.rng.randrange(256), EVENT_CMD, number)
                self.wire.send(event, self.rng.uniform(0, self.args.delay / 1000))
                self.count("events")


# --- SLIP with CRC-16/XMODEM ---------------------------------------------------------------


class Slip(Device):
    """A SLIP device: each request answered, an unsolicited frame before each answer."""

    def __init__(self, wire: Wire, rng: random.Random, args: argparse.Namespace) -> None:
        super().__init__(wire, rng, args)
        with config.use_leading_end_byte(True):
            self.driver = Driver()

    def feed(self, data: bytes) -> None:
        self.driver.receive(data)
        while True:
            try:
                message = self.driver.get(block=False)
            except ProtocolError:
                self.count("bad")
                continue
            if message is None:
                return
            body, crc = message[:-2], message[-2:]
            if len(body) < 1 or crc != binascii.crc_hqx(body, 0).to_bytes(2, "big"):
                self.count("bad")
                continue
            self.count("requests")
            number = self.counts.get("events", 0).to_bytes(4, "big")
            self.count("events")
            out = self.frame(bytes((UNSOLICITED,)) + number + b"\xc0\xdb")
            if self.counts["requests"] % 4 == 0:  # a bad escape, then a wrong CRC
                out += b"\x01bad\xdb\x41escape" + END
                out += END + b"\x01bad crc\x00\x00" + END  # (its CRC is D9 C3)
                self.counts["corrupt"] = self.counts.get("corrupt", 0) + 2
            out += self.frame(body)
            self.wire.send(out, self.rng.uniform(0, 0.01))

    def frame(self, body: bytes) -> bytes:
        frame: bytes = self.driver.send(body + binascii.crc_hqx(body, 0).to_bytes(2, "big"))
        return frame


KINDS: dict[str, type[Device]] = {"ubx": Ubx, "stx": Stx, "slip": Slip}


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM; print the counts; the exit code."""
    p = argparse.ArgumentParser(prog="framedevice", description="A binary device on a pty.")
    p.add_argument("kind", choices=sorted(KINDS))
    p.add_argument("--link", required=True, metavar="PATH", help="symlink to the pty's slave")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--delay", type=float, default=50.0, help="stx: the most ms to answer in")
    p.add_argument(
        "--noise",
        choices=("clean", "any", "stuck"),
        default="clean",
        help="stx: noise without STX, any, or a false start before each reply",
    )
    args = p.parse_args(argv)
    stop = False

    def stopping(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, stopping)
    wire = Wire(args.link)
    device = KINDS[args.kind](wire, random.Random(args.seed), args)
    print(f"READY {args.link}", flush=True)
    try:
        while not stop:
            wait = min(wire.flush(), device.tick(time.monotonic()))
            try:
                readable = select.select([wire.master], [], [], max(0.0, wait))[0]
            except InterruptedError:
                continue
            if readable:
                device.feed(os.read(wire.master, 4096))
    finally:
        wire.close()
    print(json.dumps(device.counts), flush=True)
    return 0


# --- the helper tests use ------------------------------------------------------------------


class FrameDevice:
    """tests/framedevice.py as a subprocess, its pty link in `directory`:

    with FrameDevice(tmp_path, "ubx") as device:
        ...  # point verld at device.link
    device.counts  # {"polls": ..., "navs": ...}, once stopped
    """

    def __init__(self, directory: Path, kind: str, *args: str, timeout: float = 10.0) -> None:
        self.link = str(directory / f"{kind}.tty")
        self.timeout = timeout
        self.counts: dict[str, int] = {}
        self.log_path = directory / f"{kind}.log"
        argv = [sys.executable, str(SCRIPT), kind, "--link", self.link, *args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=log,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl; no leak if we die
            )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().decode() if ready else ""
        if line.strip() != f"READY {self.link}":
            self.stop()
            raise AssertionError(f"framedevice {kind}: {line!r}; {self.log_path.read_text()}")

    def stop(self) -> dict[str, int]:
        """Stop it by pid (SIGKILL after `timeout`); its counts."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                out, _ = self.proc.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, _ = self.proc.communicate()
            lines = out.decode().splitlines()
            self.counts = json.loads(lines[-1]) if lines else {}
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.counts

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
