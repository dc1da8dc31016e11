"""Ways in to the one device: each front is a thin edge over `base.Core`.

Every front implements `protocol.Front` (claim, start, reload, stop accepting,
status, close) and is made as `Front(cfg, core)`; the daemon keeps them in a list
and drives them through that protocol only: `registry.FRONTS`. How a front's part
of `status` reads (its metrics, its rows in `verlctl status`) is its
`protocol.FrontFigures`, in `NAME/figures.py` next to it, listed in
`figures.FIGURES`.

`api/` is the Unix-socket JSON API, `modbus/` the Modbus TCP server (every TCP
connection a client of the same fair queue), `ports/` the virtual serial ports,
`network/` the network ports (raw TCP, telnet, RFC 2217; shared or passthrough).
Nothing is imported here, so importing a submodule loads only what it needs
(verlctl imports `figures` without any front's machinery).
"""
