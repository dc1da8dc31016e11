"""Each front's figures (`verld.fronts.*.figures`): one name per front, light to import,
and the metrics and rows they make from a `status` reply."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from verld.fronts.figures import FIGURES
from verld.fronts.registry import FRONTS
from verld.metrics import as_json, exposition


def _status(**parts: Any) -> dict[str, Any]:
    return {"modbus": None, "ports": [], "network": [], **parts}


PORT = {
    "link": "/run/verld/ttyV0",
    "open": True,
    "calls": 3,
    "ok": 2,
    "failed": {"timeout": 1},
    "dropped": 0,
    "ignored": 4,
    "bad_frames": 0,
    "write": True,
    "events": False,
}
ENTRY = {
    "name": "dev",
    "listen": "127.0.0.1:4000",
    "protocol": "raw",
    "mode": "shared",
    "connections": 1,
    "calls": 5,
    "ok": 4,
    "failed": {"busy": 1},
    "dropped": 0,
    "ignored": 0,
    "bad_frames": 0,
    "refused": {"allow": 2},
    "holder": None,
    "bytes_in": 10,
    "bytes_out": 12,
}


class TestOneNamePerFront:
    def test_the_figures_are_the_fronts_in_status_order(self) -> None:
        """FIGURES lists the fronts of FRONTS that have figures, by the fronts' own names."""
        names = [getattr(reg.make, "name", None) for reg in FRONTS]
        assert [f.name for f in FIGURES] == [n for n in names if n in {f.name for f in FIGURES}]
        assert names == ["api", "modbus", "port", "network"]

    def test_verlctl_imports_no_front_machinery(self) -> None:
        """Importing verlctl (which renders with the fronts' figures) loads no front or session."""
        machinery = (
            "verld.fronts.base",
            "verld.fronts.registry",
            "verld.fronts.api",
            "verld.fronts.ports.front",
            "verld.fronts.network.front",
            "verld.fronts.modbus.server",
            "verld.session.session",
            "structlog",
        )
        loaded = f"(m for m in sys.modules if m.startswith({machinery}))"
        code = f"import sys, verld.ctl; print(*{loaded})"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
        assert out.stdout.split() == []


class TestMetrics:
    def test_a_front_with_nothing_to_serve_adds_no_series(self) -> None:
        """No ports, no network entries, the Modbus front off: no front series at all."""
        assert [f.metrics(_status()) for f in FIGURES] == [[], [], []]

    def test_the_ports_and_network_series_parse(self) -> None:
        """The ports' and network ports' series are valid Prometheus text, labelled by each."""
        st = _status(ports=[PORT], network=[ENTRY])
        text = exposition(f for figures in FIGURES for f in figures.metrics(st))
        parsed = {f.name: f for f in text_string_to_metric_families(text)}
        failed = parsed["verld_port_failed"].samples
        assert [(s.labels, s.value) for s in failed] == [
            ({"link": "/run/verld/ttyV0", "code": "timeout"}, 1.0)
        ]
        refused = parsed["verld_network_refused"].samples
        assert [(s.labels, s.value) for s in refused] == [({"name": "dev", "why": "allow"}, 2.0)]

    def test_a_label_value_is_escaped_in_the_text_and_raw_in_json(self) -> None:
        """A link with a quote and a backslash is escaped in the text, kept as is in JSON."""
        port = {**PORT, "link": 'a"b\\c'}
        families = FIGURES[1].metrics(_status(ports=[port]))
        assert 'verld_port_open{link="a\\"b\\\\c"} 1' in exposition(families)
        assert as_json(families)[0]["samples"][0]["labels"] == {"link": 'a"b\\c'}


class TestRows:
    def test_each_front_shows_its_own_row(self) -> None:
        """The Modbus front's row, a `vport` row per port and a `network` row per entry."""
        modbus = {
            "listen": "127.0.0.1:1502",
            "connections": 2,
            "calls": 9,
            "exceptions": {"11": 1},
            "closed_malformed": 0,
        }
        st = _status(modbus=modbus, ports=[PORT], network=[ENTRY])
        rows = [row for figures in FIGURES for row in figures.rows(st)]
        assert [label for label, _ in rows] == ["modbus", "vport", "network"]
        assert "exceptions 0x0b x1" in rows[0][1]
        assert rows[1][1].startswith("/run/verld/ttyV0  open  calls 3  ok 2  failed timeout x1")

    def test_a_front_that_is_off_has_no_row(self) -> None:
        """The Modbus front off, no ports, no network entries: no rows."""
        assert [row for figures in FIGURES for row in figures.rows(_status())] == []
