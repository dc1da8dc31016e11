"""verld-sim: the command logic in-process, then the real program over ptys and TCP."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from verld.codec.length import LengthCommandFraming, LengthDecoder
from verld.codec.length import encode as length_encode
from verld.codec.line import LineSplitter
from verld.codec.verl import FrameDecoder, VerlCommandFraming, VerlFrame, encode_frame
from verld.sim.device import (
    CommandPersonality,
    Device,
    LinePersonality,
    make_personality,
    run_binary,
    run_line,
)
from verld.sim.faults import Counters, Faults
from verld.sim.launch import sim_command
from verld.sim.modbus import ModbusRtuPersonality, ModbusTcpPersonality
from verld.sim.personality import IDENTITY
from verld.testing import SimProc

REQUEST, REPLY, EVENT = 0x11, 0x12, 0x13
MAX = 4096


# --- helpers -----------------------------------------------------------------


class Stream:
    """The daemon's end of the link: a pty slave or a TCP socket, non-blocking."""

    def __init__(self, fd: int, sock: socket.socket | None = None) -> None:
        self.fd = fd
        self.sock = sock

    @classmethod
    def open_pty(cls, path: str) -> Stream:
        return cls(os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK))

    @classmethod
    def connect(cls, address: str) -> Stream:
        host, port = address.removeprefix("tcp://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=5)
        sock.setblocking(False)
        return cls(sock.fileno(), sock)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            select.select([], [self.fd], [], 5)
            with contextlib.suppress(BlockingIOError):
                view = view[os.write(self.fd, view) :]

    def read(self, timeout: float) -> bytes | None:
        """Bytes read; None on timeout; b'' when the link is gone (EOF or EIO)."""
        if not select.select([self.fd], [], [], timeout)[0]:
            return None
        try:
            return os.read(self.fd, 65536)
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno in (errno.EIO, errno.ECONNRESET):
                return b""
            raise

    def read_for(self, seconds: float) -> bytes:
        """Everything that arrives within `seconds`."""
        out = b""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            data = self.read(left)
            if data == b"":
                break
            out += data or b""
        return out

    def collect(
        self, feed: Callable[[bytes], list[Any]], count: int, timeout: float = 3.0
    ) -> list[Any]:
        """Decoded messages until `count` arrived or `timeout` passed."""
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and (left := deadline - time.monotonic()) > 0:
            data = self.read(left)
            if data == b"":
                break
            if data:
                got += feed(data)
        return got

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        else:
            os.close(self.fd)


class SimProcess(SimProc):
    """A running verld-sim (verld.testing.SimProc) and the streams opened to it."""

    def __init__(self, workdir: Path, *args: str, tcp: bool = False) -> None:
        super().__init__(workdir, *args, codec=None, tcp=tcp, timeout=10)
        self.streams: list[Stream] = []

    def open(self) -> Stream:
        if self.address.startswith("tcp://"):
            stream = Stream.connect(self.address)
        else:
            stream = Stream.open_pty(self.address)
        self.streams.append(stream)
        return stream

    def stop(self, sig: int = signal.SIGTERM) -> int:
        for stream in self.streams:
            with contextlib.suppress(OSError):
                stream.close()
        self.streams.clear()
        return super().stop(sig)


class Verl:
    """Speaks verl to the sim through a stream, as the daemon would."""

    def __init__(self, stream: Stream, max_payload: int = MAX) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(max_payload, frozenset({REPLY, EVENT}))

    def send(self, seq: int, payload: bytes) -> None:
        self.stream.write(encode_frame(REQUEST, seq, payload))

    def frames(self, count: int, timeout: float = 3.0) -> list[VerlFrame]:
        frames: list[VerlFrame] = self.stream.collect(self.decoder.feed, count, timeout)
        return frames

    def call(self, seq: int, payload: bytes) -> VerlFrame:
        self.send(seq, payload)
        frames = self.frames(1)
        assert frames, "no reply"
        return frames[0]


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short temporary directory (Unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="vsim"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start(workdir: Path) -> Iterator[Callable[..., SimProcess]]:
    """Start sims; each is stopped at the end and must exit 0, its link removed."""
    sims: list[SimProcess] = []

    def starter(*args: str, tcp: bool = False) -> SimProcess:
        sim = SimProcess(workdir, *args, tcp=tcp)
        sims.append(sim)
        return sim

    yield starter
    for sim in sims:
        assert sim.stop() == 0
        assert not os.path.lexists(sim.link)
        assert not os.path.lexists(sim.control_path)


@pytest.fixture(scope="module")
def verl_sim() -> Iterator[tuple[SimProcess, Verl]]:
    """One verl sim shared by the fault-free command tests."""
    path = Path(tempfile.mkdtemp(prefix="vsim"))
    sim = SimProcess(path)
    yield sim, Verl(sim.open())
    assert sim.stop() == 0
    shutil.rmtree(path, ignore_errors=True)


# --- the command logic, no I/O -------------------------------------------------


class TestCommands:
    @pytest.mark.parametrize(
        ("payload", "expected"),
        [
            (b"", (0x00, b"", 0, 0)),
            (b"\x01ab\x00\xff", (0x00, b"ab\x00\xff", 0, 0)),
            (b"\x02", (0x00, IDENTITY, 0, 0)),
            (b"\x03\x01\x2cxy", (0x00, b"xy", 300, 0)),
            (b"\x04", (0xFF, b"", 0, 0)),
            (b"\x05\x42zz", (0x42, b"zz", 0, 0)),
            (b"\x06\x00\x07", (0x00, b"", 0, 7)),
            (b"\x06\x00", (0xFE, b"bad arguments", 0, 0)),
            (b"\x99", (0xFE, b"unknown command", 0, 0)),
        ],
    )
    def test_binary_command(self, payload: bytes, expected: tuple[int, bytes, int, int]) -> None:
        """Each binary opcode gives its status, data, delay and event count."""
        assert run_binary(payload) == expected

    @pytest.mark.parametrize(
        ("line", "expected"),
        [
            ("PING", (["PONG"], 0, 0)),
            ("ECHO hello  world", (["hello  world"], 0, 0)),
            ("*idn?", (["verld-sim 0.1.0"], 0, 0)),
            ("DELAY 250 late", (["late"], 250, 0)),
            ("FAIL", (["ERROR failed"], 0, 0)),
            ("EVENTS 3", (["OK"], 0, 3)),
            ("MULTI 2", (["LINE 0", "LINE 1", "OK"], 0, 0)),
            ("MULTI x", (["ERROR bad arguments"], 0, 0)),
            ("FROB", (["ERROR unknown command"], 0, 0)),
        ],
    )
    def test_line_command(self, line: str, expected: tuple[list[str], int, int]) -> None:
        """Each text command gives its reply lines, delay and event count."""
        assert run_line(line) == expected


class TestMakePersonality:
    @pytest.mark.parametrize(
        ("codec", "kind"),
        [
            ("verl", CommandPersonality),
            ("length", CommandPersonality),
            ("line", LinePersonality),
            ("modbus-rtu", ModbusRtuPersonality),
            ("modbus-tcp", ModbusTcpPersonality),
        ],
    )
    def test_each_codec_gets_its_personality(self, codec: str, kind: type) -> None:
        """make_personality picks the personality of the codec the name stands for."""
        assert isinstance(make_personality(codec, 64), kind)

    @pytest.mark.parametrize(
        ("codec", "framing", "pipelined"),
        [("verl", VerlCommandFraming, True), ("length", LengthCommandFraming, False)],
    )
    def test_binary_commands_run_over_the_codecs_own_framing(
        self, codec: str, framing: type, pipelined: bool
    ) -> None:
        """A binary codec's device is the command set over its spec's `commands` framing."""
        personality = make_personality(codec, 64)
        assert isinstance(personality, CommandPersonality)
        assert isinstance(personality.framing, framing)
        assert personality.pipelined is pipelined

    def test_an_rtu_slave_takes_broadcasts_and_a_tcp_one_does_not(self) -> None:
        """modbus-rtu: unit 0 is the broadcast address; modbus-tcp: it is a unit."""
        rtu = make_personality("modbus-rtu", 64)
        tcp = make_personality("modbus-tcp", 64)
        assert isinstance(rtu, ModbusRtuPersonality) and rtu.slave.broadcast
        assert isinstance(tcp, ModbusTcpPersonality) and not tcp.slave.broadcast

    def test_an_unknown_codec_is_a_value_error(self) -> None:
        """An unknown codec name raises ValueError naming it."""
        with pytest.raises(ValueError, match="smoke"):
            make_personality("smoke", 64)


class TestDevice:
    @staticmethod
    def device(codec: str, **faults: Any) -> Device:
        return Device(make_personality(codec, 64), Faults(**faults), Counters(), random.Random(1))

    def test_verl_delay_does_not_hold_back_later_replies(self) -> None:
        """verl replies are scheduled each on its own: a fast one is due before a slow one."""
        dev = self.device("verl")
        out = dev.feed(encode_frame(REQUEST, 1, b"\x03\x01\x00") + encode_frame(REQUEST, 2, b""), 0)
        assert out[0].due == pytest.approx(0.256)
        assert out[1].due == 0

    def test_length_replies_keep_request_order(self) -> None:
        """length replies never overtake an earlier delayed reply."""
        dev = self.device("length")
        out = dev.feed(length_encode(b"\x03\x01\x00") + length_encode(b""), 0)
        assert [t.due for t in out] == [pytest.approx(0.256), pytest.approx(0.256)]

    def test_verl_corruption_keeps_the_framing(self) -> None:
        """A corrupted verl frame keeps its zero bytes where they were, so the CRC catches it."""
        personality = make_personality("verl", 64)
        rng = random.Random(7)
        frame = encode_frame(REPLY, 5, bytes(range(40)))
        for _ in range(200):
            bad = personality.corrupt(frame, rng)
            assert bad != frame
            assert [i for i, b in enumerate(bad) if b == 0] == [
                i for i, b in enumerate(frame) if b == 0
            ]
            decoder = FrameDecoder(64, frozenset({REPLY}))
            assert decoder.feed(bad) == []
            assert decoder.bad_frames == 1

    def test_hang_drop_and_garbage_are_counted(self) -> None:
        """Hung and dropped requests get no answer; garbage precedes the reply."""
        dev = self.device("length", hang=True)
        assert dev.feed(length_encode(b""), 0) == []
        dev.faults.hang, dev.faults.drop = False, 1.0
        assert dev.feed(length_encode(b""), 0) == []
        dev.faults.drop, dev.faults.garbage = 0.0, 1.0
        [timed] = dev.feed(length_encode(b""), 0)
        assert timed.data.endswith(length_encode(b"\x00"))
        assert len(timed.data) > 5
        counters = dev.status()
        assert (counters["requests"], counters["ignored"], counters["dropped"]) == (3, 1, 1)
        assert (counters["replies"], counters["garbage_bursts"]) == (1, 1)

    def test_seed_makes_faults_repeatable(self) -> None:
        """Two devices with the same seed misbehave identically."""
        runs = []
        for _ in range(2):
            dev = self.device("verl", garbage=0.5, corrupt=0.5, jitter=10.0)
            requests = b"".join(encode_frame(REQUEST, i, b"\x01abc") for i in range(20))
            runs.append(dev.feed(requests, 0))
        assert runs[0] == runs[1]

    def test_garbage_input_is_survived(self) -> None:
        """Random input never raises, and a request after it is still answered."""
        rng = random.Random(3)
        for codec in ("verl", "length", "line"):
            dev = self.device(codec)
            for _ in range(50):
                dev.feed(rng.randbytes(rng.randint(1, 300)), 0)
            dev.reset()
            request = {"verl": encode_frame(REQUEST, 9, b""), "length": length_encode(b"")}
            out = dev.feed(request.get(codec, b"PING\n"), 0)
            assert len(out) == 1


# --- the real program: verl ----------------------------------------------------


class TestVerl:
    @pytest.mark.timeout(15)
    def test_ping(self, verl_sim: tuple[SimProcess, Verl]) -> None:
        """An empty request is a ping: status 0x00, no data, seq echoed."""
        assert verl_sim[1].call(7, b"") == (REPLY, 7, b"\x00")

    @pytest.mark.timeout(15)
    @pytest.mark.parametrize(
        "data", [b"hi", b"\x00" * 20, b"\xff" * 20, bytes(range(256)) * 3, b"\x00\xff" * 300]
    )
    def test_echo(self, verl_sim: tuple[SimProcess, Verl], data: bytes) -> None:
        """Echo returns the bytes unchanged, zeros and 0xFF included."""
        assert verl_sim[1].call(65535, b"\x01" + data) == (REPLY, 65535, b"\x00" + data)

    @pytest.mark.timeout(15)
    def test_echo_max_payload(self, verl_sim: tuple[SimProcess, Verl]) -> None:
        """A request of exactly max_payload bytes is answered in full."""
        data = random.Random(5).randbytes(MAX - 1)
        assert verl_sim[1].call(3, b"\x01" + data).payload == b"\x00" + data

    @pytest.mark.timeout(15)
    def test_oversize_request_is_dropped(self, verl_sim: tuple[SimProcess, Verl]) -> None:
        """A request above max_payload gets no reply; the next one does."""
        sim, verl = verl_sim
        before = sim.counters()["oversize"] + sim.counters()["bad_frames"]
        verl.send(1, b"\x01" + bytes(MAX))
        assert verl.call(2, b"") == (REPLY, 2, b"\x00")
        after = sim.counters()
        assert after["oversize"] + after["bad_frames"] == before + 1

    @pytest.mark.timeout(15)
    @pytest.mark.parametrize(
        ("request_", "reply"),
        [
            (b"\x02", b"\x00" + IDENTITY),
            (b"\x04", b"\xff"),
            (b"\x05\x42why", b"\x42why"),
            (b"\x7f", b"\xfeunknown command"),
        ],
    )
    def test_commands(
        self, verl_sim: tuple[SimProcess, Verl], request_: bytes, reply: bytes
    ) -> None:
        """info, fail, status code and unknown opcodes answer as specified."""
        assert verl_sim[1].call(11, request_).payload == reply

    @pytest.mark.timeout(15)
    def test_delay_does_not_block_a_fast_call(self, verl_sim: tuple[SimProcess, Verl]) -> None:
        """A delayed call's reply comes after a later fast call's reply."""
        verl = verl_sim[1]
        start = time.monotonic()
        verl.send(1, b"\x03" + struct.pack(">H", 300) + b"slow")
        verl.send(2, b"\x01fast")
        first = verl.frames(1)
        fast_at = time.monotonic() - start
        second = verl.frames(1)
        slow_at = time.monotonic() - start
        assert first == [(REPLY, 2, b"\x00fast")]
        assert second == [(REPLY, 1, b"\x00slow")]
        assert fast_at < 0.2
        assert slow_at >= 0.28

    @pytest.mark.timeout(15)
    def test_events(self, verl_sim: tuple[SimProcess, Verl]) -> None:
        """0x06 n: the reply first, then n events numbered from 0."""
        verl = verl_sim[1]
        verl.send(9, b"\x06\x00\x05")
        frames = verl.frames(6)
        assert frames[0] == (REPLY, 9, b"\x00")
        assert frames[1:] == [(EVENT, 0, b"evt" + struct.pack(">I", i)) for i in range(5)]

    @pytest.mark.timeout(15)
    def test_garbage_input_is_survived(self, verl_sim: tuple[SimProcess, Verl]) -> None:
        """Random bytes on the line never crash the sim; the next call is answered."""
        sim, verl = verl_sim
        verl.stream.write(random.Random(9).randbytes(5000))
        assert verl.call(4, b"\x01ok") == (REPLY, 4, b"\x00ok")
        assert sim.proc.poll() is None


# --- length and line -----------------------------------------------------------


class TestLength:
    @pytest.mark.timeout(15)
    def test_calls_in_order(self, start: Callable[..., SimProcess]) -> None:
        """Echo, ping, fail, oversize and a delayed call answer in request order."""
        sim = start("--codec", "length", "--max-payload", "64")
        stream = sim.open()
        decoder = LengthDecoder(1024)
        requests = [b"\x03\x00\x64late", b"\x01\x00\xff", b"", b"\x04", b"\x01" + bytes(64)]
        stream.write(b"".join(length_encode(r) for r in requests))
        replies = stream.collect(decoder.feed, 5)
        assert replies == [b"\x00late", b"\x00\x00\xff", b"\x00", b"\xff", b"\xfetoo large"]

    @pytest.mark.timeout(15)
    def test_events_follow_the_reply(self, start: Callable[..., SimProcess]) -> None:
        """0x06 n: the reply, then n frames carrying the event payloads."""
        sim = start("--codec", "length")
        stream = sim.open()
        stream.write(length_encode(b"\x06\x00\x03"))
        frames = stream.collect(LengthDecoder(1024).feed, 4)
        assert frames == [b"\x00"] + [b"evt" + struct.pack(">I", i) for i in range(3)]


class TestLine:
    @pytest.mark.timeout(15)
    def test_commands(self, start: Callable[..., SimProcess]) -> None:
        """PING, ECHO, *IDN?, FAIL, MULTI, EVENTS and unknown commands answer line by line."""
        sim = start("--codec", "line")
        stream = sim.open()
        splitter = LineSplitter(b"\n", 4096)
        stream.write(b"PING\nECHO a b\n*IDN?\nFAIL\nMULTI 2\nEVENTS 2\nNOPE\n")
        lines = stream.collect(splitter.feed, 11)
        assert lines == [
            b"PONG",
            b"a b",
            IDENTITY,
            b"ERROR failed",
            b"LINE 0",
            b"LINE 1",
            b"OK",
            b"OK",
            b"EVENT 0",
            b"EVENT 1",
            b"ERROR unknown command",
        ]

    @pytest.mark.timeout(15)
    def test_terminator_and_crlf(self, start: Callable[..., SimProcess]) -> None:
        """Requests end at --terminator; with --crlf replies end with CR LF."""
        sim = start("--codec", "line", "--terminator", "\\r", "--crlf")
        stream = sim.open()
        stream.write(b"ECHO x\rPING\r")
        data = b""
        deadline = time.monotonic() + 3
        while data.count(b"\r\n") < 2 and time.monotonic() < deadline:
            data += stream.read(1) or b""
        assert data == b"x\r\nPONG\r\n"


# --- faults and the control socket ----------------------------------------------


class TestFaults:
    @pytest.mark.timeout(15)
    def test_drop(self, start: Callable[..., SimProcess]) -> None:
        """With drop 1.0 a request gets no reply, and is counted."""
        sim = start()
        verl = Verl(sim.open())
        assert sim.control("set drop 1.0")["faults"]["drop"] == 1.0
        verl.send(1, b"")
        assert verl.frames(1, timeout=0.3) == []
        assert sim.counters()["dropped"] == 1
        sim.control("set drop 0")
        assert verl.call(2, b"") == (REPLY, 2, b"\x00")

    @pytest.mark.timeout(15)
    def test_corrupt(self, start: Callable[..., SimProcess]) -> None:
        """With corrupt 1.0 every reply fails the daemon's CRC check and is counted."""
        sim = start()
        verl = Verl(sim.open())
        sim.control("set corrupt 1")
        for seq in range(5):
            verl.send(seq, b"\x01" + bytes(range(30)))
        assert verl.frames(1, timeout=0.5) == []
        assert verl.decoder.bad_frames == 5
        assert sim.counters()["corrupted"] == 5

    @pytest.mark.timeout(15)
    def test_garbage_fault(self, start: Callable[..., SimProcess]) -> None:
        """With garbage 1.0 a burst precedes each reply; verl replies still decode."""
        sim = start("--seed", "4", "--garbage", "1")
        verl = Verl(sim.open())
        for seq in range(5):
            assert verl.call(seq, b"\x01x") == (REPLY, seq, b"\x00x")
        assert sim.counters()["garbage_bursts"] == 5

    @pytest.mark.timeout(15)
    def test_latency(self, start: Callable[..., SimProcess]) -> None:
        """--latency delays every reply."""
        sim = start("--latency", "200")
        verl = Verl(sim.open())
        begin = time.monotonic()
        assert verl.call(1, b"") == (REPLY, 1, b"\x00")
        assert time.monotonic() - begin >= 0.18

    @pytest.mark.timeout(15)
    def test_hang_and_unhang(self, start: Callable[..., SimProcess]) -> None:
        """A hung sim reads requests but answers none until unhung."""
        sim = start()
        verl = Verl(sim.open())
        assert sim.control("hang")["faults"]["hang"] is True
        verl.send(1, b"")
        assert verl.frames(1, timeout=0.3) == []
        sim.control("unhang")
        assert verl.call(2, b"") == (REPLY, 2, b"\x00")
        counters = sim.counters()
        assert (counters["requests"], counters["ignored"]) == (2, 1)

    @pytest.mark.timeout(15)
    def test_sigusr1_toggles_hang(self, start: Callable[..., SimProcess]) -> None:
        """SIGUSR1 hangs the sim, a second SIGUSR1 wakes it."""
        sim = start()
        sim.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 3
        while not sim.control("status")["faults"]["hang"]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        sim.proc.send_signal(signal.SIGUSR1)
        while sim.control("status")["faults"]["hang"]:
            assert time.monotonic() < deadline
            time.sleep(0.01)

    @pytest.mark.timeout(15)
    def test_unplug_and_replug(self, start: Callable[..., SimProcess]) -> None:
        """Unplug: the daemon's fd reads b''/EIO and the link vanishes; it then comes back."""
        sim = start()
        verl = Verl(sim.open())
        assert verl.call(1, b"") == (REPLY, 1, b"\x00")
        assert sim.control("unplug 0.5")["plugged"] is False
        assert verl.stream.read(2) == b""
        assert not os.path.exists(sim.link)
        deadline = time.monotonic() + 5
        while not os.path.exists(sim.link):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        fresh = Verl(sim.open())
        assert fresh.call(2, b"\x01back") == (REPLY, 2, b"\x00back")
        assert sim.counters()["unplugs"] == 1

    @pytest.mark.timeout(15)
    def test_unplug_until_replug(self, start: Callable[..., SimProcess]) -> None:
        """`unplug 0` stays unplugged until `replug`."""
        sim = start()
        sim.control("unplug 0")
        time.sleep(0.3)
        assert not os.path.exists(sim.link)
        assert sim.control("replug")["plugged"] is True
        assert Verl(sim.open()).call(1, b"") == (REPLY, 1, b"\x00")

    @pytest.mark.timeout(15)
    def test_unplug_every(self, start: Callable[..., SimProcess]) -> None:
        """--unplug-every unplugs periodically and replugs after --replug-after."""
        sim = start("--unplug-every", "0.2", "--replug-after", "0.1")
        time.sleep(0.8)
        assert sim.counters()["unplugs"] >= 2

    @pytest.mark.timeout(15)
    def test_garbage_and_event_commands(self, start: Callable[..., SimProcess]) -> None:
        """`garbage N` writes N bytes now; `event HEX` emits one event."""
        sim = start()
        stream = sim.open()
        sim.control("garbage 100")
        assert len(stream.read_for(0.3)) == 100
        verl = Verl(stream)
        sim.control("event 00ff10")
        assert verl.frames(1) == [(EVENT, 0, b"\x00\xff\x10")]

    @pytest.mark.timeout(15)
    def test_control_errors_and_reset(self, start: Callable[..., SimProcess]) -> None:
        """Bad control commands answer ok=false; reset turns every fault off."""
        sim = start("--latency", "50", "--hang")
        assert sim.control("set drop 2")["ok"] is False
        assert sim.control("set nonsense 1")["ok"] is False
        assert sim.control("frobnicate")["ok"] is False
        assert sim.control("event zz")["ok"] is False
        faults = sim.control("reset")["faults"]
        assert (faults["latency"], faults["hang"]) == (0.0, False)

    @pytest.mark.timeout(15)
    def test_unread_output_never_blocks(self, start: Callable[..., SimProcess]) -> None:
        """Far more output than a pty buffers: the sim stays responsive, nothing is lost."""
        sim = start()
        verl = Verl(sim.open())
        verl.send(1, b"\x06" + struct.pack(">H", 6000))  # ~80 KB of events
        time.sleep(0.2)
        begin = time.monotonic()
        assert sim.control("status")["ok"] is True
        assert time.monotonic() - begin < 0.5
        frames = verl.frames(6001, timeout=5)
        assert len(frames) == 6001
        assert frames[-1] == (EVENT, 0, b"evt" + struct.pack(">I", 5999))

    @pytest.mark.timeout(15)
    def test_baud_pacing(self, start: Callable[..., SimProcess]) -> None:
        """At --baud 115200 a 4 KB reply takes at least ~0.3 s to arrive."""
        sim = start("--baud", "115200")
        verl = Verl(sim.open())
        data = bytes(range(256)) * 16
        begin = time.monotonic()
        assert verl.call(1, b"\x01" + data[1:]).payload == b"\x00" + data[1:]
        assert 0.25 <= time.monotonic() - begin < 5


class TestProcess:
    @pytest.mark.timeout(15)
    def test_tcp_echo_and_replacement(self, start: Callable[..., SimProcess]) -> None:
        """--tcp 0 listens on 127.0.0.1; a new connection replaces the old one."""
        sim = start(tcp=True)
        assert sim.address.startswith("tcp://127.0.0.1:")
        first = Verl(sim.open())
        assert first.call(1, b"\x01\x00tcp") == (REPLY, 1, b"\x00\x00tcp")
        second = Verl(sim.open())
        assert second.call(2, b"") == (REPLY, 2, b"\x00")
        assert first.stream.read(2) == b""

    @pytest.mark.timeout(15)
    def test_sigterm_cleans_up(self, workdir: Path) -> None:
        """SIGTERM: exit 0, link and control socket removed."""
        sim = SimProcess(workdir)
        assert os.path.islink(sim.address)
        assert sim.stop() == 0
        assert not os.path.lexists(sim.address)
        assert not os.path.exists(sim.control_path)

    @pytest.mark.timeout(15)
    def test_default_link_path(self) -> None:
        """Without --link the device is at /tmp/verld-sim-<pid>."""
        proc = subprocess.Popen(sim_command(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode()
            assert line == f"READY /tmp/verld-sim-{proc.pid}\n"
        finally:
            proc.terminate()
            assert proc.wait(5) == 0
            if proc.stdout is not None:
                proc.stdout.close()
        assert not os.path.lexists(f"/tmp/verld-sim-{proc.pid}")
