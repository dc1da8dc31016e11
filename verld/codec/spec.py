"""What every codec module declares: its traits, the factories of both its sides and
the check of the settings it is given.

A codec module ends with one `CodecSpec`; `verld.codec.registry` lists them by name.
The factories and `check` read the config only through the small `Settings`
protocols below (which `verld.config.Config` satisfies): the codecs sit below the
config in the import order (the config takes its codec names from the registry and
runs each codec's `check`), and a test can hand a factory a bare stand-in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from verld.codec.base import CommandFraming, LinkCodec, PortFraming

if TYPE_CHECKING:
    from verld.codec.frame.declaration import FrameDeclaration


class LineSettings(Protocol):
    """`device.line`: what the `line` codec reads."""

    @property
    def terminator(self) -> str: ...
    @property
    def encoding(self) -> str: ...
    @property
    def end(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def event(self) -> str | None: ...
    @property
    def no_reply(self) -> str | None: ...


class DeviceSettings(Protocol):
    """`device`: what every codec reads, and the registry (which codec, its retries)."""

    @property
    def codec(self) -> str: ...
    @property
    def retry(self) -> int | None: ...
    @property
    def window(self) -> int: ...
    @property
    def max_payload(self) -> int: ...
    @property
    def line(self) -> LineSettings: ...
    @property
    def frame(self) -> FrameDeclaration | None: ...


class HeartbeatSettings(Protocol):
    """`heartbeat`: what the pings are made of."""

    @property
    def payload(self) -> str: ...


class Settings(Protocol):
    """The parts of the config a codec's factories read."""

    @property
    def device(self) -> DeviceSettings: ...
    @property
    def heartbeat(self) -> HeartbeatSettings: ...


class Problem(NamedTuple):
    """A setting a codec cannot work with, as the config reports it."""

    paths: tuple[str, ...]  #: the config keys at fault, the first one reported
    message: str


#: the settings a codec's `check` may read: the config runs it once these passed
#: their own checks, so one typo does not cause a second, confusing message
CHECKED = (
    "device.codec",
    "device.window",
    "device.max_payload",
    "device.frame",
    "device.line.terminator",
    "device.line.encoding",
    "heartbeat.payload",
)


def no_problems(cfg: Settings) -> list[Problem]:
    """A codec that can send any settings it may be given."""
    return []


@dataclass(frozen=True, slots=True)
class CodecSpec:
    """One codec: what it is like, and how to make each side of it. A spec names its
    factories and only the traits where it differs from the defaults, which are a
    device answering one call at a time with no request ids (no pipelining, no retry)
    that may send events and whose every request is answered (no `reply: false`)."""

    name: str
    _: KW_ONLY
    #: the daemon side (requests out, replies and events in)
    host: Callable[[Settings], LinkCodec]
    #: the device side (requests in, replies and events out) for a virtual port
    device: Callable[[Settings], PortFraming]
    #: the device's ping, from `heartbeat.payload`: what the handshake, the heartbeat
    #: and the probe after a timeout send (None: the device has none)
    device_ping: Callable[[Settings], bytes | None]
    #: replies carry a seq (or transaction id): several calls may be on the link at
    #: once, up to `device.window` (else one)
    pipelined: bool = False
    #: a program on a virtual port may have several requests outstanding, answered by
    #: its own seqs in any order (verl); else the port serves it one call at a time
    port_window: bool = False
    #: a Modbus bus: units, offline units, broadcast, exception replies
    bus: bool = False
    #: silence ends frames (3.5 character times): modbus-rtu
    rtu: bool = False
    #: the device side may hold the start of a request that no later byte is bound to
    #: complete (a program's false start): a port calls its `flush` once the program has
    #: been quiet for `device.guard`, so the false start is dropped and what the search
    #: finds behind it is heard (`frame`)
    guard_flush: bool = False
    #: replies and events carry text (line)
    text: bool = False
    #: the device may send events
    events: bool = True
    #: `device.retry`'s default: extra tries after a timeout. A retry re-sends the
    #: command, so codecs without request ids default to 0 (the device may act twice)
    retry: int = 0
    #: a call may say `reply: false` (a command the device does not answer): written
    #: once, then the line kept quiet for `device.guard`; codecs whose every request
    #: is answered (verl, Modbus) refuse it
    quiet: bool = False
    #: a device's own side, from `device.max_payload`, where the requests are binary
    #: commands (the simulator runs its command set over it); None where they are not:
    #: lines (`text`) or unit + PDU (`bus`)
    commands: Callable[[int], CommandFraming] | None = None
    #: what in the settings (`CHECKED`) this codec cannot send, e.g. a heartbeat
    #: payload it cannot frame: the config schema reports each problem
    check: Callable[[Settings], list[Problem]] = no_problems
    #: a codec whose traits or factories depend on its settings (`frame`: pipelined
    #: only with a seq field) returns itself as those settings make it; None: it is
    #: the same whatever the settings. `settled` applies it; `registry.spec_of` does.
    settle: Callable[[CodecSpec, Settings], CodecSpec] | None = None
    #: the framing is declared in the config (`device.frame`): `frame`
    declared: bool = False

    def settled(self, cfg: Settings) -> CodecSpec:
        """This codec as `cfg` makes it (its traits and factories for those settings)."""
        return self if self.settle is None else self.settle(self, cfg)
