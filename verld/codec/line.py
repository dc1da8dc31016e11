"""The `line` link codec: text lines for SCPI, AT, NMEA, G-code, `println` devices.

Strategy: `LineSplitter` cuts the byte stream at a terminator and knows nothing
of text; `LineCodec` decodes each line and sorts it. A line matching `event` is
always an event. While a call is outstanding, the other lines form its reply: the
next line, or, with `end` set, every line up to and including the first one that
matches `end`. Lines with no call outstanding are events. The patterns are tested
with `re.search` (anchor them with `^...$` to match whole lines).

Noise is bounded, not fatal: a line longer than the limit is dropped and
counted, and so is a multi-line reply that outgrows it.

Device side (`LinePortFraming`): each line (terminator stripped; with `\\n`, a
`\\r` before it too) is a call, its text encoded; the reply's lines go back each
with the terminator. An overlong line puts the port out of step (see
`verld.codec.base`, bounds).
"""

from __future__ import annotations

import re

from verld.codec.base import Bounded, Inbound, Kind, PortRequest
from verld.codec.spec import CodecSpec, Problem, Settings

__all__ = ["LINE", "LineCodec", "LinePortFraming", "LineSplitter"]


class LineSplitter:
    """Turns a byte stream into lines, without their terminators.

    With the terminator `\\n`, a `\\r` before it is stripped too (CRLF devices).
    A line longer than `max_length` (terminators stripped) is dropped and counted
    in `bad_frames`, whether it arrives whole or grows past the limit in pieces.
    """

    def __init__(self, terminator: bytes, max_length: int) -> None:
        if not terminator:
            raise ValueError("line: the terminator is empty")
        #: lines dropped as overlong since creation (a monotonic counter)
        self.bad_frames = 0
        self._terminator = terminator
        self._strip_cr = terminator == b"\n"
        self._max_length = max_length
        # An incomplete line may end in part of the terminator (or the `\r` of a
        # CRLF): only past this length is it sure to end up overlong.
        self._max_partial = max_length + len(terminator) - 1 + self._strip_cr
        self._buf = bytearray()  #: bytes after the last terminator
        self._skipping = False  #: the current line is overlong: discard it

    def feed(self, data: bytes) -> list[bytes]:
        """Lines completed by `data`, in order."""
        buf = self._buf
        term = self._terminator
        # the buffer holds no terminator, but one may straddle the old end
        start = max(0, len(buf) - len(term) + 1)
        buf += data
        lines = []
        pos = 0
        while (end := buf.find(term, start)) >= 0:
            if self._skipping:
                self._skipping = False
            else:
                line = bytes(buf[pos:end])
                if self._strip_cr and line.endswith(b"\r"):
                    line = line[:-1]
                if len(line) > self._max_length:
                    self.bad_frames += 1
                else:
                    lines.append(line)
            pos = start = end + len(term)
        del buf[:pos]
        if not self._skipping and len(buf) > self._max_partial:
            self.bad_frames += 1
            self._skipping = True
        if self._skipping:
            del buf[: max(0, len(buf) - len(term) + 1)]  # keep what may start a terminator
        return lines

    def reset(self) -> None:
        """Forget the incomplete line (after a reconnect or a guard period)."""
        self._buf.clear()
        self._skipping = False


class LineCodec:
    """The daemon side of `line` (`LinkCodec`): one call outstanding at a time."""

    pipelined = False
    desync: str | None = None  #: lines resync at the next terminator: never out of step

    def __init__(
        self,
        max_payload: int,
        terminator: str = "\n",
        encoding: str = "utf-8",
        end: str | None = None,
        error: str | None = None,
        event: str | None = None,
        no_reply: str | None = None,
    ) -> None:
        #: overlong lines and replies dropped since creation, refreshed by every `feed`
        self.bad_frames = 0
        self._terminator = terminator.encode(encoding)
        self._newline = "\n".encode(encoding)
        self._strip_cr = self._terminator == b"\n"
        self._encoding = encoding
        self._max_payload = max_payload
        self._splitter = LineSplitter(self._terminator, max_payload)
        self._end = None if end is None else re.compile(end)
        self._error = None if error is None else re.compile(error)
        self._event = None if event is None else re.compile(event)
        if no_reply is not None:
            self._no_reply = re.compile(no_reply)
            self.unanswered = self._unanswered
        self._reply: list[str] = []  #: lines of a multi-line reply so far
        self._reply_raw: list[bytes] = []  #: the same lines as the device sent them
        self._reply_size = 0  #: their bytes, newlines included
        self._overlong_replies = 0
        self._overlong = False  #: the reply outgrew max_payload: discard it up to `end`

    def refuse(self, payload: bytes) -> str | None:
        """Why a request cannot go out as one call (None: it can).

        One line per call: a terminator anywhere but at the end (with `\\n`, a `\\r`
        anywhere but just before it) would make the device answer twice, and the
        second answer would pass for the reply to another client's call.
        """
        term = self._terminator
        body = payload[: -len(term)] if payload.endswith(term) else payload
        if term in body or (self._strip_cr and b"\r" in body[:-1]):
            return "one line per call: the request contains the line terminator"
        return None

    def _unanswered(self, payload: bytes) -> bool:
        """Whether the device gives no answer to this request (it matches `no_reply`;
        e.g. `^[^?]*$` for SCPI: a command without `?`). Only set with `no_reply`."""
        term = self._terminator
        body = payload[: -len(term)] if payload.endswith(term) else payload
        return self._no_reply.search(body.decode(self._encoding, "replace")) is not None

    def encode_request(self, seq: int, payload: bytes) -> bytes:
        """`payload` plus the terminator, unless it already ends with it (no seq here)."""
        if payload.endswith(self._terminator):
            return payload
        return payload + self._terminator

    def feed(self, data: bytes, awaiting_reply: bool) -> list[Inbound]:
        """The reply (if one is awaited and now complete) and events decoded from `data`."""
        return self._feed(data, awaiting_reply, every=False)

    def feed_replies(self, data: bytes) -> list[Inbound]:
        """Every reply in `data` (each line, or each group up to `end`), and events:
        for a link out of step, where each may be a late answer or the ping's."""
        return self._feed(data, True, every=True)

    def _feed(self, data: bytes, awaiting_reply: bool, every: bool) -> list[Inbound]:
        if not awaiting_reply:
            self._drop_reply()  # the call it belonged to is over
        messages = []
        for raw in self._splitter.feed(data):
            text = raw.decode(self._encoding, "replace")
            if not awaiting_reply or (self._event is not None and self._event.search(text)):
                messages.append(Inbound(Kind.EVENT, None, None, raw, text))
                continue
            reply = self._add_to_reply(raw, text)
            if reply is not None:
                messages.append(reply)
                awaiting_reply = every  # one call outstanding: the rest are events
        self.bad_frames = self._splitter.bad_frames + self._overlong_replies
        return messages

    def quiet_feed(self, data: bytes) -> tuple[list[Inbound], int]:
        """Lines in a quiet time (no call's reply awaited, but not every line is an
        event): those matching `event`, and how many others there were (to drop)."""
        self._drop_reply()
        events, dropped = [], 0
        event = self._event
        for raw in self._splitter.feed(data):
            text = raw.decode(self._encoding, "replace")
            if event is not None and event.search(text):
                events.append(Inbound(Kind.EVENT, None, None, raw, text))
            else:
                dropped += 1
        self.bad_frames = self._splitter.bad_frames + self._overlong_replies
        return events, dropped

    def reset(self) -> None:
        """Forget partial input and any partial reply."""
        self._splitter.reset()
        self._drop_reply()

    def _add_to_reply(self, raw: bytes, text: str) -> Inbound | None:
        """Take one line of the awaited reply; the reply once it is complete."""
        done = self._end is None or self._end.search(text) is not None
        if self._overlong:
            self._overlong = not done
            return None
        self._reply.append(text)
        self._reply_raw.append(raw)
        self._reply_size += len(raw) + (len(self._newline) if len(self._reply) > 1 else 0)
        if self._reply_size > self._max_payload:
            self._overlong_replies += 1
            self._drop_reply()
            self._overlong = not done
            return None
        if not done:
            return None
        lines, raw_lines = self._reply, self._reply_raw
        self._drop_reply()
        error = self._error
        failed = error is not None and any(error.search(line) for line in lines)
        reply_text = "\n".join(lines)
        # The device's own bytes (the text, encoded, whenever they decode cleanly), so
        # undecodable bytes reach the client unchanged and data stays within max_payload.
        data = self._newline.join(raw_lines)
        return Inbound(Kind.REPLY, None, 0xFF if failed else 0x00, data, reply_text)

    def _drop_reply(self) -> None:
        self._reply = []
        self._reply_raw = []
        self._reply_size = 0
        self._overlong = False


class LinePortFraming(Bounded):
    """`line` for a port (`PortFraming`): each line the program writes is a call;
    answers go back line by line.

    A program's line ends at CR, LF or CRLF whatever the device's terminator (picocom's
    Enter sends CR alone; a CRLF split over two reads is one end), and at that
    terminator too; empty lines are ignored.
    """

    def __init__(self, max_payload: int, terminator: str = "\n", encoding: str = "utf-8") -> None:
        super().__init__()
        self._terminator = terminator.encode(encoding)
        self._newline = "\n".encode(encoding)  #: what joins a multi-line reply's data
        self._encoding = encoding
        self._max = max_payload
        ends = [b"\r\n", b"\r", b"\n"]
        if self._terminator not in ends:
            ends.insert(0, self._terminator)
        self._ends = re.compile(b"|".join(re.escape(end) for end in ends))
        self._buf = bytearray()  #: the line being received (no end yet)

    def feed(self, data: bytes) -> list[PortRequest]:
        if self.discarding:
            self.ignored += len(data)
            return []
        buf = self._buf
        buf += data
        held = bytes(buf)  # (a regex over the bytearray would pin it: no resize then)
        requests: list[PortRequest] = []
        pos = 0
        for end in self._ends.finditer(held):
            line = held[pos : end.start()]
            if len(line) > self._max:  # an overlong line: out of step until quiet
                self._discard(len(held) - pos)
                buf.clear()
                return requests
            pos = end.end()
            if line:
                requests.append(PortRequest(None, line))
        del buf[:pos]
        if len(buf) > self._max + len(self._terminator):
            self._discard(len(buf))
            buf.clear()
        return requests

    def reply(self, tag: int | None, status: int | None, data: bytes, text: str | None) -> bytes:
        return b"" if status is None else self._lines(data, text)

    def event(self, data: bytes, text: str | None) -> bytes:
        return self._lines(data, text)

    def _lines(self, data: bytes, text: str | None) -> bytes:
        """The text's lines (or, without text, data's), each with the terminator."""
        if text is None:
            lines = data.split(self._newline)
        else:
            lines = [line.encode(self._encoding, "replace") for line in text.split("\n")]
        return b"".join(line + self._terminator for line in lines)

    def reset(self) -> None:
        self._buf.clear()
        self.discarding = False


def _host(cfg: Settings) -> LineCodec:
    line = cfg.device.line
    return LineCodec(
        cfg.device.max_payload,
        terminator=line.terminator,
        encoding=line.encoding,
        end=line.end,
        error=line.error,
        event=line.event,
        no_reply=line.no_reply,
    )


def _device(cfg: Settings) -> LinePortFraming:
    line = cfg.device.line
    return LinePortFraming(cfg.device.max_payload, line.terminator, line.encoding)


def _device_ping(cfg: Settings) -> bytes | None:
    """`heartbeat.payload` as text; None when it is empty."""
    payload = cfg.heartbeat.payload
    return payload.encode(cfg.device.line.encoding) if payload else None


def _check(cfg: Settings) -> list[Problem]:
    """The terminator and the heartbeat payload go out as encoded text: each must encode."""
    line, problems = cfg.device.line, []
    values = {"device.line.terminator": line.terminator, "heartbeat.payload": cfg.heartbeat.payload}
    for path, value in values.items():
        try:
            value.encode(line.encoding)
        except UnicodeEncodeError as exc:
            message = f"cannot be encoded in {line.encoding}: {exc.reason}"
            problems.append(Problem((path, "device.line.encoding"), message))
    return problems


LINE = CodecSpec(
    "line",
    host=_host,
    device=_device,
    device_ping=_device_ping,
    text=True,
    quiet=True,
    check=_check,
)
