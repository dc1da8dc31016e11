"""RFC 2217's server side: a client's COM-PORT commands → answers, and the modem state.

Strategy: sans-I/O like the telnet codec under it. `ComPortServer.handle(code,
value)` returns the answers to write (server code, value): every SET is answered
with the value in effect once handled. In `shared` mode (`port` None, `apply`
False) nothing is applied: the configured line settings are the answer, so a client
asking for others sees them refused while one asking for the configured ones opens;
DTR and RTS are reported ON, BREAK OFF. In `passthrough` the real port (a pyserial
`Serial`) takes them: a setting it refuses (a pty's `tcsetattr` refuses even parity
and 7 data bits: `termios.error`) is answered with the value still in effect, logged
once per setting (`network_setting_refused`), and put back in pyserial's store so that
the next change does not apply it again; a DTR, RTS or BREAK change on a port
without modem lines (a pty) is answered with the state asked for and reported once as
not applied (`not_applied`), so that clients which set them while opening still open.
On a `tcp://` link (`port` None, `apply` True) there is nothing to apply: the values
in effect are the answer. PURGE-DATA goes to `purge(received, sent)`. `modem(bits)`
makes the NOTIFY-MODEMSTATE to send when the lines (under the client's mask) changed.
"""

from __future__ import annotations

import termios
from collections.abc import Callable
from typing import Any

import serial
import structlog

from verld.codec.rfc2217 import CONTROL, PARITY, SERVER, Cmd, pack_value, unpack_value
from verld.config import DeviceConfig

log = structlog.get_logger("verld.network")

Answer = tuple[int, bytes]

_PARITY_OF_CONFIG = {"none": "N", "odd": "O", "even": "E", "mark": "M", "space": "S"}
_PARITY_CODE = {v: k for k, v in PARITY.items()}  # 1 → "N"
_PARITY_WORD = {v: k for k, v in _PARITY_OF_CONFIG.items()}  # "E" → "even"
_STOPBITS = {1: serial.STOPBITS_ONE, 2: serial.STOPBITS_TWO, 3: serial.STOPBITS_ONE_POINT_FIVE}
_STOP_CODE = {serial.STOPBITS_ONE: 1, serial.STOPBITS_TWO: 2, serial.STOPBITS_ONE_POINT_FIVE: 3}
_FLOW = (CONTROL["flow_none"], CONTROL["flow_xonxoff"], CONTROL["flow_hardware"])
#: SET-CONTROL values that set a line: value → (line, on)
_LINES = {
    CONTROL["break_on"]: ("break", True),
    CONTROL["break_off"]: ("break", False),
    CONTROL["dtr_on"]: ("dtr", True),
    CONTROL["dtr_off"]: ("dtr", False),
    CONTROL["rts_on"]: ("rts", True),
    CONTROL["rts_off"]: ("rts", False),
}
#: SET-CONTROL "request" values: value → line
_REQUESTS = {
    CONTROL["break_request"]: "break",
    CONTROL["dtr_request"]: "dtr",
    CONTROL["rts_request"]: "rts",
}
#: a line's state as a SET-CONTROL answer: (line, on) → value
_STATE = {v: k for k, v in _LINES.items()}
#: what applying a setting raises (termios.error: tcsetattr refused it, e.g. EINVAL on a pty)
_PORT_ERRORS = (serial.SerialException, OSError, ValueError, termios.error)


def _why(exc: BaseException) -> str:
    args = exc.args
    if isinstance(exc, termios.error) and len(args) == 2:
        return f"[Errno {args[0]}] {args[1]}"  # (as an OSError reads)
    return str(exc)


class ComPortServer:
    """One connection's COM-PORT-OPTION, server side (see the module docstring)."""

    def __init__(
        self,
        device: DeviceConfig,
        *,
        apply: bool,
        port: Any = None,
        purge: Callable[[bool, bool], None] | None = None,
    ) -> None:
        self.device = device
        self.apply = apply
        self.port = port  #: the real port (a pyserial Serial), passthrough on a serial link
        self._purge = purge
        self.lines = {"dtr": True, "rts": True, "break": False}
        self.not_applied: list[str] = []  #: lines the port could not take, to report (once each)
        self._noted: set[str] = set()
        self._refused: set[str] = set()  #: settings whose refusal was logged
        self.log: Any = log  #: (the relay binds the entry's name and the peer)
        self.modem_mask = 0xFF
        self.line_mask = 0
        self._modem: int | None = None  #: the last MODEMSTATE sent (None: none yet)
        self.signature: bytes | None = None  #: the client's SIGNATURE text, if it sent one
        self.ignored = 0  #: commands with a bad value, or unknown

    # --- in effect --------------------------------------------------------------------------
    def baudrate(self) -> int:
        return int(self.port.baudrate) if self.port is not None else self.device.baudrate

    def datasize(self) -> int:
        return int(self.port.bytesize) if self.port is not None else self.device.bytesize

    def parity(self) -> int:
        if self.port is not None:
            return PARITY[self.port.parity]
        return PARITY[_PARITY_OF_CONFIG[self.device.parity]]

    def stopsize(self) -> int:
        stop = self.port.stopbits if self.port is not None else self.device.stopbits
        return _STOP_CODE.get(stop, 1)

    def flow(self) -> int:
        if self.port is not None:
            if self.port.rtscts:
                return CONTROL["flow_hardware"]
            return CONTROL["flow_xonxoff"] if self.port.xonxoff else CONTROL["flow_none"]
        return CONTROL["flow_hardware"] if self.device.rtscts else CONTROL["flow_none"]

    # --- commands -----------------------------------------------------------------------------
    def handle(self, code: int, value: bytes) -> list[Answer]:
        """The answers to one client command (none for SUSPEND/RESUME and the like)."""
        number = unpack_value(code, value) if code <= Cmd.PURGE_DATA else None
        if code == Cmd.SIGNATURE:
            if value:
                self.signature = value
                return []
            return [(SERVER + Cmd.SIGNATURE, b"verld")]
        if code == Cmd.NOTIFY_LINESTATE:  # (a client's poll, as pyserial's ?poll_modem)
            return [(SERVER + code, b"\x00")]
        if code == Cmd.NOTIFY_MODEMSTATE:
            return [(SERVER + code, bytes((self._modem or 0,)))]
        if code in (Cmd.FLOWCONTROL_SUSPEND, Cmd.FLOWCONTROL_RESUME):
            return []  # (RFC 2217 defines no answer; a 108 would tell the client to stop)
        if not isinstance(number, int):
            self.ignored += 1
            return []
        answer = self._answer(code, number)
        if answer is None:
            self.ignored += 1
            return []
        return [(SERVER + code, pack_value(SERVER + code, answer))]

    def _answer(self, code: int, number: int) -> int | None:
        if code == Cmd.SET_BAUDRATE:
            if number:
                self._set("baudrate", number)
            return self.baudrate()
        if code == Cmd.SET_DATASIZE:
            if number:
                self._set("bytesize", number)
            return self.datasize()
        if code == Cmd.SET_PARITY:
            if number in _PARITY_CODE:
                self._set("parity", _PARITY_CODE[number])
            return self.parity()
        if code == Cmd.SET_STOPSIZE:
            if number in _STOPBITS:
                self._set("stopbits", _STOPBITS[number])
            return self.stopsize()
        if code == Cmd.SET_CONTROL:
            return self._control(number)
        if code == Cmd.SET_LINESTATE_MASK:
            self.line_mask = number
            return number
        if code == Cmd.SET_MODEMSTATE_MASK:
            self.modem_mask = number
            self._modem = None  # (the next look reports under the new mask)
            return number
        if code == Cmd.PURGE_DATA:
            if number not in (1, 2, 3):
                return None
            if self._purge is not None:
                self._purge(bool(number & 1), bool(number & 2))
            return number
        return None  # no command at all

    def _set(self, attr: str, value: object) -> None:
        """A line setting for the real port (passthrough on a serial link only)."""
        if not self.apply or self.port is None:
            return
        before = getattr(self.port, attr)
        try:
            setattr(self.port, attr, value)
        except _PORT_ERRORS as exc:  # refused: the answer carries the value still in effect
            self._keep(attr, before)
            if attr not in self._refused:  # (logged once per setting and connection)
                self._refused.add(attr)
                shown = _PARITY_WORD.get(str(value), value) if attr == "parity" else value
                self.log.warning(
                    "network_setting_refused", setting=attr, value=shown, error=_why(exc)
                )

    def _keep(self, attr: str, value: object) -> None:
        """pyserial stores a value before applying it: the refused one goes, `value` (in
        effect before) is back, so the next change of another setting does not apply it."""
        try:
            setattr(self.port, attr, value)  # (applies nothing new: the port has it already)
        except _PORT_ERRORS:
            setattr(self.port, f"_{attr}", value)  # (pyserial's own store, not applied)

    def _control(self, number: int) -> int | None:
        if number == 0 or number in _FLOW:
            if number:
                self._set("rtscts", number == CONTROL["flow_hardware"])
                self._set("xonxoff", number == CONTROL["flow_xonxoff"])
            return self.flow()
        if number in _REQUESTS:
            line = _REQUESTS[number]
            return _STATE[line, self.lines[line]]
        if number not in _LINES:
            return None
        line, on = _LINES[number]
        if not self.apply:  # shared: nothing changes
            return _STATE[line, self.lines[line]]
        try:
            if self.port is None:
                raise OSError("no modem lines")
            setattr(self.port, "break_condition" if line == "break" else line, on)
        except _PORT_ERRORS:
            if line not in self._noted:  # (reported once per connection)
                self._noted.add(line)
                self.not_applied.append(line)
        self.lines[line] = on
        return number

    # --- modem lines -----------------------------------------------------------------------------
    def modem(self, bits: int | None) -> Answer | None:
        """The NOTIFY-MODEMSTATE to send for `bits` (None: the port has no modem lines,
        reported as 0 once), or None when nothing changed under the mask."""
        state = (bits or 0) & 0xF0 & self.modem_mask
        last = self._modem
        if last is not None and (bits is None or state == last):
            return None
        delta = 0 if last is None else (((state ^ last) >> 4) & 0x0F)
        self._modem = state
        return SERVER + Cmd.NOTIFY_MODEMSTATE, bytes((state | (delta & self.modem_mask),))
