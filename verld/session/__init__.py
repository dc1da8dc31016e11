"""The session layer: the calls on the one link to the device.

`session.Session` (the calls: submit, the lease, pump, send, finish) and its receiving
half (`receiving.Receiver`), the timers (`timekeeper.py`), the line discipline
(`discipline.py`, `bus.py`), the fair queue (`calls.py`), the window of calls on the link
(`window.py`), the counters (`stats.py`), which link transitions are told (`outage.py`),
and the supervisor (`supervisor.py`), the link's life. No I/O of its own: the bytes come
and go through the links package (`verld.links`); `verld.fronts.base.Core` is the only
code outside this package that makes or drives a session.
"""
