"""The device's port opened by its kind: the one opener the supervisor uses.

`rfc2217://HOST:PORT` is a telnet link with its line settings negotiated
(`verld.links.rfc2217`); a serial path and `tcp://HOST:PORT` are plain fds
(`verld.links.transport.open_link`).
"""

from __future__ import annotations

from verld.config import DeviceConfig
from verld.links.rfc2217 import open_rfc2217
from verld.links.transport import LinkHandler, LinkTransport, open_link


async def open_device(
    cfg: DeviceConfig, port: str, handler: LinkHandler, connect_timeout: float
) -> LinkTransport:
    """Open `port` (a serial path, tcp:// or rfc2217://); `OpenError` says why not."""
    if port.startswith("rfc2217://"):
        return await open_rfc2217(cfg, port, handler, connect_timeout)
    return await open_link(cfg, port, handler, connect_timeout)
