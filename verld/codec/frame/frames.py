"""One declared framing: a frame's data to wire bytes, and a byte stream to frames.

A frame's *data* is its header and payload (everything between `start` and the
check): what a call carries and a reply returns. `FrameFormat.encode` writes the
length field (and, given one, the seq field) into the data, appends the check, adds
`start` and `end`, and stuffs the whole.

Strategy (`FrameReader`), without stuffing: look for `start`; read the header; take
the size from the length field (or, without one, read up to each `end` in turn until
one has a good check); then check `end` and the check. A size beyond the bound
(`max_payload` data bytes, plus the frame's overhead), a wrong `end` or a wrong check
is a bad frame: it is counted and the search resumes one byte after the failed start,
so a good frame right behind noise, or inside a false start's supposed extent, is
found. A candidate still incomplete is kept (bounded by the largest frame) until more
bytes come, or until `flush` says the line has been quiet for `device.guard`: then it
is dropped the same way (`_sized` with a length field, `_ended` without: each one
loop, as they run for every frame a device sends). With stuffing, the stream is cut
at the delimiter; each non-empty piece is unstuffed (a bad escape is a bad frame) and
must hold exactly one frame, found at its first `start` that makes one. The receive
buffer is bounded.
"""

from __future__ import annotations

from typing import Literal

from verld.codec.frame.check import make_check
from verld.codec.frame.declaration import FrameDeclaration
from verld.codec.frame.stuffing import stuffing

__all__ = ["FrameFormat", "FrameReader"]

Order = Literal["big", "little"]


def _order(name: str) -> Order:
    return "little" if name == "little" else "big"


class FrameFormat:
    """A declaration made ready: encode data, and verify and cut frames."""

    def __init__(self, frame: FrameDeclaration, max_payload: int) -> None:
        self.frame = frame
        self.max_payload = max_payload  #: the most data bytes (header included)
        self.header = frame.header
        self.start, self.end = frame.start, frame.end
        check = None if frame.check is None else make_check(frame.check.kind, frame.check.order)
        self.check_size = 0 if check is None else check.size
        self._compute = None if check is None else check.compute
        #: a CRC's value and byte order (None: a sum, or no check): compared as numbers
        self._crc = None if check is None else check.crc
        self._crc_order: Order = "big" if check is None else check.order
        self._check_start = frame.check is not None and frame.check.over.startswith("start")
        self.stuffing = stuffing(frame.stuffing)
        #: start, check and end: the bytes of a frame around its data
        self.overhead = len(self.start) + self.check_size + len(self.end)
        self.max_frame = max_payload + self.overhead
        length, seq = frame.length, frame.seq
        self._length = None if length is None else (length.offset, length.size)
        self._length_order = _order(length.order) if length is not None else "big"
        #: the length field holds a frame's data size plus this (`_length_value`)
        self._length_add = 0 if length is None else self._length_value(0)
        self._seq = None if seq is None else (seq.offset, seq.size)
        self._seq_order = _order(seq.order) if seq is not None else "big"
        #: how many numbers the seq field holds (0: no seq)
        self.seq_space = 0 if seq is None else 1 << (8 * seq.size)
        #: the seq field: (offset, size, byte order), or None (`seq_of`, for inlining)
        self.seq_field = None if seq is None else (seq.offset, seq.size, self._seq_order)

    # --- writing --------------------------------------------------------------------------
    def refuse(self, data: bytes) -> str | None:
        """Why `data` cannot be sent as a frame, or None."""
        if len(data) < self.header:
            return f"{len(data)} bytes, shorter than the frame's {self.header}-byte header"
        if not data and not self.overhead and self.stuffing is not None:
            return "an empty frame: the stuffing skips empty frames between delimiters"
        length = self._length
        if length is not None and not 0 <= len(data) + self._length_add < 1 << (8 * length[1]):
            return f"{len(data)} bytes do not fit the frame's {length[1]}-byte length field"
        return None

    def encode(self, data: bytes, seq: int | None = None) -> bytes:
        """The wire bytes of the frame carrying `data` (`refuse` has passed it), with
        `seq` written into the seq field when given."""
        body = bytearray(data)
        length = self._length
        if length is not None:
            offset, size = length
            value = len(data) + self._length_add
            if size == 1:  # (the usual field: a byte, put as one)
                body[offset] = value
            else:
                body[offset : offset + size] = value.to_bytes(size, self._length_order)
        field = self.seq_field
        if seq is not None and field is not None:
            offset, size, order = field
            seq %= self.seq_space
            if size == 1:
                body[offset] = seq
            else:
                body[offset : offset + size] = seq.to_bytes(size, order)
        check = b""
        if self._compute is not None:
            covered = self.start + body if self._check_start else body
            if self._crc is not None:  # (what `_compute` does, without its call)
                check = self._crc(covered).to_bytes(self.check_size, self._crc_order)
            else:
                check = self._compute(covered)
        frame = b"".join((self.start, body, check, self.end))
        return frame if self.stuffing is None else self.stuffing.stuff(frame)

    def _length_value(self, size: int) -> int:
        """What the length field holds for `size` data bytes."""
        length = self.frame.length
        assert length is not None
        if length.counts == "payload":
            counted = size - self.header
        elif length.counts == "header+payload":
            counted = size
        else:
            counted = size + self.overhead
        return counted - length.adjust

    # --- reading --------------------------------------------------------------------------
    def data_size(self, field: int) -> int:
        """The data bytes (header included) a frame holds, by its length field's value."""
        return field - self._length_add

    def length_field(self, header: bytes | bytearray, at: int) -> int:
        """The length field's value in the header starting at `at`."""
        assert self._length is not None
        offset, size = self._length
        return int.from_bytes(header[at + offset : at + offset + size], self._length_order)

    def seq_of(self, data: bytes) -> int | None:
        """The seq field of a frame's data (None: no seq)."""
        if self._seq is None:
            return None
        offset, size = self._seq
        return int.from_bytes(data[offset : offset + size], self._seq_order)

    def with_seq(self, data: bytes, seq: int) -> bytes:
        """`data` with `seq` in its seq field (data unchanged without one)."""
        if self._seq is None:
            return data
        offset, size = self._seq
        number = (seq % self.seq_space).to_bytes(size, self._seq_order)
        return data[:offset] + number + data[offset + size :]

    def verify(self, buf: bytes | bytearray, at: int, size: int) -> bytes | None:
        """The data of the frame at `at` in `buf` holding `size` data bytes, when its
        check and `end` are right; None: a bad frame. `buf` holds the whole frame."""
        first = at + len(self.start)
        cut = first + size
        check, end = self.check_size, self.end
        if end and buf[cut + check : cut + check + len(end)] != end:
            return None
        data = bytes(buf[first:cut])
        if not check:
            return data
        covered = buf[at:cut] if self._check_start else data
        crc, compute = self._crc, self._compute
        if crc is not None:  # (`compute`'s bytes, compared as a number: one call less)
            if crc(covered) != int.from_bytes(buf[cut : cut + check], self._crc_order):
                return None
        elif compute is not None and buf[cut : cut + check] != compute(covered):
            return None
        return data


class FrameReader:
    """A byte stream in, the data of each good frame out; bad frames counted."""

    def __init__(self, form: FrameFormat) -> None:
        self.form = form
        #: bad frames since creation (a monotonic counter; `reset` keeps it)
        self.bad_frames = 0
        self._buf = bytearray()
        #: without length or stuffing: where the next `end` of the candidate at the
        #: buffer's start is looked for (its earlier ends had a bad check)
        self._end_from = 0
        self._skipping = False  #: stuffed: an overlong piece is skipped to the delimiter
        stuffed = form.stuffing
        self._max_piece = 0 if stuffed is None else stuffed.max_stuffed(form.max_frame)
        #: without stuffing: the frames completed in the buffer, by the length field or
        #: else by `end`
        self._scan = self._sized if form._length is not None else self._ended

    @property
    def partial(self) -> bool:
        """Bytes of a frame not yet complete are held."""
        return bool(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """The data of the frames completed by `data`, in order."""
        if self.form.stuffing is not None:
            return self._pieces(data)
        self._buf += data
        return self._scan()

    def flush(self) -> list[bytes]:
        """The line has been quiet for `device.guard`: an incomplete frame is a bad
        frame, and the search resumes one byte after its start (frames behind it)."""
        if self.form.stuffing is not None:
            if self._buf:
                self.bad_frames += 1
            self.reset()
            return []
        found: list[bytes] = []
        start = self.form.start
        while self._buf:  # what is left after each pass is incomplete too: the line is quiet
            if self._buf.startswith(start):
                self.bad_frames += 1  # (not a start's first bytes alone)
            del self._buf[:1]
            self._end_from = 0
            found += self._scan()
        return found

    def reset(self) -> None:
        """Forget partial input (a reconnect, a guard period)."""
        self._buf.clear()
        self._end_from = 0
        self._skipping = False

    # --- without stuffing -----------------------------------------------------------------
    def _ended(self) -> list[bytes]:
        form, buf = self.form, self._buf
        start = form.start
        found: list[bytes] = []
        pos = 0
        while True:
            at = buf.find(start, pos)
            if at < 0:  # keep what may be the beginning of a start
                pos = max(pos, len(buf) - len(start) + 1)
                break
            if at != pos:
                self._end_from = 0
            result = self._frame_at(at)
            if result is None:  # incomplete
                pos = at
                break
            if isinstance(result, int):  # bad: resume one byte after its start
                self.bad_frames += 1
                self._end_from = 0
                pos = at + 1
                continue
            data, pos = result
            self._end_from = 0
            found.append(data)
        if pos:
            del buf[:pos]
            self._end_from = max(0, self._end_from - pos)
        return found

    def _sized(self) -> list[bytes]:
        """The frames completed in the buffer, by their length field: one loop, its steps
        inlined, as it runs for every frame a device sends."""
        form, buf = self.form, self._buf
        start, header, max_payload, verify = form.start, form.header, form.max_payload, form.verify
        assert form._length is not None
        offset, field = form._length
        order, add = form._length_order, form._length_add
        offset += len(start)  #: from a frame's start
        least = len(start) + header  #: bytes from a start to the end of its header
        around = len(start) + form.check_size + len(form.end)  #: a frame's bytes but data
        found: list[bytes] = []
        pos, held = 0, len(buf)
        while True:
            at = buf.find(start, pos)
            if at < 0:  # keep what may be the beginning of a start
                pos = max(pos, held - len(start) + 1)
                break
            if held < at + least:  # incomplete
                pos = at
                break
            here = at + offset
            size = (
                buf[here] if field == 1 else int.from_bytes(buf[here : here + field], order)
            ) - add
            if header <= size <= max_payload:
                end = at + around + size
                if held < end:  # incomplete
                    pos = at
                    break
                data = verify(buf, at, size)
                if data is not None:
                    found.append(data)
                    pos = end
                    continue
            self.bad_frames += 1  # bad: resume one byte after its start
            pos = at + 1
        if pos:
            del buf[:pos]
        return found

    def _frame_at(self, at: int) -> tuple[bytes, int] | int | None:
        """The frame starting at `at`, without a length field: (data, where it ends), -1
        for a bad frame, or None while it is incomplete."""
        first = at + len(self.form.start)
        if len(self._buf) < first + self.form.header:
            return None
        return self._ended_at(at, first)

    def _ended_at(self, at: int, first: int) -> tuple[bytes, int] | int | None:
        """A frame without a length field: it ends at the first `end` with a good check."""
        form, buf, end = self.form, self._buf, self.form.end
        search = max(first + form.header + form.check_size, self._end_from)
        while True:
            cut = buf.find(end, search)
            if cut < 0 or cut - form.check_size - first > form.max_payload:
                if len(buf) - at > form.max_frame:
                    return -1  # no good end within the largest frame
                self._end_from = max(search, len(buf) - len(end) + 1)
                return None
            size = cut - form.check_size - first
            data = form.verify(buf, at, size)
            if data is not None:
                return data, cut + len(end)
            search = cut + 1

    # --- with stuffing --------------------------------------------------------------------
    def _pieces(self, data: bytes) -> list[bytes]:
        stuffed = self.form.stuffing
        assert stuffed is not None
        delimiter = stuffed.delimiter
        if self._skipping:
            cut = data.find(delimiter)
            if cut < 0:
                return []
            self._skipping = False
            data = data[cut:]
        if self._buf:
            self._buf += data
            if delimiter not in data:
                if len(self._buf) > self._max_piece:
                    self._overflow()
                return []
            data = bytes(self._buf)
            self._buf.clear()
        pieces = data.split(bytes((delimiter,)))
        last = pieces.pop()
        if len(last) > self._max_piece:
            self._overflow()
        elif last:
            self._buf += last
        found: list[bytes] = []
        for piece in pieces:
            if not piece:
                continue
            frame = self._unstuffed(piece)
            if frame is None:
                self.bad_frames += 1
            else:
                found.append(frame)
        return found

    def _overflow(self) -> None:
        self.bad_frames += 1
        self._buf.clear()
        self._skipping = True

    def _unstuffed(self, piece: bytes) -> bytes | None:
        """The data of the one frame in a piece between delimiters, or None: bad."""
        form = self.form
        stuffed = form.stuffing
        assert stuffed is not None
        if len(piece) > self._max_piece:
            return None
        try:
            frame = stuffed.unstuff(piece)
        except ValueError:
            return None
        at = frame.find(form.start)
        while at >= 0:
            data = self._whole(frame, at)
            if data is not None:
                return data
            if not form.start:
                return None
            at = frame.find(form.start, at + 1)
        return None

    def _whole(self, frame: bytes, at: int) -> bytes | None:
        """The data of the frame that is exactly `frame[at:]`, or None."""
        form = self.form
        first = at + len(form.start)
        size = len(frame) - first - form.check_size - len(form.end)
        if size < form.header or size > form.max_payload:
            return None
        if (
            form.frame.length is not None
            and form.data_size(form.length_field(frame, first)) != size
        ):
            return None
        return form.verify(frame, at, size)
