"""verlctl's exit codes and its usage error.

The table of docs/verlctl.md ("Exit codes"): 0 ok, 1 device error, 2 usage (and
bad_request / unknown_op / too_large from the daemon), 3 daemon unreachable (and
shutting_down), 4 timeout or link down, 5 forbidden, 6 busy. The error codes are
the API's, docs/protocol.md.
"""

from __future__ import annotations

from verld.errors import ErrorCode, VerldError

EXIT_CODES: dict[str, int] = {
    ErrorCode.BAD_REQUEST: 2,
    ErrorCode.UNKNOWN_OP: 2,
    ErrorCode.TOO_LARGE: 2,
    "usage": 2,  # verlctl's own: a command-line mistake
    "unreachable": 3,  # verlctl's own: no daemon on the socket
    ErrorCode.SHUTTING_DOWN: 3,
    ErrorCode.TIMEOUT: 4,
    ErrorCode.LINK_DOWN: 4,
    ErrorCode.FORBIDDEN: 5,
    ErrorCode.BUSY: 6,
    ErrorCode.REMOTE_FAILURE: 1,
    ErrorCode.DEVICE_ERROR: 1,
}
USAGE = 2  #: the exit code of a command-line mistake


class Usage(VerldError):
    """A command-line mistake: exit 2."""


def exit_code(error_code: str) -> int:
    """The exit code for an API error code (1 for any code not in the table)."""
    return EXIT_CODES.get(error_code, 1)
