"""verld's command line: the parser, and the config the daemon starts on.

Three ways to start (docs/config.md, verld(8)):

- `verld --config FILE [PORT] [--codec C] [--baudrate N] [--socket PATH]`: the file,
  with what the command line gives on top (the command line wins); for `line`
  devices also `--end RE`, `--event RE`, `--no-reply RE`, `--ping TEXT`, `--expect RE`
  (`device.line.end`, `.event`, `.no_reply`, `heartbeat.payload`, `heartbeat.expect`),
  and for `frame` devices `--frame FILE` (a YAML file holding the `device.frame` mapping);
- `verld PORT [--codec C] [--baudrate N] [--socket PATH]`, the quick start: no file is
  read, every other key takes its default, and the socket is `/run/verld/verld.sock`
  for root, else `$XDG_RUNTIME_DIR/verld.sock` (never a shared directory such as /tmp:
  with neither, `--socket` is asked for);
- `verld` with neither `--config` nor PORT: `/etc/verld/verld.yaml` as if given with
  `--config` (`$VERLD_DEFAULT_CONFIG` names another file); when that file does not
  exist, the usage and exit 2. verld never runs on made-up defaults.

The command line's values are checked by the config's own checkers (the tables of
`verld.config.sections`), so `--baudrate fast` is refused as `baudrate: fast` in a
file would be, naming the option instead of a line. They are applied to the file's
config before the checks across fields, and a command-line codec brings its own
`device.timeout` default (Modbus: 0.5 s) where the file does not set it, exactly as
if the file had said `codec:`. `Start.reread` reads the file again the same way, so a
reload keeps what the command line gave.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from verld import __version__
from verld.codec.frame.declaration import FrameDeclaration
from verld.codec.registry import CODECS, spec
from verld.compiled import build
from verld.config import Config, DeviceConfig
from verld.config.framefile import load_declaration
from verld.config.load import parse_with, read_text
from verld.config.model import MODBUS_DEVICE_DEFAULTS
from verld.config.schema import cross_check, root_config
from verld.config.sections import CONFIG
from verld.config.validate import BadValue, Check, Context, Item, MarkedMap, Section
from verld.errors import VerldError

log = structlog.get_logger("verld.daemon")

#: the config verld reads when given neither --config nor PORT
DEFAULT_CONFIG = "/etc/verld/verld.yaml"
#: names another default config (tests, unusual layouts)
DEFAULT_CONFIG_ENV = "VERLD_DEFAULT_CONFIG"
#: the quick start's socket for root (api.socket's default)
ROOT_SOCKET = "/run/verld/verld.sock"
#: where a quick start's messages say the command line's values came from
COMMAND_LINE = "the command line"

EPILOG = """\
examples:
  verld /dev/ttyUSB0                     quick start: no config file, other keys at their defaults
  verld sim                              the built-in simulated device: no hardware needed
  verld tcp://10.0.0.5:4001 --codec length    a device behind ser2net or a converter
  verld /dev/ttyACM0 --codec line --no-reply '^[^?]*$' --ping '*IDN?' --expect '^ACME,'
                                         a SCPI instrument: set commands get no answer
  verld /dev/ttyACM0 --codec frame --frame ubx.yaml
                                         a binary device whose framing ubx.yaml declares
  verld --config /etc/verld/verld.yaml   the daemon as systemd runs it
  verld -c /etc/verld/verld.yaml /dev/ttyUSB1    that config on another port
  verld --check-config /etc/verld/verld.yaml     check a file: exit 0 (valid) or 2

Without --config or PORT verld reads /etc/verld/verld.yaml, and exits 2 when there
is none. The quick start's socket is /run/verld/verld.sock for root, else
$XDG_RUNTIME_DIR/verld.sock.
"""


#: the three ways to start, as `verld --help` and the usage on exit 2 show them
USAGE = """\
verld PORT [--codec CODEC] [--baudrate N] [--socket PATH] [LINE OPTIONS] [--frame FILE]
       verld [--config FILE] [PORT] [--codec CODEC] [--baudrate N] [--socket PATH] [LINE OPTIONS]
             [--frame FILE]
       verld --check-config FILE | --list-codecs | --version | --help
LINE OPTIONS: [--end RE] [--event RE] [--no-reply RE] [--ping TEXT] [--expect RE]"""


def codec_list() -> str:
    """`verld --list-codecs`: a line per codec, its name and where it comes from (a
    plugin that cannot be used: why, after its package)."""
    listed = CODECS.listing()
    width = max(len(codec.name) for codec in listed)
    lines = []
    for codec in listed:
        line = f"{codec.name:<{width}}  {codec.origin}"
        if codec.error is not None:
            line += f" (unusable: {codec.error})"
        lines.append(line)
    return "\n".join(lines)


class Usage(VerldError):
    """A command line verld cannot start from: the usage, this message, exit 2."""


def parser() -> argparse.ArgumentParser:
    """verld's argument parser (verld --help, verld(8))."""
    p = argparse.ArgumentParser(
        prog="verld",
        usage=USAGE,
        description="Device bridge daemon: owns one serial/TCP link, serves local clients "
        "on a Unix socket.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "port",
        nargs="?",
        metavar="PORT",
        help="the device: a serial device path, tcp://HOST:PORT, rfc2217://HOST:PORT or sim "
        "(the built-in simulated device); sets device.port, over --config's",
    )
    p.add_argument(
        "--config",
        "-c",
        metavar="FILE",
        help=f"YAML config (default: {DEFAULT_CONFIG}, unless PORT is given: then no file)",
    )
    p.add_argument("--check-config", metavar="FILE", help="validate FILE and exit 0 (ok) or 2")
    p.add_argument(
        "--list-codecs",
        action="store_true",
        help="list the codecs: the built-ins and the installed plugins, with where each "
        "comes from (a plugin that cannot be used: why), and exit",
    )
    p.add_argument(
        "--codec",
        metavar="CODEC",
        help=f"the device's codec (device.codec): {_either(list(CODECS))} "
        f"(default: {DeviceConfig().codec}, or the config's)",
    )
    p.add_argument(
        "--baudrate",
        metavar="N",
        help="a serial port's speed (device.baudrate; default: 115200, or the config's)",
    )
    p.add_argument(
        "--socket",
        metavar="PATH",
        help="serve the API on PATH instead of api.socket (default with PORT and no "
        "--config: /run/verld/verld.sock for root, else $XDG_RUNTIME_DIR/verld.sock)",
    )
    line = p.add_argument_group("line devices (codec line: SCPI, AT, G-code)")
    for flag, _key, what in _LINE_FLAGS:
        line.add_argument(flag, metavar="TEXT" if flag == "--ping" else "RE", help=what)
    binary = p.add_argument_group("binary devices (codec frame: any declared framing)")
    binary.add_argument(
        "--frame",
        metavar="FILE",
        help="a YAML file holding the device.frame mapping (start, header, length, check, ...): "
        "how the device frames its messages, over --config's",
    )
    p.add_argument("--version", action="version", version=f"verld {__version__} ({build()})")
    return p


#: the line devices' options: (flag, config key, help)
_LINE_FLAGS = (
    (
        "--end",
        "device.line.end",
        "a reply runs up to the first line matching RE, e.g. "
        "'^(OK|ERROR)$' for AT modems (device.line.end)",
    ),
    (
        "--event",
        "device.line.event",
        "lines matching RE are events, never a reply, e.g. '^ALARM' (device.line.event)",
    ),
    (
        "--no-reply",
        "device.line.no_reply",
        "requests matching RE get no answer: written once, "
        "then device.guard of quiet, e.g. '^[^?]*$' for SCPI (device.line.no_reply)",
    ),
    (
        "--ping",
        "heartbeat.payload",
        "the ping: a request the device always answers, e.g. '*IDN?' or 'AT' (heartbeat.payload)",
    ),
    (
        "--expect",
        "heartbeat.expect",
        "the ping's answer matches RE, e.g. '^ACME,' "
        "(heartbeat.expect): after a timeout, lines before it are late answers, dropped",
    ),
)


@dataclass(frozen=True, slots=True)
class Options:
    """The command line's values for config keys, checked (None: not given)."""

    port: str | None = None
    codec: str | None = None
    baudrate: int | None = None
    socket: str | None = None
    #: the line devices' options given: config key → value (`--end`, `--ping`, ...)
    line: tuple[tuple[str, str], ...] = ()
    #: `--frame FILE`'s declaration
    frame: FrameDeclaration | None = None


@dataclass(frozen=True, slots=True)
class Start:
    """What the daemon starts on."""

    cfg: Config
    #: the file a reload re-reads (None: the quick start, which has none)
    config_path: str | None
    options: Options

    @property
    def quick(self) -> bool:
        """Started without a config file (`verld PORT`)."""
        return self.config_path is None

    def reread(self, path: str) -> Config:
        """The file again, with the command line on top (a reload); ConfigError."""
        return load(path, self.options)


def _either(names: list[str]) -> str:
    """`a, b or c`."""
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def default_config_path(env: Mapping[str, str] = os.environ) -> str:
    """The file read without --config or PORT: $VERLD_DEFAULT_CONFIG, else DEFAULT_CONFIG."""
    return env.get(DEFAULT_CONFIG_ENV) or DEFAULT_CONFIG


def quick_socket(euid: int, env: Mapping[str, str]) -> str:
    """The quick start's socket: /run/verld/verld.sock for root, else in $XDG_RUNTIME_DIR."""
    if euid == 0:
        return ROOT_SOCKET
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return os.path.join(runtime, "verld.sock")
    raise Usage(
        "where should the API socket go? Not root and no $XDG_RUNTIME_DIR (your own "
        "runtime directory, which a login session sets): give one with --socket PATH, "
        "in a directory of your own (not a shared one such as /tmp)"
    )


def start_config(
    args: argparse.Namespace,
    *,
    euid: int | None = None,
    env: Mapping[str, str] = os.environ,
) -> Start:
    """The config `args` start the daemon on.

    Usage when the command line cannot start verld (a bad option value, no socket
    for a quick start, no default config); ConfigError for a bad file.
    """
    options = checked_options(args)
    if args.config:
        return Start(load(args.config, options), args.config, options)
    if args.port is None:
        path = default_config_path(env)
        if not os.path.lexists(path):
            raise Usage(
                f"no config: {path} does not exist. Give the device to run without a file "
                "(verld /dev/ttyUSB0, verld sim) or a config with --config FILE"
            )
        return Start(load(path, options), path, options)
    if options.socket is None:
        sock = quick_socket(os.geteuid() if euid is None else euid, env)
        options = replace(options, socket=sock)
    return Start(_validated("", COMMAND_LINE, options), None, options)


def checked_options(args: argparse.Namespace) -> Options:
    """PORT, --codec, --baudrate and --socket through the config's own checkers; the
    --frame file read and checked as `device.frame` is (ConfigError)."""
    device = _section("device")
    baudrate = None if args.baudrate is None else _number(args.baudrate)
    line = []
    for flag, key, _ in _LINE_FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None:
            section, name = key.rsplit(".", 1)
            table = _section(section.split(".")[0])
            if section == "device.line":
                line_table = table.keys["line"]
                assert isinstance(line_table, Section)
                table = line_table
            line.append((key, _check(flag, table.keys[name], value)))
    return Options(
        port=_check("PORT", device.keys["port"], args.port),
        codec=_check("--codec", device.keys["codec"], args.codec),
        baudrate=_check("--baudrate", device.keys["baudrate"], baudrate),
        socket=_check("--socket", _section("api").keys["socket"], args.socket),
        line=tuple(line),
        frame=None if args.frame is None else load_declaration(args.frame),
    )


def load(path: str, options: Options) -> Config:
    """The config file at `path` with `options` on top, validated as one; ConfigError."""
    return _validated(read_text(path), path, options)


def _validated(text: str, source: str, options: Options) -> Config:
    def root(item: Item) -> Config:
        config = with_options(root_config(item), options, _device_keys(item.value))
        cross_check(config, item.ctx)
        return config

    return replace(parse_with(text, source, root), source=source)


def with_options(config: Config, options: Options, file_keys: set[str]) -> Config:
    """`config` with the command line's values; a codec given there brings its own
    timeout/retry defaults unless the file (`file_keys`: its device keys) sets them."""
    device: dict[str, Any] = {
        key: value
        for key, value in (
            ("port", options.port),
            ("codec", options.codec),
            ("baudrate", options.baudrate),
        )
        if value is not None
    }
    if options.codec is not None:
        plain = DeviceConfig()
        for key, modbus in MODBUS_DEVICE_DEFAULTS.items():
            if key not in file_keys:
                device[key] = modbus if spec(options.codec).bus else getattr(plain, key)
    api = config.api if options.socket is None else replace(config.api, socket=options.socket)
    given = dict(options.line)
    line = {k.rsplit(".", 1)[1]: v for k, v in given.items() if k.startswith("device.line.")}
    if line:
        device["line"] = replace(config.device.line, **line)
    if options.frame is not None:
        device["frame"] = options.frame
    heartbeat = config.heartbeat
    if "heartbeat.payload" in given:
        heartbeat = replace(heartbeat, payload=given["heartbeat.payload"])
    if "heartbeat.expect" in given:
        heartbeat = replace(heartbeat, expect=given["heartbeat.expect"])
    device_cfg = replace(config.device, **device)
    if options.line and not spec(device_cfg.codec).text:
        flags = ", ".join(f for f, key, _ in _LINE_FLAGS if key in given)
        raise Usage(f"{flags}: for line devices; add --codec line (codec is {device_cfg.codec})")
    if options.frame is not None and not spec(device_cfg.codec).declared:
        raise Usage(
            f"--frame: for binary framings; add --codec frame (codec is {device_cfg.codec})"
        )
    return replace(config, device=device_cfg, api=api, heartbeat=heartbeat)


def _device_keys(tree: object) -> set[str]:
    """The device keys a file sets: those under `device:`, or the flat format's."""
    if not isinstance(tree, MarkedMap):
        return set()
    device = tree.get("device")
    keys = device if isinstance(device, MarkedMap) else tree
    return {k for k in keys if isinstance(k, str)}


def _section(name: str) -> Section:
    section = CONFIG.keys[name]
    assert isinstance(section, Section)
    return section


def _check(option: str, check: Check | Section, value: Any) -> Any:
    """`value` as the config's checker takes it; Usage naming `option` when it is bad."""
    if value is None:
        return None
    assert not isinstance(check, Section)
    try:
        return check(Item(Context(COMMAND_LINE), option, value, None, 0))
    except BadValue as exc:
        raise Usage(f"{option}: {exc}") from None


def _number(text: str) -> int | float | str:
    """A number given as text, as YAML would have read it in a file."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# --- what the quick start says first ---------------------------------------------------------


def announce(start: Start, fmt: str, env: Mapping[str, str] = os.environ) -> None:
    """Where verld listens and how verlctl reaches it, before anything else: a quick
    start prints it on a console, else logs it as the first record; a config on the
    simulated device (`make run`) prints its demo lines on a console. Nothing under
    socket activation, where the socket is systemd's."""
    cfg = start.cfg
    if env.get("LISTEN_FDS"):
        return
    sim = cfg.device.port == "sim"
    sock = cfg.api.socket
    if not start.quick:
        if sim and fmt == "console":
            print(
                f"verld: demo on the simulated device; in another shell try:\n"
                f"  tools/verlctl --socket {sock} status\n"
                f"  tools/verlctl --socket {sock} call {_sim_example(cfg.device.codec)}\n",
                file=sys.stderr,
            )
        return
    ctl = verlctl_command()
    tries = [f"{ctl} --socket {sock} status"]
    if sim:
        tries.append(f"{ctl} --socket {sock} call {_sim_example(cfg.device.codec)}")
    if fmt != "console":
        log.info(
            "listening", socket=sock, port=cfg.device.port, codec=cfg.device.codec, verlctl=tries[0]
        )
        return
    what = "the simulated device" if sim else cfg.device.port
    print(
        f"verld: quick start on {what} (codec {cfg.device.codec}, no config file), "
        f"listening on {sock}; in another shell try:\n" + "".join(f"  {t}\n" for t in tries),
        file=sys.stderr,
        flush=True,
    )


def _sim_example(codec: str) -> str:
    if spec(codec).text:
        return "--text PING"
    if spec(codec).bus:
        return "--hex 010300000002"  # unit 1 reads holding registers 0 and 1
    return "--hex 01aabb"  # 0x01: echo


def verlctl_command(
    which: Callable[[str], str | None] = shutil.which, executable: str = sys.executable
) -> str:
    """How to run verlctl from here: `verlctl` on $PATH, else the one beside this
    Python (an unactivated venv), else the module."""
    if which("verlctl"):
        return "verlctl"
    beside = Path(executable).parent / "verlctl"
    if beside.exists():
        return str(beside)
    return f"{executable} -m verld.ctl"
