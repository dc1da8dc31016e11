"""The Modbus TCP server front (docs/modbus-gateway.md): Modbus masters in.

`server.ModbusServer` is the front, `conn` one master's connection, `mbap` its
request decoder, `figures` how its part of `status` reads. Nothing is imported
here, so importing a submodule loads only what it needs.
"""
