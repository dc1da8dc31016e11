"""verlctl's exit codes and its usage error.

The table of docs/verlctl.md ("Exit codes"): 0 ok, 1 device error, 2 usage (and
bad_request / unknown_op / too_large from the daemon), 3 daemon unreachable (and
shutting_down), 4 timeout or link down, 5 forbidden, 6 busy. The error codes are
the API's, docs/protocol.md.
"""

from __future__ import annotations

EXIT_CODES = {
    "bad_request": 2,
    "unknown_op": 2,
    "too_large": 2,
    "usage": 2,
    "unreachable": 3,
    "shutting_down": 3,
    "timeout": 4,
    "link_down": 4,
    "forbidden": 5,
    "busy": 6,
    "remote_failure": 1,
    "device_error": 1,
}
USAGE = 2  #: the exit code of a command-line mistake


class Usage(Exception):
    """A command-line mistake: exit 2."""


def exit_code(error_code: str) -> int:
    """The exit code for an API error code (1 for any code not in the table)."""
    return EXIT_CODES.get(error_code, 1)
