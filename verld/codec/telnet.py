"""Telnet (RFC 854, RFC 1143) and its COM-PORT-OPTION (RFC 2217), sans-I/O, either side.

Strategy: `Telnet` is one end of a connection, server or client. `feed(bytes)` takes
what the peer sent, in any cuts, and returns the `Event`s it makes: `Data` (the byte
stream with every command and negotiation taken out and IAC IAC turned back into
0xFF), `ComPort` (one COM-PORT-OPTION subnegotiation: command code and value) and
`Agreed` (an option just agreed, e.g. COM-PORT-OPTION, after which a server sends its
first NOTIFY-MODEMSTATE); what the negotiation itself calls for (WILL/WONT/DO/DONT
answers) is queued, and `take_output()` hands it to the caller to write. Going out,
`data(bytes)` doubles 0xFF, and `comport(code, value)` frames a subnegotiation.
Nothing here does I/O or reads a clock.

Negotiation follows RFC 1143's Q method without the queue bits: each option has a
state for this side (`us`) and for the peer (`him`), NO, YES, WANTNO or WANTYES; a
request that asks for the state an option is already in is not answered, so two
ends cannot loop. This side agrees to BINARY and SUPPRESS-GO-AHEAD both ways, and
to COM-PORT-OPTION both ways when `comport` (RFC 2217's server answers WILL and DO,
its client asks with WILL); every other option is refused (WONT/DONT), ECHO
included. `start()` is what this side offers at connect.

Malformed input is never an error: an IAC followed by a byte that is no command, a
stray SE, and a subnegotiation longer than `MAX_SUBNEG` bytes are dropped and
counted (`ignored`); commands without meaning here (NOP, GA, AYT...) are dropped
silently. There is no CR/NUL translation (binary mode): the stream is the
device's bytes, whatever they are.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BINARY",
    "COM_PORT",
    "ECHO",
    "IAC",
    "MAX_SUBNEG",
    "SGA",
    "Agreed",
    "ComPort",
    "Data",
    "Event",
    "Telnet",
    "escape",
]

# --- RFC 854 command bytes ------------------------------------------------------------
IAC, DONT, DO, WONT, WILL, SB, SE = 255, 254, 253, 252, 251, 250, 240
BINARY, ECHO, SGA, COM_PORT = 0, 1, 3, 44  #: the options that matter here
_IAC = bytes((IAC,))
MAX_SUBNEG = 64  #: longer subnegotiations are discarded and counted
_NO, _YES, _WANTNO, _WANTYES = 0, 1, 2, 3


@dataclass(frozen=True)
class Data:
    """Bytes of the stream itself (commands taken out, IAC IAC as one 0xFF)."""

    data: bytes


@dataclass(frozen=True)
class ComPort:
    """One COM-PORT-OPTION subnegotiation: `IAC SB 44 code value IAC SE`."""

    code: int
    value: bytes


@dataclass(frozen=True)
class Agreed:
    """An option newly in force: `local` this side's (it WILL), else the peer's."""

    option: int
    local: bool


Event = Data | ComPort | Agreed


def escape(data: bytes) -> bytes:
    """Data bytes for the wire: every 0xFF doubled."""
    return data.replace(b"\xff", b"\xff\xff") if 255 in data else data


def _emit(events: list[Event], plain: bytearray, event: Event) -> None:
    """`event` after the data read before it (which then starts afresh)."""
    if plain:
        events.append(Data(bytes(plain)))
        plain.clear()
    events.append(event)


class Telnet:
    """One end of a telnet connection; see the module docstring."""

    def __init__(self, *, server: bool, comport: bool = False) -> None:
        self.server = server
        self.rfc2217 = comport  #: COM-PORT-OPTION spoken (RFC 2217)
        self._supported = {BINARY, SGA} | ({COM_PORT} if comport else set())
        self._us: dict[int, int] = {}
        self._him: dict[int, int] = {}
        self._out = bytearray()
        self._state = 0  #: 0 data, 1 after IAC, 2 after WILL/WONT/DO/DONT, 3 in SB, 4 SB after IAC
        self._verb = 0
        self._sb = bytearray()
        self._sb_over = False
        self.ignored = 0  #: malformed commands and over-long subnegotiations dropped

    # --- state ----------------------------------------------------------------------
    def local(self, option: int) -> bool:
        """Whether this side has the option in force (it said WILL, the peer DO)."""
        return self._us.get(option, _NO) == _YES

    def remote(self, option: int) -> bool:
        """Whether the peer has the option in force (it said WILL, this side DO)."""
        return self._him.get(option, _NO) == _YES

    # --- out ------------------------------------------------------------------------
    def start(self) -> bytes:
        """What this side offers at connect: WILL and DO for each option it supports."""
        for option in sorted(self._supported):
            self._ask_us(option)
            self._ask_him(option)
        return self.take_output()

    def take_output(self) -> bytes:
        """Negotiation bytes queued for the peer (answers to what `feed` read)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def data(self, data: bytes) -> bytes:
        """Stream bytes for the wire (0xFF doubled)."""
        return escape(data)

    def comport(self, code: int, value: bytes = b"") -> bytes:
        """A COM-PORT-OPTION subnegotiation for the wire (`value` escaped)."""
        if not 0 <= code <= 255:
            raise ValueError(f"telnet: COM-PORT command {code} is not a byte")
        return bytes((IAC, SB, COM_PORT)) + escape(bytes((code,)) + value) + bytes((IAC, SE))

    # --- in -------------------------------------------------------------------------
    def feed(self, data: bytes) -> list[Event]:
        """The events made by `data` (any cut of the stream), in order."""
        events: list[Event] = []
        state = self._state
        if state == 0 and IAC not in data:  # the usual read: data only
            return [Data(data)] if data else []
        plain = bytearray()
        i, n = 0, len(data)
        while i < n:
            if state == 0:  # data up to the next IAC, as one slice
                j = data.find(_IAC, i)
                if j < 0:
                    plain += data[i:]
                    break
                plain += data[i:j]
                state, i = 1, j + 1
                continue
            byte = data[i]
            i += 1
            if state == 1:  # after IAC
                if byte == IAC:
                    plain.append(IAC)
                    state = 0
                elif byte in (WILL, WONT, DO, DONT):
                    self._verb, state = byte, 2
                elif byte == SB:
                    self._sb.clear()
                    self._sb_over = False
                    state = 3
                elif byte == SE or byte < 240:
                    self.ignored += 1  # a stray SE, or no command at all
                    state = 0
                else:
                    state = 0  # NOP, DM, BRK, IP, AO, AYT, EC, EL, GA: nothing to do here
            elif state == 2:  # the option of a WILL/WONT/DO/DONT
                agreed = self._negotiate(self._verb, byte)
                if agreed is not None:
                    _emit(events, plain, agreed)
                state = 0
            elif state == 3:  # in a subnegotiation
                if byte == IAC:
                    state = 4
                else:
                    self._sb_byte(byte)
            elif byte == IAC:  # (state 4: in a subnegotiation, after IAC) a data 0xFF
                self._sb_byte(IAC)
                state = 3
            elif byte == SE:
                event = self._sb_end()
                if event is not None:
                    _emit(events, plain, event)
                state = 0
            else:  # IAC + anything else inside SB: the subnegotiation is broken
                self.ignored += 1
                self._sb.clear()
                state = 0
        self._state = state
        if plain:
            events.append(Data(bytes(plain)))
        return events

    def _sb_byte(self, byte: int) -> None:
        if len(self._sb) >= MAX_SUBNEG + 1:  # option byte + MAX_SUBNEG bytes of it
            self._sb_over = True
        else:
            self._sb.append(byte)

    def _sb_end(self) -> ComPort | None:
        body, over = bytes(self._sb), self._sb_over
        self._sb.clear()
        self._sb_over = False
        if over or len(body) < 2 or body[0] != COM_PORT or not self.rfc2217:
            self.ignored += 1
            return None
        return ComPort(body[1], body[2:])

    # --- RFC 1143 ---------------------------------------------------------------------
    def _send(self, verb: int, option: int) -> None:
        self._out += bytes((IAC, verb, option))

    def _ask_us(self, option: int) -> None:
        """Offer to enable `option` here (WILL), unless it is or is being."""
        if self._us.get(option, _NO) == _NO:
            self._us[option] = _WANTYES
            self._send(WILL, option)

    def _ask_him(self, option: int) -> None:
        """Ask the peer to enable `option` (DO), unless it is or is being."""
        if self._him.get(option, _NO) == _NO:
            self._him[option] = _WANTYES
            self._send(DO, option)

    def _negotiate(self, verb: int, option: int) -> Agreed | None:
        """Handle one WILL/WONT/DO/DONT; an `Agreed` when an option came into force."""
        mine = verb in (DO, DONT)  # DO/DONT are about this side's option
        table = self._us if mine else self._him
        state = table.get(option, _NO)
        if verb in (WILL, DO):
            if state == _NO:
                if option in self._supported:
                    table[option] = _YES
                    self._send(WILL if mine else DO, option)
                    return Agreed(option, mine)
                self._send(WONT if mine else DONT, option)
            elif state == _WANTYES:
                table[option] = _YES
                return Agreed(option, mine)
            elif state == _WANTNO:
                table[option] = _NO  # (RFC 1143: "DONT answered by WILL": stays off)
            return None
        # WONT / DONT
        if state == _YES:
            table[option] = _NO
            self._send(WONT if mine else DONT, option)
        elif state in (_WANTYES, _WANTNO):
            table[option] = _NO
        return None
