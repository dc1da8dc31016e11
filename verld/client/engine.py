"""The reference engine's steps and the settings both clients share.

`Engine` holds a client's socket path, name and actions table (`from_config`
reads them from a daemon's config) and does the reference engine's pure steps:
normalize + `to_packet` ({"action", "params"} → request bytes) and `interpret`
(Reply → result dict, 0xFF → RemoteFailure). Sending is the clients' business.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Self

from verld.client.messages import RemoteFailure, Reply, default_socket
from verld.config import DEFAULT_ACTIONS, actions_table, load_config
from verld.errors import ErrorCode


class Engine:
    """The reference engine's four steps, shared by both clients (minus send)."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        actions: Mapping[str, int] | None = None,
        name: str | None = None,
    ) -> None:
        self.socket_path = socket_path or default_socket()
        self.actions = dict(actions if actions is not None else DEFAULT_ACTIONS)
        self.name = name

    @classmethod
    def from_config(cls, path: str, **kwargs: Any) -> Self:
        """A client for the daemon a config file describes (its socket and actions)."""
        cfg = load_config(path)
        return cls(cfg.api.socket, actions=actions_table(cfg.device), **kwargs)

    def to_packet(self, payload: Mapping[str, Any]) -> bytes:
        """normalize + to_packet: {"action", "params"} → request bytes."""
        if not isinstance(payload, Mapping):
            raise ValueError("payload must be a dict with 'action' and optional 'params'")
        action = payload.get("action")
        params = payload.get("params")
        if action == "ping" and not params:
            return b""
        return bytes([self._opcode(action)]) + param_bytes(params)

    def _opcode(self, action: object) -> int:
        """An action name or opcode → the opcode; ValueError for anything else."""
        if isinstance(action, bool) or not isinstance(action, str | int):
            raise ValueError("'action' must be a name or an opcode 0..255")
        if isinstance(action, str):
            if action not in self.actions:
                known = ", ".join(sorted(self.actions))
                raise ValueError(f"unknown action {action!r} (known: {known})")
            action = self.actions[action]
        if not 0 <= action <= 255:
            raise ValueError("an opcode must be 0..255")
        return action

    @staticmethod
    def interpret(reply: Reply) -> dict[str, Any]:
        """Reply → the reference result shape; 0xFF raises RemoteFailure."""
        if reply.status == 0:
            return {"ok": True, "data": reply.data}
        if reply.status == 0xFF:
            raise RemoteFailure(
                ErrorCode.REMOTE_FAILURE,
                "remote execution failed (status 0xff)",
                {"data": reply.data},
            )
        return {"ok": False, "code": reply.status, "data": reply.data}


def param_bytes(params: Any) -> bytes:
    """A call's `params` → the bytes after the opcode."""
    if params is None or (isinstance(params, dict | list | bytes | str) and not params):
        return b""
    if isinstance(params, bytes | bytearray | memoryview):
        return bytes(params)
    if isinstance(params, str):
        return params.encode("utf-8")
    if isinstance(params, dict | list):
        return json.dumps(params, separators=(",", ":")).encode()
    raise ValueError("'params' must be bytes, str, a JSON-able dict/list, or empty")
