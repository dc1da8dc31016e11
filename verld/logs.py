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

Record = dict[str, Any]
_LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
}
_PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}


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
    """Sends each record to the journal with upper-case structured fields."""

    def __init__(self) -> None:
        import importlib

        self._send = importlib.import_module("systemd.journal").send

    def __call__(self, _logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        fields = {
            "".join(c if c.isalnum() else "_" for c in k.upper()).lstrip("_"): str(v)
            for k, v in event_dict.items()
            if k not in ("event", "timestamp", "level")
        }
        self._send(
            str(event_dict.get("event", "")),
            PRIORITY=str(_PRIORITY.get(method, 6)),
            SYSLOG_IDENTIFIER="verld",
            **{k: v for k, v in fields.items() if k},
        )
        raise structlog.DropEvent


def _json_renderer(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> str:
    return json.dumps(event_dict, default=str, separators=(",", ":"))


def setup(level: str = "INFO", fmt: str = "auto") -> str:
    """Configure structlog; returns the format actually used."""
    fmt = resolve_format(fmt)
    renderer: Any
    if fmt == "journal":
        try:
            renderer = JournalRenderer()
        except ImportError:
            fmt, renderer = "json", _json_renderer
    elif fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    else:
        renderer = _json_renderer
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
            RING,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    return fmt


def level_enabled(level: str, wanted: str = "DEBUG") -> bool:
    """Whether `wanted` records pass the configured `level`."""
    return _LEVELS.get(level, logging.INFO) <= _LEVELS[wanted]
