"""verld's benchmark: direct pty, socat relay and verld side by side, one run.

`tools/bench` is the entry; `cli` parses the command line, `runner` drives the
rounds, `procs` starts and measures the processes (simulator, bridges, load
generators), `worker` is the load generator run in its own processes (its clients
in `peers`, its counts in `meter`), `report` turns the rounds into medians, ratios
and targets, `plot` draws docs/bench.png.
"""

from __future__ import annotations
