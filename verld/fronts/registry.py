"""The daemon's list of fronts: `FRONTS`, one line per front, in `status` order
(the daemon starts them in the reverse order, so the API socket answers last),
with the event logged when the front cannot claim or start what it serves.
Every front is made whatever the config: one with nothing to serve (no `ports`,
no `network`, no `modbus.listen`) claims and starts nothing, shows an empty part
in `status`, and can begin serving on a reload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from verld.config import Config
from verld.fronts.api import ApiServer
from verld.fronts.base import Core
from verld.fronts.modbus.server import ModbusServer
from verld.fronts.network.front import NetworkFront
from verld.fronts.ports.front import PortsFront
from verld.fronts.protocol import Front


class Registration(NamedTuple):
    """One front: how it is made, and the event logged when it cannot serve."""

    make: Callable[[Config, Core], Front]
    fails: str


#: every front, in `status` order
FRONTS: tuple[Registration, ...] = (
    Registration(ApiServer, fails="cannot_serve"),
    Registration(ModbusServer, fails="cannot_serve_modbus"),
    Registration(PortsFront, fails="cannot_create_port"),
    Registration(NetworkFront, fails="cannot_serve_network"),
)
