"""verlctl: inspect and drive a running verld (docs/verlctl.md).

The pieces: `cli` (arguments, `main`, the console-script entry point
`verld.ctl:main`), `commands` and `ping` (what each command does), `render`
(human and --json output, `monitor` decoding) and `codes` (exit codes, the table
of docs/verlctl.md; error codes are docs/protocol.md's).
"""

from verld.ctl.cli import main
from verld.ctl.codes import EXIT_CODES, Usage
from verld.ctl.render import (
    hexdump,
    render_event,
    render_record,
    render_status,
    render_traffic,
    safe,
)

__all__ = [
    "EXIT_CODES",
    "Usage",
    "hexdump",
    "main",
    "render_event",
    "render_record",
    "render_status",
    "render_traffic",
    "safe",
]
