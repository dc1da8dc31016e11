"""verld-sim, the simulated device: a pty (or TCP port) speaking a verld link codec.

`device` is the sans-I/O command logic and fault injection, `nmea` the GPS
sentences of the line codec's GPS mode, `faults` the settings and counters,
`ports` the pty/TCP edges, `control` the runtime control socket, `loop` the event
loop and `main` the command line.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The `verld-sim` console script (imports the loop only when run)."""
    from verld.sim.main import main as run

    return run(argv)
