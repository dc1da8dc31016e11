"""Tests for verld.config: defaults, example files, strict validation and its messages."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType
from typing import NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verld.config.load as config_module
from verld.config import (
    DEFAULT_ACTIONS,
    ApiConfig,
    Config,
    DeviceConfig,
    HeartbeatConfig,
    LineConfig,
    LogConfig,
    MetricsConfig,
    NetworkConfig,
    PortConfig,
    ReconnectConfig,
    RoleList,
    RolesConfig,
    actions_table,
    changed_keys,
    default_config,
    load_config,
    parse_config,
    tcp_target,
)
from verld.errors import ConfigError, VerldError

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def errors_of(text: str, source: str = "x.yaml") -> list[str]:
    """The lines of the ConfigError that `text` raises."""
    with pytest.raises(ConfigError) as info:
        parse_config(text, source)
    return str(info.value).splitlines()


def one_error(text: str) -> str:
    """The single error line that `text` raises."""
    lines = errors_of(text)
    assert len(lines) == 1, lines
    return lines[0]


class TestDefaults:
    def test_empty_text_gives_defaults(self) -> None:
        """An empty file, or one with only comments, is the default config."""
        expected = dataclasses.replace(default_config(), source="<string>")
        assert parse_config("") == parse_config("# nothing\n") == expected

    def test_default_values_match_the_design(self) -> None:
        """The defaults are the ones docs/config.md shows."""
        config = default_config()
        assert config.device.port == "/dev/ttyUSB0"
        assert config.device.codec == "verl"
        assert config.device.timeout == 5.0
        assert config.device.retry is None  # (the codec's own: 3 on verl, 0 on line)
        assert config.device.line.terminator == "\n"
        assert config.heartbeat == HeartbeatConfig(interval=2.0, misses=3, timeout=1.0)
        assert config.api.mode == 0o660
        assert config.api.socket == "/run/verld/verld.sock"
        assert config.metrics.listen is None
        assert config.log == LogConfig(level="INFO", format="auto")

    def test_every_dataclass_builds_without_arguments(self) -> None:
        """Every config dataclass has a default for every field."""
        for cls in (
            LineConfig,
            DeviceConfig,
            HeartbeatConfig,
            ReconnectConfig,
            RoleList,
            RolesConfig,
            ApiConfig,
            MetricsConfig,
            LogConfig,
            Config,
        ):
            assert dataclasses.is_dataclass(cls())

    def test_config_is_frozen(self) -> None:
        """A config cannot be changed after it is built."""
        config = default_config()
        with pytest.raises(dataclasses.FrozenInstanceError):
            config.device.timeout = 1.0  # type: ignore[misc]

    def test_actions_are_read_only(self) -> None:
        """device.actions is a read-only mapping."""
        actions = parse_config("device: {actions: {reset: 16}}").device.actions
        assert isinstance(actions, MappingProxyType)
        with pytest.raises(TypeError):
            actions["x"] = 1  # type: ignore[index]

    def test_source_is_the_path(self, tmp_path: Path) -> None:
        """A loaded config remembers the file it came from."""
        path = tmp_path / "v.yaml"
        path.write_text("device: {port: sim}\n")
        assert load_config(path).source == str(path)
        assert parse_config("").source == "<string>"

    def test_null_section_is_empty(self) -> None:
        """A section whose keys are all commented out takes the defaults."""
        assert parse_config("device:\n  # port: sim\n").device == DeviceConfig()


class TestExampleConfigs:
    @pytest.mark.parametrize("name", ["verld.yaml", "demo_config.yaml", "reference.yaml"])
    def test_example_loads(self, name: str) -> None:
        """Each example config in configs/ loads cleanly."""
        assert load_config(CONFIGS / name).source == str(CONFIGS / name)

    def test_full_example_is_all_defaults(self) -> None:
        """configs/verld.yaml spells out exactly the defaults."""
        assert changed_keys(default_config(), load_config(CONFIGS / "verld.yaml")) == []

    def test_full_example_has_every_key(self) -> None:
        """configs/verld.yaml mentions every key of every section."""
        text = (CONFIGS / "verld.yaml").read_text()
        for section in dataclasses.fields(Config):
            if section.name == "source":
                continue
            if section.name == "ports":  # a list: its entries' keys, in the comment
                fields = dataclasses.fields(PortConfig)
            elif section.name == "network":
                fields = dataclasses.fields(NetworkConfig)
            else:
                fields = dataclasses.fields(getattr(default_config(), section.name))
            for f in fields:
                assert f"{f.name}:" in text, f"{section.name}.{f.name}"

    def test_demo_config(self) -> None:
        """The demo runs the simulator on verl with a console log in /tmp."""
        config = load_config(CONFIGS / "demo_config.yaml")
        assert config.device.port == "sim"
        assert config.device.codec == "verl"
        assert config.heartbeat.interval == 2
        assert config.api.socket == "/tmp/verld-demo.sock"
        assert config.log.format == "console"


class TestReferenceFormat:
    def test_reference_example_means_tcp_length(self) -> None:
        """The reference example is a TCP link to 127.0.0.1:8080 with the length codec."""
        config = load_config(CONFIGS / "reference.yaml")
        assert config.device.port == "tcp://127.0.0.1:8080"
        assert config.device.codec == "length"
        assert config.device.timeout == 5.0
        assert config.device.retry == 3
        assert config.log.level == "INFO"

    def test_flat_keys_map_to_sections(self) -> None:
        """Flat keys set device.port, codec, timeout, retry and log.level."""
        config = parse_config(
            "host: dev.local\nport: 9000\ntimeout: 2\nretry: 0\nlog_level: debug\nadapter: verl\n"
        )
        assert config.device.port == "tcp://dev.local:9000"
        assert config.device.codec == "verl"
        assert (config.device.timeout, config.device.retry) == (2.0, 0)
        assert config.log.level == "DEBUG"

    def test_flat_defaults(self) -> None:
        """A flat file with just a timeout uses host 127.0.0.1 and port 8080."""
        assert parse_config("timeout: 1.5").device.port == "tcp://127.0.0.1:8080"

    def test_flat_ipv6_host_is_bracketed(self) -> None:
        """An IPv6 host becomes tcp://[addr]:port."""
        config = parse_config('host: "::1"')
        assert config.device.port == "tcp://[::1]:8080"
        assert tcp_target(config.device.port) == ("::1", 8080)

    def test_flat_unknown_key_suggests_timeout(self) -> None:
        """The reference pitfall: max_wait_time is rejected with a hint to use timeout."""
        line = one_error("host: 10.0.0.2\nport: 9000\nmax_wait_time: 3\n")
        assert line == "x.yaml:3: max_wait_time: unknown key; did you mean 'timeout'?"

    def test_flat_bad_adapter(self) -> None:
        """adapter must be a codec name."""
        line = one_error("host: h\nadapter: tcp\n")
        assert "adapter: expected one of verl, length, line" in line

    def test_flat_port_must_be_a_tcp_port(self) -> None:
        """A serial path as a top-level port is meant for device.port: said so."""
        assert one_error("port: /dev/ttyUSB0\n") == (
            "x.yaml:1: port: expected a TCP port 1..65535 (the reference flat format), "
            "got '/dev/ttyUSB0'; did you mean 'device.port'?"
        )

    @pytest.mark.parametrize("port", ["sim", "tcp://10.0.0.5:4001", "rfc2217://h:2217", "COM3"])
    def test_any_device_as_top_level_port_suggests_device_port(self, port: str) -> None:
        """Whatever is not a port number (sim, a URL, a name) is a device for device.port."""
        assert one_error(f"port: {port}\n").endswith("did you mean 'device.port'?")

    def test_numeric_port_is_still_the_flat_formats(self) -> None:
        """A port number (even quoted) stays the flat format's TCP port and its checks."""
        assert parse_config("port: 4001\n").device.port == "tcp://127.0.0.1:4001"
        assert "remove the quotes" in one_error('port: "4001"\n')
        assert one_error("port: 70000\n").endswith("expected a TCP port 1..65535, got 70000")

    def test_flat_file_written_for_a_serial_device(self) -> None:
        """A flat new-user file gets every key named where it goes, all at once, with its line."""
        # The new user's file: a device path and a baud rate at the top level.
        assert errors_of("port: /dev/ttyUSB0\nbaudrate: 9600\ncodec: line\ntimeout: 2\n") == [
            "x.yaml:1: port: expected a TCP port 1..65535 (the reference flat format), "
            "got '/dev/ttyUSB0'; did you mean 'device.port'?",
            "x.yaml:2: baudrate: unknown key; did you mean 'device.baudrate'?",
            "x.yaml:3: codec: unknown key; did you mean 'device.codec'?",
            "x.yaml:4: timeout: unknown key; did you mean 'device.timeout'?",
        ]

    def test_host_beside_a_device_path_says_how_tcp_is_written(self) -> None:
        """`host` means nothing next to a device path: the TCP spelling is given instead."""
        line = errors_of("host: h\nport: /dev/ttyS0\n")[0]
        assert line.startswith("x.yaml:1: host: unknown key beside a device path as port")
        assert "device.port: tcp://HOST:PORT" in line

    def test_section_key_in_a_flat_file_names_its_section(self) -> None:
        """In a real flat file a sectioned key gets its path, not a near flat name."""
        lines = errors_of("host: h\nport: 4001\nbaudrate: 9600\nparity: even\n")
        assert lines == [
            "x.yaml:3: baudrate: unknown key; did you mean 'device.baudrate'? "
            "(in sections: the flat format has no such key)",
            "x.yaml:4: parity: unknown key; did you mean 'device.parity'? "
            "(in sections: the flat format has no such key)",
        ]

    def test_flat_names_and_aliases_win_in_a_flat_file(self) -> None:
        """A flat file's `codec` is its `adapter`; a misspelt flat key its flat name."""
        assert one_error("host: h\ncodec: line\n").endswith("did you mean 'adapter'?")
        assert one_error("host: h\ntimout: 2\n").endswith("did you mean 'timeout'?")
        assert one_error("host: h\nzzzz: 2\n").endswith(
            "valid keys here: host, port, timeout, retry, log_level, adapter"
        )

    def test_device_path_port_beside_sections(self) -> None:
        """A top-level device path next to `device:` is still meant for device.port."""
        line = one_error("device:\n  baudrate: 9600\nport: /dev/ttyUSB0\n")
        assert line.startswith("x.yaml:3: port: ") and line.endswith("'device.port'?")

    def test_reference_example_still_valid(self) -> None:
        """configs/reference.yaml, the reference format, loads (top-level host, port, ...)."""
        assert load_config(CONFIGS / "reference.yaml").device.codec == "length"

    def test_mixing_flat_and_sections_is_an_error(self) -> None:
        """Flat keys beside sections are rejected, naming the sectioned equivalent."""
        lines = errors_of("timeout: 3\ndevice:\n  port: sim\n")
        assert lines == [
            "x.yaml:1: timeout: reference flat-format key mixed with sections (device); "
            "use one format: in sections write device.timeout"
        ]


class TestUnknownKeys:
    def test_typo_names_path_line_and_suggestion(self) -> None:
        """device.timout is reported with its line and the suggestion timeout."""
        line = one_error("device:\n  port: sim\n  timout: 3\n")
        assert line == "x.yaml:3: device.timout: unknown key; did you mean 'timeout'?"

    @pytest.mark.parametrize(
        ("key", "section", "expected"),
        [
            ("max_wait_time", "device", "timeout"),
            ("wait", "device", "timeout"),
            ("timeout_s", "heartbeat", "timeout"),
            ("retries", "device", "retry"),
            ("max_retries", "device", "retry"),
            ("baud", "device", "baudrate"),
            ("baud_rate", "device", "baudrate"),
            ("speed", "device", "baudrate"),
            ("path", "device", "port"),
            ("device", "device", "port"),
            ("path", "api", "socket"),
            ("loglevel", "log", "level"),
            ("Timeout", "device", "timeout"),
            ("max-payload", "device", "max_payload"),
        ],
    )
    def test_aliases_point_at_real_keys(self, key: str, section: str, expected: str) -> None:
        """Known aliases and near misses suggest the real key of that section."""
        line = one_error(f"{section}:\n  {key}: 1\n")
        assert line.endswith(f"{section}.{key}: unknown key; did you mean '{expected}'?")

    def test_no_suggestion_lists_valid_keys(self) -> None:
        """A key like nothing valid lists the valid keys of its section."""
        line = one_error("reconnect:\n  zzzz: 1\n")
        assert line.endswith("reconnect.zzzz: unknown key; valid keys here: initial, max")

    def test_top_level_leaf_suggests_dotted_path(self) -> None:
        """A section's key at the top level suggests its full path."""
        line = one_error("device: {port: sim}\nbaudrate: 9600\n")
        assert line.endswith("baudrate: unknown key; did you mean 'device.baudrate'?")

    def test_top_level_leaf_alone_suggests_dotted_path(self) -> None:
        """`baudrate: 9600` alone (no section at all) suggests device.baudrate."""
        assert one_error("baudrate: 9600\n") == (
            "x.yaml:1: baudrate: unknown key; did you mean 'device.baudrate'?"
        )

    @pytest.mark.parametrize(
        ("key", "expected"),
        [
            ("mode", "api.mode"),
            ("codec", "device.codec"),
            ("baud", "device.baudrate"),
            ("interval", "heartbeat.interval"),
            ("listen", "metrics.listen"),
            ("socket", "api.socket"),
            ("level", "log.level"),
            ("logs", "log"),
        ],
    )
    def test_top_level_names_before_spellings(self, key: str, expected: str) -> None:
        """A section's key by name or alias wins over a near spelling (mode: not modbus)."""
        line = one_error(f"device: {{port: sim}}\n{key}: x\n")
        assert line.endswith(f"did you mean '{expected}'?")

    def test_misspelt_section(self) -> None:
        """A misspelt section name suggests the section."""
        assert one_error("heartbeet: {}\n").endswith("did you mean 'heartbeat'?")

    def test_non_string_key(self) -> None:
        """A key YAML reads as a boolean is reported as such."""
        assert "keys must be strings" in one_error("device:\n  on: 1\n")


class TestDuplicates:
    def test_duplicate_key_names_both_lines(self) -> None:
        """A key given twice is an error naming both lines."""
        line = one_error("device:\n  timeout: 1\n  port: sim\n  timeout: 2\n")
        assert line == "x.yaml:4: device.timeout: duplicate key (first on line 2)"

    def test_duplicate_section(self) -> None:
        """A section given twice is an error too."""
        assert one_error("log: {}\nlog: {}\n") == "x.yaml:2: log: duplicate key (first on line 1)"

    def test_merge_keys_are_not_duplicates(self) -> None:
        """A YAML merge (<<) may be overridden by an explicit key."""
        config = parse_config("device:\n  <<: {timeout: 1, retry: 0}\n  timeout: 2\n")
        assert (config.device.timeout, config.device.retry) == (2.0, 0)


class TestTypes:
    def test_bool_for_int(self) -> None:
        """A boolean where an integer is expected is rejected, showing what YAML read."""
        line = one_error("device:\n  retry: yes\n")
        assert (
            line
            == "x.yaml:2: device.retry: expected an integer >= 0, got yes (YAML reads it as true)"
        )

    def test_float_for_int(self) -> None:
        """A float where an integer is expected is rejected."""
        assert "expected an integer 5..8, got 7.5" in one_error("device: {bytesize: 7.5}")

    def test_string_for_number(self) -> None:
        """A string where seconds are expected says what was expected and given."""
        line = one_error("device:\n  timeout: abc\n")
        assert line == "x.yaml:2: device.timeout: expected a number of seconds > 0, got 'abc'"

    def test_quoted_number_hints_to_unquote(self) -> None:
        """A quoted number for a number field suggests removing the quotes."""
        assert "remove the quotes" in one_error('device: {baudrate: "9600"}')

    def test_int_for_float_is_fine(self) -> None:
        """Seconds accept integers."""
        assert parse_config("device: {timeout: 2}").device.timeout == 2.0

    def test_string_for_bool(self) -> None:
        """A string where a boolean is expected is rejected."""
        assert "expected true or false, got 'maybe'" in one_error("device: {rtscts: maybe}")

    def test_int_for_pattern_says_quote_it(self) -> None:
        """A pattern YAML read as a number must be quoted."""
        line = one_error("device:\n  line:\n    end: 0100\n")
        assert line == (
            "x.yaml:3: device.line.end: expected a regular expression (a string), "
            'got 0100 (YAML reads it as 64); quote it: "0100"'
        )

    def test_bool_for_payload_says_quote_it(self) -> None:
        """A line heartbeat payload of ON (a boolean to YAML) must be quoted."""
        line = one_error("device: {codec: line}\nheartbeat:\n  payload: ON\n")
        assert line.endswith('got ON (YAML reads it as true); quote it: "ON"')

    def test_empty_value(self) -> None:
        """A key with no value where a number is expected says so."""
        assert one_error("device:\n  timeout:\n").endswith("got an empty value")

    def test_non_finite_seconds(self) -> None:
        """Infinite and NaN seconds are rejected."""
        assert len(errors_of("device: {timeout: .inf, guard: .nan}")) == 2

    def test_section_must_be_a_mapping(self) -> None:
        """A section given as a scalar is rejected."""
        assert one_error("device: 5\n") == "x.yaml:1: device: expected a mapping of keys, got 5"

    def test_top_level_must_be_a_mapping(self) -> None:
        """A list at the top level is rejected."""
        assert "top level must be a mapping" in one_error("- a\n- b\n")


class TestValues:
    @pytest.mark.parametrize(
        "port", ["sim", "/dev/ttyUSB0", "tcp://10.0.0.5:4001", "tcp://[::1]:9", "rfc2217://h:7"]
    )
    def test_valid_ports(self, port: str) -> None:
        """Device paths, tcp:// targets, pyserial URLs and sim are accepted."""
        assert parse_config(f'device: {{port: "{port}"}}').device.port == port

    @pytest.mark.parametrize(
        ("port", "message"),
        [
            ("tcp://host", "expected tcp://HOST:PORT"),
            ("tcp://host:70000", "1..65535"),
            ("tpc://host:1", "did you mean 'tcp://'?"),
            ("", "expected a serial device path"),
        ],
    )
    def test_bad_ports(self, port: str, message: str) -> None:
        """Malformed TCP targets, unknown URL schemes and empty ports are rejected."""
        assert message in one_error(f'device: {{port: "{port}"}}')

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("device: {baudrate: 0}", "a baud rate > 0"),
            ("device: {bytesize: 9}", "an integer 5..8"),
            ("device: {parity: nne}", "did you mean 'none'?"),
            ("device: {stopbits: 3}", "1, 1.5 or 2"),
            ("device: {codec: cobs}", "one of verl, length, line"),
            ("device: {guard: -1}", "seconds >= 0"),
            ("device: {window: 0}", "1..32768"),
            ("device: {max_payload: 2000000}", "1..1048576"),
            ("device: {actions: {reset: 256}}", "an opcode 0..255"),
            ('device: {line: {terminator: ""}}', "a non-empty string"),
            ("device: {line: {encoding: klingon}}", "unknown encoding"),
            ("device: {line: {encoding: base64}}", "not a text encoding"),
            ("heartbeat: {misses: 0}", "an integer > 0"),
            ("heartbeat: {timeout: 0}", "seconds > 0"),
            ("reconnect: {initial: 2, max: 1}", "must be >= reconnect.initial"),
            ("api: {socket: ''}", "a socket path"),
            (f"api: {{socket: /{'x' * 120}}}", "limited to 107 bytes"),
            ("api: {queue_limit: 0}", "an integer > 0"),
            ("api: {lease_max: 0}", "seconds > 0"),
            ("api: {group: ''}", "a group name"),
            ("metrics: {listen: localhost}", "HOST:PORT"),
            ("log: {level: verbose}", "one of DEBUG, INFO, WARNING, ERROR"),
            ("log: {format: xml}", "one of auto, console, json, journal"),
        ],
    )
    def test_bad_values(self, text: str, message: str) -> None:
        """Out-of-range and unknown values are rejected with what was expected."""
        assert message in one_error(text)

    def test_stopbits_one_and_a_half(self) -> None:
        """stopbits accepts 1.5."""
        assert parse_config("device: {stopbits: 1.5}").device.stopbits == 1.5

    def test_enums_are_case_insensitive(self) -> None:
        """log.level is stored upper case, other enums lower case."""
        config = parse_config("log: {level: debug, format: JSON}\ndevice: {codec: Line}")
        assert (config.log.level, config.log.format, config.device.codec) == (
            "DEBUG",
            "json",
            "line",
        )

    def test_group_name_or_gid(self) -> None:
        """api.group is a name, a gid or null."""
        assert parse_config("api: {group: dialout}").api.group == "dialout"
        assert parse_config("api: {group: 20}").api.group == 20

    def test_roles(self) -> None:
        """Role lists are tuples of ints."""
        config = parse_config("api:\n  roles:\n    admin: {uids: [0, 1000], gids: [27]}\n")
        assert config.api.roles.admin == RoleList(uids=(0, 1000), gids=(27,))
        assert config.api.roles.observer == RoleList()

    def test_role_names_are_not_looked_up(self) -> None:
        """A user name in a uid list says to use the number."""
        line = one_error("api:\n  roles:\n    admin:\n      uids:\n        - 0\n        - alice\n")
        assert line.startswith("x.yaml:6: api.roles.admin.uids[1]: expected a numeric uid")

    def test_metrics_listen(self) -> None:
        """metrics.listen takes HOST:PORT."""
        assert parse_config('metrics: {listen: "127.0.0.1:9108"}').metrics.listen

    def test_unquoted_backslash_terminator(self) -> None:
        """A terminator \\n outside double quotes is caught (it is a literal backslash)."""
        assert "literal backslash" in one_error("device:\n  line:\n    terminator: \\n\n")


class TestMode:
    @pytest.mark.parametrize("written", ['"0660"', '"660"', '"0o660"', "0660", "'0o660'"])
    def test_accepted_forms(self, written: str) -> None:
        """Quoted octal digits and a YAML octal integer all mean 0o660."""
        assert parse_config(f"api:\n  mode: {written}\n").api.mode == 0o660

    def test_unquoted_decimal_is_rejected_with_a_hint(self) -> None:
        """An unquoted 660 (decimal to YAML) is rejected with the quoted fix."""
        line = one_error("api:\n  mode: 660\n")
        assert line == (
            'x.yaml:2: api.mode: expected a file mode such as "0660" (at most 0o777), got 660, '
            'which YAML reads as the decimal number 660 (0o1224); quote it: mode: "0660"'
        )

    def test_non_octal_digits(self) -> None:
        """A quoted mode with non-octal digits is rejected."""
        assert "octal digits" in one_error('api: {mode: "0690"}')

    @pytest.mark.parametrize("written", ["999", "-1", "4000", "0o1777", "true", "6.6"])
    def test_other_bad_modes(self, written: str) -> None:
        """Other impossible modes are rejected with one clear line each."""
        assert "api.mode: expected a file mode" in one_error(f"api:\n  mode: {written}\n")

    def test_above_0o777(self) -> None:
        """Special bits are not allowed."""
        assert "at most 0o777" in one_error('api: {mode: "1777"}')


class TestCodecChecks:
    def test_length_payload_must_be_hex(self) -> None:
        """A length heartbeat payload that is not hex is rejected."""
        line = one_error("device:\n  codec: length\nheartbeat:\n  payload: hello\n")
        assert line.startswith("x.yaml:4: heartbeat.payload: codec length sends the payload as hex")

    def test_length_payload_hex_ok(self) -> None:
        """Hex with spaces is a valid length payload."""
        assert parse_config('device: {codec: length}\nheartbeat: {payload: "de ad"}')

    def test_line_payload_is_text(self) -> None:
        """A line heartbeat payload is any text."""
        config = parse_config('device: {codec: line}\nheartbeat: {payload: "*IDN?"}')
        assert config.heartbeat.payload == "*IDN?"

    def test_line_payload_must_encode(self) -> None:
        """A line payload must be encodable in the line encoding."""
        text = 'device: {codec: line, line: {encoding: ascii}}\nheartbeat: {payload: "é"}'
        assert "cannot be encoded in ascii" in one_error(text)

    def test_bad_regex_reports_re_error(self) -> None:
        """A pattern that does not compile reports the regex error."""
        line = one_error('device:\n  line:\n    end: "^(OK|ERROR$"\n')
        assert line.startswith("x.yaml:3: device.line.end: '^(OK|ERROR$' is not a valid regular")
        assert "missing ), unterminated subpattern" in line

    def test_empty_pattern_is_rejected(self) -> None:
        """An empty event pattern (matching every line) is rejected; null leaves it unset."""
        assert "use null" in one_error("device: {line: {event: ''}}")
        assert parse_config("device: {line: {event: null}}").device.line.event is None

    def test_line_settings(self) -> None:
        """Line patterns and terminators are kept as written."""
        text = 'device:\n  line: {terminator: "\\r\\n", end: "^(OK|ERROR)$", error: "^ERROR"}\n'
        line = parse_config(text).device.line
        assert (line.terminator, line.end, line.error) == ("\r\n", "^(OK|ERROR)$", "^ERROR")


class TestManyErrors:
    def test_all_errors_are_reported_in_line_order(self) -> None:
        """Every problem in a file is reported, one per line, in file order."""
        text = (
            "device:\n"
            "  timout: 3\n"  # 2
            "  baudrate: fast\n"  # 3
            "api:\n"
            "  mode: 660\n"  # 5
            "log:\n"
            "  level: loud\n"  # 7
        )
        lines = errors_of(text)
        assert [line.split(":")[1] for line in lines] == ["2", "3", "5", "7"]
        assert all(line.startswith("x.yaml:") for line in lines)


class TestUnreadable:
    def test_yaml_syntax_error_has_a_line(self) -> None:
        """A YAML syntax error names the file and line, not a traceback."""
        line = one_error("device:\n  port: sim\n bad: [1\n")
        assert line.startswith("x.yaml:3: YAML syntax error")

    def test_tab_indent_hint(self) -> None:
        """A tab used for indentation gets a hint."""
        assert "not tabs" in one_error("device:\n\tport: sim\n")

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file is a ConfigError naming it."""
        path = tmp_path / "nope.yaml"
        with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read the config: No such file"):
            load_config(path)

    def test_unreadable_file(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A file without read permission is a ConfigError (simulated: root reads anything)."""

        def denied(*args: object, **kwargs: object) -> NoReturn:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(config_module, "open", denied, raising=False)
        with pytest.raises(ConfigError, match=r"^secret\.yaml: cannot read the config: Permission"):
            load_config("secret.yaml")

    def test_directory(self, tmp_path: Path) -> None:
        """A directory given as the config is a ConfigError."""
        with pytest.raises(ConfigError, match="Is a directory"):
            load_config(tmp_path)

    def test_deep_nesting(self) -> None:
        """Absurdly deep nesting is a ConfigError, not a RecursionError."""
        with pytest.raises(ConfigError, match="nested too deeply"):
            parse_config("device: " + "[" * 5000 + "]" * 5000)

    def test_not_utf8(self, tmp_path: Path) -> None:
        """A file that is not UTF-8 is a ConfigError."""
        path = tmp_path / "bin.yaml"
        path.write_bytes(b"device: {port: \xff}\n")
        with pytest.raises(ConfigError, match="not UTF-8"):
            load_config(path)

    def test_config_error_is_a_verld_error(self) -> None:
        """ConfigError is part of verld's error hierarchy."""
        assert issubclass(ConfigError, VerldError)


class TestHelpers:
    def test_actions_table_merges(self) -> None:
        """actions_table is the defaults plus the user's entries, which win."""
        device = parse_config("device: {actions: {reset: 16, echo: 9}}").device
        assert dict(device.actions) == {"reset": 16, "echo": 9}
        assert actions_table(device) == {**DEFAULT_ACTIONS, "reset": 16, "echo": 9}
        assert actions_table(DeviceConfig()) == {
            "echo": 1,
            "info": 2,
            "delay": 3,
            "fail": 4,
            "status": 5,
            "events": 6,
        }

    def test_tcp_target(self) -> None:
        """tcp_target splits tcp:// ports and returns None for others."""
        assert tcp_target("tcp://10.0.0.5:4001") == ("10.0.0.5", 4001)
        assert tcp_target("/dev/ttyUSB0") is None
        assert tcp_target("sim") is None

    def test_changed_keys(self) -> None:
        """changed_keys lists the dotted paths that differ, not the source."""
        old = parse_config("device: {timeout: 5}", "a.yaml")
        new = parse_config(
            "device: {timeout: 2, actions: {x: 1}}\napi: {roles: {controller: {gids: [5]}}}",
            "b.yaml",
        )
        assert changed_keys(old, new) == [
            "device.timeout",
            "device.actions",
            "api.roles.controller.gids",
        ]
        assert changed_keys(new, new) == []


YAML_PIECES = st.sampled_from(
    [
        "device:",
        "api:",
        "log:",
        "host:",
        "mode:",
        "port:",
        "roles:",
        "uids:",
        "<<:",
        "&a",
        "*a",
        " ",
        "  ",
        "\n",
        "\t",
        "-",
        ":",
        ",",
        "{",
        "}",
        "[",
        "]",
        "'",
        '"',
        "?",
        "#",
        "!!str",
        "0660",
        "660",
        "yes",
        "~",
        "1.5",
        "tcp://h:1",
        "sim",
        "---\n",
    ]
)


class TestRobustness:
    @settings(max_examples=300, deadline=None)
    @given(st.lists(YAML_PIECES, max_size=30).map("".join))
    def test_yaml_like_text_never_crashes(self, text: str) -> None:
        """Any text either parses or raises ConfigError; never another exception."""
        try:
            parse_config(text)
        except ConfigError as exc:
            assert str(exc)

    @settings(max_examples=200, deadline=None)
    @given(st.text(max_size=200))
    def test_arbitrary_text_never_crashes(self, text: str) -> None:
        """Arbitrary Unicode either parses or raises ConfigError."""
        try:
            parse_config(text)
        except ConfigError as exc:
            assert str(exc)


def test_a_modbus_listen_given_as_a_port_number_says_where_the_host_goes() -> None:
    """`modbus.listen: 1502` is told to write "127.0.0.1:1502"."""
    with pytest.raises(ConfigError) as info:
        parse_config("device: {codec: modbus-rtu}\nmodbus: {listen: 1502}\n")
    assert 'write the host too: "127.0.0.1:1502"' in str(info.value)


def test_modbus_idle_timeout_0_is_never() -> None:
    """idle_timeout 0 is valid (connections are never closed for silence)."""
    assert parse_config("modbus: {idle_timeout: 0}\n").modbus.idle_timeout == 0
