"""docs/bench.png (the api family): latency percentiles per path, verld versus clients.

matplotlib is the optional `bench` extra (`pip install '.[bench]'`); without it
the plot is skipped with a message and the rest of the run is unaffected.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from benchlib.report import get, median

_PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999))
_COLOURS = {"direct": "tab:green", "socat": "tab:blue", "verld": "tab:red"}


def _med(rounds: list[dict[str, Any]], path: str, wl: str, *keys: str) -> float | None:
    return median(get(r, path, wl, *keys) for r in rounds)


def plot(result: dict[str, Any], out: Path) -> str | None:
    """Draw the figure; a message when it was skipped, else None."""
    try:  # imported by name: an optional extra, so mypy need not see it installed
        importlib.import_module("matplotlib").use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return "matplotlib is not installed (pip install '.[bench]'): plot skipped"
    api = result["families"]["api"]
    rounds: list[dict[str, Any]] = api["phases"]["rounds"]
    paths: list[str] = api["paths"]["rounds"]
    fig, (lat, scale, thr) = plt.subplots(1, 3, figsize=(16, 5), constrained_layout=True)

    xs = [q for _, q in _PERCENTILES]
    for path in paths:
        for wl, style, size in (("lat32", "-", "32 B"), ("lat1k", "--", "1 KiB")):
            ys = [_med(rounds, path, wl, "latency_us", name) for name, _ in _PERCENTILES]
            lat.plot(xs, ys, style, marker="o", color=_COLOURS[path], label=f"{path} {size}")
    lat.set_xscale("logit")
    lat.set_xticks(xs, [f"p{q * 100:g}" for q in xs])
    lat.minorticks_off()
    lat.set_yscale("log")
    lat.set_ylabel("round trip (µs)")
    lat.set_title("Lock-step round trip, one client")
    lat.legend(fontsize="small")
    lat.grid(True, which="both", alpha=0.3)

    clients = [("lat32", 1), ("c16", 16), ("c64", 64)]
    xs_clients = [n for _, n in clients]
    for name, style in (("p50", "-"), ("p99", "--")):
        ys = [_med(rounds, "verld", wl, "latency_us", name) for wl, _ in clients]
        label = f"verld {name}, lock-step clients"
        scale.plot(xs_clients, ys, style, marker="o", color="tab:red", label=label)
    for name, marker in (("p50", "s"), ("p99", "^")):
        for w, colour in ((8, "tab:purple"), (32, "tab:orange")):
            y = _med(rounds, "verld", f"p16x8_w{w}", "latency_us", name)
            scale.plot([16], [y], marker, color=colour, label=f"verld {name}, 16×8 window {w}")
    scale.set_xscale("log")
    scale.set_yscale("log")
    scale.set_xticks([1, 16, 64], ["1", "16", "64"])
    scale.set_xlabel("clients")
    scale.set_ylabel("round trip (µs)")
    scale.set_title("verld latency versus clients")
    scale.legend(fontsize="small")
    scale.grid(True, which="both", alpha=0.3)

    ys = [_med(rounds, "verld", wl, "rate") for wl, _ in clients]
    thr.plot(xs_clients, ys, "-o", color="tab:red", label="verld, lock-step clients")
    for w, colour in ((8, "tab:purple"), (32, "tab:orange")):
        y = _med(rounds, "verld", f"p16x8_w{w}", "rate")
        thr.plot([16], [y], "s", color=colour, label=f"verld, 16 clients × 8 in flight, window {w}")
    for path in paths:
        if path == "verld":
            continue
        one = _med(rounds, path, "lat32", "rate")
        thr.plot([1], [one], "D", color=_COLOURS[path], label=f"{path}, 1 lock-step client")
        eight = _med(rounds, path, "inflight8", "rate")
        if eight is not None:
            thr.axhline(eight, ls=":", color=_COLOURS[path], label=f"{path}, 8 in flight")
    thr.set_xscale("log")
    thr.set_xticks([1, 16, 64], ["1", "16", "64"])
    thr.set_xlabel("clients")
    thr.set_ylabel("calls/s")
    thr.set_ylim(bottom=0)
    thr.set_title("Throughput versus clients (32 B echoes)")
    thr.legend(fontsize="small", loc="center right")
    thr.grid(True, alpha=0.3)

    meta = result["meta"]
    fig.suptitle(
        f"verld bench, {meta['date']}: {meta['nproc']} CPUs ({meta['cpu']}), "
        f"Python {meta['python']}, median of {meta['rounds']} rounds"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return None
