"""docs/fleet.md cannot drift from verld-mqtt: its configs and its topic reference.

Every ```yaml block on the page that looks like a verld-mqtt config (a top-level
`broker:` or `devices:` key) must pass `python -m verld.mqtt --check-config`. Every
`<base>/...` topic the page names in backticks must be one `verld.mqtt.topics.Topics`
builds, and every topic Topics builds must be on the page. The Home Assistant config
topics and unique ids it names must be the ones `discovery` builds.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from verld.mqtt import setpoint
from verld.mqtt.config import parse_bridge_config
from verld.mqtt.topics import HA_STATUS, Topics, discovery

DOC = Path(__file__).resolve().parents[1] / "docs" / "fleet.md"
TEXT = DOC.read_text(encoding="utf-8")
YAML_BLOCKS = re.findall(r"^```yaml\n(.*?)^```", TEXT, re.M | re.S)
CONFIGS = [block for block in YAML_BLOCKS if re.search(r"^(broker|devices):", block, re.M)]
BASE, DEVICE, HOST = "<base>", "<device>", "<host>"


def _bridge_topics() -> set[str]:
    """Every name Topics builds, for base `<base>` and device `<device>`: its string
    properties, and its methods that take just a device name."""
    topics = Topics(BASE)
    names: set[str] = set()
    for name, member in inspect.getmembers(Topics):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            value = getattr(topics, name)
            if isinstance(value, str):
                names.add(value)
        elif inspect.isfunction(member) and list(inspect.signature(member).parameters) == [
            "self",
            "device",
        ]:
            names.add(getattr(topics, name)(DEVICE))
    return names


def _doc_topics(prefix: str) -> set[str]:
    return set(re.findall(rf"`({re.escape(prefix)}[^`\s]*)`", TEXT))


def test_the_page_has_configs_to_check() -> None:
    """docs/fleet.md has at least three verld-mqtt configs in its yaml blocks."""
    assert len(CONFIGS) >= 3, "no verld-mqtt config found in the ```yaml blocks"


@pytest.mark.parametrize("config", CONFIGS, ids=[f"yaml{i}" for i in range(len(CONFIGS))])
def test_each_config_on_the_page_passes_check_config(config: str, tmp_path: Path) -> None:
    """Each verld-mqtt config on docs/fleet.md passes `verld-mqtt --check-config`."""
    path = tmp_path / "mqtt.yaml"
    path.write_text(config, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "verld.mqtt", "--check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{done.stderr}\n--- the block:\n{config}"


def test_every_base_topic_on_the_page_is_one_the_bridge_uses() -> None:
    """docs/fleet.md's topic reference names exactly the topics the bridge uses under its base."""
    bridge, doc = _bridge_topics(), _doc_topics(f"{BASE}/")
    assert len(bridge) >= 7, bridge  # (bridge/state, the call filter, five per device)
    unknown = doc - bridge
    assert not unknown, f"docs/fleet.md names topics the bridge does not use: {unknown}"
    missing = bridge - doc
    assert not missing, f"docs/fleet.md's topic reference lacks: {missing}"


def test_the_home_assistant_topics_and_ids_on_the_page_are_the_bridges() -> None:
    """docs/fleet.md's Home Assistant topics, status topic and unique ids are the bridge's."""
    configs = discovery(Topics("verld/vm"), "vm", "psu", "verl", "verld 0.1.0")
    named = {
        topic.replace(HOST, "vm").replace(DEVICE, "psu")
        for topic in _doc_topics("homeassistant/")
        if DEVICE in topic
    }
    assert named == set(configs), f"page: {sorted(named)}, bridge: {sorted(configs)}"
    assert f"`{HA_STATUS}`" in TEXT
    for payload in configs.values():
        unique_id = json.loads(payload)["unique_id"]
        template = unique_id.replace("verld_vm_psu", f"verld_{HOST}_{DEVICE}")
        assert f"`{template}`" in TEXT, f"the unique id {template} is not on the page"


def _setpoint_example(name: str) -> Any:
    """The entity `name` of the page's setpoint examples, as verld-mqtt reads it."""
    for block in CONFIGS:
        for entity in parse_bridge_config(block).entities if f"name: {name}\n" in block else ():
            if entity.name == name and entity.set is not None:
                return entity
    raise AssertionError(f"no setpoint {name} on the page")


def test_the_setpoint_examples_write_what_the_page_says() -> None:
    """The bytes docs/fleet.md shows for its number and select examples are the bridge's."""
    limit, period = _setpoint_example("current_limit"), _setpoint_example("demand_period")
    shown = {
        (limit, "16.5"): "03 06 00 10 00 a5",
        (period, "15 min"): "01 10 00 02 00 02 04 41 70 00 00",
    }
    for (entity, payload), data in shown.items():
        assert f"`{data}`" in TEXT
        assert setpoint.request(entity, payload.encode()).data == bytes.fromhex(data)
    for payload in ("16.3", "40"):
        with pytest.raises(setpoint.Refused):
            setpoint.request(limit, payload.encode())
    assert period.options is not None and setpoint.label(period.options, 15.0) == "15 min"
    volt, output = _setpoint_example("voltage"), _setpoint_example("output")
    assert setpoint.request(volt, b"12.5").text == "VOLT 12.5"
    assert setpoint.request(output, b"on").text == "OUTP 1"
