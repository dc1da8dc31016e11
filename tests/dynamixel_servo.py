"""A Dynamixel Protocol 2.0 servo for tests, on a real pty: the device behind a verld
whose `device.codec` is the `dynamixel` plugin (tests/plugins/verld-dynamixel).

It frames its packets with the ROBOTIS SDK's own code (`Protocol2PacketHandler`'s
CRC and byte stuffing), not the plugin's: the plugin is checked against another
implementation of the protocol on both of its sides.

`Servo(directory)` makes a pty pair, puts the slave in raw mode, points the symlink
`directory/servo` at it (verld opens it with pyserial, as real hardware) and keeps its
own slave fd open (the master never sees a hang-up while nobody has it open); a
thread answers until `stop()`. The servo has ID 1 and a control table of 256 bytes
(model number 1020 at 0, an XM430's; present position 2048 at 132); it answers:

    PING  (0x01)                     model number (u16 LE), firmware version 45
    READ  (0x02) address, length     the bytes (u16 LE each)
    WRITE (0x03) address, data...    nothing; the bytes are written
    anything else                    error byte 0x02 (instruction error)

Packets to other IDs go unanswered; a packet failing its CRC is dropped. `received`
holds every packet as it came over the wire (stuffed), in order.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import tty
from pathlib import Path

from dynamixel_sdk.protocol2_packet_handler import Protocol2PacketHandler

HEADER = b"\xff\xff\xfd\x00"
PING, READ, WRITE, STATUS = 0x01, 0x02, 0x03, 0x55
INSTRUCTION_ERROR = 0x02
MODEL, FIRMWARE, PRESENT_POSITION = 1020, 45, 132
_SDK = Protocol2PacketHandler()


def _crc(data: bytes) -> bytes:
    crc: int = _SDK.updateCRC(0, list(data), len(data))
    return crc.to_bytes(2, "little")


def status_packet(ident: int, error: int, params: bytes) -> bytes:
    """A status packet as the SDK frames its packets: stuffed, then the CRC."""
    plain = [*HEADER, ident, 0, 0, STATUS, error, *params, 0, 0]
    length = len(plain) - 7
    plain[5], plain[6] = length & 0xFF, length >> 8
    stuffed = bytes(_SDK.addStuffing(plain))
    return stuffed[:-2] + _crc(stuffed[:-2])


def split(buf: bytearray) -> list[bytes]:
    """The whole packets at the front of `buf` (taken out of it, CRC checked)."""
    found = []
    while (start := buf.find(HEADER)) >= 0:
        del buf[:start]
        if len(buf) < 7:
            break
        end = 7 + int.from_bytes(buf[5:7], "little")
        if len(buf) < end:
            break
        wire = bytes(buf[:end])
        if _crc(wire[:-2]) == wire[-2:]:
            found.append(wire)
            del buf[:end]
        else:
            del buf[:1]
    return found


class Servo:
    """A Dynamixel servo on a pty: `link` is the path verld opens."""

    def __init__(self, directory: Path, ident: int = 1) -> None:
        self.ident = ident
        self.table = bytearray(256)
        self.table[0:2] = MODEL.to_bytes(2, "little")
        self.table[PRESENT_POSITION : PRESENT_POSITION + 4] = (2048).to_bytes(4, "little")
        self.received: list[bytes] = []
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        tty.setraw(self.master)
        self.link = str(directory / "servo")
        os.symlink(os.ttyname(self.slave), self.link)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="servo", daemon=True)
        self._thread.start()

    def answer(self, wire: bytes) -> bytes:
        """The servo's answer to one packet from the wire (b"": none)."""
        plain = _SDK.removeStuffing(list(wire))
        length = plain[5] | plain[6] << 8
        ident, instruction, params = plain[4], plain[7], bytes(plain[8 : 7 + length - 2])
        if ident != self.ident:
            return b""
        if instruction == PING:
            return status_packet(ident, 0, bytes(self.table[0:2]) + bytes((FIRMWARE,)))
        if instruction == READ and len(params) == 4:
            address, size = (int.from_bytes(params[i : i + 2], "little") for i in (0, 2))
            return status_packet(ident, 0, bytes(self.table[address : address + size]))
        if instruction == WRITE and len(params) >= 2:
            address = int.from_bytes(params[:2], "little")
            self.table[address : address + len(params) - 2] = params[2:]
            return status_packet(ident, 0, b"")
        return status_packet(ident, INSTRUCTION_ERROR, b"")

    def _run(self) -> None:
        buf = bytearray()
        while not self._stopping.is_set():
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if not ready:
                continue
            try:
                buf += os.read(self.master, 4096)
            except OSError:
                continue
            for wire in split(buf):
                self.received.append(wire)
                if out := self.answer(wire):
                    os.write(self.master, out)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.link)
        os.close(self.master)
        os.close(self.slave)
