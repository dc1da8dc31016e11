"""The COMMAND of `verlctl inhibit` in tests/test_inhibit.py: use the port as a flasher would.

`python inhibit_device.py PORT STATUS`: open PORT raw, take its flock (exclusive,
non-blocking: refused while verld, which opens ports exclusively, still has it),
flush it, send one verl echo request straight to the device and read the reply.
One JSON line on stdout says what happened (`$VERLD_PORT`, the lock, the reply);
the exit status is STATUS when every step went as expected, 1 otherwise.
`talk` is also used in-process by the tests.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import sys
import termios
import time
import tty
from typing import Any

from verld.codec.verl import FrameDecoder, encode_frame

REQUEST, REPLY, EVENT = 0x11, 0x12, 0x13
ECHO = b"\x01"  #: verld-sim's echo command: the reply is 00 + the same bytes
SEQ = 4242  #: a seq of our own, unlike verld's first ones


def talk(port: str, timeout: float = 5.0) -> dict[str, Any]:
    """Lock `port`, echo a tag through the device; what was seen (`ok`: all as expected)."""
    fd = os.open(port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError while verld holds it
        tty.setraw(fd)
        termios.tcflush(fd, termios.TCIOFLUSH)
        tag = f"flasher-{os.getpid()}".encode()
        os.write(fd, encode_frame(REQUEST, SEQ, ECHO + tag))
        decoder = FrameDecoder(4096, frozenset({REPLY, EVENT}))
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                break
            for frame in decoder.feed(os.read(fd, 4096)):
                if frame.kind == REPLY and frame.seq == SEQ:
                    reply = frame.payload
                    return {"locked": True, "reply": reply.hex(), "ok": reply == b"\x00" + tag}
        return {"locked": True, "reply": None, "ok": False}
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    port, status = argv[1], int(argv[2])
    env = os.environ.get("VERLD_PORT")
    try:
        report = talk(port)
    except OSError as exc:
        report = {"locked": False, "error": f"{type(exc).__name__}: {exc}", "ok": False}
    report |= {"port": port, "env": env}
    print(json.dumps(report), flush=True)
    return status if report["ok"] and env == port else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
