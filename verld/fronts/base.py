"""Core: the one surface over the device, for the fronts and for the daemon.

Strategy: a front (the JSON API, virtual serial ports, a Modbus TCP server) never
reaches into the session. It submits a call for an owner — any hashable that
stands for one program on that front — and gets exactly one `CallResult` back;
it registers as a `Listener` for device events and link transitions, and says
which taps (decoded frames, raw bytes) it wants while someone of its own listens.
Every owner is a client of the same fair queue, under the same limits and leases;
each front's calls are counted by outcome (`verld_front_calls_total{front,outcome}`)
by the session as they end. The daemon runs, reconfigures and stops the device
through the same object, and `status` (and the metrics) are assembled here once:
the session's part, then each front's (`Front.status`); the metrics are made from
that `status`, verld's own (`verld.metrics.families`) and each front's
(`FrontFigures.metrics`, `verld.fronts.figures.FIGURES`).

Core makes the session and its supervisor and is the only code that touches them:
every use of either is one of its methods.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections import deque
from collections.abc import Callable, Coroutine, Hashable, Mapping
from typing import Any

from verld.alarm import Clock
from verld.codec.registry import CodecSpec, retry_of, spec_of
from verld.config import Config
from verld.fronts.figures import FIGURES
from verld.fronts.leases import LeaseRefused, Leases, Shown
from verld.fronts.protocol import CannotServe, Front, FrontCounts, Listener
from verld.links.link import LinkState, Transition
from verld.links.port import PortKind, RawPort, open_port, port_kind
from verld.links.rfc2217 import Rfc2217Link
from verld.metrics import Family, exposition, families
from verld.session.calls import Call, CallResult
from verld.session.receiving import TrafficTap
from verld.session.session import Session, WireTap
from verld.session.supervisor import Opener, Supervisor

__all__ = ["CannotServe", "Core", "Front", "FrontCounts", "Listener"]

_CONNECTING = LinkState.CONNECTING
#: link changes kept for `programs`
LINK_CHANGES = 10


class Burst:
    """`with core.burst():` the calls submitted inside go to the device in one write
    (a burst of requests from one read). Nests; one object per core, no allocation."""

    __slots__ = ("_flush", "_hold")

    def __init__(self, hold: Callable[[], None], flush: Callable[[], None]) -> None:
        self._hold, self._flush = hold, flush

    def __enter__(self) -> None:
        self._hold()

    def __exit__(self, *exc: object) -> None:
        self._flush()


class Core:
    """The session and its supervisor, as the fronts and the daemon see them."""

    def __init__(
        self,
        cfg: Config,
        port: str | None = None,
        *,
        clock: Clock,
        opener: Opener = open_port,
        rng: random.Random | None = None,
        sockets: Mapping[str, socket.socket | None] | None = None,
    ) -> None:
        """`port`: the device's (default `device.port`); `sockets`: those systemd
        passed, by name ("api", "modbus", "net-NAME"), each for its front to
        `take_socket`."""
        self.cfg = cfg
        self.listeners: list[Listener] = []
        #: the fronts serving over this core, in `status` order (the daemon's list)
        self.fronts: list[Front] = []
        self.inhibits = 0  #: inhibitions so far (verld_inhibits_total)
        #: the last link changes, oldest first (`programs`' `link_changes`)
        self.link_changes: deque[dict[str, Any]] = deque(maxlen=LINK_CHANGES)
        #: who holds the port (`status.inhibit`: an `inhibit` op or a passthrough
        #: connection), None while nobody does; see `hold`
        self.holder: dict[str, Any] | None = None
        self._end_hold: Callable[[str], None] | None = None
        self.started = time.time()  #: (`status.uptime`)
        #: re-read the config file and apply it, returning the changed keys (the admin
        #: `reload` op; ConfigError keeps the running config). None: not available.
        self.reload_config: Callable[[], list[str]] | None = None
        #: a front calls it when its clients come or go (the daemon's STATUS= line)
        self.clients_changed: Callable[[], None] = _nothing
        self._counts: dict[str, FrontCounts] = {}
        self._sockets = {k: s for k, s in (sockets or {}).items() if s is not None}
        self._taps: dict[object, tuple[TrafficTap | None, WireTap | None]] = {}
        self._tapped: tuple[TrafficTap | None, WireTap | None] = (None, None)
        #: an rfc2217:// link's modem lines as last seen (all false until the server tells)
        self._modem_seen = {"cts": False, "dsr": False, "ri": False, "cd": False}
        self._session = Session(
            cfg,
            spec_of(cfg).host(cfg),
            cfg.device.port if port is None else port,
            clock=clock,
            on_event=self.device_event,
            # a loop's time is the monotonic clock (to the ms on uvloop): elapsed times
            # and the RTU gap read that clock itself
            precise=time.monotonic if isinstance(clock, asyncio.AbstractEventLoop) else None,
            rng=rng,
        )
        self._session.started = self.started
        self._retry = retry_of(cfg)  #: `device.retry`, or the codec's own default
        #: the codec's rule for requests that get no answer (`line.no_reply`), or None
        self._unanswered = _unanswered_rule(self._session.codec)
        self._supervisor = Supervisor(self._session, self.link_event, opener)
        self._burst = Burst(self._session.hold, self._session.flush)
        self._leases = Leases(clock, self._session.set_exclusive)
        #: submit(call): the call joins the fair queue; its `done` runs exactly once
        #: (maybe before this returns). The session's own method: no layer per call.
        self.submit: Callable[[Call], None] = self._session.submit

    # --- for fronts: calls ----------------------------------------------------------
    def front(self, name: str) -> FrontCounts:
        """The counts of front `name` (made on first use)."""
        counts = self._counts.get(name)
        if counts is None:
            counts = self._counts[name] = FrontCounts(name)
        return counts

    def make_call(
        self,
        counts: FrontCounts | None,
        owner: Hashable,
        payload: bytes,
        done: Callable[[CallResult], None],
        timeout: float | None = None,
        retry: int | None = None,
        wait: bool | None = None,
        req_id: object = None,
        reply: bool | None = None,
    ) -> Call:
        """A call for `owner` with `device.timeout`/`device.retry` where not given;
        hand it to `submit`, and `done` runs exactly once. Its outcome is counted in
        `counts` (the front's) as it ends. `wait` None: the call waits only while an
        open attempt is under way (at start, say), else fails at once when the link
        is not up. `reply` None: the codec's rule decides (`line.no_reply`), else an
        answer is awaited; False: none is (the call's `reply`, which its front reads
        to answer its program)."""
        if wait is None:
            wait = self._session.link.state is _CONNECTING
        call = Call(
            owner,
            payload,
            done,
            timeout or self.cfg.device.timeout,
            self._retry if retry is None else retry,
            wait,
            req_id,
        )
        if reply is None:
            unanswered = self._unanswered
            if unanswered is not None and unanswered(payload):
                call.reply = False
        elif not reply:
            call.reply = False
        if counts is not None:
            call.outcomes = counts.outcomes
        return call

    def awaits(self, payload: bytes, reply: bool | None = None) -> bool:
        """Whether a call of `payload` awaits the device's answer: `reply` where given,
        else the codec's rule (`line.no_reply`). A front that answers differently when
        none is awaited asks this before `make_call` (and passes the result as its
        `reply`), so its `done` need not hold the call: a call and its `done` holding
        each other would be a reference cycle per call, left to the garbage collector."""
        if reply is not None:
            return reply
        unanswered = self._unanswered
        return unanswered is None or not unanswered(payload)

    def forget(self, owner: Hashable) -> None:
        """The owner went away: its lease ends, its waiting calls are dropped, its
        calls on the link abandoned (their late replies are then stale)."""
        self._leases.forget(owner)
        self._session.forget_owner(owner)

    def burst(self) -> Burst:
        """`with core.burst():` calls submitted inside go out in one write at its end."""
        return self._burst

    def take_lease(self, owner: Hashable, seconds: float, shown: Shown) -> str:
        """Only `owner`'s calls reach the device for `seconds` (asked again: renewed);
        the lease's token. `shown()`: the holder as `status.lease` shows it.
        `LeaseRefused` while another owner holds it or the port is held."""
        inhibited_by = self.inhibited_by
        if inhibited_by is not None:
            raise LeaseRefused(inhibited_by or "inhibited")
        return self._leases.take(owner, seconds, shown)

    def release_lease(self, owner: Hashable, token: str | None) -> bool:
        """End `owner`'s lease (this token's, if given); False: it holds none."""
        return self._leases.release(owner, token)

    def lease_status(self) -> dict[str, Any] | None:
        """`status.lease`: the holder and `seconds_left`, or None."""
        return self._leases.status()

    def request_reconnect(self, reason: str) -> None:
        """Drop the link now and reopen it (the admin `reconnect` op, a reload)."""
        self._supervisor.request_reconnect(reason)

    def inhibit(self, reason: str) -> Coroutine[Any, Any, str]:
        """Let go of the device port for another program: calls stop going out now;
        the coroutine returned ends, with the port's path, once it is closed."""
        self.inhibits += 1
        self._supervisor.inhibit(reason)
        return self._let_go(reason)

    async def _let_go(self, reason: str) -> str:
        await self._supervisor.let_go(reason)
        return self._session.port

    def release(self) -> None:
        """End an inhibition: the port reopens (a no-op when not inhibited)."""
        self._supervisor.release()

    def hold(
        self, holder: dict[str, Any], reason: str, end: Callable[[str], None]
    ) -> Coroutine[Any, Any, str]:
        """The one holder of the port (an `inhibit` op, a passthrough connection):
        `inhibit(reason)` for it, `holder` shown as `status.inhibit`; `end(why)` is how
        an `uninhibit` asks it to stop (it then calls `unhold`). Ask only while
        `holder` is None."""
        self.holder, self._end_hold = holder, end
        self._leases.end("inhibited")
        return self.inhibit(reason)

    def end_hold(self, why: str) -> bool:
        """`uninhibit`: ask the holder to give the port back; False: none holds it."""
        end = self._end_hold
        if end is None:
            return False
        end(why)
        return True

    def unhold(self) -> None:
        """The holder gives the port back: it reopens (flush, handshake)."""
        self.holder = self._end_hold = None
        self.release()

    @property
    def inhibited_by(self) -> str | None:
        """Why the port is let go of ("inhibited by pid N"), while it is (or is being)."""
        return self._session.link.inhibited_by

    @property
    def inhibited(self) -> bool:
        """An inhibition is in force (or letting go of the port is under way)."""
        return self._session.link.inhibited_by is not None

    def take_socket(self, name: str) -> socket.socket | None:
        """The socket systemd passed for `name` ("api", "modbus"), once; None: none."""
        return self._sockets.pop(name, None)

    def passed_sockets(self) -> list[str]:
        """The names of the sockets systemd passed that no front has taken yet."""
        return list(self._sockets)

    # --- for fronts: the device -----------------------------------------------------
    @property
    def port(self) -> str:
        """The device's port (a path or tcp://HOST:PORT)."""
        return self._session.port

    def modem_bits(self) -> int | None:
        """The link's modem input lines as RFC 2217's MODEMSTATE bits (CD 0x80, RI
        0x40, DSR 0x20, CTS 0x10); None when it has none (a pty, TCP) or is not open."""
        port = self._session.attached
        return port.modem_bits() if isinstance(port, RawPort) else None

    @property
    def window(self) -> int:
        """How many calls may be on the link at once."""
        return self._session.window.size

    @property
    def spec(self) -> CodecSpec:
        """The device codec's traits and factories (the current config's)."""
        return spec_of(self.cfg)

    def device_event(self, data: bytes, text: str | None, generation: int) -> None:
        for listener in self.listeners:
            listener.device_event(data, text, generation)

    def link_event(self, transition: Transition) -> None:
        self.link_changes.append(
            {
                "t": round(time.time(), 3),
                "state": transition.state.value,
                "reason": transition.reason,
                "generation": transition.generation,
            }
        )
        for listener in self.listeners:
            listener.link_event(transition)

    def waiting(self, owner: Hashable) -> int:
        """`owner`'s calls waiting in the queue or on the link."""
        return self._session.queue.load_of(owner)

    def set_taps(self, who: object, traffic: TrafficTap | None, wire: WireTap | None) -> None:
        """`who` (a front) wants these taps (None: not that one); the session taps
        only while some front wants it, and then costs nothing for the others."""
        self._taps[who] = (traffic, wire)
        traffics = [t for t, _ in self._taps.values() if t is not None]
        wires = [w for _, w in self._taps.values() if w is not None]
        self._tapped = (_fan(traffics), _fan(wires))
        self._session.set_taps(*self._tapped)

    def relayed(self, direction: str, data: bytes) -> None:
        """Bytes a passthrough relayed to ("tx") or from ("rx") the port, for the taps:
        raw on `wire`, as one `passthrough` frame on `traffic`."""
        traffic, wire = self._tapped
        if wire is not None:
            wire(direction, data)
        if traffic is not None:
            traffic(direction, "passthrough", None, None, data)

    # --- for the daemon -------------------------------------------------------------
    def run(self) -> Coroutine[Any, Any, None]:
        """The connect loop (the daemon's one task): until `close`."""
        return self._supervisor.run()

    async def close(self, drain: float) -> None:
        """Stop: queued calls fail, in-flight ones may finish for up to `drain` s."""
        await self._supervisor.close(drain)

    @property
    def closing(self) -> bool:
        """`close` has begun."""
        return self._session.link.closing

    def set_debug(self, enabled: bool) -> None:
        """Per-call DEBUG lines are built only when DEBUG is on."""
        self._session.set_debug(enabled)

    def reconfigure(self, cfg: Config) -> None:
        """A reloaded config's live settings (timeouts, heartbeat, limits)."""
        self.cfg = cfg
        self._retry = retry_of(cfg)
        self._session.reconfigure(cfg)

    def replace_device(self, port: str | None = None) -> None:
        """The current config's device settings (after `reconfigure`): a new codec, and
        `port` when given; a running link takes them at its next open
        (`request_reconnect`)."""
        self._session.replace_device(spec_of(self.cfg).host(self.cfg), port)
        self._unanswered = _unanswered_rule(self._session.codec)

    def link_summary(self) -> str:
        """The link in a few words, for systemd's STATUS= line."""
        link = self._session.link
        return f"link {link.state.value} ({link.reason}), gen {link.generation}, port {self.port}"

    # --- figures ----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The `status` reply (docs/protocol.md): the session's part, `uptime`, then
        each front's keys."""
        st = self._session.status(time.time())
        st["uptime"] = round(time.time() - self.started, 3)
        for front in self.fronts:
            st.update(front.status())
        kind = port_kind(self.port)
        if kind is PortKind.RFC2217:
            st["link"]["modem"] = self._server_modem()
        if kind is not PortKind.TCP:  # serial, rfc2217: show the line settings
            dev = self.cfg.device
            st["link"]["settings"] = (
                f"{dev.baudrate} {dev.bytesize}{dev.parity[0].upper()}{dev.stopbits:g}"
                + (" rtscts" if dev.rtscts else "")
            )
        return st

    def _server_modem(self) -> dict[str, bool]:
        """An rfc2217:// link's modem lines, as its server last told them (kept while
        the link is down; all off until the server first tells)."""
        transport = self._session.attached
        if isinstance(transport, Rfc2217Link):
            self._modem_seen = dict(transport.modem)
        return dict(self._modem_seen)

    def programs(self) -> dict[str, Any]:
        """The `programs` reply (docs/protocol.md): every front's programs, and the last
        link changes."""
        rows = [row for front in self.fronts for row in front.programs()]
        return {"programs": rows, "link_changes": list(self.link_changes)}

    def front_calls(self) -> dict[str, dict[str, int]]:
        """Each front's calls by outcome (`verld_front_calls_total{front,outcome}`)."""
        return {name: dict(c.outcomes) for name, c in sorted(self._counts.items())}

    def metrics(self) -> list[Family]:
        """The metrics (the `metrics` op, `metrics.listen`), from one `status`: verld's
        own, the latency histogram, and each front's from its part of it."""
        st = self.status()
        session = self._session
        fronts = [family for figures in FIGURES for family in figures.metrics(st)]
        units = session.line.unit_calls()
        return families(st, session.stats.latency, self.front_calls(), units, fronts)

    def metrics_text(self) -> str:
        """`metrics` in the Prometheus text exposition format."""
        return exposition(self.metrics())


def _nothing() -> None:
    return None


def _fan(taps: list[Any]) -> Any:
    """One tap calling each of `taps` (or the one itself; None for none)."""
    if not taps:
        return None
    if len(taps) == 1:
        return taps[0]

    def fan(*args: Any) -> None:
        for tap in taps:
            tap(*args)

    return fan


def _unanswered_rule(codec: object) -> Callable[[bytes], bool] | None:
    """The codec's test for requests its device does not answer (the `line` codec's
    `no_reply`), or None when it has none."""
    rule: Callable[[bytes], bool] | None = getattr(codec, "unanswered", None)
    return rule
