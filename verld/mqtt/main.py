"""verld-mqtt, the command: config → secrets → logging → bridge → signals/systemd.

Exit codes as verld's: 0 clean stop (SIGTERM/SIGINT), 1 cannot serve (a file the
config names cannot be read, a task crashed), 2 bad config. Readiness (READY=1) is
sent as soon as the bridge runs, before the broker answers: a broker down at boot
must not hold the unit in "activating"; STATUS= follows the broker and devices.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
import sys

import structlog

from verld import __version__, logs, systemd
from verld.config.load import check_file
from verld.errors import ConfigError, ServeError
from verld.mqtt.config import BridgeConfig, Secrets, load_bridge_config

log = structlog.get_logger("verld.mqtt")


class StartError(ServeError):
    """Something the config names cannot be used (exit 1)."""


def read_secrets(cfg: BridgeConfig) -> Secrets:
    """The password (first line of password_file) and the TLS context, read now so
    a missing or unreadable file stops the start with a clear message."""
    b = cfg.broker
    password = None
    if b.password_file is not None:
        try:
            with open(b.password_file, encoding="utf-8") as f:
                password = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise StartError(f"broker.password_file {b.password_file}: {_why(exc)}") from None
    if not b.tls:
        return Secrets(password)
    for key in ("ca", "cert", "key"):
        path = getattr(b, key)
        if path is not None and not os.access(path, os.R_OK):
            reason = "no such file" if not os.path.exists(path) else "not readable"
            raise StartError(f"broker.{key} {path}: {reason}")
    try:
        context = ssl.create_default_context(cafile=b.ca)
        if b.cert is not None:
            context.load_cert_chain(b.cert, b.key)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise StartError(f"broker TLS files (ca/cert/key): {_why(exc)}") from None
    return Secrets(password, context)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


async def serve(cfg: BridgeConfig, secrets: Secrets) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    from verld.mqtt.bridge import Bridge  # (paho-mqtt: only needed to run)

    loop = asyncio.get_running_loop()
    bridge = Bridge(cfg, secrets)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, bridge.stopping.set)
    log.info(
        "starting",
        version=__version__,
        broker=f"{cfg.broker.host}:{cfg.broker.port}",
        base=bridge.topics.base,
        devices=",".join(cfg.devices) or "none",
        event_loop=type(loop).__module__.split(".")[0],
    )
    if not cfg.devices:
        log.warning("no_devices", hint="add NAME: SOCKET entries under devices:")
    systemd.notify("READY=1")
    stop_watchdog = systemd.start_watchdog(loop)
    try:
        await bridge.run()
    except Exception as exc:
        log.error("task_crashed", error=repr(exc), exc_info=exc)
        return 1
    finally:
        systemd.notify("STOPPING=1")
        if stop_watchdog is not None:
            stop_watchdog()
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="verld-mqtt",
        description="Fleet bridge: publishes local verld devices' state and events to an "
        "MQTT broker and runs calls requested through it (docs/fleet.md).",
        epilog="examples:\n  verld-mqtt --config /etc/verld/mqtt.yaml\n"
        "  verld-mqtt --check-config configs/mqtt.yaml\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", metavar="FILE", help="YAML config (required to run)")
    p.add_argument("--check-config", metavar="FILE", help="validate FILE and exit 0 (ok) or 2")
    p.add_argument("--version", action="version", version=f"verld-mqtt {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.check_config:
        return check_file("verld-mqtt", args.check_config, load_bridge_config)
    if not args.config:
        parser.error("--config FILE is required (or --check-config FILE)")
    try:
        cfg = load_bridge_config(args.config)
    except ConfigError as exc:
        print(f"verld-mqtt: invalid config:\n{exc}", file=sys.stderr)
        return 2
    logs.setup(cfg.log.level, cfg.log.format)
    try:
        import paho.mqtt.client  # noqa: F401 (present, or say how to get it)
    except ImportError:
        log.error("cannot_start", error="paho-mqtt is not installed: pip install 'verld[mqtt]'")
        return 1
    try:
        secrets = read_secrets(cfg)
    except StartError as exc:
        log.error("cannot_start", error=str(exc))
        return 1
    try:
        with _runner() as runner:
            return runner.run(serve(cfg, secrets))
    except KeyboardInterrupt:
        return 0


def _runner() -> asyncio.Runner:
    """uvloop where it is installed, like verld ($VERLD_EVENT_LOOP=asyncio opts out)."""
    if os.environ.get("VERLD_EVENT_LOOP", "auto") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    return asyncio.Runner()


if __name__ == "__main__":
    raise SystemExit(main())
