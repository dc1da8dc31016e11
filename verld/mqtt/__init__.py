"""verld-mqtt: a fleet bridge between local verld sockets and one MQTT broker.

An API client of one or more verld Unix sockets and an MQTT client of one broker,
so that a fleet of hosts is watched and driven through the broker (docs/fleet.md).
Under `<base>` (default `verld/<short host name>`):

- `bridge/state` (retained): `{"state": "online"}`; `{"state": "offline"}` is the
  last will, and is also published on a clean stop;
- `<device>/state` (retained): `{"state", "generation", "port", "codec"}`, the state
  one of `up`, `down`, `connecting`, `inhibited` or `unreachable`;
- `<device>/event`: `{"data", "hex", "generation"}` (+ `text`) per device event;
- `<device>/status` (retained): verld's `status` reply, every `status_interval`;
- `<device>/call`: requests `{"data" | "hex" | "text", "timeout", "retry",
  "transaction"}`, answered with the API's call reply (+ `hex`, `transaction`) on
  the MQTT 5 Response Topic with its Correlation Data, else on
  `<device>/call/response`;
- `<device>/value/<name>`: an entity's polled value `{"value", "ts", "generation"}`
  (`entities:`), and `<device>/value/<name>/set` a switch's or button's commands;
  `bridge/entities` (retained) every entity's counters.

Modules: `config` (the YAML schema), `topics` (names and payloads), `calls`
(request parsing, routing, redelivery; sans-I/O), `outbox` (bounded pending
publishes; sans-I/O), `device` (one verld connection), `dispatch` (requests to
calls on the devices, answers to the outbox), `tasks` (the owner every task is
started in), `bridge` (the broker connection), `main` (the command); for device
values: `entityconfig` and `valueconfig` (the `entities:` schema), `decode` (replies
to values; sans-I/O), `schedule` (when each is polled; sans-I/O), `hass` (their
discovery configs; sans-I/O), `entities` (polls, values, commands, counters).
"""

from __future__ import annotations
