"""`verlctl top`'s screen as text (`verld.ctl.topframe`): samples in, lines out.

Strategy: samples are built by hand (a status, programs, histogram buckets, times),
so every rate is known; the checks are on the lines `frame` returns: the rates, the
order of the rows, the size (80×24 and smaller), words never cut, and the trouble
flags the terminal colours.
"""

from __future__ import annotations

from typing import Any

from verld.ctl.topframe import Sample, fit, frame, program_rows, quantile
from verld.metrics import Histogram, as_json, buckets


def status(calls: int = 0, failed: int = 0, state: str = "up", **more: Any) -> dict[str, Any]:
    counters = {"calls": calls, "calls_failed": failed, "events": 0, "bytes_tx": 0, "bytes_rx": 0}
    link = {
        "state": state,
        "reason": "connected",
        "generation": 3,
        "port": "/dev/ttyUSB0",
        "codec": "verl",
        "since": 1796189035.0,
        "settings": "115200 8N1",
        "modem": None,
    }
    return {"link": link, "counters": counters, "queue": 0, "inflight": 0, **more}


def program(who: str, calls: int, front: str = "api", **more: Any) -> dict[str, Any]:
    return {
        "front": front,
        "who": who,
        "calls": calls,
        "ok": calls,
        "failed": 0,
        "waiting": 0,
        **more,
    }


def texts(lines: list[tuple[str, bool]]) -> list[str]:
    return [text for text, _ in lines]


def test_rates_come_from_two_samples() -> None:
    """calls/s and errors/s are the counters' differences over the time between samples."""
    prev = Sample(10.0, status(calls=100, failed=1))
    cur = Sample(12.0, status(calls=300, failed=5))
    now = next(t for t in texts(frame(prev, cur)) if t.startswith("now"))
    assert "100.0 calls/s" in now and "2.0 errors/s" in now


def test_latency_quantiles_are_over_the_interval_only() -> None:
    """p50 comes from the calls counted between the samples, not since start."""
    prev = [(0.001, 1000.0), (0.01, 1000.0), (float("inf"), 1000.0)]
    cur = [(0.001, 1000.0), (0.01, 1100.0), (float("inf"), 1100.0)]
    p50 = quantile(prev, cur, 0.5)
    assert p50 is not None and 0.001 < p50 <= 0.01


def test_buckets_are_read_from_the_metrics_as_data() -> None:
    """The histogram's buckets are read from the metrics' JSON form, cumulative, +Inf last."""
    h = Histogram()
    for seconds in (0.0004, 0.0004, 0.0009, 2.0, 500.0):
        h.observe(seconds)
    read = buckets(as_json([h.family("verld_call_latency_seconds", "Call latency.")]))
    assert dict(read)[0.0005] == 2.0 and dict(read)[0.001] == 3.0 and dict(read)[100.0] == 4.0
    assert read[-1] == (float("inf"), 5.0)


def test_busiest_program_first_and_sorts() -> None:
    """Rows are busiest first; the name sort orders them by front and name."""
    prev = Sample(0.0, status(), [program("pid 1 a", 10), program("pid 2 b", 10)])
    cur = Sample(1.0, status(), [program("pid 1 a", 11), program("pid 2 b", 60)])
    assert [r.who for r in program_rows(prev, cur, "calls/s")] == ["pid 2 b", "pid 1 a"]
    assert [r.who for r in program_rows(prev, cur, "name")] == ["pid 1 a", "pid 2 b"]


def test_a_passthrough_holder_shows_bytes_per_second() -> None:
    """A passthrough connection's rate is its bytes/s, its calls shown as -."""
    held = {"passthrough": True, "bytes_in": 1000, "bytes_out": 1000}
    prev = Sample(0.0, status(), [program("flash 10.0.0.2:5000", 0, "network", **held)])
    moved = {"passthrough": True, "bytes_in": 3000, "bytes_out": 5000}
    cur = Sample(2.0, status(), [program("flash 10.0.0.2:5000", 0, "network", **moved)])
    row = next(t for t in texts(frame(prev, cur)) if t.startswith("network"))
    assert "3.0kB/s" in row and " - " in row


def test_80_by_24_fits_and_cuts_no_word() -> None:
    """Many programs with long names: 24 lines of at most 80, names cut at a word with …."""
    long = "a rather long program name that goes on and on past the column"
    programs = [program(f"pid {i} {long}", i) for i in range(40)]
    lines = texts(frame(Sample(0.0, status(), programs), Sample(1.0, status(), programs)))
    assert len(lines) == 24 and all(len(t) <= 80 for t in lines)
    rows = [t for t in lines if t.startswith("api")]
    assert rows and all("…" in t for t in rows)
    assert all(
        t.split("…")[0].endswith(
            ("a", "name", "goes", "on", "that", "long", "rather", "program", "past", "and")
        )
        for t in rows
    )
    assert any("more" in t for t in lines)
    assert lines[-1].startswith("q quit")


def test_fit_cuts_at_a_word() -> None:
    """fit shortens at a space, never inside a word, and marks the cut."""
    assert fit("verlctl top on a small screen", 16) == "verlctl top on…"
    assert fit("short", 16) == "short"
    assert fit("/run/verld/ports/ttyV0", 16) == "…/ports/ttyV0"


def test_trouble_is_flagged() -> None:
    """A link not up, errors, failed calls and an offline unit are flagged for colour."""
    units = [{"unit": 1, "calls": 5, "ok": 1, "exceptions": 0, "timeouts": 4, "offline": True}]
    prev = Sample(0.0, status(state="down", units=units), [program("pid 1 x", 1)])
    bad_prog = {**program("pid 1 x", 3), "failed": 2}
    cur = Sample(1.0, status(calls=3, failed=2, state="down", units=units), [bad_prog])
    flagged = [t for t, bad in frame(prev, cur) if bad]
    assert any(t.startswith("link") for t in flagged)
    assert any(t.startswith("now") for t in flagged)
    assert any(t.startswith("api") for t in flagged)
    assert any("OFFLINE" in t for t in flagged)


def test_first_frame_waits_for_rates() -> None:
    """With one sample only, the rates line says they come with the next."""
    assert any("rates after the next sample" in t for t in texts(frame(None, Sample(0, status()))))


def test_refused_connections_show_and_are_trouble_while_they_grow() -> None:
    """Refused connections (gateway, network ports) get a line, flagged while they grow."""
    net = [{"name": "console", "refused": {"allow": 2}}, {"name": "quiet", "refused": {}}]
    old = Sample(0.0, status(modbus={"refused": {"tls": 1}}, network=net), [], [], [])
    grown = Sample(1.0, status(modbus={"refused": {"tls": 3}}, network=net), [], [], [])
    lines = frame(old, grown, height=24)
    shown = [(t, bad) for t, bad in lines if t.startswith("refused")]
    assert shown == [("refused modbus: tls 3  net console: allow 2", True)]
    steady = [(t, bad) for t, bad in frame(grown, grown) if t.startswith("refused")]
    assert steady == [("refused modbus: tls 3  net console: allow 2", False)]
    assert not [t for t, _ in frame(None, Sample(0.0, status(), [], [], [])) if "refused" in t]
