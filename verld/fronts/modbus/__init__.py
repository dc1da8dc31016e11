"""The Modbus TCP server front (docs/modbus-gateway.md): Modbus masters in."""

from verld.fronts.modbus.server import ModbusServer

__all__ = ["ModbusServer"]
