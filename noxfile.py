"""The suite on every Python verld supports, and on the oldest paho-mqtt it accepts.

`make test` runs the suite once, on the default `python3`. These sessions run it on
each Python CI tests, each in its own virtualenv under `.nox/` (`make test-all`, or
`.venv/bin/nox -s tests-3.13` for one):

- `tests-3.11`, `tests-3.12`, `tests-3.13`: the whole suite (two workers, a test file
  per worker at a time, as `make test`), with the `test` and `mqtt` extras;
- `mqtt_paho16`: the MQTT bridge's tests on paho-mqtt 1.6.1, Debian 12's
  `python3-paho-mqtt`, which the Debian package runs verld-mqtt on;
- `compiled`: the whole suite on the compiled build (setup.py: mypyc compiles the hot
  path in place; removed again afterwards, so the checkout stays pure).

nox rather than tox: the sessions are Python (the paho pin is one line, and a later
session for a compiled build is another function), and it needs no plugin to find
interpreters. pyenv's versions (`$PYENV_ROOT/versions/3.X.*`), as this project's machines carry
them, come first on PATH; elsewhere `python3.X` on PATH is used.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

import nox

PYTHONS = ["3.11", "3.12", "3.13"]
#: the tests that run verld-mqtt itself (tests/mqttrig.py): again on paho-mqtt 1.6.1
MQTT_TESTS = [
    "tests/test_mqtt_bridge.py",
    "tests/test_mqtt_fleet.py",
    "tests/test_mqtt_entities.py",
    "tests/test_mqtt_paho.py",
]

nox.options.default_venv_backend = "venv"
nox.options.sessions = [*(f"tests-{v}" for v in PYTHONS), "mqtt_paho16", "compiled"]


def _pyenv_on_path() -> None:
    """pyenv's interpreters of the versions above first on PATH (its shims of versions
    not selected fail when run, so PATH alone cannot tell)."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    extra = []
    for version in PYTHONS:
        found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin")))
        if found:
            extra.append(found[-1])  # the newest patch release
    if extra:
        os.environ["PATH"] = os.pathsep.join([*extra, os.environ.get("PATH", "")])


_pyenv_on_path()


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The whole suite on one Python."""
    session.install("-e", ".[test,mqtt]")
    args = session.posargs or ["-q", "-n", "2", "--dist", "loadfile"]
    session.run("python", "-m", "pytest", *args)


@nox.session(python="3.11")
def mqtt_paho16(session: nox.Session) -> None:
    """verld-mqtt's tests with the bridge on paho-mqtt 1.6.1 (Debian 12's
    python3-paho-mqtt). The tests' own MQTT clients need paho 2 (aiomqtt), so 1.6.1
    goes to a directory of its own, first on the bridge's path alone (tests/mqttrig.py,
    $VERLD_BRIDGE_PAHO)."""
    session.install("-e", ".[test,mqtt]")
    # not session.create_tmp(): that also points $TMPDIR into .nox/, and pytest's temporary
    # directories there make Unix socket paths longer than the 107 bytes a path may have
    scratch = tempfile.mkdtemp(prefix="verld-paho16-")
    try:
        paho16 = os.path.join(scratch, "paho16")
        pin = "paho-mqtt==1.6.1"
        session.run("python", "-m", "pip", "install", "-q", "--target", paho16, pin)
        check = "import paho.mqtt; assert paho.mqtt.__version__ == '1.6.1', paho.mqtt.__version__"
        session.run("python", "-c", check, env={"PYTHONPATH": paho16})
        # serially: each file's broker, daemons and bridge are many processes already
        tests = session.posargs or MQTT_TESTS
        session.run("python", "-m", "pytest", "-q", *tests, env={"VERLD_BRIDGE_PAHO": paho16})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@nox.session(python="3.11")
def compiled(session: nox.Session) -> None:
    """The whole suite on the compiled build: mypyc's extension modules built in place
    (they load on this session's Python only), then removed, whatever the outcome."""
    session.install("-e", ".[test,mqtt]")
    try:
        session.run("python", "setup.py", "-q", "build_ext", "--inplace", env={"VERLD_MYPYC": "1"})
        env = {"VERLD_EXPECT_BUILD": "compiled (mypyc)"}
        session.run("verld", "--version")
        args = session.posargs or ["-q", "-n", "2", "--dist", "loadfile"]
        session.run("python", "-m", "pytest", *args, env=env)
    finally:
        for path in glob.glob("verld/**/*.so", recursive=True):
            os.remove(path)
        shutil.rmtree("build", ignore_errors=True)
