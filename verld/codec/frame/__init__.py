"""The `frame` codec: any binary framing that a config declares (`device.frame`).

Most binary devices frame their messages the same few ways: a start marker, a header
holding a length, the payload, a check, perhaps an end marker, or byte stuffing in
place of markers (u-blox UBX, Dynamixel 1.0, "STX len cmd data CRC ETX", SLIP). The
declaration (`declaration`) says which; `frames` turns it into an encoder and a
resyncing reader, with the check (`check`: a CRC by its catalogue name, or a sum) and
the stuffing (`stuffing`: SLIP or COBS). `host` is the daemon's side, `device` a
program's on a port and the simulator's. The codec's traits depend on the
declaration: with a seq field it is pipelined (several calls out, replies matched by
number, retry 3, no `reply: false`), without one it runs a call at a time (retry 0,
`reply: false` allowed), so `FRAME` settles them from the settings (`_settle`).
"""

from __future__ import annotations

from dataclasses import replace

from verld.codec.base import CommandFraming
from verld.codec.frame.declaration import FrameDeclaration
from verld.codec.frame.device import FrameCommandFraming, FramePortFraming
from verld.codec.frame.host import FrameCodec
from verld.codec.frame.rules import problems
from verld.codec.spec import CodecSpec, Problem, Settings

__all__ = ["FRAME", "FrameCodec", "FrameCommandFraming", "FrameDeclaration", "FramePortFraming"]


def _declared(cfg: Settings) -> FrameDeclaration:
    frame = cfg.device.frame
    if frame is None:  # (the config refuses codec frame without device.frame)
        raise ValueError("codec frame needs device.frame")
    return frame


def _device_ping(cfg: Settings) -> bytes | None:
    """`heartbeat.payload` as hex: the ping's data (a header and payload); empty: none."""
    payload = cfg.heartbeat.payload
    return bytes.fromhex(payload) if payload else None


def _check(cfg: Settings) -> list[Problem]:
    """A declaration that cannot work, a ping it cannot frame."""
    frame = cfg.device.frame
    if frame is None:
        message = (
            "codec frame reads its framing from device.frame (start, header, length, "
            "check, ...): add it (on the command line: --frame FILE), or choose another codec"
        )
        return [Problem(("device.codec", "device.frame"), message)]
    payload = cfg.heartbeat.payload
    try:
        ping = bytes.fromhex(payload) if payload else None
    except ValueError as exc:
        message = f'codec frame sends the ping as hex bytes (e.g. "b5 62"), got {payload!r}: {exc}'
        return [Problem(("heartbeat.payload", "device.codec"), message)]
    found = problems(frame, window=cfg.device.window, max_payload=cfg.device.max_payload, ping=ping)
    if ping is not None and len(ping) > cfg.device.max_payload:
        message = f"{len(ping)} bytes, more than device.max_payload ({cfg.device.max_payload})"
        found.append(Problem(("heartbeat.payload", "device.max_payload"), message))
    return found


def _settle(spec: CodecSpec, cfg: Settings) -> CodecSpec:
    """`frame` as its declaration makes it: pipelined (with retries, without `reply:
    false`) only with a seq field."""
    frame = cfg.device.frame
    if frame is None:
        return spec
    seq = frame.seq is not None

    def commands(max_payload: int) -> CommandFraming:
        return FrameCommandFraming(frame, max_payload)

    return replace(
        spec,
        pipelined=seq,
        port_window=seq,
        retry=3 if seq else 0,
        quiet=not seq,
        commands=commands,
    )


FRAME = CodecSpec(
    "frame",
    host=lambda cfg: FrameCodec(_declared(cfg), cfg.device.max_payload),
    device=lambda cfg: FramePortFraming(_declared(cfg), cfg.device.max_payload),
    device_ping=_device_ping,
    quiet=True,
    guard_flush=True,
    check=_check,
    settle=_settle,
    declared=True,
)
