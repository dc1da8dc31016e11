"""verld, the daemon: wiring only.

config → logging → core (session + supervisor) → fronts (`verld.fronts.registry.FRONTS`: the
API server, Modbus TCP, virtual ports, network ports) → signals/systemd. Every front
is driven through the one `Front` protocol: all claims first (nothing is created while
another verld owns a socket, a port link, a network or the Modbus address), then the built-in
simulated device if asked for, then each front starts. Every part that starts
registers how it stops on one AsyncExitStack; the link's task runs in one
TaskGroup, so a crash is logged, the rest is stopped in order and verld exits 1
(systemd's Restart=on-failure).
Exit codes: 0 clean stop, 1 cannot serve (the socket, a port link, a network or the
Modbus listen another process owns, sim failed: one line says which) or a task crashed,
2 bad config or command line (no config file, a bad option value).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import structlog

from verld import __version__, cmdline, httpmetrics, logs, systemd
from verld.codec.registry import CODECS
from verld.config import Config, changed_keys, load_config
from verld.config.load import check_file
from verld.errors import ConfigError, ServeError
from verld.fronts.base import CannotServe, Core, Front
from verld.fronts.registry import FRONTS
from verld.links.link import Transition
from verld.reloads import Serialised
from verld.sim.launch import SimChild, SimError

log = structlog.get_logger("verld.daemon")

#: settings of the device itself: a change takes a new codec and a reconnect
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


@dataclass
class Daemon:
    """The running daemon's parts, wired once at `start`, for reload and shutdown."""

    cfg: Config
    config_path: str | None
    socket_override: str | None = None  #: --socket, kept across reloads
    #: re-reads the config file with the command line on top (verld.cmdline), for reload
    reread: Callable[[str], Config] | None = None
    core: Core | None = None
    fronts: list[Front] = field(default_factory=list)  #: as `FRONTS` lists them
    sim: Sim | None = None  #: the built-in simulated device (`device.port: sim`)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def status_line(self) -> None:
        if self.core is None:
            return
        clients = sum(front.status().get("clients", 0) for front in self.fronts)
        systemd.notify(f"STATUS={self.core.link_summary()}, {clients} clients")

    # --- start: each part registers how it stops -----------------------------------------
    async def start(self, stack: contextlib.AsyncExitStack) -> None:
        """Every front's claim first, then the sim, then the fronts (the API last),
        metrics; `_Failed` when one cannot start."""
        cfg = self.cfg
        try:
            passed = systemd.listen_sockets()
        except OSError as exc:
            raise _Failed("socket_activation_failed", str(exc)) from None
        loop = asyncio.get_running_loop()
        core = self._wire_core(loop, passed)
        if cfg.device.port == "sim":
            sim = self.sim = Sim(core)
            stack.push_async_callback(sim.stop)  # (after the fronts close)
        self.fronts = [reg.make(cfg, core) for reg in FRONTS]
        core.fronts.extend(self.fronts)
        for front in reversed(self.fronts):  # (closed in list order: the API first)
            stack.push_async_callback(front.close)
        for reg, front in zip(FRONTS, self.fronts, strict=True):
            with _failing(reg.fails):
                await front.claim()
        if self.sim is not None:
            await self.sim.start(cfg)
        for reg, front in reversed(list(zip(FRONTS, self.fronts, strict=True))):
            with _failing(reg.fails):
                await front.start()
        if cfg.metrics.listen:
            await self._start_http(stack, core)
        self._signals(loop)
        log.info("ready", socket="socket activation" if "api" in passed else cfg.api.socket)
        systemd.notify("READY=1")
        self.status_line()
        stop_watchdog = systemd.start_watchdog(loop)
        if stop_watchdog is not None:
            stack.callback(stop_watchdog)

    def _wire_core(
        self, loop: asyncio.AbstractEventLoop, sockets: dict[str, socket.socket]
    ) -> Core:
        """The core, with the sockets systemd passed for the fronts to take."""
        cfg = self.cfg
        core = self.core = Core(cfg, clock=loop, sockets=sockets)
        core.set_debug(logs.level_enabled(cfg.log.level))
        core.listeners.append(self)
        core.reload_config = self.reload
        core.clients_changed = self.status_line
        return core

    async def _start_http(self, stack: contextlib.AsyncExitStack, core: Core) -> None:
        listen = self.cfg.metrics.listen
        assert listen is not None
        try:
            http = await httpmetrics.serve(listen, core.metrics_text)
        except OSError as exc:
            raise _Failed("metrics_http_failed", str(exc), listen=listen) from None
        stack.callback(http.close)

    def _signals(self, loop: asyncio.AbstractEventLoop) -> None:
        """Handlers before READY=1: a SIGTERM or SIGHUP sent as soon as systemd hears
        READY must not meet the default action (death by signal)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_on_signal)

    # --- running ---------------------------------------------------------------------------
    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT, then drain; 1 when a task crashed (logged)."""
        assert self.core is not None
        crashed: list[Exception] = []
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self.core.run(), name="link")
                await self.stopping.wait()
                await self._drain()
        except* Exception as crash:
            crashed.extend(crash.exceptions)
        for exc in crashed:
            log.error("task_crashed", error=repr(exc), exc_info=exc)
        if crashed:
            await self._drain()
        return 1 if crashed else 0

    async def _drain(self) -> None:
        """Stop taking clients; in-flight calls finish (at most api.drain seconds)."""
        assert self.core is not None
        if self.core.closing:
            return
        log.info("stopping", drain=self.cfg.api.drain)
        systemd.notify("STOPPING=1")
        for front in self.fronts:
            front.stop_accepting()
        await self.core.close(self.cfg.api.drain)

    # --- a Listener of the core: the STATUS= line follows the link ---------------------------
    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        return None

    def link_event(self, transition: Transition) -> None:
        self.status_line()

    # --- reload ------------------------------------------------------------------------------
    def reload(self) -> list[str]:
        """Re-read the config and apply it; raises ConfigError and keeps the old one."""
        if self.config_path is None:
            raise ConfigError("verld was started without --config: nothing to re-read")
        read = self.reread or load_config
        new = with_socket(read(self.config_path), self.socket_override)
        core = self.core
        assert core is not None
        changed = changed_keys(self.cfg, new)
        if any(k.startswith("api.socket") for k in changed):
            log.warning("reload_socket_unchanged", reason="api.socket needs a restart")
        old, self.cfg = self.cfg, new
        logs.setup(new.log.level, new.log.format)
        core.set_debug(logs.level_enabled(new.log.level))
        core.reconfigure(new)
        sim_codec = any(
            k in ("device.codec", "device.max_payload") or k.startswith("device.frame")
            for k in changed
        )
        if self.sim is not None and sim_codec:  # the built-in sim must speak the new codec
            self.sim.restart(new)
        elif any(k.startswith(_DEVICE_KEYS) for k in changed):
            new_port = new.device.port if new.device.port != old.device.port else None
            core.replace_device(None if self.sim is not None else new_port)
            core.request_reconnect("device settings changed by reload")
        for front in self.fronts:
            front.reload(new, changed)
        log.info("reloaded", changed=",".join(changed) or "nothing")
        return changed

    def _reload_on_signal(self) -> None:
        systemd.reloading()
        try:
            self.reload()
        except ConfigError as exc:
            log.error("reload_failed", error=str(exc), kept="running config")
        finally:
            systemd.notify("READY=1")
            self.status_line()


class Sim:
    """The built-in simulated device (`device.port: sim`): the running child, and
    the restarts a reload that changes its codec asks for (one after the other,
    awaited by `stop`)."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.child: SimChild | None = None
        self._restarts = Serialised("sim")

    async def start(self, cfg: Config) -> None:
        """Start it and point the core at its pty (`_Failed` when it does not start)."""
        try:
            child = self.child = await SimChild.start(
                cfg.device.codec, cfg.device.max_payload, frame=cfg.device.frame
            )
        except (SimError, OSError) as exc:
            raise _Failed("sim_failed", str(exc)) from None
        log.info("sim_started", link=child.link, pid=child.proc.pid)
        self.core.replace_device(child.link)

    def restart(self, cfg: Config) -> None:
        """A new sim for `cfg`'s codec, after any earlier restart has ended."""
        self._restarts.run(self._replace(cfg))

    async def _replace(self, cfg: Config) -> None:
        """The link moves to the new sim's pty; the old sim goes."""
        dev = cfg.device
        try:
            child = await SimChild.start(dev.codec, dev.max_payload, frame=dev.frame)
        except (SimError, OSError) as exc:
            log.error("sim_restart_failed", error=str(exc), kept="the running sim")
            return
        old, self.child = self.child, child
        log.info("sim_started", link=child.link, pid=child.proc.pid, codec=dev.codec)
        self.core.replace_device(child.link)
        self.core.request_reconnect("the simulated device restarted for the new codec")
        if old is not None:
            await old.stop()

    async def stop(self) -> None:
        """After a restart under way (it ends on its own: a sim starts or fails within
        seconds), the running sim stops."""
        await self._restarts.close()
        if self.child is not None:
            await self.child.stop()


class _Failed(ServeError):
    """A part did not start: logged as `event` with the error and `fields`."""

    def __init__(self, event: str, error: str, *, exit_code: int = 1, **fields: str) -> None:
        super().__init__(error)
        self.event, self.fields = event, fields
        #: 2 for a setup that cannot work until the config changes (systemd's unit
        #: does not restart on 2: RestartPreventExitStatus=2), else 1
        self.exit_code = exit_code


@contextlib.contextmanager
def _failing(event: str) -> Iterator[None]:
    """A front's claim or start that raised: `_Failed` as `event`, with what its
    `CannotServe` names (exit 1 for any other ServeError or OSError)."""
    try:
        yield
    except CannotServe as exc:
        raise _Failed(event, str(exc), exit_code=exc.exit_code, **exc.fields) from None
    except (OSError, ServeError) as exc:
        raise _Failed(event, str(exc)) from None


async def serve(
    cfg: Config,
    config_path: str | None,
    socket_override: str | None = None,
    reread: Callable[[str], Config] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    log.info(
        "starting",
        version=__version__,
        port=cfg.device.port,
        codec=cfg.device.codec,
        event_loop=loop_name,
    )
    _raise_fd_limit(cfg.api.max_clients)
    d = Daemon(cfg, config_path, socket_override=socket_override, reread=reread)
    async with contextlib.AsyncExitStack() as stack:
        try:
            await d.start(stack)
        except _Failed as exc:
            log.error(exc.event, error=str(exc), **exc.fields)
            return exc.exit_code
        except (OSError, ServeError) as exc:  # (a part that did not say: still one line)
            log.error("cannot_start", error=str(exc))
            return 1
        code = await d.run()
    log.info("stopped")
    return code


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


def with_socket(cfg: Config, path: str | None) -> Config:
    """`cfg` serving the API on `path` instead of api.socket (--socket)."""
    return cfg if path is None else replace(cfg, api=replace(cfg.api, socket=path))


def _parser() -> argparse.ArgumentParser:
    return cmdline.parser()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list_codecs:
        print(cmdline.codec_list())
        return 0
    if args.check_config:
        return check_file("verld", args.check_config, load_config)
    try:  # the file (--config, else /etc/verld/verld.yaml) or PORT, the command line on top
        start = cmdline.start_config(args)
    except cmdline.Usage as exc:
        parser.print_usage(sys.stderr)
        print(f"verld: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"verld: invalid config:\n{exc}", file=sys.stderr)
        return 2
    cfg = start.cfg
    fmt = logs.setup(cfg.log.level, cfg.log.format)
    cmdline.announce(start, fmt)
    for unusable in CODECS.clashes():  # plugins no config can use: only logged
        log.warning("codec_plugin_unusable", codec=unusable.name, error=str(unusable))
    try:
        with _runner() as runner:
            return runner.run(serve(cfg, start.config_path, args.socket, reread=start.reread))
    except KeyboardInterrupt:
        return 0


def _runner() -> asyncio.Runner:
    """uvloop where it is installed (a default dependency on CPython), else asyncio's.

    $VERLD_EVENT_LOOP=asyncio forces the standard loop; =uvloop warns when uvloop is
    missing (and runs on asyncio's).
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
