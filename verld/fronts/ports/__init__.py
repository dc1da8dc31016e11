"""Virtual serial ports: programs that only know a tty reach the device through a pty.

`framing` is the sans-I/O device side of every codec (the program's requests in,
replies and events out); the front that owns the ptys builds on it.
"""

from __future__ import annotations

from verld.fronts.ports.framing import PortFraming, PortRequest, make_port_framing

__all__ = ["PortFraming", "PortRequest", "make_port_framing"]
