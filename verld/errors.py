"""One small error hierarchy, and the API's error codes.

Strategy: what went wrong is told apart by who did it (h11's Local/Remote split):
- `ConfigError`: the configuration is invalid (a person's mistake, told in full);
- `LocalProtocolError`: verld's own code broke an interface's rules (an illegal link
  transition): a bug, never a user's fault;
- `RemoteProtocolError`: a peer (an API client, a device) broke its protocol; its
  subclass `ApiError` is a request that gets an error reply;
- `LinkError`: the link to the device could not be had (`OpenError`: opening it);
- `ServeError`: verld cannot serve (the socket is taken, the simulator did not start).
Noise on the device line is not an exception at all: the codecs count it and resync.

`ErrorCode` is the one list of the client API's error codes (docs/protocol.md,
"Errors"): a `StrEnum`, so each member *is* its string on the wire.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.StrEnum):
    """The `error.code` of a failed request."""

    BAD_REQUEST = "bad_request"  #: malformed message or field
    TOO_LARGE = "too_large"  #: a message above max_message, or data above max_payload
    UNKNOWN_OP = "unknown_op"  #: no such op
    FORBIDDEN = "forbidden"  #: the op needs a higher role
    BUSY = "busy"  #: queue full, device leased or inhibited, too many clients
    LINK_DOWN = "link_down"  #: the link is not up
    TIMEOUT = "timeout"  #: the device did not answer in time
    REMOTE_FAILURE = "remote_failure"  #: the device answered status 0xFF
    DEVICE_ERROR = "device_error"  #: the device answered another non-zero status
    SHUTTING_DOWN = "shutting_down"  #: verld is stopping
    BAD_CONFIG = "bad_config"  #: a reload's new config is invalid


class VerldError(Exception):
    """Base of every error verld raises on purpose."""


class ConfigError(VerldError):
    """The configuration is invalid; the message is meant for a human, complete."""


class LocalProtocolError(VerldError):
    """verld's own code used an interface against its rules (a bug)."""


class RemoteProtocolError(VerldError):
    """A peer (client or device) broke the protocol."""


class ApiError(RemoteProtocolError):
    """A request that gets an error reply (the connection stays open)."""

    def __init__(self, code: ErrorCode, message: str, req_id: int | str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.req_id = req_id


class Malformed(RemoteProtocolError, ValueError):
    """A peer's byte stream is not its protocol (an impossible MBAP header): close it."""


class LinkError(VerldError):
    """The link to the device cannot be used."""


class OpenError(LinkError):
    """The link could not be opened; the message says why, for logs and link events."""


class ServeError(VerldError):
    """verld cannot serve: the message says why; the daemon exits 1."""


class SocketInUse(ServeError):
    """Another live process serves the socket path."""
