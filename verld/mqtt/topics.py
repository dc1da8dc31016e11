"""Topic names and the payloads published on them, sans-I/O.

Everything verld-mqtt publishes is a UTF-8 JSON object (compact, ASCII-escaped,
like verld's own messages) on a topic under one base (docs/fleet.md):

    <base>/bridge/state        retained  {"state": "online"} | {"state": "offline"} (the will)
    <base>/<device>/state      retained  {"state", "generation", "port", "codec"}
    <base>/<device>/event                {"data", "hex", "generation"} (+ "text")
    <base>/<device>/status     retained  verld's `status` reply without `id`/`ok`
    <base>/<device>/call                 requests (verld.mqtt.calls)
    <base>/<device>/call/response        replies without an MQTT 5 Response Topic
    <base>/<device>/value/<name>         an entity's value (verld.mqtt.entities)
    <base>/<device>/value/<name>/set     a switch's, button's, number's or select's commands
    <base>/bridge/entities     retained  every entity's counters

plus, with Home Assistant discovery, retained configs under `homeassistant/`. This
module builds names and payloads only: the bridge decides when to publish them.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from verld import __version__

if TYPE_CHECKING:
    from verld.mqtt.config import DeviceInfo

#: the link states verld reports, plus the bridge's own for a socket it cannot reach
LINK_STATES = ("up", "down", "connecting", "inhibited")
UNREACHABLE = "unreachable"
HA_PREFIX = "homeassistant"
HA_STATUS = f"{HA_PREFIX}/status"


def encode(obj: dict[str, Any]) -> bytes:
    """A payload: compact JSON, non-ASCII escaped (so always valid UTF-8)."""
    return json.dumps(obj, separators=(",", ":")).encode("ascii")


@dataclass(frozen=True, slots=True)
class Topics:
    """The topic names under one base."""

    base: str

    @property
    def bridge_state(self) -> str:
        return f"{self.base}/bridge/state"

    @property
    def call_filter(self) -> str:
        """What the bridge subscribes to for requests."""
        return f"{self.base}/+/call"

    @property
    def entities(self) -> str:
        """Every entity's counters (retained)."""
        return f"{self.base}/bridge/entities"

    @property
    def set_filter(self) -> str:
        """What the bridge subscribes to for switch and button commands."""
        return f"{self.base}/+/value/+/set"

    def value(self, device: str, name: str) -> str:
        return f"{self.base}/{device}/value/{name}"

    def value_set(self, device: str, name: str) -> str:
        return f"{self.base}/{device}/value/{name}/set"

    def entity_of_set(self, topic: str) -> tuple[str, str] | None:
        """(device, name) of a `<base>/<device>/value/<name>/set` topic, else None."""
        head, tail = f"{self.base}/", "/set"
        if not (topic.startswith(head) and topic.endswith(tail)):
            return None
        levels = topic[len(head) : -len(tail)].split("/")
        if len(levels) != 3 or levels[1] != "value" or not levels[0] or not levels[2]:
            return None
        return levels[0], levels[2]

    def state(self, device: str) -> str:
        return f"{self.base}/{device}/state"

    def event(self, device: str) -> str:
        return f"{self.base}/{device}/event"

    def status(self, device: str) -> str:
        return f"{self.base}/{device}/status"

    def call(self, device: str) -> str:
        return f"{self.base}/{device}/call"

    def response(self, device: str) -> str:
        return f"{self.base}/{device}/call/response"

    def device_of_call(self, topic: str) -> str | None:
        """The device level of a `<base>/<device>/call` topic, else None."""
        head, tail = f"{self.base}/", "/call"
        if not (topic.startswith(head) and topic.endswith(tail)):
            return None
        name = topic[len(head) : -len(tail)]
        return name if name and "/" not in name else None

    def refusal(self, response_topic: str) -> str | None:
        """Why replies may not go to `response_topic` (None: they may).

        A reply must never become a request (another device's, on this host or any
        other), nor land in the bridge's own tree or Home Assistant's."""
        if not response_topic:
            return "an empty Response Topic"
        if "+" in response_topic or "#" in response_topic:
            return "a Response Topic with a wildcard (+ or #)"
        if response_topic.startswith("$"):
            return "a Response Topic starting with '$' (the broker's own)"
        if response_topic.endswith("/call") or response_topic == "call":
            return "a Response Topic ending in /call (it would be a request)"
        for tree in (self.base, HA_PREFIX):
            if response_topic == tree or response_topic.startswith(f"{tree}/"):
                return f"a Response Topic under {tree}/"
        return None


def bridge_state(online: bool) -> bytes:
    return encode({"state": "online" if online else "offline"})


# ---------------------------------------------------------------------------
# Device state, events, status


@dataclass(frozen=True, slots=True)
class DeviceState:
    """What `<base>/<device>/state` says; fields keep their last known values."""

    state: str = UNREACHABLE
    generation: int | None = None
    port: str | None = None
    codec: str | None = None

    def payload(self) -> bytes:
        return encode(
            {
                "state": self.state,
                "generation": self.generation,
                "port": self.port,
                "codec": self.codec,
            }
        )

    def from_status(self, status: dict[str, Any]) -> DeviceState:
        """The state a `status` reply shows (its `link` block)."""
        link = status.get("link")
        if not isinstance(link, dict):
            return self
        return replace(
            self,
            state=_link_state(_text(link.get("state"), self.state)),
            generation=_integer(link.get("generation"), self.generation),
            port=_text(link.get("port"), self.port),
            codec=_text(link.get("codec"), self.codec),
        )

    def from_link_event(self, event: dict[str, Any]) -> DeviceState:
        """The state after a `link` event."""
        return replace(
            self,
            state=_link_state(_text(event.get("state"), self.state)),
            generation=_integer(event.get("generation"), self.generation),
        )

    def unreachable(self) -> DeviceState:
        return replace(self, state=UNREACHABLE)


def _link_state(state: Any) -> Any:
    """verld's link state as published: `closed` (verld is shutting down) is `down`,
    so the state is always up, down, connecting, inhibited or unreachable."""
    return "down" if state == "closed" else state


def _text(value: Any, default: str | None) -> Any:
    return value if isinstance(value, str) else default


def _integer(value: Any, default: int | None) -> int | None:
    return value if type(value) is int else default


def data_hex(b64: Any) -> str | None:
    """The lowercase hex of a base64 `data` field, None when it is not base64."""
    if not isinstance(b64, str):
        return None
    try:
        return binascii.a2b_base64(b64.encode("ascii"), strict_mode=True).hex()
    except (binascii.Error, ValueError):
        return None


def event_payload(event: dict[str, Any]) -> bytes | None:
    """A verld `device` event → the `<base>/<device>/event` payload (None: not one)."""
    if event.get("event") != "device":
        return None
    hexed = data_hex(event.get("data"))
    if hexed is None:
        return None
    out: dict[str, Any] = {
        "data": event["data"],
        "hex": hexed,
        "generation": event.get("generation"),
    }
    if isinstance(event.get("text"), str):
        out["text"] = event["text"]
    return encode(out)


def status_payload(reply: dict[str, Any]) -> bytes:
    """verld's `status` reply, without the request's `id` and `ok`."""
    return encode({k: v for k, v in reply.items() if k not in ("id", "ok")})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ---------------------------------------------------------------------------
# Home Assistant MQTT discovery

_UNSAFE = re.compile(r"[^a-z0-9_]")


def ha_host(host: str) -> str:
    """The host name as it appears in discovery ids: lowercase [a-z0-9_]."""
    return _UNSAFE.sub("_", host.lower()) or "host"


def node_id(host: str, device: str) -> str:
    """A device's node id in discovery topics and ids: `verld_<host>_<device>`."""
    return f"verld_{ha_host(host)}_{device}"


def device_block(
    host: str,
    device: str,
    codec: str | None,
    daemon: str | None,
    info: DeviceInfo | None = None,
) -> dict[str, Any]:
    """The `device` block every discovery config of one verld device shares; `info` (its
    `devices:` mapping) gives its name, model, manufacturer and suggested area."""
    ident: dict[str, Any] = {
        "identifiers": [node_id(host, device)],
        "name": f"verld {device} on {host}",
        "manufacturer": "verld",
    }
    if codec:  # (HA refuses null values: a field not known yet is left out)
        ident["model"] = codec
    if daemon:
        ident["sw_version"] = daemon.removeprefix("verld ")
    if info is not None:
        given = {
            "name": info.name,
            "model": info.model,
            "manufacturer": info.manufacturer,
            "suggested_area": info.area,
        }
        ident.update((key, value) for key, value in given.items() if value is not None)
    return ident


ORIGIN = {"name": "verld-mqtt", "sw_version": __version__}


def discovery(
    topics: Topics,
    host: str,
    device: str,
    codec: str | None,
    daemon: str | None,
    info: DeviceInfo | None = None,
) -> dict[str, bytes]:
    """Topic → retained discovery config for one device: a connectivity binary_sensor
    for the link, and total_increasing sensors for calls and failed calls.

    `host` is the short host name; `daemon` verld's hello (`"verld X.Y.Z"`); `info` what
    its `devices:` mapping says of it (`device_block`)."""
    node = node_id(host, device)
    common: dict[str, Any] = {
        "availability_topic": topics.bridge_state,
        "availability_template": "{{ value_json.state }}",
        "payload_available": "online",
        "payload_not_available": "offline",
        "device": device_block(host, device, codec, daemon, info),
        "origin": ORIGIN,
    }
    link = {
        "name": "Link",
        "unique_id": f"{node}_link",
        "device_class": "connectivity",
        "state_topic": topics.state(device),
        "value_template": "{{ 'ON' if value_json.state == 'up' else 'OFF' }}",
        **common,
    }
    configs = {f"{HA_PREFIX}/binary_sensor/{node}/link/config": link}
    for obj, name, counter in (("calls", "Calls", "calls"), ("errors", "Errors", "calls_failed")):
        configs[f"{HA_PREFIX}/sensor/{node}/{obj}/config"] = {
            "name": name,
            "unique_id": f"{node}_{obj}",
            "state_topic": topics.status(device),
            "value_template": f"{{{{ value_json.counters.{counter} }}}}",
            "state_class": "total_increasing",
            **common,
        }
    return {topic: encode(config) for topic, config in configs.items()}
