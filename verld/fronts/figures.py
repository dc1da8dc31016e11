"""Every front's `FrontFigures`, in `status` order: how each front's part of the
`status` reply reads as metrics (verld) and as rows of `verlctl status` (verlctl).

Light on purpose: only the fronts' figures modules, no front machinery, so verlctl
imports it as verld does. The API front has no part here: its keys (`clients`,
`lease`, `inhibit`, ...) are read with verld's own figures.
"""

from __future__ import annotations

from verld.fronts.modbus.figures import FIGURES as MODBUS
from verld.fronts.network.figures import FIGURES as NETWORK
from verld.fronts.ports.figures import FIGURES as PORT
from verld.fronts.protocol import FrontFigures

#: the fronts' figures, in `status` order (as `verld.fronts.registry.FRONTS`)
FIGURES: tuple[FrontFigures, ...] = (MODBUS, PORT, NETWORK)
