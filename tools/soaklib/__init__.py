"""The soak: many clients calling through verld while verld-sim misbehaves in every way.

`tools/soak --clients N --seconds T [--faults all|none|LIST] [--seed S] [--json OUT]`

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

Modules: `procs` starts verld-sim and verld (with verld.testing) and measures
them, `api` speaks the client API (framing from verld.wire) and accounts for
every reply, `load` is the clients, `faults` the fault driver, `run` one soak
from start to stop, `report` the verdict and the printed report, `cli` the
command line (`python -m soaklib`, which `tools/soak` runs).
"""
