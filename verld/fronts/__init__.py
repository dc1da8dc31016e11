"""Ways in to the one device: every front sits on `base.Core` and nothing else.

`api/` is the Unix-socket JSON API; `modbus/` the Modbus TCP server (every TCP
connection a client of the same fair queue); later fronts (virtual serial ports) are
further packages here.
"""
