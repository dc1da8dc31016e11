"""The daemon side of `frame` (`LinkCodec`): requests out, replies and events in.

Which frame answers which call: `event` is tested first, on every frame (a frame
with one of its values at its offset is an event, whatever else it carries). With
`seq`, every other frame is a reply, by the number in its seq field: the session
numbers requests modulo the field's size (`seq_space`), and a number no call is
waiting for is stale there; with `match` too, a reply whose match bytes are not its
request's is dropped and counted as a bad frame. Without `seq`, one call is on the
link at a time: its reply is the first frame, not an event, with the request's bytes
at every `match` offset; any other frame is an event. A reply's status is 0x00, or,
with `status`, 0xFF when its header byte there is not one of `ok`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from verld.codec.base import Inbound, Kind
from verld.codec.frame.declaration import FrameDeclaration
from verld.codec.frame.frames import FrameFormat, FrameReader

__all__ = ["FrameCodec", "Screen"]

_new = tuple.__new__
_REPLY, _EVENT = Kind.REPLY, Kind.EVENT


class Screen:
    """What the header says about a frame: an event, its match bytes, its status."""

    def __init__(self, frame: FrameDeclaration) -> None:
        event = frame.event
        #: an event's header offset and values, or None: no events
        self.event = None if event is None else (event.offset, frozenset(event.values))
        self.match = frame.match
        #: the bytes at two or more `match` offsets, as a tuple (picked in C: per call)
        self._pick = operator.itemgetter(*frame.match) if len(frame.match) > 1 else None
        status = frame.status
        #: the status byte's header offset and the values meaning 0x00, or None: always 0x00
        self.ok = None if status is None else (status.offset, frozenset(status.ok))

    def is_event(self, data: bytes) -> bool:
        event = self.event
        return event is not None and data[event[0]] in event[1]

    def matched(self, data: bytes) -> bytes:
        """The bytes at the `match` offsets."""
        if self._pick is not None:
            return bytes(self._pick(data))
        return data[self.match[0] : self.match[0] + 1] if self.match else b""

    def status(self, data: bytes) -> int:
        ok = self.ok
        return 0x00 if ok is None or data[ok[0]] in ok[1] else 0xFF


class FrameCodec:
    """`frame`'s daemon side (`LinkCodec`); pipelined with a seq field."""

    def __init__(self, frame: FrameDeclaration, max_payload: int) -> None:
        self.form = FrameFormat(frame, max_payload)
        self._reader = FrameReader(self.form)
        self._screen = Screen(frame)
        #: why a call's data cannot be a frame (shorter than the header, too large for
        #: the length field), or None: the format's own check, one call less per call
        self.refuse: Callable[[bytes], str | None] = self.form.refuse
        #: with a seq field: several calls on the link, up to device.window
        self.pipelined = frame.seq is not None
        #: the numbers the seq field holds: the session's seqs wrap there (0: no seq)
        self.seq_space = self.form.seq_space
        #: frames dropped since creation: the reader's, and replies whose match bytes
        #: were not their request's
        self.bad_frames = 0
        self._mismatched = 0
        self.desync: str | None = None  #: never out of step: the search resumes at once
        #: match bytes of the requests on the link: by seq, or (None) the one without
        self._expected: dict[int | None, bytes] = {}
        self._awaiting = False  #: a call was on the link when bytes last came

    @property
    def partial(self) -> bool:
        """Bytes of an incomplete frame are held (`flush` after a quiet guard)."""
        return self._reader.partial

    def encode_request(self, seq: int, payload: bytes) -> bytes:
        """The frame carrying `payload` (its header and payload), `seq` in its seq field."""
        if self._screen.match:
            key = seq % self.seq_space if self.pipelined else None
            self._expected[key] = self._screen.matched(payload)
        return self.form.encode(payload, seq if self.pipelined else None)

    def feed(self, data: bytes, awaiting_reply: bool) -> list[Inbound]:
        """Replies and events from `data`; without seq, `awaiting_reply` says a call
        is on the link."""
        self._awaiting = awaiting_reply
        found = self._reader.feed(data)
        messages = self._classify(found, awaiting_reply) if found else []
        self.bad_frames = self._reader.bad_frames + self._mismatched
        return messages

    def quiet_feed(self, data: bytes) -> tuple[list[Inbound], int]:
        """Frames in a quiet time (after a timeout or a no-reply call): the events, and
        how many others there were (to drop)."""
        events: list[Inbound] = []
        dropped = 0
        self._awaiting = False
        for frame in self._reader.feed(data):
            if self._screen.is_event(frame):
                events.append(_new(Inbound, (_EVENT, None, None, frame, None)))
            else:
                dropped += 1
        self.bad_frames = self._reader.bad_frames + self._mismatched
        return events, dropped

    def flush(self) -> list[Inbound]:
        """The line has been quiet for `device.guard`: an incomplete frame is dropped,
        and what follows its start is read again (as `feed` would have, then)."""
        found = self._reader.flush()
        messages = self._classify(found, self._awaiting) if found else []
        self.bad_frames = self._reader.bad_frames + self._mismatched
        return messages

    def reset(self) -> None:
        """Forget partial input (after a reconnect or a guard period)."""
        self._reader.reset()

    def _classify(self, frames: list[bytes], awaiting_reply: bool) -> list[Inbound]:
        if self.pipelined:
            return self._numbered(frames)
        screen, messages = self._screen, []
        event, ok = screen.event, screen.ok  # (`is_event` and `status`, inlined)
        for frame in frames:
            if event is not None and frame[event[0]] in event[1]:
                messages.append(_new(Inbound, (_EVENT, None, None, frame, None)))
            elif awaiting_reply and (
                not screen.match or screen.matched(frame) == self._expected.get(None)
            ):
                awaiting_reply = False
                status = 0x00 if ok is None or frame[ok[0]] in ok[1] else 0xFF
                messages.append(_new(Inbound, (_REPLY, None, status, frame, None)))
            else:
                messages.append(_new(Inbound, (_EVENT, None, None, frame, None)))
        return messages

    def _numbered(self, frames: list[bytes]) -> list[Inbound]:
        """With a seq field: each frame an event, or a reply by its number. One loop with
        the screen's tests inlined: this runs for every reply."""
        screen, messages = self._screen, []
        event, ok = screen.event, screen.ok
        seq_field = self.form.seq_field
        assert seq_field is not None
        offset, size, order = seq_field
        expected = self._expected if screen.match else None
        for frame in frames:
            if event is not None and frame[event[0]] in event[1]:
                messages.append(_new(Inbound, (_EVENT, None, None, frame, None)))
                continue
            seq = (
                frame[offset] if size == 1 else int.from_bytes(frame[offset : offset + size], order)
            )
            if expected is not None:
                want = expected.get(seq)
                if want is not None and screen.matched(frame) != want:
                    self._mismatched += 1
                    continue
            status = 0x00 if ok is None or frame[ok[0]] in ok[1] else 0xFF
            messages.append(_new(Inbound, (_REPLY, seq, status, frame, None)))
        return messages
