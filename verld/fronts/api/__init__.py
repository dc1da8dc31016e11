"""The JSON API (docs/protocol.md), one front over the core: its dispatcher
(`dispatch`, `ops`, `fanout`, `inhibit`, over `peer.Peer`) and its transport on the
Unix socket (`server`, `conn`)."""

from verld.fronts.api.server import ApiServer

__all__ = ["ApiServer"]
