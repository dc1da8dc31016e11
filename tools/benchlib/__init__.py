"""verld's benchmark: one engine for every family of paths (docs/benchmarks.md).

`tools/bench`, `tools/bench-fleet` and `tools/bench-ab` are the entries (`cli`, `ab`).
`engine` runs a family's phases in interleaved rounds and measures each workload
(how a family is declared: its docstring); the families are in `families/`; `report`
turns any family's rounds into figures, targets, tables and markdown; `procs` starts,
stops and measures the processes; `gen` is the load generator process (its clients:
`lockstep`, `peers`, `mbclients`, `mqttgen`; its counts: `meter`), `mqttecho` the fleet's
bare MQTT echo, `fleetprocs` the fleet's broker, devices and bridge; `plot` draws
docs/bench.png.
"""
