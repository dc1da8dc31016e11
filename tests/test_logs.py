"""Logging set-up: formats, the ring buffer, and stdlib records routed through structlog."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog
from structlog.testing import capture_logs

from verld import logs


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    logging.getLogger().handlers[:] = []


def test_stdlib_records_go_through_structlog() -> None:
    """asyncio's own log records (stdlib logging) come out as structlog events."""
    logs.setup("INFO", "json")
    with capture_logs() as captured:
        logging.getLogger("asyncio").error("socket.send() raised exception.")
    assert captured[0]["event"] == "socket.send() raised exception."
    assert captured[0]["logger"] == "asyncio"


def test_ring_buffer_keeps_json_safe_records() -> None:
    """Records land in the ring with ts, level, msg and stringified odd values."""
    logs.setup("INFO", "json")
    structlog.get_logger().info("hello_ring", obj=object(), n=3)
    rec = logs.RING.tail(1)[0]
    assert (rec["msg"], rec["level"], rec["n"]) == ("hello_ring", "info", 3)
    assert isinstance(rec["obj"], str)


def test_debug_is_filtered_at_info() -> None:
    """At INFO, a DEBUG line does not reach the ring buffer."""
    logs.setup("INFO", "json")
    structlog.get_logger().debug("not_kept_debug")
    assert all(r["msg"] != "not_kept_debug" for r in logs.RING.tail(20))
    assert logs.level_enabled("DEBUG") and not logs.level_enabled("INFO")
