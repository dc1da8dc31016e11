"""The frame codec on the real session, with no event loop: replies by seq, the seq
wrapping at its field, stale replies, and an incomplete frame dropped after the guard."""

from __future__ import annotations

from verld.codec.base import PortRequest
from verld.codec.frame.frames import FrameFormat
from verld.links.link import LinkState
from verld.testing.session import SessionRig

CONFIG = """
device:
  port: /dev/fake
  codec: frame
  timeout: 1.0
  guard: 0.1
  window: 4
  frame:
    start: "02"
    header: 3
    length: {offset: 0, size: 1}
    check: {kind: CRC-16/MODBUS, order: little}
    end: "03"
    seq: {offset: 1, size: 1}
heartbeat: {interval: 0, payload: "000001"}
"""


def same(request: PortRequest) -> tuple[int, bytes] | None:
    """The device answers with the request's own header and payload."""
    return 0, request.payload


def up(config: str = CONFIG) -> SessionRig:
    rig = SessionRig(config)
    assert rig.connect(same)[0].error is None
    assert rig.session.link.state is LinkState.UP
    return rig


class TestFrameSession:
    def test_seq_wraps_at_its_field(self) -> None:
        """300 calls through a 1-byte seq: numbers wrap at 256 and every call is answered."""
        rig = up()
        seqs = []
        for i in range(300):
            result = rig.call(b"\x00\x00\x01" + bytes([i % 256]))
            seqs += [request.tag for request in rig.wire.requests]
            rig.answer(same)
            assert result[0].error is None and result[0].data[3:] == bytes([i % 256])
        assert seqs[:2] == [1, 2] and seqs[254:256] == [255, 0]  # (0 was the handshake's)

    def test_replies_out_of_order(self) -> None:
        """Calls on the link at once are answered by seq in any order."""
        rig = up()
        first, second = rig.call(b"\x00\x00\x01a"), rig.call(b"\x00\x00\x01b")
        one, two = rig.wire.requests
        rig.wire.requests = []
        rig.wire.deliver(rig.wire.reply(two, 0, two.payload))
        rig.wire.deliver(rig.wire.reply(one, 0, one.payload))
        assert first[0].data[3:] == b"a" and second[0].data[3:] == b"b"

    def test_unknown_seq_is_stale(self) -> None:
        """A reply with a number no call waits for is never delivered, and counted."""
        rig = up()
        result = rig.call(b"\x00\x00\x01a")
        [request] = rig.wire.requests
        assert rig.cfg.device.frame is not None
        form = FrameFormat(rig.cfg.device.frame, 4096)
        rig.wire.deliver(form.encode(request.payload, ((request.tag or 0) + 7) % 256))
        assert result == []
        assert rig.session.counters.stale == 1

    def test_an_incomplete_frame_is_dropped_after_the_guard(self) -> None:
        """A false start holds the reply behind it until device.guard of quiet, then drops."""
        rig = up()
        result = rig.call(b"\x00\x00\x01a")
        [request] = rig.wire.requests
        rig.wire.deliver(b"\x02\xf0\x00" + rig.wire.reply(request, 0, request.payload))
        assert result == []
        rig.clock.advance(0.05)
        assert result == []
        rig.clock.advance(0.06)
        assert result[0].error is None and result[0].data[3:] == b"a"
        assert rig.session.codec.bad_frames == 1

    def test_a_ping_answered_with_a_failure_status_still_proves_the_device(self) -> None:
        """A reply whose `status` byte is not ok still answers the handshake's ping."""
        rig = SessionRig(
            CONFIG.replace("    seq:", '    status: {offset: 2, ok: ["00"]}\n    seq:')
        )
        [result] = rig.connect(same)  # the ping's cmd byte (01) is its status: not ok
        assert result.status == 0xFF
        assert rig.session.link.state is LinkState.UP
