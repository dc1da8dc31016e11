"""One virtual serial port: a pty edge around the program behind it.

Strategy: everything about the program's requests and answers (decoding, calls,
epochs, bounded output) is the front-independent `verld.fronts.stream.ProgramStream`;
this module is only the pty around it. The pty (`pty.PtyPort`) is watched by one
task: while no program has it open the task polls every `ATTACH_POLL` (0.1 s) and
nothing is read or written (a detached master is readable for ever, so a reader
would spin); once a program opens it a reader is added, and the program's close
(read gives None) removes it again. Bytes read go to `stream.feed`; the stream
writes through `write` (which first undoes echo and canonical mode a program may
have turned on) and asks for `want_writable` when the program reads slower than
answers come.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from verld.config import Config, PortConfig
from verld.fronts.ports.figures import FIGURES, PortStatus
from verld.fronts.ports.pty import DETACHED, PtyPort
from verld.fronts.stream import GONE, ProgramStream

if TYPE_CHECKING:
    from verld.fronts.base import Core

log = structlog.get_logger("verld.ports")

#: seconds between looks at a port nobody has open: a program that opens it and
#: writes at once waits at most this long (two syscalls a look: no CPU to speak of)
ATTACH_POLL = 0.1

#: the ports' front (`verld_front_calls_total{front}`) and their log events' prefix
KIND = FIGURES.name


class VirtualPort:
    """One `ports:` entry: its pty, and the program behind it. Made in the loop."""

    def __init__(self, core: Core, cfg: Config, entry: PortConfig) -> None:
        self.entry = entry
        self.link = entry.link
        self.pty = PtyPort(entry.link, entry.mode, entry.group)
        self._loop = asyncio.get_running_loop()  # (kept: get_running_loop costs a syscall)
        self._watch: asyncio.Task[None] | None = None
        self._gone: asyncio.Future[None] | None = None
        self.stream = ProgramStream(
            core,
            cfg,
            self,
            self._loop,
            kind=KIND,
            where={"link": entry.link},
            write=entry.write,
            events=entry.events,
        )

    def __repr__(self) -> str:
        return f"port:{self.link}"

    def configure(self, cfg: Config, entry: PortConfig) -> None:
        """Take the (re)loaded settings (`PortSetupError` when the node's mode or
        group cannot be set: the old ones stay); the decoder stays."""
        self.entry = entry
        self.stream.configure(cfg, write=entry.write, events=entry.events)
        if (entry.mode, entry.group) != (self.pty.mode, self.pty.group):
            self.pty.set_access(entry.mode, entry.group)

    # --- lifecycle ----------------------------------------------------------------------
    def open(self) -> None:
        """Create the pty and its link (`PortSetupError` says why not) and watch it."""
        self.pty.open()
        self._watch = self._loop.create_task(self._watch_program(), name=f"port {self.link}")
        log.info(
            "port_created",
            link=self.link,
            pty=self.pty.slave_path,
            write=self.entry.write,
            events=self.entry.events,
        )

    def close(self) -> None:
        """Close the pty (its program sees a hang-up) and remove the link."""
        if self._watch is not None:
            self._watch.cancel()  # (it only ever waits: nothing to clean up after it)
            self._watch = None
        self._detach("port removed")
        self.stream.close()
        self.pty.close()

    async def _watch_program(self) -> None:
        while True:
            while not self.pty.program_attached():  # (no event tells: poll)
                self._departed()
                await asyncio.sleep(ATTACH_POLL)
            self._gone = self._loop.create_future()
            self._attach()
            await self._gone

    def _departed(self) -> None:
        """A program opened the port, wrote and closed it between two polls: its
        requests go to the device (as to a real one), its answers nowhere."""
        while (data := self.pty.read()) is not None and data:
            self.stream.feed(data)
        self.stream.absent()

    def _attach(self) -> None:
        self.stream.attach()
        self._loop.add_reader(self.pty.fd, self._readable)
        log.info("port_opened", link=self.link)

    def _detach(self, reason: str) -> None:
        """The program closed the port (or the port goes)."""
        if not self.stream.attached:
            return
        self._loop.remove_reader(self.pty.fd)
        self.stream.detach()
        log.info("port_closed", link=self.link, reason=reason)
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    def _readable(self) -> None:
        data = self.pty.read()
        if data is None:
            self._detach("the program closed it")
        elif data:
            self.stream.feed(data)

    # --- the stream's Edge ----------------------------------------------------------------
    def write(self, data: bytes | bytearray) -> int:
        """Write to the program: bytes taken, or `GONE` when it closed the port since
        (the reader will see that, after reading its last words)."""
        pty = self.pty
        if pty.fix_termios():
            log.info(
                "port_termios_fixed",
                link=self.link,
                reason="the program turned on echo or canonical mode: turned off",
            )
        written = pty.write(data)
        return GONE if written == DETACHED else written

    def want_writable(self, want: bool) -> None:
        if want:
            self._loop.add_writer(self.pty.fd, self.stream.writable)
        else:
            self._loop.remove_writer(self.pty.fd)

    # --- the stream's events and figures -------------------------------------------------
    def event(self, data: bytes, text: str | None) -> None:
        """A device event (written when the entry has `events: true`)."""
        self.stream.event(data, text)

    def row(self) -> dict[str, Any]:
        """This port's `programs` row."""
        st, stream = self.stream.stats, self.stream
        return {
            "front": KIND,
            "who": self.link,
            "open": stream.attached,
            "calls": st.calls,
            "ok": st.ok,
            "failed": sum(st.failed.values()),
            "waiting": stream.waiting,
        }

    def status(self) -> PortStatus:
        """This port's `status.ports` entry."""
        return {
            "link": self.link,
            "open": self.stream.attached,
            **self.stream.figures(),
            "write": self.entry.write,
            "events": self.entry.events,
        }
