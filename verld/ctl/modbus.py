"""A Modbus unit + PDU read out as one line of text, for `verlctl monitor` (sans-I/O).

`describe(data, request=...)` takes what a modbus codec's call or reply carries
(the unit id, then the PDU: function code and data) and names the unit, the
function and its fields, e.g. `unit 1 read holding registers (03) addr 0 count 10`
for a request and `unit 1 read holding registers (03) 10 registers: 0 1 2 ...` for
its response. An exception response reads `... exception 02 illegal data address`.
Bytes that are too few, too many or contradict their own byte count are described
as `malformed: ...`; `describe` never raises. Addresses and values are decimal,
bits are in address order (the first bit is the lowest address) in groups of 8.
The fields are read by `verld.codec.modbus.pdu`; what it finds wrong is said here,
in verlctl's words.
"""

from __future__ import annotations

from collections.abc import Callable

from verld.codec.modbus import pdu
from verld.codec.modbus.pdu import EXCEPTION_NAMES, FUNCTION_NAMES
from verld.codec.registry import CODECS
from verld.ctl.render import safe

__all__ = ["describe", "is_modbus"]

MAX_BITS = 16  #: bits shown of a coil or input read / coil write
MAX_REGISTERS = 10  #: register values shown of a response
MAX_WRITTEN = 8  #: register values shown of a write request
MAX_DATA = 16  #: bytes shown as hex of a function this module does not decode
MAX_OBJECT_TEXT = 32  #: characters shown of a device identification object


class _Malformed(ValueError):
    """The PDU's data does not fit its function code (the text says how)."""


def is_modbus(codec: object) -> bool:
    """Whether a daemon's codec (from `hello`) is one of the Modbus codecs (a name this
    verlctl does not know is not)."""
    found = CODECS.get(codec) if isinstance(codec, str) else None
    return found is not None and found.bus


def describe(data: bytes, *, request: bool, rtu: bool = True) -> str:
    """One line naming the unit, the function and its fields (`request`: master to unit;
    `rtu`: unit 0 is the broadcast address, as on a serial line but not on Modbus TCP)."""
    if not data:
        return "malformed: no data (a unit id and a function code expected)"
    unit = data[0]
    head = "unit 0 (broadcast)" if unit == 0 and rtu else f"unit {unit}"
    if len(data) < 2:
        return f"{head} malformed: no function code"
    fc, body = data[1], bytes(data[2:])
    if pdu.is_exception(fc):
        if request:
            return f"{head} malformed: function code {fc:02x} (an exception's) in a request"
        return f"{head} {_function(fc & 0x7F)} {_exception(body)}"
    decoders = _REQUESTS if request else _RESPONSES
    try:
        fields = decoders.get(fc, _other)(body)
    except _Malformed as exc:
        fields = f"malformed: {exc}"
    except pdu.PduError as exc:
        fields = f"malformed: {_said(exc)}"
    return f"{head} {_function(fc)} {fields}".rstrip()


def _function(fc: int) -> str:
    return f"{FUNCTION_NAMES.get(fc, f'function {fc}')} ({fc:02x})"


def _exception(body: bytes) -> str:
    try:
        code = pdu.exception_code(body)
    except pdu.WrongLength as exc:
        if not exc.have:
            return "malformed: exception response without an exception code"
        extra = _plural(exc.have - 1, "byte")
        return f"malformed: exception response with {extra} after the exception code"
    except pdu.ZeroExceptionCode:
        return "malformed: exception code 00"
    name = EXCEPTION_NAMES.get(code)
    return f"exception {code:02x} {name}" if name else f"exception {code:02x}"


# --- pieces --------------------------------------------------------------------------
def _said(exc: pdu.PduError) -> str:
    """What the PDU module found wrong, in verlctl's words."""
    if isinstance(exc, pdu.WrongLength):
        more = "at least " if exc.at_least else ""
        return f"{_plural(exc.have, 'data byte')}, {more}{exc.need} expected"
    if isinstance(exc, pdu.CountMismatch):
        return f"byte count {exc.count}, {_plural(exc.have, 'byte')} after it"
    if isinstance(exc, pdu.OddLength):
        return f"odd byte count {exc.have} for 16-bit registers"
    if isinstance(exc, pdu.CutObject):
        return f"{exc.announced} objects announced, the data ends inside one"
    if isinstance(exc, pdu.ExtraBytes):
        return f"{_plural(exc.extra, 'byte')} after the last object"
    return str(exc)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _bits(packed: bytes, n: int) -> str:
    """The first `n` bits (LSB of the first byte first) as 0/1 in groups of 8, cut at MAX_BITS."""
    bits = "".join("1" if bit else "0" for bit in pdu.unpack_bits(packed, min(n, MAX_BITS)))
    shown = " ".join(bits[i : i + 8] for i in range(0, len(bits), 8))
    return f"{shown} ..." if n > MAX_BITS else shown


def _values(values: list[int], limit: int) -> str:
    shown = " ".join(str(v) for v in values[:limit])
    return f"{shown} ..." if len(values) > limit else shown


def _registers(data: bytes) -> str:
    """A response's register values: `N registers: v0 v1 ...`."""
    values = pdu.unpack_registers(data)
    shown = _values(values, MAX_REGISTERS)
    return _listed(_plural(len(values), "register"), shown)


def _listed(head: str, shown: str) -> str:
    """`head: shown`, or just `head` when nothing is shown."""
    return f"{head}: {shown}" if shown else head


def _hex(data: bytes) -> str:
    if not data:
        return ""
    shown = data[:MAX_DATA].hex(" ")
    return f"data {shown} ..." if len(data) > MAX_DATA else f"data {shown}"


# --- requests ------------------------------------------------------------------------
def _read_request(body: bytes) -> str:
    addr, count = pdu.fields(body)
    return f"addr {addr} count {count}"


def _write_coil(body: bytes) -> str:
    addr, value = pdu.fields(body)
    state = {pdu.COIL_ON: "on", pdu.COIL_OFF: "off"}.get(value)
    return f"addr {addr} {state}" if state else f"addr {addr} value {value:#06x} (not on/off)"


def _write_register(body: bytes) -> str:
    addr, value = pdu.fields(body)
    return f"addr {addr} value {value}"


def _write_coils_request(body: bytes) -> str:
    packed = pdu.counted(body, pdu.FIELDS.size)
    addr, count = pdu.FIELDS.unpack_from(body)
    if len(packed) != pdu.bit_bytes(count):
        raise _Malformed(f"{_plural(len(packed), 'byte')} of coil values for count {count}")
    return _listed(f"addr {addr} count {count}", _bits(packed, count))


def _write_registers_request(body: bytes) -> str:
    data = pdu.counted(body, pdu.FIELDS.size)
    addr, count = pdu.FIELDS.unpack_from(body)
    if len(data) != 2 * count:
        raise _Malformed(f"{_plural(len(data), 'byte')} of register values for count {count}")
    return _listed(f"addr {addr} count {count}", _values(pdu.unpack_registers(data), MAX_WRITTEN))


def _read_write_request(body: bytes) -> str:
    data = pdu.counted(body, pdu.READ_WRITE_FIELDS.size)
    raddr, rcount, waddr, wcount = pdu.READ_WRITE_FIELDS.unpack_from(body)
    if len(data) != 2 * wcount:
        raise _Malformed(
            f"{_plural(len(data), 'byte')} of register values for write count {wcount}"
        )
    head = f"read addr {raddr} count {rcount} write addr {waddr} count {wcount}"
    return _listed(head, _values(pdu.unpack_registers(data), MAX_WRITTEN))


def _diagnostics(body: bytes) -> str:
    """Request and response alike: the sub-function and its data (a response echoes it)."""
    try:
        sub, data = pdu.sub_function(body)
    except pdu.WrongLength as exc:
        raise _Malformed(
            f"{_plural(exc.have, 'data byte')}, at least 2 (the sub-function) expected"
        ) from None
    return f"sub-function {sub} {_hex(data)}".rstrip()


def _mei_request(body: bytes) -> str:
    if not body:
        raise _Malformed("no MEI type")
    mei, rest = body[0], body[1:]
    if mei != pdu.MEI_DEVICE_ID:
        return f"MEI type {mei:02x} {_hex(rest)}".rstrip()
    code, object_id = pdu.device_identification_request(rest)
    return f"read device identification (MEI 0e) code {code} object {object_id}"


def _other(body: bytes) -> str:
    return _hex(body)


# --- responses -----------------------------------------------------------------------
def _read_bits_response(body: bytes) -> str:
    packed = pdu.counted(body)
    n = 8 * len(packed)
    return _listed(_plural(n, "bit"), _bits(packed, n))


def _read_registers_response(body: bytes) -> str:
    return _registers(pdu.counted(body))


def _write_multiple_response(body: bytes) -> str:
    addr, count = pdu.fields(body)
    return f"addr {addr} count {count}"


def _mei_response(body: bytes) -> str:
    if not body:
        raise _Malformed("no MEI type")
    mei, rest = body[0], body[1:]
    if mei != pdu.MEI_DEVICE_ID:
        return f"MEI type {mei:02x} {_hex(rest)}".rstrip()
    try:
        found = pdu.device_identification(rest)
    except pdu.WrongLength as exc:
        raise _Malformed(
            f"{_plural(exc.have, 'byte')} of device identification, 5 or more expected"
        ) from None
    objects = []
    for oid, value in found.objects:
        text = value.decode("utf-8", "replace")
        if len(text) > MAX_OBJECT_TEXT:
            text = text[:MAX_OBJECT_TEXT] + "..."
        objects.append(f'{oid}="{safe(text)}"')
    more_text = f" more from object {found.next_object}" if found.more else ""
    shown = f": {' '.join(objects)}" if objects else ""
    return (
        f"read device identification (MEI 0e) code {found.code} conformity "
        f"{found.conformity:02x}{more_text} {_plural(len(objects), 'object')}{shown}"
    )


_REQUESTS: dict[int, Callable[[bytes], str]] = {
    0x01: _read_request,
    0x02: _read_request,
    0x03: _read_request,
    0x04: _read_request,
    0x05: _write_coil,
    0x06: _write_register,
    0x08: _diagnostics,
    0x0F: _write_coils_request,
    0x10: _write_registers_request,
    0x17: _read_write_request,
    0x2B: _mei_request,
}

_RESPONSES: dict[int, Callable[[bytes], str]] = {
    0x01: _read_bits_response,
    0x02: _read_bits_response,
    0x03: _read_registers_response,
    0x04: _read_registers_response,
    0x05: _write_coil,
    0x06: _write_register,
    0x08: _diagnostics,
    0x0F: _write_multiple_response,
    0x10: _write_multiple_response,
    0x17: _read_registers_response,
    0x2B: _mei_response,
}
