"""verld: a device bridge daemon.

One verld process owns the link to one device (serial port or TCP endpoint);
local clients share it through a framed JSON API on a Unix socket.
"""

from __future__ import annotations

__version__ = "0.1.0"
API_VERSION = "1"

__all__ = ["API_VERSION", "__version__"]
