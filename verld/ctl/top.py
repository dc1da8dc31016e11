"""`verlctl top [--interval S]`: the device and everyone using it, live, on one screen.

Strategy: every `interval` seconds one look at verld (`status`, `programs`, the
latency histogram's buckets out of `metrics` as data, `"format": "json"`: a
`topframe.Sample`), and the screen drawn from
the last two (`topframe.frame`) with curses from the standard library: nothing
else on the terminal, colour only for trouble (red, or bold without colour). Keys:
`q` quits (exit 0; curses gives the terminal back), `p` pauses the sampling, `s`
changes the sort; a resize redraws at once. If verld goes away the last screen
stays with a line saying so, and a new connection is tried every interval; the
rates start again once it answers. With stdout not a terminal (a pipe, a file) it
prints one frame as plain text, after one interval, and exits 0; with `--json`, the
programs' rows with their rates as one JSON object.
"""

from __future__ import annotations

import argparse
import curses
import json
import os
import shutil
import sys
import time
from typing import Any

from verld.client import Client, ClientError
from verld.ctl.codes import Usage
from verld.ctl.topframe import SORTS, Sample, frame, program_rows
from verld.metrics import buckets

#: the name it gives verld (`hello`): its row in its own view
NAME = "verlctl top"
#: lines a piped frame may have (every program row)
PIPED_HEIGHT = 10_000


def take(c: Client) -> Sample:
    """One look at verld (raises ClientError/OSError when it does not answer)."""
    status = c.status()
    programs = c.request("programs")
    metrics = c.request("metrics", format="json")["families"]
    return Sample(
        time.monotonic(),
        status,
        programs.get("programs", []),
        programs.get("link_changes", []),
        buckets(metrics),
    )


def cmd_top(c: Client, args: argparse.Namespace) -> int:
    """The live view (a terminal), or one frame as text (a pipe)."""
    interval = float(args.interval)
    if interval <= 0:
        raise Usage(f"--interval must be > 0 seconds, got {args.interval}")
    source = c.socket_path or ""
    c.hello(NAME)  # (its own row: "pid N verlctl top")
    if args.json or not sys.stdout.isatty():
        prev = take(c)
        time.sleep(interval)
        cur = take(c)
        if args.json:  # the rows with their rates, as the screen would show them
            rows = [vars(row) for row in program_rows(prev, cur, SORTS[0])]
            print(
                json.dumps(
                    {"interval": interval, "programs": rows, "link_changes": cur.link_changes}
                ),
                flush=True,
            )
            return 0
        width = shutil.get_terminal_size((80, 24)).columns
        lines = frame(
            prev,
            cur,
            width=width,
            height=PIPED_HEIGHT,
            source=source,
            interval=interval,
            keys=False,
        )
        print("\n".join(text.rstrip() for text, _ in lines), flush=True)
        return 0
    return int(curses.wrapper(_Screen(c, source, interval).run))


class _Screen:
    """The curses loop (see the module docstring)."""

    def __init__(self, c: Client, source: str, interval: float) -> None:
        self.c: Client | None = c
        self.source, self.interval = source, interval
        self.sort = SORTS[0]
        self.paused = False
        self.note = ""
        self.prev: Sample | None = None
        self.cur: Sample | None = None
        self.trouble = curses.A_BOLD

    def run(self, scr: Any) -> int:
        curses.curs_set(0)
        if curses.has_colors():
            curses.use_default_colors()
            curses.init_pair(1, curses.COLOR_RED, -1)
            self.trouble = curses.color_pair(1) | curses.A_BOLD
        scr.timeout(100)
        due = 0.0
        size = _size()
        while True:
            if _size() != size:  # (a resize whose KEY_RESIZE did not come: redrawn all the same)
                size = _size()
                curses.resizeterm(*size)
                self._draw(scr)
            now = time.monotonic()
            if now >= due and not self.paused:
                self._look()
                due = now + self.interval
                self._draw(scr)
            key = scr.getch()
            if key in (ord("q"), ord("Q")):
                return 0
            if key in (ord("p"), ord("P")):
                self.paused = not self.paused
                self._draw(scr)
            elif key in (ord("s"), ord("S")):
                self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
                self._draw(scr)
            elif key == curses.KEY_RESIZE:
                size = _size()
                curses.update_lines_cols()
                self._draw(scr)

    def _look(self) -> None:
        try:
            if self.c is None:
                self.c = Client(self.source, timeout=5.0, name=NAME).connect()
            sample = take(self.c)
        except (ClientError, OSError) as exc:
            if self.c is not None:
                self.c.close()
            self.c = None
            self.prev = None  # (rates start again once it answers)
            self.note = f"verld is not answering ({exc}); retrying every {self.interval:g} s"
            return
        self.note = ""
        self.prev, self.cur = self.cur, sample

    def _draw(self, scr: Any) -> None:
        size = _size()
        if size != scr.getmaxyx():  # (the terminal was resized and curses has not caught up)
            curses.resizeterm(*size)
        scr.erase()
        height, width = scr.getmaxyx()
        note = self.note or ("PAUSED" if self.paused else "")
        if self.cur is None:
            scr.addnstr(0, 0, note or "waiting for verld…", max(0, width - 1), self.trouble)
            scr.refresh()
            return
        lines = frame(
            self.prev,
            self.cur,
            width=max(1, width - 1),
            height=height,
            sort=self.sort,
            source=self.source,
            interval=self.interval,
            note=note,
        )
        for y, (text, bad) in enumerate(lines[:height]):
            scr.addnstr(y, 0, text, max(0, width - 1), self.trouble if bad else curses.A_NORMAL)
        scr.refresh()


def _size() -> tuple[int, int]:
    """The terminal's (lines, columns) as the kernel has them now."""
    try:
        cols, lines = os.get_terminal_size(sys.__stdout__.fileno() if sys.__stdout__ else 1)
    except OSError:
        return curses.LINES, curses.COLS
    return lines, cols
