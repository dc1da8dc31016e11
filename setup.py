"""The optional compiled build: `VERLD_MYPYC=1` compiles verld's hot path with mypyc.

Everything else about the package is in pyproject.toml. Without `VERLD_MYPYC=1` (every
ordinary `pip install`, the Debian package, `make run`) nothing is compiled and verld is
the pure-Python code. With it, the modules below become C extension modules (mypy's
mypyc must be importable: `make compiled` builds them in place for the checkout's
virtualenv; docs/benchmarks.md, "The compiled build"). They are the modules every call
runs through, each kept because it paid in `tools/hotpath` and `tools/bench-ab`; the
same source is the pure build, byte for byte the same behaviour (CI runs the whole
suite on both).
"""

from __future__ import annotations

import os

from setuptools import setup

#: the per-call path: the link's transport and state, the codecs, window and queue, the
#: session and its parts, the core and the API's message path and ops, the metrics'
#: per-reply histogram, a program's stream on a virtual or network port. The transport and
#: the serial port are compiled together: a compiled class may have no interpreted
#: subclass unless it says so, at a cost on every call, and the serial port is the one.
HOT = [
    "verld/alarm.py",
    "verld/wire.py",
    "verld/codec/base.py",
    "verld/codec/cobs.py",
    "verld/codec/verl.py",
    "verld/codec/length.py",
    "verld/codec/line.py",
    "verld/codec/frame/check.py",
    "verld/codec/frame/stuffing.py",
    "verld/codec/frame/frames.py",
    "verld/codec/frame/host.py",
    "verld/links/link.py",
    "verld/links/serialport.py",
    "verld/links/transport.py",
    "verld/metrics.py",
    "verld/session/calls.py",
    "verld/session/window.py",
    "verld/session/stats.py",
    "verld/session/discipline.py",
    "verld/session/receiving.py",
    "verld/session/timekeeper.py",
    "verld/session/session.py",
    "verld/fronts/api/peer.py",
    "verld/fronts/api/fanout.py",
    "verld/fronts/api/dispatch.py",
    "verld/fronts/api/ops.py",
    "verld/fronts/base.py",
    "verld/fronts/api/conn.py",
    "verld/fronts/stream.py",
    "verld/fronts/ports/port.py",
    "verld/fronts/network/peer.py",
    "verld/fronts/network/conn.py",
]

ext_modules = []
if os.environ.get("VERLD_MYPYC") == "1":
    from mypyc.build import mypycify

    # one shared library inside the package (verld/hot__mypyc.*.so), not at the top
    # level, so an editable install finds it as it finds verld
    ext_modules = mypycify(HOT, opt_level="3", group_name="verld.hot")

setup(ext_modules=ext_modules)
