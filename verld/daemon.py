"""verld, the daemon: wiring only.

config → logging → (simulated device) → session + supervisor → core → fronts (the
API server) → signals/systemd. Every part that starts registers how it stops on
one AsyncExitStack; the link's task runs in one TaskGroup, so a crash is logged,
the rest is stopped in order and verld exits 1 (systemd's Restart=on-failure).
Exit codes: 0 clean stop, 1 cannot serve (the socket, a port link or the Modbus
listen another process owns, sim failed: one line says which) or a task crashed,
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
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import structlog

from verld import __version__, cmdline, httpmetrics, logs, systemd
from verld.codec.select import make_codec
from verld.config import MODBUS_CODECS, Config, changed_keys, load_config
from verld.errors import ConfigError, ServeError, SocketInUse
from verld.fronts.api import ApiServer
from verld.fronts.base import Core
from verld.fronts.modbus import ModbusServer
from verld.fronts.modbus.server import bind_listen
from verld.fronts.ports.front import PortsFront
from verld.fronts.ports.pty import PortSetupError, claim_link
from verld.link import Transition
from verld.ownership import Lock
from verld.session import Session
from verld.sim.launch import SimChild, SimError
from verld.sockfile import claim_socket
from verld.supervisor import Supervisor

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


@dataclass
class Daemon:
    """The running daemon's parts, wired once at `start`, for reload and shutdown."""

    cfg: Config
    config_path: str | None
    socket_override: str | None = None  #: --socket, kept across reloads
    #: re-reads the config file with the command line on top (verld.cmdline), for reload
    reread: Callable[[str], Config] | None = None
    sim: SimChild | None = None
    session: Session | None = None
    supervisor: Supervisor | None = None
    server: ApiServer | None = None
    core: Core | None = None
    modbus: ModbusServer | None = None
    ports: PortsFront | None = None
    _modbus_activated: bool = False
    _rebinding: asyncio.Task[None] | None = None
    _restarting: asyncio.Task[None] | None = None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

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

    # --- start: each part registers how it stops -----------------------------------------
    async def start(self, stack: contextlib.AsyncExitStack) -> None:
        """Claims first (`_claim`), then sim, session, ports, API front, Modbus,
        metrics; ServeError when one cannot start."""
        cfg = self.cfg
        try:
            listen, modbus_sock = systemd.listen_sockets()
        except OSError as exc:
            raise _Failed("socket_activation_failed", str(exc)) from None
        claims = await self._claim(stack, listen is not None, modbus_sock is not None)
        if cfg.device.port == "sim":
            await self._start_sim(stack)
        loop = asyncio.get_running_loop()
        core = self._wire_core(loop)
        self._start_ports(stack, core, claims.ports)
        server = self.server = ApiServer(cfg, core, on_reload=self.reload)
        server.debug = logs.level_enabled(cfg.log.level)
        server.on_clients_changed = self.status_line
        stack.push_async_callback(server.close)  # (before start: it removes what start made)
        try:
            await server.start(listen, lock=claims.take_socket())
        except (OSError, ServeError) as exc:  # SocketInUse included
            raise _Failed("cannot_serve", str(exc), socket=cfg.api.socket) from None
        server.extra_status["ports"] = self._ports_status
        if cfg.modbus.listen or modbus_sock is not None:
            await self._start_modbus(stack, modbus_sock, claims.take_modbus())
        if cfg.metrics.listen:
            await self._start_http(stack, server)
        self._signals(loop)
        log.info("ready", socket="socket activation" if listen is not None else cfg.api.socket)
        systemd.notify("READY=1")
        self.status_line()
        stop_watchdog = systemd.start_watchdog(loop)
        if stop_watchdog is not None:
            stack.callback(stop_watchdog)

    async def _claim(
        self, stack: contextlib.AsyncExitStack, api_activated: bool, modbus_activated: bool
    ) -> _Claims:
        """Everything another verld could own, taken before anything is created,
        bound, re-pointed or removed: the API socket's lock (unless systemd passed
        the socket), each port link's lock, the Modbus `listen` address (bound and
        kept). Anything in the way is `_Failed` (one line naming it, exit 1) with
        nothing touched; what was taken is let go by the stack unless handed over."""
        cfg = self.cfg
        claims = _Claims()
        stack.callback(claims.release)
        if not api_activated:
            try:
                claims.api = claim_socket(cfg.api.socket)
            except SocketInUse as exc:
                raise _Failed("cannot_serve", str(exc), socket=cfg.api.socket) from None
        for entry in cfg.ports:
            try:
                claims.ports[entry.link] = claim_link(entry.link)
            except PortSetupError as exc:
                raise _Failed("cannot_create_port", str(exc), link=entry.link) from None
        if cfg.modbus.listen and not modbus_activated:
            try:
                claims.modbus = await bind_listen(cfg.modbus.listen)
            except OSError as exc:
                why = exc.strerror or str(exc)  # ("cannot listen on HOST:PORT: ...")
                raise _Failed("cannot_serve_modbus", why, listen=cfg.modbus.listen) from None
        return claims

    async def _start_sim(self, stack: contextlib.AsyncExitStack) -> None:
        dev = self.cfg.device
        try:
            sim = self.sim = await SimChild.start(dev.codec, dev.max_payload)
        except (SimError, OSError) as exc:
            raise _Failed("sim_failed", str(exc)) from None
        stack.push_async_callback(self._stop_sim)  # (whichever sim runs by then)
        log.info("sim_started", link=sim.link, pid=sim.proc.pid)

    async def _stop_sim(self) -> None:
        if self.sim is not None:
            await self.sim.stop()

    async def _restart_sim(self, new: Config) -> None:
        """A reload changed the built-in sim's codec: a new sim speaks it; the link
        moves to its pty, the old sim goes."""
        assert self.session is not None and self.supervisor is not None
        old = self.sim
        try:
            sim = await SimChild.start(new.device.codec, new.device.max_payload)
        except (SimError, OSError) as exc:
            log.error("sim_restart_failed", error=str(exc), kept="the running sim")
            return
        self.sim = sim
        log.info("sim_started", link=sim.link, pid=sim.proc.pid, codec=new.device.codec)
        self.session.replace_device(make_codec(new), sim.link)
        self.supervisor.request_reconnect("the simulated device restarted for the new codec")
        if old is not None:
            await old.stop()

    def _wire_core(self, loop: asyncio.AbstractEventLoop) -> Core:
        cfg = self.cfg
        core = self.core = Core(cfg, make_codec(cfg), self.port(), clock=loop)
        self.session, self.supervisor = core.session, core.supervisor
        core.session.set_debug(logs.level_enabled(cfg.log.level))
        core.listeners.append(self)
        return core

    def _start_ports(
        self, stack: contextlib.AsyncExitStack, core: Core, claims: dict[str, Lock]
    ) -> None:
        """The virtual serial ports on their claimed links (exit 1 when one cannot be
        created)."""
        front = self.ports = PortsFront(self.cfg, core)
        stack.callback(front.close)
        try:
            front.start(claims)
        except PortSetupError as exc:
            raise _Failed("cannot_create_port", str(exc)) from None
        core.listeners.append(front)

    def _ports_status(self) -> list[dict[str, object]]:
        return [] if self.ports is None else self.ports.status()

    async def _start_modbus(
        self,
        stack: contextlib.AsyncExitStack,
        sock: socket.socket | None,
        bound: list[socket.socket] | None,
    ) -> None:
        cfg = self.cfg
        if cfg.device.codec not in MODBUS_CODECS:
            raise _Failed("cannot_serve_modbus", "a socket named 'modbus' was passed, but "
                          f"the Modbus TCP server needs codec modbus-rtu or modbus-tcp, not "
                          f"{cfg.device.codec}", exit_code=2)  # fmt: skip
        assert self.core is not None and self.server is not None
        front = self.modbus = ModbusServer(cfg, self.core)
        try:
            await front.start(sock, bound=bound)
        except OSError as exc:
            raise _Failed("cannot_serve_modbus", str(exc), listen=cfg.modbus.listen or "") from None
        self.server.extra_status["modbus"] = front.status
        self._modbus_activated = sock is not None
        stack.push_async_callback(self._close_modbus)

    async def _close_modbus(self) -> None:
        if self.modbus is not None:
            await self.modbus.close()

    async def _start_http(self, stack: contextlib.AsyncExitStack, server: ApiServer) -> None:
        listen = self.cfg.metrics.listen
        assert listen is not None
        try:
            http = await httpmetrics.serve(listen, server.metrics_text)
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
        assert self.supervisor is not None and self.server is not None
        crashed: list[Exception] = []
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self.supervisor.run(), name="link")
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
        assert self.supervisor is not None and self.server is not None
        if self.supervisor.session.closing:
            return
        log.info("stopping", drain=self.cfg.api.drain)
        systemd.notify("STOPPING=1")
        await self.server.stop_accepting()
        await self.supervisor.close(self.cfg.api.drain)

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
        assert self.session is not None and self.server is not None
        assert self.supervisor is not None
        changed = changed_keys(self.cfg, new)
        if any(k.startswith("api.socket") for k in changed):
            log.warning("reload_socket_unchanged", reason="api.socket needs a restart")
        old, self.cfg = self.cfg, new
        logs.setup(new.log.level, new.log.format)
        self.session.set_debug(logs.level_enabled(new.log.level))
        self.session.reconfigure(new)
        assert self.core is not None
        self.core.cfg = self.server.cfg = new
        self.server.debug = logs.level_enabled(new.log.level)
        self.server.reevaluate_roles()
        sim_codec = ("device.codec" in changed or "device.max_payload" in changed) and self.sim
        if sim_codec:  # the built-in sim must speak the new codec: a new one
            self._restarting = asyncio.get_running_loop().create_task(self._restart_sim(new))
        elif any(k.startswith(_DEVICE_KEYS) for k in changed):
            new_port = new.device.port if new.device.port != old.device.port else None
            self.session.replace_device(make_codec(new), None if self.sim else new_port)
            self.supervisor.request_reconnect("device settings changed by reload")
        self._reload_modbus(new, "modbus.listen" in changed)
        if self.ports is not None:
            self.ports.configure(new)
        log.info("reloaded", changed=",".join(changed) or "nothing")
        return changed

    def _reload_modbus(self, new: Config, rebind: bool) -> None:
        """The Modbus front takes the new settings; a changed `listen` rebinds it
        (its connections closed), or starts or stops it."""
        if self.modbus is not None:
            self.modbus.configure(new)
        if not rebind:
            return
        if self._modbus_activated:
            log.warning("reload_modbus_unchanged", reason="the Modbus socket is systemd's")
            return
        self._rebinding = asyncio.get_running_loop().create_task(self._rebind_modbus(new))

    async def _rebind_modbus(self, new: Config) -> None:
        assert self.server is not None and self.core is not None
        old, self.modbus = self.modbus, None
        self.server.extra_status.pop("modbus", None)
        if old is not None:
            await old.close()
        if new.modbus.listen is None:
            log.info("modbus_stopped", reason="modbus.listen is null after reload")
            return
        front = ModbusServer(new, self.core)
        try:
            await front.start()
        except OSError as exc:
            log.error("modbus_rebind_failed", listen=new.modbus.listen, error=str(exc))
            return
        self.modbus = front
        self.server.extra_status["modbus"] = front.status

    def _reload_on_signal(self) -> None:
        systemd.reloading()
        try:
            self.reload()
        except ConfigError as exc:
            log.error("reload_failed", error=str(exc), kept="running config")
        finally:
            systemd.notify("READY=1")
            self.status_line()


@dataclass
class _Claims:
    """What `Daemon._claim` took before anything was created; `release` lets go of
    whatever was not handed over to the part that serves it."""

    api: Lock | None = None  #: the API socket's
    ports: dict[str, Lock] = field(default_factory=dict)  #: by link; popped when handed over
    modbus: list[socket.socket] | None = None

    def take_socket(self) -> Lock | None:
        lock, self.api = self.api, None
        return lock

    def take_modbus(self) -> list[socket.socket] | None:
        socks, self.modbus = self.modbus, None
        return socks

    def release(self) -> None:
        if self.api is not None:
            self.api.release()
        for lock in self.ports.values():
            lock.release()
        for sock in self.modbus or ():
            sock.close()
        self.api, self.modbus = None, None
        self.ports.clear()


class _Failed(ServeError):
    """A part did not start: logged as `event` with the error and `fields`."""

    def __init__(self, event: str, error: str, *, exit_code: int = 1, **fields: str) -> None:
        super().__init__(error)
        self.event, self.fields = event, fields
        #: 2 for a setup that cannot work until the config changes (systemd's unit
        #: does not restart on 2: RestartPreventExitStatus=2), else 1
        self.exit_code = exit_code


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
    if args.check_config:
        try:
            load_config(args.check_config)
        except ConfigError as exc:
            print(f"verld: invalid config:\n{exc}", file=sys.stderr)
            return 2
        print(f"{args.check_config}: ok")
        return 0
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
