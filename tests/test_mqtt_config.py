"""Tests for verld.mqtt.config: defaults, the example file, strict validation and its messages."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from verld.config import parse_config
from verld.config.model import LogConfig
from verld.errors import ConfigError
from verld.mqtt.config import (
    BridgeConfig,
    BrokerConfig,
    DeviceInfo,
    load_bridge_config,
    parse_bridge_config,
    short_host,
)
from verld.mqtt.main import StartError, main, read_secrets

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def errors_of(text: str) -> list[str]:
    """The lines of the ConfigError that `text` raises."""
    with pytest.raises(ConfigError) as info:
        parse_bridge_config(text, "m.yaml")
    return str(info.value).splitlines()


def one_error(text: str) -> str:
    lines = errors_of(text)
    assert len(lines) == 1, lines
    return lines[0]


class TestDefaults:
    def test_empty_file_is_the_default(self) -> None:
        """An empty file gives every default of the contract."""
        cfg = parse_bridge_config("")
        assert cfg.broker == BrokerConfig()
        assert (cfg.base, cfg.qos, dict(cfg.devices), cfg.calls) == (None, 1, {}, True)
        assert (cfg.status_interval, cfg.homeassistant, cfg.log) == (30.0, False, LogConfig())

    def test_broker_defaults(self) -> None:
        """localhost:1883, MQTT 5, no TLS, no credentials, keepalive 30."""
        b = BrokerConfig()
        assert (b.host, b.port, b.protocol, b.tls, b.keepalive) == (
            "localhost",
            1883,
            "5",
            False,
            30,
        )
        assert b.ca is b.cert is b.key is b.username is b.password_file is b.client_id is None

    def test_base_defaults_to_the_short_host_name(self) -> None:
        """A null base is verld/ + the host name up to its first dot."""
        assert BridgeConfig().topic_base == f"verld/{socket.gethostname().split('.')[0]}"

    def test_client_id_defaults_to_the_short_host_name(self) -> None:
        """A null client_id is verld-mqtt-<short host>."""
        assert BridgeConfig().client_id == f"verld-mqtt-{short_host()}"

    def test_given_base_and_client_id_win(self) -> None:
        """A base and client_id in the file are used as written."""
        cfg = parse_bridge_config("base: site/a\nbroker: {client_id: me}\n")
        assert (cfg.topic_base, cfg.client_id) == ("site/a", "me")

    def test_example_file_is_valid_and_all_defaults(self) -> None:
        """configs/mqtt.yaml checks out and lists the defaults."""
        cfg = load_bridge_config(CONFIGS / "mqtt.yaml")
        assert cfg == BridgeConfig(source=str(CONFIGS / "mqtt.yaml"))

    def test_example_file_names_every_key(self) -> None:
        """Every key of the schema appears in configs/mqtt.yaml."""
        text = (CONFIGS / "mqtt.yaml").read_text()
        keys = [
            *BrokerConfig.__dataclass_fields__,
            "base",
            "qos",
            "devices",
            "calls",
            "status_interval",
            "homeassistant",
            "level",
            "format",
        ]
        assert [k for k in keys if f"{k}:" not in text] == []


class TestBroker:
    def test_protocol_3_1_1_unquoted(self) -> None:
        """An unquoted 3.1.1 is a string in YAML, and selects MQTT 3.1.1."""
        assert parse_bridge_config("broker: {protocol: 3.1.1}").broker.protocol == "3.1.1"

    def test_protocol_3_1_1_quoted(self) -> None:
        """A quoted "3.1.1" is accepted too."""
        assert parse_bridge_config('broker: {protocol: "3.1.1"}').broker.mqtt5 is False

    def test_protocol_3_1_float_says_how_to_write_it(self) -> None:
        """3.1 (a YAML float) is refused with the spelling that works."""
        assert "MQTT 3.1.1 is written 3.1.1" in one_error("broker: {protocol: 3.1}")

    def test_protocol_quoted_5_is_refused(self) -> None:
        """A quoted "5" is told to be a plain number."""
        assert "write 5, a plain number" in one_error("broker: {protocol: '5'}")

    @pytest.mark.parametrize("value", ["4", "311", "3", "true", "mqtt"])
    def test_other_protocols_refused(self, value: str) -> None:
        """Anything else than 5 or 3.1.1 is an error naming both."""
        assert "expected 5 or 3.1.1" in one_error(f"broker: {{protocol: {value}}}")

    @pytest.mark.parametrize("port", ["0", "65536", "'1883'", "1.5"])
    def test_bad_port(self, port: str) -> None:
        """broker.port is an integer 1..65535."""
        assert "broker.port: expected a TCP port 1..65535" in one_error(f"broker: {{port: {port}}}")

    def test_keepalive_must_be_positive(self) -> None:
        """keepalive 0 would never notice a dead broker: refused."""
        assert "broker.keepalive" in one_error("broker: {keepalive: 0}")

    def test_cert_without_key(self) -> None:
        """A client certificate needs its key."""
        assert "needs broker.key too" in one_error("broker: {tls: true, cert: /c.pem}")

    def test_key_without_cert(self) -> None:
        """A key needs its certificate."""
        assert "needs broker.cert too" in one_error("broker: {tls: true, key: /k.pem}")

    def test_tls_files_without_tls(self) -> None:
        """A CA file with tls: false is a mistake worth saying."""
        assert "broker.tls is false" in one_error("broker: {ca: /ca.pem}")

    def test_tls_with_system_cas(self) -> None:
        """tls: true without ca is valid (the system CAs)."""
        assert parse_bridge_config("broker: {tls: true}").broker.ca is None

    def test_password_file_needs_username(self) -> None:
        """A password goes with a user name."""
        assert "needs broker.username" in one_error("broker: {password_file: /p}")

    def test_username_alone_is_valid(self) -> None:
        """A user name without a password is allowed."""
        assert parse_bridge_config("broker: {username: u}").broker.username == "u"

    def test_files_are_not_opened_at_check_time(self) -> None:
        """Paths that do not exist pass validation (they are read at start)."""
        files = "ca: /n/a, cert: /n/c, key: /n/k, password_file: /no/p"
        text = f"broker: {{tls: true, username: u, {files}}}"
        assert parse_bridge_config(text).broker.password_file == "/no/p"

    def test_unknown_broker_key_gets_a_suggestion(self) -> None:
        """A misspelt broker key gets the closest valid one."""
        assert "did you mean 'keepalive'?" in one_error("broker: {keep_alive: 3}")


class TestTopLevel:
    def test_section_key_at_top_level(self) -> None:
        """A broker key written at the top level is told where it belongs."""
        assert one_error("port: 1883") == "m.yaml:1: port: unknown key; did you mean 'broker.port'?"

    @pytest.mark.parametrize(
        ("base", "words"),
        [
            ("verld/", "ends with '/'"),
            ("a/+/b", "wildcard"),
            ("a/#", "wildcard"),
            ("/a", "empty topic level"),
            ("a//b", "empty topic level"),
            ("$SYS/x", "broker"),
            ("''", "got ''"),
        ],
    )
    def test_bad_base(self, base: str, words: str) -> None:
        """A base is a plain topic prefix: no trailing slash, wildcards or empty levels."""
        assert words in one_error(f"base: {base}")

    @pytest.mark.parametrize("qos", ["3", "-1", "true", "1.0"])
    def test_bad_qos(self, qos: str) -> None:
        """qos is 0, 1 or 2."""
        assert "qos: expected a QoS 0..2" in one_error(f"qos: {qos}")

    def test_status_interval_zero_is_valid(self) -> None:
        """status_interval 0 means on link changes only."""
        assert parse_bridge_config("status_interval: 0").status_interval == 0

    def test_status_interval_negative(self) -> None:
        """A negative interval is refused."""
        assert "status_interval" in one_error("status_interval: -5")

    def test_top_level_must_be_a_mapping(self) -> None:
        """A list at the top level is refused."""
        assert "the top level must be a mapping" in one_error("- a\n")

    def test_errors_are_all_reported_with_lines(self) -> None:
        """Every bad key is reported, each with its line."""
        assert errors_of("qos: 5\ncalls: yes please\n") == [
            "m.yaml:1: qos: expected a QoS 0..2, got 5",
            "m.yaml:2: calls: expected true or false, got 'yes please'",
        ]

    def test_duplicate_key(self) -> None:
        """A key given twice is an error, as in verld's own config."""
        assert "duplicate key (first on line 1)" in one_error("qos: 1\nqos: 2\n")

    def test_log_section(self) -> None:
        """log.level and log.format are checked as verld's."""
        assert parse_bridge_config("log: {level: debug, format: json}").log == LogConfig(
            "DEBUG", "json"
        )
        assert "log.format" in one_error("log: {format: xml}")


class TestDevices:
    def test_devices_map(self) -> None:
        """NAME: socket path entries are kept in order."""
        cfg = parse_bridge_config("devices:\n  psu: /run/a.sock\n  scope-2: /run/b.sock\n")
        assert list(cfg.devices.items()) == [("psu", "/run/a.sock"), ("scope-2", "/run/b.sock")]

    def test_bridge_is_reserved(self) -> None:
        """A device may not be called `bridge`."""
        assert "reserved" in one_error("devices: {bridge: /run/a.sock}")

    @pytest.mark.parametrize("name", ["a.b", "a/b", "'a b'", "'+'", "'#'", "''"])
    def test_bad_names(self, name: str) -> None:
        """A name is one topic level of [A-Za-z0-9_-]."""
        assert "letters, digits" in one_error(f"devices: {{{name}: /run/a.sock}}")

    def test_number_name_is_told_to_quote(self) -> None:
        """A YAML number as a name is told to quote it."""
        assert "quote it" in one_error("devices: {1: /run/a.sock}")

    def test_same_socket_twice(self) -> None:
        """Two devices on one socket is a mistake."""
        assert "the same socket as device 'a'" in one_error("devices: {a: /s, b: /s}")

    def test_socket_path_too_long(self) -> None:
        """A socket path past sun_path's limit is refused at check time."""
        assert "limited to 107 bytes" in one_error(f"devices: {{a: /{'x' * 120}}}")

    def test_a_list_is_refused(self) -> None:
        """devices is a mapping, not a list."""
        assert "got a list" in one_error("devices: [/run/a.sock]")

    def test_empty_map_is_valid(self) -> None:
        """No devices is valid (the bridge warns at start)."""
        assert dict(parse_bridge_config("devices: {}").devices) == {}


class TestDeviceMappings:
    def test_a_mapping_gives_the_socket_and_what_home_assistant_shows(self) -> None:
        """{socket, name, model, manufacturer, area} beside a plain path: sockets and info."""
        cfg = parse_bridge_config(
            "devices:\n"
            "  psu: /run/a.sock\n"
            "  meter:\n"
            "    socket: /run/m.sock\n"
            "    name: Main meter\n"
            "    model: SDM630\n"
            "    manufacturer: Eastron\n"
            "    area: Garage\n"
            "  tiny: {socket: /run/t.sock}\n"
        )
        assert dict(cfg.devices) == {
            "psu": "/run/a.sock",
            "meter": "/run/m.sock",
            "tiny": "/run/t.sock",
        }
        assert dict(cfg.device_info) == {
            "meter": DeviceInfo("Main meter", "SDM630", "Eastron", "Garage"),
            "tiny": DeviceInfo(),
        }

    @pytest.mark.parametrize(
        ("entry", "error"),
        [
            ("{name: Meter}", "m.yaml:3: devices.meter: needs socket: the verld socket's path"),
            ("{socket: /run/m.sock, modle: X}", "m.yaml:3: devices.meter.modle: unknown key; "),
            ("{socket: /run/m.sock, area: ''}", "m.yaml:3: devices.meter.area: expected a non-"),
            ("{socket: /run/m.sock, name: [a]}", "m.yaml:3: devices.meter.name: expected a str"),
            ("{socket: 7}", "m.yaml:3: devices.meter.socket: expected a socket path, got 7"),
            ("{socket: /run/a.sock}", "m.yaml:3: devices.meter: the same socket as device 'a'"),
        ],
    )
    def test_a_bad_mapping_is_told_with_its_line(self, entry: str, error: str) -> None:
        """Each bad key of a device mapping: file:line, key path and what is wrong."""
        assert one_error(f"devices:\n  a: /run/a.sock\n  meter: {entry}\n").startswith(error)

    def test_an_entity_of_a_bad_device_mapping_is_not_told_twice(self) -> None:
        """The device's own error only, not also 'no device' on its entities."""
        text = (
            "devices:\n  meter: {name: M}\nentities:\n  - {device: meter, name: v, "
            "kind: sensor, poll: {hex: '01'}, value: {offset: 0, type: uint16}}\n"
        )
        assert "needs socket" in one_error(text)


class TestStart:
    def test_missing_password_file_is_exit_1(self, tmp_path: Path) -> None:
        """An unreadable password file stops the start with its path."""
        cfg = parse_bridge_config(f"broker: {{username: u, password_file: {tmp_path}/none}}")
        with pytest.raises(StartError, match="password_file"):
            read_secrets(cfg)

    def test_password_is_the_first_line_stripped(self, tmp_path: Path) -> None:
        """The password is the file's first line, without its spaces and newline."""
        (tmp_path / "pw").write_text("  s3cret \nother\n")
        cfg = parse_bridge_config(f"broker: {{username: u, password_file: {tmp_path}/pw}}")
        assert read_secrets(cfg).password == "s3cret"

    def test_missing_ca_is_exit_1(self, tmp_path: Path) -> None:
        """A CA file that does not exist stops the start."""
        cfg = parse_bridge_config(f"broker: {{tls: true, ca: {tmp_path}/ca.pem}}")
        with pytest.raises(StartError, match=r"broker\.ca .*no such file"):
            read_secrets(cfg)

    def test_tls_uses_system_cas(self) -> None:
        """tls: true without ca builds a context on the system CAs."""
        assert read_secrets(parse_bridge_config("broker: {tls: true}")).tls is not None

    def test_check_config_exit_codes(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--check-config exits 0 on a good file and 2 on a bad one."""
        bad = tmp_path / "bad.yaml"
        bad.write_text("qos: 9\n")
        assert main(["--check-config", str(CONFIGS / "mqtt.yaml")]) == 0
        assert main(["--check-config", str(bad)]) == 2
        assert "qos: expected a QoS 0..2" in capsys.readouterr().err

    def test_bad_config_exits_2(self, tmp_path: Path) -> None:
        """--config with an invalid file exits 2 before anything starts."""
        bad = tmp_path / "bad.yaml"
        bad.write_text("devices: {bridge: /s}\n")
        assert main(["--config", str(bad)]) == 2

    def test_unreadable_file_is_a_config_error(self, tmp_path: Path) -> None:
        """A config file that does not exist is exit 2."""
        assert main(["--check-config", str(tmp_path / "none.yaml")]) == 2


def test_verld_config_unchanged_by_the_shared_entry_point() -> None:
    """verld's own parse_config still names its source and reports errors with lines."""
    assert parse_config("", "v.yaml").source == "v.yaml"
    with pytest.raises(ConfigError, match=r"v\.yaml:1: device\.baudrate"):
        parse_config("device: {baudrate: 0}", "v.yaml")
