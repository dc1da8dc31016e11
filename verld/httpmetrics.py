"""Optional HTTP exposition of the metrics (`metrics.listen: HOST:PORT`), stdlib only.

A deliberately tiny HTTP/1.0 responder: `GET /metrics` (or `/`) gets the
Prometheus text, anything else 404. One request per connection, bounded reads
and a timeout, so a slow or hostile scraper cannot hold resources.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

log = structlog.get_logger("verld.metrics")
_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _response(status: str, body: bytes, content_type: str = "text/plain") -> bytes:
    head = (
        f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def serve(listen: str, render: Callable[[], str]) -> asyncio.AbstractServer:
    """Start serving `render()` on HOST:PORT."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass  # headers are not needed
            parts = line.split()
            if (
                len(parts) >= 2
                and parts[0] in (b"GET", b"HEAD")
                and parts[1] in (b"/", b"/metrics")
            ):
                body = render().encode()
                reply = _response("200 OK", b"" if parts[0] == b"HEAD" else body, _CONTENT_TYPE)
            else:
                reply = _response("404 Not Found", b"try /metrics\n")
            writer.write(reply)
            await writer.drain()
        except (TimeoutError, OSError, ValueError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, int(port), limit=8192)
    log.info("metrics_http", listen=listen)
    return server
