"""verld-mqtt's hold on paho-mqtt's private names (verld/mqtt/mqttconn.py, `_Paho`).

The paho verld-mqtt runs on must be a version `PAHO_CHECKED` names, and have each name
of `PAHO_PRIVATE` (and, on 1.6, `PAHO16_PRIVATE` and the attributes its DISCONNECT fix
reads) callable the way it is used, with none of `_Paho`'s own names taken by paho.
Checked in a subprocess on the bridge's own environment (tests/mqttrig.py: the venv's
paho 2.x, or 1.6.1 under nox's `mqtt_paho16`, $VERLD_BRIDGE_PAHO), and on the system's
python3-paho-mqtt (Debian 12's 1.6.1) where it is installed.

On a new paho: read those methods in its client.py, run the MQTT tests on it (the nox
session takes another pin as easily), then add its version to `PAHO_CHECKED`. Run as a
script, this file prints the check's findings on the paho it imports, as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: Debian's python3-paho-mqtt
SYSTEM_PAHO = Path("/usr/lib/python3/dist-packages/paho")


def findings() -> dict[str, Any]:
    """The imported paho's version and file, and what does not hold on it (`wrong`)."""
    import inspect

    from paho import mqtt
    from paho.mqtt import client as paho

    from verld.mqtt import mqttconn

    version = mqtt.__version__
    wrong: list[str] = []
    if version not in mqttconn.PAHO_CHECKED:
        wrong.append(f"paho-mqtt {version} is not in PAHO_CHECKED {mqttconn.PAHO_CHECKED}")
    v16 = not hasattr(paho, "CallbackAPIVersion")
    used = {**mqttconn.PAHO_PRIVATE, **(mqttconn.PAHO16_PRIVATE if v16 else {})}
    for name, nargs in used.items():
        for cls in (paho.Client, mqttconn._Paho):  # (paho's, and an override's, shape)
            method = getattr(cls, name, None)
            if not callable(method):
                wrong.append(f"{cls.__name__} has no method {name}")
                continue
            try:
                inspect.signature(method).bind(None, *[None] * nargs)
            except TypeError:
                sig = inspect.signature(method)
                wrong.append(f"{cls.__name__}.{name}{sig} takes no {nargs} positional argument(s)")
    session: dict[str, Any] = {"client_id": "pin", "protocol": paho.MQTTv5}
    plain = paho.Client(*mqttconn._API, **session)  # (_API: paho 2's callback API version)
    if v16:
        packet = getattr(plain, "_in_packet", None)
        if not isinstance(packet, dict) or "packet" not in packet:
            wrong.append("paho.Client has no _in_packet['packet']")
        if getattr(plain, "_protocol", None) != paho.MQTTv5:
            wrong.append("paho.Client has no _protocol holding the protocol asked for")
    ours = {n for n in vars(mqttconn._Paho) if not n.startswith("__")}
    ours |= set(mqttconn._Paho.__annotations__)
    taken = (ours & (set(dir(paho.Client)) | set(vars(plain)))) - set(used)
    if taken:
        wrong.append(f"paho.Client has names _Paho gives another meaning: {sorted(taken)}")
    return {"version": version, "file": mqtt.__file__, "wrong": wrong}


def check(env: dict[str, str]) -> dict[str, Any]:
    """`findings()` in a Python on `env` (this file as a script)."""
    done = subprocess.run(
        [sys.executable, __file__],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_the_bridges_paho_has_the_private_names_it_uses() -> None:
    """The paho verld-mqtt runs on is a checked version with every private name as used."""
    from mqttrig import BRIDGE_PAHO, bridge_env

    found = check(bridge_env())
    assert found["wrong"] == []
    pinned = os.environ.get(BRIDGE_PAHO)
    if pinned:  # (nox's mqtt_paho16: the paho it installed for the bridge, not the venv's)
        assert Path(found["file"]).resolve().is_relative_to(Path(pinned).resolve()), found


def test_the_system_paho_has_the_private_names_it_uses(tmp_path: Path) -> None:
    """The system's python3-paho-mqtt (Debian 12's 1.6.1), when installed, is one too."""
    if not (SYSTEM_PAHO / "mqtt" / "client.py").is_file():
        if os.environ.get("CI") == "true":  # (.ci/run installs it)
            pytest.fail("python3-paho-mqtt is not installed")
        pytest.skip("no python3-paho-mqtt on this system")
    (tmp_path / "paho").symlink_to(SYSTEM_PAHO)  # (alone: not the rest of dist-packages)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    found = check({**os.environ, "PYTHONPATH": path})
    assert found["wrong"] == []
    assert Path(found["file"]).resolve().is_relative_to(SYSTEM_PAHO.resolve()), found


if __name__ == "__main__":
    print(json.dumps(findings()))
