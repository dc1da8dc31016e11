"""RFC 2217's COM-PORT-OPTION commands: their codes and values, for either side.

Strategy: the subnegotiations travel inside telnet (`verld.codec.telnet`: `ComPort`
events in, `Telnet.comport` out); this module only names the commands and packs
and unpacks their values. A client sends a command with its code; the server
answers with code + 100 (`SERVER`) carrying the value in effect. SET-BAUDRATE's
value is 4 bytes big-endian; the other SETs, PURGE-DATA and the masks one byte;
SIGNATURE text; value 0 in a SET asks for the value in effect.
"""

from __future__ import annotations

__all__ = [
    "CONTROL",
    "PARITY",
    "SERVER",
    "STOPSIZE",
    "Cmd",
    "pack_value",
    "unpack_value",
]

SERVER = 100  #: a server's answer is the client's code + SERVER


class Cmd:
    """Client command codes (RFC 2217 section 3)."""

    SIGNATURE = 0
    SET_BAUDRATE = 1
    SET_DATASIZE = 2
    SET_PARITY = 3
    SET_STOPSIZE = 4
    SET_CONTROL = 5
    NOTIFY_LINESTATE = 6
    NOTIFY_MODEMSTATE = 7
    FLOWCONTROL_SUSPEND = 8
    FLOWCONTROL_RESUME = 9
    SET_LINESTATE_MASK = 10
    SET_MODEMSTATE_MASK = 11
    PURGE_DATA = 12


#: SET-PARITY values
PARITY = {"N": 1, "O": 2, "E": 3, "M": 4, "S": 5}
#: SET-STOPSIZE values (1.5 as "1.5")
STOPSIZE = {"1": 1, "2": 2, "1.5": 3}
#: SET-CONTROL values
CONTROL = {
    "flow_none": 1,
    "flow_xonxoff": 2,
    "flow_hardware": 3,
    "break_request": 4,
    "break_on": 5,
    "break_off": 6,
    "dtr_request": 7,
    "dtr_on": 8,
    "dtr_off": 9,
    "rts_request": 10,
    "rts_on": 11,
    "rts_off": 12,
}


def pack_value(code: int, value: int | bytes) -> bytes:
    """The value bytes of command `code` (client or server code): 4 bytes for the baud
    rate, the text itself for SIGNATURE, one byte otherwise."""
    base = code - SERVER if code >= SERVER else code
    if isinstance(value, bytes):
        return value
    if base == Cmd.SET_BAUDRATE:
        return value.to_bytes(4, "big")
    return bytes((value,))


def unpack_value(code: int, value: bytes) -> int | bytes | None:
    """A command's value (the baud rate or a byte as an int, SIGNATURE's text as bytes);
    None when it has the wrong length for the command."""
    base = code - SERVER if code >= SERVER else code
    if base == Cmd.SIGNATURE:
        return value
    if base == Cmd.SET_BAUDRATE:
        return int.from_bytes(value, "big") if len(value) == 4 else None
    return value[0] if len(value) == 1 else None
