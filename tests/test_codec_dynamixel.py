"""The Dynamixel Protocol 2.0 codec plugin (tests/plugins/verld-dynamixel, the example
docs/codecs.md walks through), byte by byte against the ROBOTIS SDK's own framing."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from codec_plugins import DYNAMIXEL, PLUGINS
from dynamixel_sdk.protocol2_packet_handler import Protocol2PacketHandler
from hypothesis import given
from hypothesis import strategies as st

from verld.codec.api import Inbound, Kind, PortRequest

sys.path.insert(0, str(PLUGINS / DYNAMIXEL))
import verld_dynamixel as dxl  # (the plugin's source, read in place)

sys.path.pop(0)

SDK = Protocol2PacketHandler()


def sdk_packet(ident: int, instruction: int, params: bytes) -> bytes:
    """The packet the ROBOTIS SDK writes (its stuffing and CRC), for comparison."""
    plain = [*dxl.HEADER, ident, 0, 0, instruction, *params, 0, 0]
    length = len(plain) - 7
    plain[5], plain[6] = length & 0xFF, length >> 8
    stuffed = SDK.addStuffing(plain)
    crc: int = SDK.updateCRC(0, stuffed, len(stuffed) - 2)
    return bytes(stuffed[:-2]) + crc.to_bytes(2, "little")


def test_packet_is_the_sdks_read_instruction() -> None:
    """A READ of 4 bytes from 132 of servo 1 is the SDK's packet, CRC-16/UMTS included."""
    wire = dxl.packet(1, 0x02, bytes.fromhex("84000400"))
    assert wire == bytes.fromhex("fffffd0001070002840004001d15")
    assert wire == sdk_packet(1, 0x02, bytes.fromhex("84000400"))


def test_stuffing_inserts_fd_after_the_header_pattern() -> None:
    """`FF FF FD` inside a packet is sent as `FF FF FD FD`, and LENGTH counts the FD."""
    wire = dxl.packet(1, 0x03, bytes.fromhex("4000fffffd01"))
    assert bytes.fromhex("fffffdfd01") in wire
    assert int.from_bytes(wire[5:7], "little") == 10
    assert wire == sdk_packet(1, 0x03, bytes.fromhex("4000fffffd01"))


@given(st.binary(max_size=64))
def test_stuffing_matches_the_sdk_and_round_trips(params: bytes) -> None:
    """Any parameters are framed as the SDK frames them and unstuffed back unchanged."""
    assert dxl.packet(7, 0x03, params) == sdk_packet(7, 0x03, params)
    assert dxl.unstuff(dxl.stuff(b"\x03" + params)) == b"\x03" + params


@given(st.binary(max_size=40), st.binary(max_size=8))
def test_port_reads_requests_fed_in_any_chunks_after_noise(params: bytes, noise: bytes) -> None:
    """Noise, then two packets fed a byte at a time: both requests come out, tagged by ID."""
    port = dxl.DynamixelPort(256)
    stream = noise + sdk_packet(3, 0x03, params) + sdk_packet(4, 0x02, b"\x84\x00\x04\x00")
    found: list[PortRequest] = []
    for i in range(len(stream)):
        found += port.feed(stream[i : i + 1])
    assert found[-2:] == [
        PortRequest(3, b"\x03\x03" + params),
        PortRequest(4, b"\x04\x02\x84\x00\x04\x00"),
    ]


def test_port_answers_with_a_status_packet_from_the_requests_id() -> None:
    """The reply is a status packet from the ID the request went to: error byte, params."""
    port = dxl.DynamixelPort(256)
    assert port.reply(5, 0, b"\x00\x08", None) == sdk_packet(5, 0x55, b"\x00\x00\x08")
    assert port.reply(5, None, b"", None) == b""  # no answer: the program's timeout runs
    assert port.event(b"tick", None) == b""  # a servo sends nothing unasked


def test_host_reply_is_the_status_error_byte_and_params() -> None:
    """verld's side: the call's payload goes out as a packet; the status packet is its reply."""
    host = dxl.DynamixelHost(256)
    assert host.encode_request(0, b"\x01\x02\x84\x00\x04\x00") == sdk_packet(1, 2, b"\x84\0\4\0")
    reply = host.feed(sdk_packet(1, 0x55, b"\x00\x00\x08\x00\x00"), True)
    assert reply == [Inbound(Kind.REPLY, None, 0, b"\x00\x08\x00\x00")]


def test_host_drops_bad_crc_and_unasked_status_as_noise() -> None:
    """A packet failing its CRC, and a status nobody waits for, are counted, never replies."""
    host = dxl.DynamixelHost(256)
    good = sdk_packet(1, 0x55, b"\x00\x01")
    damaged = good[:-1] + bytes((good[-1] ^ 1,))
    assert host.feed(damaged + good, False) == []
    assert host.bad_frames == 2
    assert host.feed(good, True) == [Inbound(Kind.REPLY, None, 0, b"\x01")]


def test_host_refuses_a_call_without_id_and_instruction() -> None:
    """A call shorter than ID and instruction is refused before it is sent."""
    assert dxl.DynamixelHost(256).refuse(b"\x01") is not None
    assert dxl.DynamixelHost(256).refuse(b"\x01\x01") is None


def test_the_docs_walk_the_plugins_own_code() -> None:
    """Every code block docs/codecs.md shows of the plugin is in its source as shown."""
    doc = (Path(__file__).parents[1] / "docs" / "codecs.md").read_text()
    package = PLUGINS / DYNAMIXEL
    source = (package / "verld_dynamixel.py").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.DOTALL)
    assert len(blocks) == 5
    for block in blocks:
        assert block in source
    (toml,) = re.findall(r"```toml\n(.*?)```", doc, re.DOTALL)
    assert toml in (package / "pyproject.toml").read_text()
