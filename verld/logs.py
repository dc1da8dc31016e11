"""Logging set-up: structlog to stderr (console / json / journal) plus a ring buffer.

Every record also lands in an in-memory ring buffer (served by the `logs` op) and
is offered to a listener (the server's `logs` subscribers). Loggers filter by
level before building anything, so a DEBUG line costs one method call at INFO.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

from verld import journal

Record = dict[str, Any]
_LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
}


class Ring:
    """The most recent log records, JSON-safe, plus one optional live listener."""

    def __init__(self, size: int = 1000) -> None:
        self.records: deque[Record] = deque(maxlen=size)
        self.listener: Callable[[Record], None] | None = None

    def __call__(
        self, _logger: Any, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        record: Record = {"ts": round(time.time(), 6), "level": method}
        for key, value in event_dict.items():
            if key in ("timestamp", "level"):
                continue
            safe = isinstance(value, str | int | float | bool | None)
            record["msg" if key == "event" else key] = value if safe else str(value)
        self.records.append(record)
        if self.listener is not None:
            self.listener(record)
        return event_dict

    def tail(self, n: int) -> list[Record]:
        n = max(0, min(n, len(self.records)))
        return list(self.records)[len(self.records) - n :] if n else []


RING = Ring()


def stderr_is_journal() -> bool:
    """True when stderr is connected to the journal ($JOURNAL_STREAM = dev:inode)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(x) for x in stream.split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def resolve_format(fmt: str) -> str:
    """`auto` → journal when stderr is the journal, console on a TTY, else json."""
    if fmt != "auto":
        return fmt
    if stderr_is_journal():
        return "journal"
    return "console" if sys.stderr.isatty() else "json"


class JournalRenderer:
    """Sends each record to the journal with upper-case structured fields (verld.journal).

    Raises JournalUnavailable when no journald listens. A record the journal
    refuses (journald restarting) is written to stderr as JSON instead of lost.
    """

    def __init__(self) -> None:
        self._send = journal.sender()

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        try:
            self._send(journal.entry_fields(method, event_dict))
        except OSError:
            return _json_renderer(logger, method, event_dict)
        raise structlog.DropEvent


def _json_renderer(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> str:
    return json.dumps(event_dict, default=str, separators=(",", ":"))


class _StdlibBridge(logging.Handler):
    """Records from the stdlib `logging` (asyncio's, mostly) go through structlog too,
    so they reach the same format, journal and ring buffer instead of raw stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, Any] = {"logger": record.name}
            if record.exc_info and record.exc_info[1] is not None:
                fields["error"] = repr(record.exc_info[1])
            method = record.levelname.lower() if record.levelno < logging.CRITICAL else "error"
            getattr(structlog.get_logger("stdlib"), method, structlog.get_logger().error)(
                record.getMessage(), **fields
            )
        except Exception:  # a log line must never take the daemon down
            self.handleError(record)


def setup(level: str = "INFO", fmt: str = "auto") -> str:
    """Configure structlog; returns the format actually used."""
    fmt = resolve_format(fmt)
    renderer: Any
    unavailable = None
    if fmt == "journal":
        try:
            renderer = JournalRenderer()
        except journal.JournalUnavailable as exc:
            fmt, renderer, unavailable = "json", _json_renderer, str(exc)
    elif fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    else:
        renderer = _json_renderer
    # The console renderer prints a record's traceback itself; for the json and journal
    # formats (and the ring behind the `logs` op) exc_info becomes its formatted text.
    tracebacks = [] if fmt == "console" else [structlog.processors.format_exc_info]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
            *tracebacks,
            RING,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    root.handlers[:] = [_StdlibBridge()]
    root.setLevel(logging.WARNING)
    if unavailable is not None:
        structlog.get_logger("verld.logs").warning(
            "journal_unavailable", reason=unavailable, fallback="json"
        )
    return fmt


def level_enabled(level: str, wanted: str = "DEBUG") -> bool:
    """Whether `wanted` records pass the configured `level`."""
    return _LEVELS.get(level, logging.INFO) <= _LEVELS[wanted]
