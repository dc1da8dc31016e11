"""The Unix-socket JSON API (docs/protocol.md): one front over the core."""

from verld.fronts.api.server import ApiServer

__all__ = ["ApiServer"]
