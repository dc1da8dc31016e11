"""The Modbus TCP server front (DESIGN.md, "Modbus TCP server"): Modbus masters in."""

from verld.fronts.modbus.server import ModbusServer

__all__ = ["ModbusServer"]
