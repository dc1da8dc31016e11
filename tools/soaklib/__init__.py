"""The soak: many clients calling through verld while verld-sim misbehaves in every way.

`tools/soak --clients N --seconds T [--faults all|none|LIST] [--seed S] [--json OUT]
[--codec verl|modbus-rtu|modbus-tcp]`

Strategy: start verld-sim (pty, control socket) and verld (a temp config with
short timeouts, retries and reconnect delays), then run N clients on the raw
API protocol, each keeping `--depth` calls in flight. Every call is an echo
(`01` + a unique id + random bytes), so a reply's data names the call it
belongs to. A fault driver meanwhile applies random mixes of faults through the
sim's control socket: latency, jitter, drop, corrupt, garbage (rate and
bursts), baud pacing, hang, unplug/replug and power cycles (unplug with an
automatic replug). Clients also reconnect now and then, and an "abandoner"
sends calls and hangs up without reading, so dead owners are exercised too.

The raw protocol (not `AsyncClient`) is used on purpose: it sees every reply,
so a duplicate or a reply for an id never sent is counted, not hidden.

Absolute invariants (exit 1 if broken): no misrouted reply (data that is not
what the call sent, or an id the connection never used), every call gets
exactly one reply, the daemon never dies, and, with `--max-rss-growth`, RSS
growth after the warm-up stays under that many MiB.

`--codec modbus-rtu|modbus-tcp` runs the same soak on a Modbus link (`modbus`):
the sim serves units 1..4 (unit 9 stays silent), each client owns a holding
register that it writes and reads back, and every answer is checked: a wrong
value, an answer from the silent unit, or a served unit that never answers
rightly fails the soak too. Faults a codec cannot take are left out, said why
(`faults.NOT_ON`: corrupt on modbus-tcp, which has no checksum).

Modules: `procs` starts verld-sim and verld (with verld.testing) and measures
them, `api` speaks the client API (framing from verld.wire) and accounts for
every reply, `load` is the clients, `modbus` the Modbus clients and their
checks, `faults` the fault driver, `run` one soak from start to stop, `report`
the verdict and the printed report, `cli` the command line (`python -m
soaklib`, which `tools/soak` runs).
"""
