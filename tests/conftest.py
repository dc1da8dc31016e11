"""Shared fixtures."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, write_config

from verld.testing import Processes, running, stop_leftovers

VECTORS = Path(__file__).resolve().parent / "vectors"

# The modules whose every test is marked `slow` (pytest_collection_modifyitems below;
# the marker is registered in pyproject.toml): `python -m pytest -m "not slow"` runs the
# rest, the core, in under a minute on one worker. A module is here when it starts
# daemons, simulators or peers, or takes over ~2 s alone; a one-shot `--check-config` or
# `--version` run of a module under a second keeps it in the core. tests/test_markers.py
# checks that `-m slow` and `-m "not slow"` split the suite and that every name exists.
SLOW_MODULES: frozenset[str] = frozenset(
    {
        # real verld and verld-sim processes on ptys and Unix sockets
        "test_client.py", "test_cmdline.py", "test_ctl.py", "test_ctl_ping.py",
        "test_daemon.py", "test_e2e.py", "test_e2e_frame.py", "test_inhibit.py",
        # the frame codec before device fakes built on pyubx2 and sliplib (tests/framedevice.py)
        "test_frame_ubx.py", "test_frame_seq.py", "test_frame_slip.py",
        "test_monitor_frame.py",
        "test_leftovers.py",
        "test_modbus_daemon.py", "test_modbus_gap.py", "test_outage.py",
        "test_ownership.py", "test_port_exclusive.py", "test_ports.py",
        "test_ports_life.py", "test_protocol_doc.py", "test_resilience.py",
        "test_rs485.py", "test_security.py", "test_server.py", "test_session.py",
        "test_sim.py", "test_sim_modbus.py", "test_sim_nmea.py",
        # the network front: real TCP clients against a daemon
        "test_network.py", "test_network_hostile.py", "test_network_passthrough.py",
        # codec plugins: pip installs them, verld runs with them (ROBOTIS's dynamixel-sdk)
        "test_plugins.py", "test_plugins_dynamixel.py",
        # third-party peers: independent device, pymodbus, ser2net, gpsd/picocom/socat,
        # tmux, socat pty rigs, and the SCPI instrument fake on ptys with long timeouts
        "test_interop.py", "test_modbus_gateway.py", "test_modbus_gateway_access.py",
        "test_modbus_pymodbus.py",
        "test_modbusrig.py", "test_rfc2217_ser2net.py", "test_ports_programs.py",
        "test_top.py", "test_instruments.py", "test_instrument_fake.py",
        # verld-mqtt against a real mosquitto broker (TLS too), and its fleet docs' checks
        "test_mqtt_bridge.py", "test_mqtt_entities.py", "test_mqtt_fleet.py", "test_mqtt_groups.py",
        "test_fleet_doc.py", "test_mqtt_setpoints_e2e.py",
        # TLS recipes: PKIs made with openssl
        "test_tls_recipes.py",
        # packaging: wheel and sdist build, Debian package build, units and `make
        # install`, systemd's tools, man pages (groff, man), completions (bash, zsh, fish)
        "test_packaging.py", "test_deb.py", "test_units.py", "test_systemd.py",
        "test_manpages.py", "test_completion.py",
        # benches and soaks: tools/bench, tools/bench-ab, tools/soak
        "test_bench.py", "test_soak_modbus.py",
        # the neighbour batteries, on real daemons
        "test_neighbours.py", "test_line_neighbours.py", "test_network_neighbours.py",
        # hypothesis batteries over every decoder (several seconds)
        "test_fuzz_props.py",
        # the partition check: collects the whole suite twice, in subprocesses
        "test_markers.py",
    }
)  # fmt: skip


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of a module in SLOW_MODULES is marked `slow` (before `-m` selects)."""
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each phase's report, kept on the test (`_no_leftover_processes` reads it)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(autouse=True)
def _no_leftover_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """A sim or daemon a failed test started and did not stop (it failed before its
    clean-up) is stopped after it: one failure leaves no process behind."""
    before = running()
    yield
    report = getattr(request.node, "report_call", None)
    if report is None or report.failed:
        stop_leftovers(before)


@pytest.fixture(scope="session")
def verl_vectors() -> dict[str, Any]:
    """The frozen verl test vectors, tests/vectors/verl-frames.json (docs/protocol.md, §3.1)."""
    vectors: dict[str, Any] = json.loads((VECTORS / "verl-frames.json").read_text())
    return vectors


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimProc]:
    """A verld-sim on a fresh pty, its link and control socket in tmp_path."""
    s = SimProc(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def daemon(tmp_path: Path, sim: SimProc) -> Iterator[DaemonProc]:
    """A verld serving `sim` with the test defaults of verld.testing.write_config, link up."""
    d = DaemonProc(write_config(tmp_path, sim.link))
    yield d
    d.stop()


@pytest.fixture
def procs() -> Iterator[Processes]:
    """The owner of the processes a test starts (`procs.sim(tmp)`, `procs.daemon(cfg)`,
    `procs.popen(cmd)`, `procs.own(rig)`): all stopped, newest first, when it ends."""
    with Processes() as owner:
        yield owner


@pytest.fixture
def pubdir() -> Iterator[Path]:
    """A directory every uid may traverse (pytest's tmp_path may be root-only): for
    tests that run a client as another, non-root user."""
    path = Path(tempfile.mkdtemp(prefix="verld-pub-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
