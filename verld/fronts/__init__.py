"""Ways in to the one device: every front sits on `base.Core` and nothing else.

`api/` is the Unix-socket JSON API; later fronts (virtual serial ports, a Modbus TCP
server) are further modules here, each a client of the same fair queue.
"""
