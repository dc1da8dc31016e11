"""Home Assistant discovery for the entities of `entities:`, and forgetting removed ones;
sans-I/O.

Strategy: each entity gets one retained config,
`homeassistant/<kind>/<node>/value_<name>/config`, under the node id of its device's
link/calls/errors configs (`verld_<host>_<device>`: one Home Assistant device per verld
device); its object id `value_<name>` cannot collide with `link`, `calls` or `errors`.
The config names the value's topic and how to read it (`{{ value_json.value }}`), a
switch's or button's command topic and payloads, a number's or select's command
topic with its range and step or its options (`setpoint.discovery`), the unit and
classes given, and two availability topics with `availability_mode: all`: the entity
is available only while the bridge is online and the device's link is `up`. Sensors
and binary sensors also expire (unavailable) when no value came for three polls (at
least a minute): a device that answers but no longer decodes does not keep showing its
last value.

Home Assistant keeps an entity as long as its retained config is on the broker. So
`Forgetting` tells, of each retained config the bridge reads back at start, whether it
is one of the bridge's own (its node id is one of this bridge's devices'), a `value_*`
object, and no longer configured: such a config is to be cleared (an empty retained
message), which removes the entity from Home Assistant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from verld.mqtt import setpoint
from verld.mqtt.entityconfig import Entity
from verld.mqtt.topics import HA_PREFIX, ORIGIN, Topics, encode, node_id

#: what the bridge subscribes to, to read the retained configs back
CONFIGS = f"{HA_PREFIX}/+/+/+/config"
OBJECT = "value_"
MIN_EXPIRY = 60


def config_topic(host: str, entity: Entity) -> str:
    return f"{HA_PREFIX}/{entity.kind}/{node_id(host, entity.device)}/{OBJECT}{entity.name}/config"


def entity_config(topics: Topics, host: str, entity: Entity, device: dict[str, Any]) -> bytes:
    """The retained discovery config of `entity`; `device` is its verld device's block
    (`topics.device_block`)."""
    name, kind = entity.name, entity.kind
    config: dict[str, Any] = {
        "name": name.replace("_", " ").capitalize(),
        "unique_id": f"{node_id(host, entity.device)}_{OBJECT}{name}",
    }
    if kind != "button":
        config["state_topic"] = topics.value(entity.device, name)
        config["value_template"] = "{{ value_json.value }}"
    if kind in ("switch", "button", "number", "select"):
        config["command_topic"] = topics.value_set(entity.device, name)
    if kind in ("switch", "binary_sensor"):
        config.update(payload_on="ON", payload_off="OFF")
    elif kind == "button":
        config["payload_press"] = "PRESS"
    given = {
        "unit_of_measurement": entity.unit,
        "device_class": entity.device_class,
        "state_class": entity.state_class,
        "icon": entity.icon,
    }
    config.update((key, value) for key, value in given.items() if value is not None)
    config.update(setpoint.discovery(entity))
    if kind in ("sensor", "binary_sensor"):
        config["expire_after"] = max(MIN_EXPIRY, math.ceil(3 * entity.every))
    config["availability"] = [
        {
            "topic": topics.bridge_state,
            "value_template": "{{ value_json.state }}",
            "payload_available": "online",
            "payload_not_available": "offline",
        },
        {
            "topic": topics.state(entity.device),
            "value_template": "{{ 'online' if value_json.state == 'up' else 'offline' }}",
            "payload_available": "online",
            "payload_not_available": "offline",
        },
    ]
    config["availability_mode"] = "all"
    config["device"] = device
    config["origin"] = ORIGIN
    return encode(config)


class Forgetting:
    """Which retained configs read back are the bridge's removed entities; see the
    module docstring."""

    def __init__(self, host: str, devices: Iterable[str], current: Iterable[str]) -> None:
        self.nodes = {node_id(host, device) for device in devices}
        self.current = set(current)

    def stale(self, topic: str, payload: bytes) -> bool:
        """Whether `topic` (a config read back, with its payload) is to be cleared."""
        levels = topic.split("/")
        return (
            len(levels) == 5
            and levels[0] == HA_PREFIX
            and levels[4] == "config"
            and levels[2] in self.nodes
            and levels[3].startswith(OBJECT)
            and topic not in self.current
            and bool(payload)
        )
