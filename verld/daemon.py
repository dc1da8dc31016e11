"""verld, the daemon: wiring only.

config → logging → (simulated device) → session → API server → signals/systemd.
Exit codes: 0 clean stop, 1 cannot serve (socket in use, sim failed), 2 bad config.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field, replace

import structlog

from verld import __version__, httpmetrics, logs, systemd
from verld.config import Config, changed_keys, default_config, load_config
from verld.errors import ConfigError
from verld.link import Transition
from verld.server import ApiServer
from verld.session import Session, make_codec
from verld.sockfile import SocketInUse

log = structlog.get_logger("verld.daemon")

_DEVICE_KEYS = (
    "device.port",
    "device.baudrate",
    "device.bytesize",
    "device.parity",
    "device.stopbits",
    "device.rtscts",
    "device.codec",
    "device.max_payload",
    "device.line",
)


class SimError(Exception):
    """The built-in simulated device did not start."""


def _die_with_parent() -> None:
    """In the sim child: get SIGTERM when verld dies, even by SIGKILL (Linux prctl)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class SimChild:
    """verld-sim running as our child on a pty pair (`device.port: sim`)."""

    proc: asyncio.subprocess.Process
    link: str
    tmpdir: str

    @classmethod
    async def start(cls, cfg: Config) -> SimChild:
        tmpdir = tempfile.mkdtemp(prefix="verld-sim-")
        link = os.path.join(tmpdir, "tty")
        args = [
            sys.executable,
            "-m",
            "verld.sim",
            "--link",
            link,
            "--codec",
            cfg.device.codec,
            "--max-payload",
            str(cfg.device.max_payload),
        ]
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdout=asyncio.subprocess.PIPE,
            preexec_fn=_die_with_parent,
            # Its own session: Ctrl-C on `make run` reaches verld, which then stops the
            # sim itself after draining, instead of the sim vanishing first.
            start_new_session=True,
        )
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 15)
        except TimeoutError:
            line = b""
        if not line.startswith(b"READY"):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise SimError(f"verld-sim did not start (exit {proc.returncode})")
        return cls(proc, link, tmpdir)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 3)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


@dataclass
class Daemon:
    """The running daemon's parts, for reload and shutdown."""

    cfg: Config
    config_path: str | None
    sim: SimChild | None = None
    session: Session | None = None
    server: ApiServer | None = None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    socket_override: str | None = None  #: --socket, kept across reloads

    def port(self) -> str:
        return self.sim.link if self.sim is not None else self.cfg.device.port

    def status_line(self) -> None:
        if self.session is None or self.server is None:
            return
        link = self.session.link
        systemd.notify(
            f"STATUS=link {link.state.value} ({link.reason}), gen {link.generation}, "
            f"port {self.port()}, {len(self.server.clients)} clients"
        )

    def on_link(self, t: Transition) -> None:
        if self.server is not None:
            self.server.link_event(t)
        self.status_line()

    def reload(self) -> list[str]:
        """Re-read the config and apply it; raises ConfigError and keeps the old one."""
        if self.config_path is None:
            raise ConfigError("verld was started without --config: nothing to re-read")
        new = with_socket(load_config(self.config_path), self.socket_override)
        assert self.session is not None and self.server is not None
        changed = changed_keys(self.cfg, new)
        if any(k.startswith("api.socket") for k in changed):
            log.warning("reload_socket_unchanged", reason="api.socket needs a restart")
        old, self.cfg = self.cfg, new
        logs.setup(new.log.level, new.log.format)
        self.session.set_debug(logs.level_enabled(new.log.level))
        self.session.reconfigure(new)
        self.server.debug = logs.level_enabled(new.log.level)
        self.server.cfg = new
        self.server.reevaluate_roles()
        if any(k.startswith(_DEVICE_KEYS) for k in changed):
            new_port = new.device.port if new.device.port != old.device.port else None
            self.session.replace_device(make_codec(new), None if self.sim else new_port)
        log.info("reloaded", changed=",".join(changed) or "nothing")
        return changed


async def serve(cfg: Config, config_path: str | None, socket_override: str | None = None) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    loop = asyncio.get_running_loop()
    d = Daemon(cfg, config_path, socket_override=socket_override)
    loop_name = type(loop).__module__.split(".")[0]
    log.info("starting", version=__version__, port=cfg.device.port, codec=cfg.device.codec,
             event_loop=loop_name)  # fmt: skip
    _raise_fd_limit(cfg.api.max_clients)
    try:
        listen = systemd.listen_socket()
    except OSError as exc:
        log.error("socket_activation_failed", error=str(exc))
        return 1
    if cfg.device.port == "sim":
        try:
            d.sim = await SimChild.start(cfg)
        except (SimError, OSError) as exc:
            log.error("sim_failed", error=str(exc))
            return 1
        log.info("sim_started", link=d.sim.link, pid=d.sim.proc.pid)
    session = d.session = Session(
        cfg, make_codec(cfg), d.port(), on_event=lambda *a: None, on_link=d.on_link
    )
    session.set_debug(logs.level_enabled(cfg.log.level))
    server = d.server = ApiServer(cfg, session, on_reload=d.reload)
    server.debug = logs.level_enabled(cfg.log.level)
    session.on_event = server.device_event
    server.on_clients_changed = d.status_line
    try:
        await server.start(listen)
    except (SocketInUse, OSError) as exc:
        log.error("cannot_serve", socket=cfg.api.socket, error=str(exc))
        if d.sim is not None:
            await d.sim.stop()
        return 1
    http = None
    if cfg.metrics.listen:
        try:
            http = await httpmetrics.serve(cfg.metrics.listen, server.metrics_text)
        except OSError as exc:
            log.error("metrics_http_failed", listen=cfg.metrics.listen, error=str(exc))
            await server.close()
            if d.sim is not None:
                await d.sim.stop()
            return 1
    # Handlers before READY=1: a SIGTERM or SIGHUP sent as soon as systemd hears
    # READY must not meet the default action (death by signal).
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, d.stopping.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: _reload_on_signal(d))
    where = "socket activation" if listen is not None else cfg.api.socket
    log.info("ready", socket=where)
    systemd.notify("READY=1")
    d.status_line()
    stop_watchdog = systemd.start_watchdog(loop)
    runner = asyncio.create_task(session.run(), name="session")
    stopper = asyncio.create_task(d.stopping.wait(), name="stop")
    await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if runner.done() and runner.exception() is not None:
        log.error("session_crashed", error=repr(runner.exception()))
    log.info("stopping", drain=cfg.api.drain)
    systemd.notify("STOPPING=1")
    if stop_watchdog is not None:
        stop_watchdog()
    await server.stop_accepting()
    if http is not None:
        http.close()
    await session.close(d.cfg.api.drain)
    await server.close()
    for task in (runner, stopper):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if d.sim is not None:
        await d.sim.stop()
    log.info("stopped")
    return 0


def _raise_fd_limit(max_clients: int) -> None:
    """Room for max_clients connections plus the link, sim and spares (soft limit only).

    Units may forbid setrlimit (SystemCallFilter=~@resources): then say so and go on.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_clients + 64
    if soft >= want:
        return
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (OSError, ValueError) as exc:
        new = soft
        log.warning("fd_limit_unchanged", soft=soft, wanted=want, error=str(exc))
    if new < want:
        hint = "raise LimitNOFILE= (or ulimit -n): connections past it wait unanswered"
        log.warning("fd_limit_low", limit=new, max_clients=max_clients, hint=hint)


def _reload_on_signal(d: Daemon) -> None:
    systemd.reloading()
    try:
        d.reload()
    except ConfigError as exc:
        log.error("reload_failed", error=str(exc), kept="running config")
    finally:
        systemd.notify("READY=1")
        d.status_line()


def with_socket(cfg: Config, path: str | None) -> Config:
    """`cfg` serving the API on `path` instead of api.socket (--socket)."""
    return cfg if path is None else replace(cfg, api=replace(cfg.api, socket=path))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="verld",
        description="Device bridge daemon: owns one serial/TCP link, serves local clients "
        "on a Unix socket.",
        epilog="examples:\n  verld --config /etc/verld/verld.yaml\n"
        "  verld --check-config configs/verld.yaml\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config", "-c", metavar="FILE", help="YAML config (default: built-in defaults)"
    )
    p.add_argument("--check-config", metavar="FILE", help="validate FILE and exit 0 (ok) or 2")
    p.add_argument(
        "--socket",
        metavar="PATH",
        help="serve the API on PATH instead of the config's api.socket (verld@.service)",
    )
    p.add_argument("--version", action="version", version=f"verld {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.check_config:
        try:
            load_config(args.check_config)
        except ConfigError as exc:
            print(f"verld: invalid config:\n{exc}", file=sys.stderr)
            return 2
        print(f"{args.check_config}: ok")
        return 0
    try:
        cfg = load_config(args.config) if args.config else default_config()
        cfg = with_socket(cfg, args.socket)
    except ConfigError as exc:
        print(f"verld: invalid config:\n{exc}", file=sys.stderr)
        return 2
    fmt = logs.setup(cfg.log.level, cfg.log.format)
    if fmt == "console" and cfg.device.port == "sim" and not os.environ.get("LISTEN_FDS"):
        print(
            f"verld: demo on the simulated device; in another shell try:\n"
            f"  tools/verlctl --socket {cfg.api.socket} status\n"
            f"  tools/verlctl --socket {cfg.api.socket} call --hex 01aabb\n",
            file=sys.stderr,
        )
    try:
        with _runner() as runner:
            return runner.run(serve(cfg, args.config, args.socket))
    except KeyboardInterrupt:
        return 0


def _runner() -> asyncio.Runner:
    """uvloop when installed (the `fast` extra), else asyncio's own loop.

    $VERLD_EVENT_LOOP=asyncio forces the standard loop; =uvloop insists on uvloop.
    """
    choice = os.environ.get("VERLD_EVENT_LOOP", "auto")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                print("verld: VERLD_EVENT_LOOP=uvloop but uvloop is not installed", file=sys.stderr)
        else:
            return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    return asyncio.Runner()


if __name__ == "__main__":
    raise SystemExit(main())
