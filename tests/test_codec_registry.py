"""The codec registry: every codec by name, its traits, both its sides and its pings."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from verld import config as config_package
from verld.codec.base import Kind
from verld.codec.length import LengthCodec, LengthPortFraming
from verld.codec.line import LineCodec, LinePortFraming
from verld.codec.modbus import (
    ModbusRtuCodec,
    ModbusRtuPortFraming,
    ModbusTcpCodec,
    ModbusTcpPortFraming,
)
from verld.codec.registry import CODECS, spec, spec_of
from verld.codec.verl import VerlCodec, VerlPortFraming
from verld.config import Config, parse_config
from verld.config.model import DeviceConfig, HeartbeatConfig, LineConfig

CODEC_DIR = Path(__file__).resolve().parents[1] / "verld" / "codec"


def config(codec: str, payload: str = "", interval: float = 2.0, **line: str) -> Config:
    return Config(
        device=DeviceConfig(codec=codec, max_payload=64, line=LineConfig(**line)),
        heartbeat=HeartbeatConfig(interval=interval, payload=payload),
    )


class TestNames:
    def test_the_names_are_the_config_schemas_codecs_in_order(self) -> None:
        """The registry lists exactly the config schema's CODECS, in the same order."""
        assert tuple(CODECS) == tuple(config_package.CODECS)

    def test_each_spec_is_filed_under_its_own_name(self) -> None:
        """CODECS maps every name to the spec of that name."""
        assert all(found.name == name for name, found in CODECS.items())

    def test_an_unknown_name_is_a_value_error_naming_it(self) -> None:
        """spec("smoke") raises ValueError mentioning "smoke"."""
        with pytest.raises(ValueError, match="smoke"):
            spec("smoke")

    def test_spec_of_reads_device_codec(self) -> None:
        """spec_of(cfg) is the spec that cfg.device.codec names."""
        assert spec_of(config("line")) is spec("line")


class TestTraits:
    @pytest.mark.parametrize(
        ("name", "traits"),
        [
            ("verl", (True, True, False, False, False, True)),
            ("length", (False, False, False, False, False, True)),
            ("line", (False, False, False, False, True, True)),
            ("modbus-rtu", (False, False, True, True, False, False)),
            ("modbus-tcp", (True, False, True, False, False, False)),
        ],
    )
    def test_traits(self, name: str, traits: tuple[bool, ...]) -> None:
        """Each codec's (pipelined, port_window, bus, rtu, text, events) are as expected."""
        found = spec(name)
        got = (found.pipelined, found.port_window, found.bus, found.rtu, found.text, found.events)
        assert got == traits

    @pytest.mark.parametrize("name", ["verl", "length", "line", "modbus-rtu", "modbus-tcp"])
    def test_pipelined_is_the_host_codecs_own_word(self, name: str) -> None:
        """A spec's `pipelined` says what its host codec says (the session's window)."""
        cfg = parse_config(f"device: {{port: /dev/x, codec: {name}}}\n")
        assert spec(name).pipelined is spec(name).host(cfg).pipelined

    def test_specs_are_frozen(self) -> None:
        """A spec cannot be changed after it is made."""
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec("verl").name = "other"  # type: ignore[misc]


class TestFactories:
    @pytest.mark.parametrize(
        ("name", "host", "device"),
        [
            ("verl", VerlCodec, VerlPortFraming),
            ("length", LengthCodec, LengthPortFraming),
            ("line", LineCodec, LinePortFraming),
            ("modbus-rtu", ModbusRtuCodec, ModbusRtuPortFraming),
            ("modbus-tcp", ModbusTcpCodec, ModbusTcpPortFraming),
        ],
    )
    def test_each_side_is_its_codecs(self, name: str, host: type, device: type) -> None:
        """host(cfg) is the codec's daemon side and device(cfg) its device side."""
        cfg = config(name)
        assert isinstance(spec(name).host(cfg), host)
        assert isinstance(spec(name).device(cfg), device)

    def test_the_line_sides_take_the_line_settings(self) -> None:
        """line: the terminator, encoding and `end` pattern reach both sides."""
        cfg = config("line", terminator="\r\n", encoding="latin-1", end="^OK$")
        host = spec_of(cfg).host(cfg)
        assert host.encode_request(0, b"X") == b"X\r\n"
        reply = host.feed("\xe9\r\nOK\r\n".encode("latin-1"), True)
        assert [(m.kind, m.text) for m in reply] == [(Kind.REPLY, "\xe9\nOK")]
        device = spec_of(cfg).device(cfg)
        assert device.reply(None, 0, b"", "\xe9") == b"\xe9\r\n"

    def test_max_payload_bounds_the_host_side(self) -> None:
        """length: a reply above device.max_payload (+ status) puts the link out of step."""
        cfg = config("length")
        host = spec_of(cfg).host(cfg)
        host.feed((66).to_bytes(4, "big") + bytes(66), True)
        assert host.desync is not None


class TestPings:
    @pytest.mark.parametrize(
        ("name", "payload", "device_ping"),
        [
            ("verl", "", b""),
            ("verl", "0102", b""),
            ("length", "", b""),
            ("length", "0102", b"\x01\x02"),
            ("line", "", None),
            ("line", "*IDN?", b"*IDN?"),
            ("modbus-rtu", "", None),
            ("modbus-rtu", "010300000001", bytes.fromhex("010300000001")),
            ("modbus-tcp", "", None),
            ("modbus-tcp", "010300000001", bytes.fromhex("010300000001")),
        ],
    )
    @pytest.mark.parametrize("interval", [2.0, 0.0])
    def test_device_ping(
        self, name: str, payload: str, device_ping: bytes | None, interval: float
    ) -> None:
        """The device's ping per codec and heartbeat.payload, the heartbeat on or off."""
        cfg = config(name, payload, interval)
        assert spec(name).device_ping(cfg) == device_ping

    def test_line_pings_in_the_line_encoding(self) -> None:
        """line: heartbeat.payload is encoded with device.line.encoding."""
        cfg = config("line", "\xe9", 2.0, encoding="latin-1")
        assert spec_of(cfg).device_ping(cfg) == b"\xe9"


class TestChecks:
    @pytest.mark.parametrize("name", ["verl", "length", "line", "modbus-rtu", "modbus-tcp"])
    def test_the_defaults_pass(self, name: str) -> None:
        """Every codec can send the default settings (with a Modbus ping where it needs one)."""
        payload = "010300000001" if spec(name).bus else ""
        assert spec(name).check(config(name, payload)) == []

    @pytest.mark.parametrize(
        ("name", "payload", "paths", "message"),
        [
            ("verl", "not hex", None, ""),
            ("length", "zz", ("heartbeat.payload", "device.codec"), "as hex bytes"),
            ("length", "00" * 65, ("heartbeat.payload", "device.codec"), "65 bytes, more than"),
            ("modbus-tcp", "zz", ("heartbeat.payload", "device.codec"), "hex Modbus request"),
            ("modbus-rtu", "000300000001", ("heartbeat.payload", "device.codec"), "broadcast"),
            ("line", "\u20ac", ("heartbeat.payload", "device.line.encoding"), "latin-1"),
        ],
    )
    def test_a_payload_the_codec_cannot_send_is_a_problem(
        self, name: str, payload: str, paths: tuple[str, ...] | None, message: str
    ) -> None:
        """check() names the keys at fault and why, for a ping its codec cannot frame."""
        problems = spec(name).check(config(name, payload, encoding="latin-1"))
        if paths is None:
            assert problems == []
        else:
            [problem] = problems
            assert problem.paths == paths and message in problem.message

    def test_modbus_tcp_may_ping_unit_zero(self) -> None:
        """modbus-tcp: unit 0 is an ordinary unit, not a broadcast (RTU's alone)."""
        assert spec("modbus-tcp").check(config("modbus-tcp", "000300000001")) == []


def _imports(path: Path) -> set[str]:
    """The verld modules `path` imports (anywhere in it, TYPE_CHECKING included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.startswith("verld")}


class TestLayering:
    @pytest.mark.parametrize(
        "path", sorted(CODEC_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(CODEC_DIR))
    )
    def test_codecs_import_neither_the_simulator_nor_a_front(self, path: Path) -> None:
        """No codec module imports verld.sim or verld.fronts (the device side is the codec's)."""
        assert not {m for m in _imports(path) if m.startswith(("verld.sim", "verld.fronts"))}

    @pytest.mark.parametrize(
        "path", sorted(CODEC_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(CODEC_DIR))
    )
    def test_only_the_registry_knows_the_config(self, path: Path) -> None:
        """Only the registry and its shim import verld.config (codecs read Settings)."""
        if path.name not in ("registry.py", "select.py"):
            assert not {m for m in _imports(path) if m.startswith("verld.config")}
