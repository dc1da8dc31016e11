"""`device.frame` in the config: declarations parse, each mistake is named with file:line."""

from __future__ import annotations

import binascii
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from pyubx2 import POLL, SET, UBXMessage  # type: ignore[import-untyped]

from verld.cmdline import Usage, parser, start_config
from verld.codec.frame.declaration import (
    Check,
    Event,
    Field,
    FrameDeclaration,
    Length,
    Status,
)
from verld.codec.frame.frames import FrameFormat, FrameReader
from verld.codec.registry import retry_of, spec_of
from verld.config import Config, load_config, parse_config
from verld.config.framefile import dump_declaration, load_declaration
from verld.errors import ConfigError
from verld.sim.device import make_personality

MAX = 256


def config(frame: str, extra: str = "") -> str:
    """A config with codec frame and `frame` (YAML lines) as device.frame."""
    body = textwrap.indent(textwrap.dedent(frame).strip("\n"), "    ")
    return f"device:\n  port: sim\n  codec: frame\n{extra}  frame:\n{body}\n"


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "x.yaml")
    return str(info.value).splitlines()


UBX = """
start: "b5 62"
header: 4
length: {offset: 2, size: 2, order: little}
check: {kind: fletcher8}
"""


class TestGood:
    def test_ubx(self) -> None:
        """The UBX declaration parses into its dataclasses, hex as bytes."""
        frame = parse_config(config(UBX)).device.frame
        assert frame == FrameDeclaration(
            header=4, start=b"\xb5\x62", length=Length(2, 2, "little"), check=Check("fletcher8")
        )

    def test_every_key(self) -> None:
        """Every key of a declaration is read; a check kind is spelt as the catalogue does."""
        frame = parse_config(
            config(
                """
                start: "02"
                header: 4
                length: {offset: 0, size: 1, order: big, counts: frame, adjust: -1}
                check: {kind: crc-16/modbus, over: start+header+payload, order: little}
                end: "03"
                stuffing: none
                match: [3]
                seq: {offset: 1, size: 1}
                event: {offset: 2, values: ["80", "81"]}
                status: {offset: 2, ok: ["00", "01"]}
                """
            )
        ).device.frame
        assert frame == FrameDeclaration(
            header=4,
            start=b"\x02",
            length=Length(0, 1, "big", "frame", -1),
            check=Check("CRC-16/MODBUS", "start+header+payload", "little"),
            end=b"\x03",
            match=(3,),
            seq=Field(1, 1),
            event=Event(2, (0x80, 0x81)),
            status=Status(2, (0, 1)),
        )

    def test_slip(self) -> None:
        """A SLIP declaration needs no start, length or end."""
        text = config("header: 1\nstuffing: slip\ncheck: {kind: CRC-32}")
        frame = parse_config(text).device.frame
        assert frame is not None and frame.check == Check("CRC-32/ISO-HDLC")

    def test_traits_follow_the_seq(self) -> None:
        """With seq the codec is pipelined with retry 3; without, one call at a time, retry 0."""
        with_seq = parse_config(
            config(
                'start: "02"\nheader: 2\nlength: {offset: 0, size: 1}\nseq: {offset: 1, size: 1}'
            )
        )
        without = parse_config(config(UBX))
        assert spec_of(with_seq).pipelined and retry_of(with_seq) == 3
        assert not spec_of(without).pipelined and retry_of(without) == 0
        assert spec_of(without).quiet and not spec_of(with_seq).quiet


class TestBad:
    def test_codec_frame_needs_a_declaration(self) -> None:
        """Codec frame without device.frame is an error naming the codec's line."""
        [line] = errors_of("device:\n  port: sim\n  codec: frame\n")
        assert line.startswith("x.yaml:3: device.codec: codec frame reads its framing")

    @pytest.mark.parametrize(
        ("frame", "where", "words"),
        [
            ('start: "b5 6"\nheader: 4\nend: "03"', "5: device.frame.start", "expected hex bytes"),
            ('start: "02"\nheader: 65\nend: "03"', "6: device.frame.header", "0..64"),
            ('start: "02"\nend: "03"', "4: device.frame", "needs header"),
            (
                'start: "02"\nheader: 2\nlength: {offset: 0, size: 3}',
                "7: device.frame.length.size",
                "1, 2 or 4",
            ),
            (
                'start: "02"\nheader: 2\nlength: {offset: 0}',
                "7: device.frame.length",
                "needs size",
            ),
            (
                'start: "02"\nheader: 2\nlength: {offset: 0, size: 1, ordr: big}',
                "7: device.frame.length.ordr",
                "did you mean 'order'?",
            ),
            (
                'start: "02"\nheader: 1\nend: "03"\ncheck: {kind: CRC-16/MODBS}',
                "8: device.frame.check.kind",
                "did you mean 'CRC-16/MODBUS'?",
            ),
            (
                'start: "02"\nheader: 1\nend: "03"\nstuffing: hdlc',
                "8: device.frame.stuffing",
                "expected one of none, slip, cobs",
            ),
            (
                'start: "02"\nheader: 1\nend: "03"\nevent: {offset: 0, values: ["0102"]}',
                "8: device.frame.event.values",
                "one byte",
            ),
            (
                'start: "02"\nheader: 1\nend: "03"\nsatus: {offset: 0}',
                "8: device.frame.satus",
                "did you mean 'status'?",
            ),
            (
                'start: "02"\nheader: 2\nlength: {offset: 1, size: 2}',
                "7: device.frame.length.offset",
                "inside the 2-byte header",
            ),
            ('header: 2\nend: "03"', "4: device.frame.start", "a way to be found"),
            ('start: "02"\nheader: 2', "4: device.frame.length", "a way to end"),
        ],
    )
    def test_each_mistake(self, frame: str, where: str, words: str) -> None:
        """Each bad key gives one message at its file:line, naming its key path."""
        [line] = errors_of(config(frame))
        assert line.startswith(f"x.yaml:{where}:"), line
        assert words in line

    def test_window_beyond_the_seq_field(self) -> None:
        """A window the seq field cannot number twice over is refused."""
        frame = 'start: "02"\nheader: 2\nlength: {offset: 0, size: 1}\nseq: {offset: 1, size: 1}'
        [line] = errors_of(config(frame, "  window: 129\n"))
        assert line.startswith("x.yaml:9: device.frame.seq.size:") and "at most 128" in line

    def test_ping_must_hold_the_header(self) -> None:
        """A ping shorter than the header is refused at heartbeat.payload's line."""
        text = config(UBX) + 'heartbeat:\n  payload: "0a"\n'
        [line] = errors_of(text)
        assert line.startswith("x.yaml:10: heartbeat.payload:") and "4-byte header" in line


# --- the worked declarations of docs/config.md ---------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs" / "config.md"


def worked() -> list[Config]:
    """The three declarations docs/config.md works through, parsed (port: sim added)."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Binary framings") :]
    section = section[: section.index("\n### ", 1)]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    return [
        parse_config(block.replace("device:\n", "device:\n  port: sim\n", 1)) for block in blocks
    ]


class TestWorkedDeclarations:
    def test_three_parse(self) -> None:
        """docs/config.md works through three declarations, each a valid config."""
        assert len(worked()) == 3

    def test_each_passes_check_config(self, tmp_path: Path) -> None:
        """Each worked declaration, as a config file, passes `verld --check-config`."""
        text = DOCS.read_text(encoding="utf-8")
        section = text[text.index("### Binary framings") :]
        section = section[: section.index("\n### ", 1)]
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", section, re.S)):
            path = tmp_path / f"worked{i}.yaml"
            path.write_text(block.replace("device:\n", "device:\n  port: /dev/ttyUSB0\n", 1))
            run = subprocess.run(
                [sys.executable, "-m", "verld", "--check-config", str(path)],
                check=False,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert (run.returncode, run.stdout) == (0, f"{path}: ok\n"), run.stderr

    def test_ubx_against_pyubx2(self) -> None:
        """The UBX declaration frames as pyubx2 does and reads pyubx2's frames among noise."""
        ubx = worked()[0]
        assert ubx.device.frame is not None
        form = FrameFormat(ubx.device.frame, ubx.device.max_payload)
        messages = [
            UBXMessage("MON", "MON-VER", POLL),
            UBXMessage("CFG", "CFG-MSG", POLL, msgClass=0x01, msgID=0x07),
            UBXMessage("CFG", "CFG-RATE", SET, measRate=200, navRate=1, timeRef=0),
        ]
        wires = [message.serialize() for message in messages]
        for wire in wires:
            # the data is the header (class, id, length) and the payload
            assert form.encode(wire[2:-2]) == wire
        found = FrameReader(form).feed(b"\xb5\x00\xb5".join(wires))
        assert found == [wire[2:-2] for wire in wires]
        ping = spec_of(ubx).device_ping(ubx)
        assert ping is not None and form.encode(ping) == wires[0]

    def test_stx_pipelined(self) -> None:
        """The STX declaration numbers calls in its seq byte, CRC-16/MODBUS low byte first."""
        # (the Modbus RTU example: 01 03 00 00 00 0A → C5 CD)
        stx = worked()[1]
        assert stx.device.frame is not None and spec_of(stx).pipelined
        form = FrameFormat(stx.device.frame, stx.device.max_payload)
        wire = form.encode(bytes.fromhex("000301") + b"\x00\x00\x00\x0a", 7)
        assert wire[:4] == bytes.fromhex("02040701") and wire[-1:] == b"\x03"
        crc = bytes.fromhex("c5cd")
        modbus = FrameFormat(
            dataclasses.replace(stx.device.frame, header=0, length=None, seq=None, event=None),
            MAX,
        )
        assert modbus.encode(bytes.fromhex("01030000000a"))[1:-1] == (
            bytes.fromhex("01030000000a") + crc
        )

    def test_slip_with_crc(self) -> None:
        """The SLIP declaration's check is CRC-16/XMODEM (binascii.crc_hqx from 0), big-endian."""
        slip = worked()[2]
        assert slip.device.frame is not None
        form = FrameFormat(slip.device.frame, slip.device.max_payload)
        data = b"\x01\xc0payload\xdb"
        crc = binascii.crc_hqx(data, 0).to_bytes(2, "big")
        frame = data + crc
        escaped = frame.replace(b"\xdb", b"\xdb\xdd").replace(b"\xc0", b"\xdb\xdc")
        assert form.encode(data) == escaped + b"\xc0"
        assert FrameReader(form).feed(b"\xc0" + escaped + b"\xc0") == [data]


# --- --frame FILE: verld's and verld-sim's command lines ----------------------------------


def frame_file(tmp_path: Path, text: str = UBX) -> Path:
    path = tmp_path / "frame.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


class TestFrameFile:
    def test_verld_takes_the_declaration(self, tmp_path: Path) -> None:
        """`verld PORT --codec frame --frame FILE` runs on the file's declaration."""
        path = frame_file(tmp_path)
        args = parser().parse_args(["sim", "--codec", "frame", "--frame", str(path)])
        start = start_config(args, euid=0, env={})
        assert start.cfg.device.frame == load_declaration(str(path))
        assert start.cfg.device.frame is not None and start.cfg.device.frame.header == 4

    def test_frame_needs_codec_frame(self, tmp_path: Path) -> None:
        """--frame with another codec is a usage error saying to add --codec frame."""
        args = parser().parse_args(["sim", "--frame", str(frame_file(tmp_path))])
        with pytest.raises(Usage, match="add --codec frame"):
            start_config(args, euid=0, env={})

    def test_a_bad_file_names_its_line(self, tmp_path: Path) -> None:
        """A mistake in the --frame file is reported with that file's name and line."""
        path = frame_file(tmp_path, 'start: "02"\nheader: 2\nlength: {offset: 0, size: 3}\n')
        with pytest.raises(ConfigError, match=rf"{path}:3: length.size: expected a field size"):
            load_declaration(str(path))

    def test_dump_reads_back(self) -> None:
        """A declaration written for the built-in sim reads back the same."""
        frame = parse_config(config(UBX)).device.frame
        assert frame is not None
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(dump_declaration(frame))
        try:
            assert load_declaration(f.name) == frame
        finally:
            os.unlink(f.name)

    def test_sim_personality_answers_in_the_framing(self, tmp_path: Path) -> None:
        """verld-sim's frame personality runs the command set on a request's payload."""
        frame = load_declaration(str(frame_file(tmp_path)))
        personality = make_personality("frame", 4096, frame=frame)
        form = FrameFormat(frame, 4096)
        [request] = personality.decode(form.encode(bytes.fromhex("0a040000") + b"\x01hi"))
        response = personality.respond(request)
        assert FrameReader(form).feed(b"".join(response.reply)) == [
            bytes.fromhex("0a040200") + b"hi"
        ]


def test_the_example_config_loads() -> None:
    """configs/frame.yaml is a valid config for a pipelined frame device."""
    cfg = load_config(Path(__file__).resolve().parent.parent / "configs" / "frame.yaml")
    assert spec_of(cfg).pipelined and cfg.device.frame is not None
