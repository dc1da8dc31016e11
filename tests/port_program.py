"""A program on a virtual serial port, as a user would write it with pyserial.

`python tests/port_program.py LINK CODEC COUNT TAG [--window W] [--partial]`
opens LINK with pyserial, makes COUNT echo requests in the device's own framing
(line `ECHO TAG-i`, length/verl the sim's echo command 0x01 + `TAG-i`), and checks
that every answer is its own: line and length in order, verl by the seq it chose
(seqs 1..W again and again, so two programs use the same seqs). `--partial`
writes each request in three pieces with a pause between them. It prints one
JSON line: {"sent", "ok", "wrong", "missing", "events"} and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque

import serial

from verld.codec.length import LengthDecoder
from verld.codec.length import encode as length_encode
from verld.codec.verl import FrameDecoder, encode_frame

REQUEST, REPLY, EVENT = 0x11, 0x12, 0x13


def _write(port: serial.Serial, data: bytes, partial: bool) -> None:
    if not partial or len(data) < 3:
        port.write(data)
        return
    third = len(data) // 3
    for piece in (data[:third], data[third : 2 * third], data[2 * third :]):
        port.write(piece)
        port.flush()
        time.sleep(0.001)


class Program:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.port = serial.Serial(args.link, 115200, timeout=0.05)
        self.ok = 0
        self.wrong: list[str] = []
        self.events = 0
        self.buf = b""

    def request(self, i: int) -> tuple[bytes, object]:
        """(bytes to write, what identifies the answer) for request i."""
        text = f"{self.args.tag}-{i}"
        codec = self.args.codec
        if codec == "line":
            return f"ECHO {text}\n".encode(), text.encode()
        payload = b"\x01" + text.encode()
        if codec == "length":
            return length_encode(payload), b"\x00" + text.encode()
        seq = 1 + i % self.args.window
        return encode_frame(REQUEST, seq, payload), (seq, b"\x00" + text.encode())

    def answers(self, decoders: dict[str, object]) -> list[object]:
        """Answers read so far (one read with the port's short timeout)."""
        data = self.port.read(self.port.in_waiting or 1)  # (not 64 KiB: that waits the timeout)
        codec = self.args.codec
        if codec == "line":
            self.buf += data
            *lines, self.buf = self.buf.split(b"\n")
            out: list[object] = []
            for line in lines:
                if line.startswith(b"EVENT"):
                    self.events += 1
                else:
                    out.append(line)
            return out
        if codec == "length":
            decoder = decoders["length"]
            assert isinstance(decoder, LengthDecoder)
            return list(decoder.feed(data))
        frames = decoders["verl"]
        assert isinstance(frames, FrameDecoder)
        result: list[object] = []
        for frame in frames.feed(data):
            if frame.kind == EVENT:
                self.events += 1
            else:
                result.append((frame.seq, frame.payload))
        return result

    def run(self) -> dict[str, object]:
        args = self.args
        decoders: dict[str, object] = {
            "length": LengthDecoder(65536),
            "verl": FrameDecoder(65536, frozenset({REPLY, EVENT})),
        }
        window = args.window if args.codec == "verl" else 1
        expected: deque[object] = deque()
        sent = 0
        deadline = time.monotonic() + args.deadline
        while (sent < args.count or expected) and time.monotonic() < deadline:
            while sent < args.count and len(expected) < window:
                data, want = self.request(sent)
                _write(self.port, data, args.partial)
                expected.append(want)
                sent += 1
            for answer in self.answers(decoders):
                if answer in expected:  # verl: any order; the others: the first
                    if args.codec != "verl" and answer != expected[0]:
                        self.wrong.append(repr(answer))
                    expected.remove(answer)
                    self.ok += 1
                else:
                    self.wrong.append(repr(answer))
        self.port.close()
        return {
            "sent": sent,
            "ok": self.ok,
            "wrong": self.wrong[:10],
            "missing": len(expected),
            "events": self.events,
        }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("link")
    p.add_argument("codec", choices=("line", "length", "verl"))
    p.add_argument("count", type=int)
    p.add_argument("tag")
    p.add_argument("--window", type=int, default=1)
    p.add_argument("--partial", action="store_true")
    p.add_argument("--deadline", type=float, default=30.0)
    result = Program(p.parse_args()).run()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
