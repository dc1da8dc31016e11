"""The device side of `frame`: a program's requests in, frames out; and the simulator's.

`FramePortFraming` (a virtual port, a network connection): each good frame a program
writes is a call whose data is the frame's header and payload; with a seq field the
program's own number is its tag, put back into the reply's header in place of
verld's (the length and check written afresh), so a program may have several calls
out and tell the replies apart. Noise is a bad frame and the search resumes at once
(`FrameReader`): the framing never goes out of step. A frame left incomplete is
dropped once the program has been quiet for `device.guard` (`flush`, which the port
calls: the spec's `guard_flush`).

`FrameCommandFraming` (the simulator's `CommandPersonality`): the binary command set
runs on a request's payload (after the header); the reply is a frame with the
request's header (its seq and match bytes kept), the status written at `status`'s
offset when one is declared (`ok`'s first value for status 0x00), and the command's
data as payload; an event is a frame whose header is zeros but for `event`'s first
value at its offset.
"""

from __future__ import annotations

import itertools

from verld.codec.base import Bounded, PortRequest
from verld.codec.frame.declaration import FrameDeclaration
from verld.codec.frame.frames import FrameFormat, FrameReader

__all__ = ["FrameCommandFraming", "FramePortFraming", "event_header"]

_KEPT = 4096  #: request headers the simulator keeps for replies not yet sent


def event_header(frame: FrameDeclaration) -> bytes:
    """The header of a device's event: zeros, `event`'s first value at its offset."""
    header = bytearray(frame.header)
    if frame.event is not None and frame.event.values:
        header[frame.event.offset] = frame.event.values[0]
    return bytes(header)


class FramePortFraming(Bounded):
    """`frame` for a port (`PortFraming`): frames in, frames with the program's seq out."""

    def __init__(self, frame: FrameDeclaration, max_payload: int) -> None:
        super().__init__()
        self.form = FrameFormat(frame, max_payload)
        self._reader = FrameReader(self.form)

    def feed(self, data: bytes) -> list[PortRequest]:
        return self._requests(self._reader.feed(data))

    def flush(self) -> list[PortRequest]:
        """The program has been quiet for `device.guard`: a frame it left incomplete is
        a bad frame, and the frames behind its start are read (`FrameReader.flush`)."""
        return self._requests(self._reader.flush())

    def _requests(self, frames: list[bytes]) -> list[PortRequest]:
        self.bad_frames = self._reader.bad_frames
        seq_of = self.form.seq_of
        return [PortRequest(seq_of(frame), frame) for frame in frames]

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        if status is None or self.form.refuse(data) is not None:
            return b""  # (no answer, or an error without the device's frame)
        return self.form.encode(data, tag)

    def event(self, data: bytes, text: str | None) -> bytes:
        return b"" if self.form.refuse(data) is not None else self.form.encode(data)

    def reset(self) -> None:
        self._reader.reset()
        self.discarding = False


class FrameCommandFraming:
    """`frame` as the simulated device reads and answers it (`CommandFraming`)."""

    oversize = 0  #: none: a frame above max_payload is a bad frame, dropped unread

    def __init__(self, frame: FrameDeclaration, max_payload: int) -> None:
        self.form = FrameFormat(frame, max_payload)
        self._reader = FrameReader(self.form)
        self._frame = frame
        self._tags = itertools.count()
        self._headers: dict[int, bytes] = {}  #: tag → the request's header
        self._event_header = event_header(frame)

    @property
    def bad_frames(self) -> int:
        return self._reader.bad_frames

    def feed(self, data: bytes) -> list[PortRequest]:
        header, headers = self._frame.header, self._headers
        requests = []
        for frame in self._reader.feed(data):
            tag = next(self._tags)
            headers[tag] = frame[:header]
            if len(headers) > _KEPT:  # requests never answered (a hang fault)
                del headers[next(iter(headers))]
            requests.append(PortRequest(tag, frame[header:]))
        return requests

    def reply(self, tag: int | None, status: int, data: bytes) -> bytes:
        header = bytearray(self._headers.pop(tag if tag is not None else -1, self._event_header))
        declared = self._frame.status
        if declared is not None:
            header[declared.offset] = declared.ok[0] if status == 0 and declared.ok else status
        reply = bytes(header) + data
        if self.form.refuse(reply) is not None:
            reply = bytes(header)  # (too large for the length field: the header alone)
        return self.form.encode(reply)

    def event(self, data: bytes) -> bytes:
        return self.form.encode(self._event_header + data)

    def damageable(self, chunk: bytes) -> list[int]:
        # Without stuffing or with COBS, a changed payload byte (never to 0x00) keeps the
        # framing and the check catches it; without a check nothing would, and a SLIP
        # byte may turn into its delimiter: none there.
        form = self.form
        if form.check_size == 0 or (form.stuffing is not None and form.stuffing.delimiter):
            return []
        if form.stuffing is not None:
            return [i for i, byte in enumerate(chunk) if byte]
        first = len(form.start) + form.header
        return list(range(first, len(chunk) - form.check_size - len(form.end)))

    def reset(self) -> None:
        self._reader.reset()
