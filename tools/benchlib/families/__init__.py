"""The bench's families, each a few declarations on `benchlib.engine` (see its docstring).

`api` (verld's API against a direct pty and socat), `ports` (verld's virtual serial
ports), `modbus` (verld's Modbus TCP gateway against a direct RTU master and mbusd),
`network` (a shared raw network port of verld against the pty and ser2net), `links`
(verld's `rfc2217://` device link through ser2net against `tcp://` and the pty), `fleet`
(verld-mqtt against verld's socket and a bare MQTT echo).
"""

from __future__ import annotations

import importlib

from benchlib.engine import Family

NAMES = ("api", "ports", "modbus", "network", "links", "fleet")


def family(name: str) -> Family:
    """A fresh instance of the family `name` (imported on demand: fleet needs paho)."""
    module = importlib.import_module(f"benchlib.families.{name}")
    made: Family = module.FAMILY()
    return made
