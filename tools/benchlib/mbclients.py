"""One Modbus master of the Modbus family, in a generator process of its own (`gen`).

Each master is a process of its own — a lock-step client blocks in its own read,
and several masters in one interpreter would queue behind one GIL (and its 5 ms
switch interval) instead of behind the gateway. The window is `gen`'s: calls from
GO on, the calls that ended inside [T0, T1] give its calls/s and latencies.

Every call reads holding registers (fc 3) and is checked: the values must be the
sim's (register i holds i) or, for a master told to expect it (`expect:
"gateway-exception"`, polling a silent unit), a gateway exception (0x0A or 0x0B).
Anything else — other values, another exception, no reply — is an error.

Two kinds of client:

- `pymodbus`: pymodbus's blocking `ModbusSerialClient` (RTU on the pty) or
  `ModbusTcpClient`, as a user of either would write it;
- `raw`: the request bytes built once, write(2), then blocking read(2) until the
  response is whole and compared byte for byte (the bench's lock-step client,
  `lockstep`, for Modbus): the floor under pymodbus's own cost per call.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from benchlib.lockstep import NoReply, Watchdog, open_pty
from benchlib.meter import percentiles
from verld.codec.modbus import mbap_frame, rtu_frame

GATEWAY_EXCEPTIONS = frozenset({0x0A, 0x0B})  #: path unavailable, target failed to respond
_MAX_SAMPLES = 5
_GIVE_UP = 50  #: errors after which a master stops (the run is failed anyway)


@dataclass(frozen=True)
class Master:
    """One master, as passed on the worker's command line (JSON)."""

    client: str  #: pymodbus | raw
    transport: str  #: rtu (the pty) | tcp (a gateway)
    target: str  #: the pty path, or HOST:PORT
    unit: int = 1
    address: int = 0
    count: int = 10
    baud: int = 115200  #: what the RTU client sets on the pty (the sim paces, not the pty)
    timeout: float = 5.0  #: the client's own limit per call, s
    expect: str = "values"  #: values | gateway-exception

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Master:
        return cls(**json.loads(text))


Call = Callable[[], "int | str | None"]  #: None: right values; int: exception code; str: error


def _pdu(m: Master) -> bytes:
    return struct.pack(">BBHH", m.unit, 3, m.address, m.count)


def expected_values(m: Master) -> list[int]:
    """verld-sim's holding register i holds i."""
    return list(range(m.address, m.address + m.count))


def _expected_body(m: Master) -> bytes:
    regs = b"".join(struct.pack(">H", v) for v in expected_values(m))
    return bytes((m.unit, 3, 2 * m.count)) + regs


# --- raw clients ------------------------------------------------------------------------------


def _raw_tcp(m: Master) -> tuple[Call, Callable[[], None]]:
    host, _, port = m.target.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)  # blocking: a timeout would poll before every recv
    fd = sock.fileno()
    pdu, expected = _pdu(m), _expected_body(m)
    state = {"tid": 0}
    buf = bytearray()

    def call() -> int | str | None:
        tid = state["tid"] = (state["tid"] + 1) & 0xFFFF
        os.write(fd, mbap_frame(tid, pdu))
        while True:
            if len(buf) >= 6:
                size = 6 + int.from_bytes(buf[4:6], "big")
                if len(buf) >= size:
                    break
            data = os.read(fd, 4096)
            if not data:
                raise NoReply("closed by the gateway")
            buf.extend(data)
        frame = bytes(buf[:size])
        del buf[:size]
        got_tid = int.from_bytes(frame[:2], "big")
        if got_tid != tid or frame[2:4] != b"\0\0":
            return f"MBAP header {frame[:6].hex()} for transaction {tid}"
        body = frame[6:]
        if body == expected:
            return None
        if len(body) == 3 and body[0] == m.unit and body[1] == 0x83:
            return body[2]
        return f"response {body.hex()}"

    return call, sock.close


def _raw_rtu(m: Master) -> tuple[Call, Callable[[], None]]:
    fd = open_pty(m.target)
    os.set_blocking(fd, True)
    request, expected = rtu_frame(_pdu(m)), rtu_frame(_expected_body(m))
    buf = bytearray()

    def call() -> int | str | None:
        buf.clear()
        os.write(fd, request)
        need = len(expected)
        while len(buf) < need:
            data = os.read(fd, 4096)
            if not data:
                raise NoReply("the pty closed")
            buf.extend(data)
            if len(buf) >= 2 and buf[1] & 0x80:
                need = 5  # unit, fc | 0x80, code, CRC
        frame = bytes(buf)
        if frame == expected:
            return None
        if len(frame) == 5 and frame == rtu_frame(frame[:3]) and frame[1] == 0x83:
            return frame[2]
        return f"response {frame.hex()}"

    return call, lambda: os.close(fd)


# --- pymodbus clients ---------------------------------------------------------------------------


def _pymodbus(m: Master) -> tuple[Call, Callable[[], None]]:
    from pymodbus.client import ModbusSerialClient, ModbusTcpClient
    from pymodbus.exceptions import ModbusException

    client: ModbusSerialClient | ModbusTcpClient
    if m.transport == "rtu":
        client = ModbusSerialClient(
            m.target,
            baudrate=m.baud,
            bytesize=8,
            parity="N",
            stopbits=1,
            timeout=m.timeout,
            retries=0,
        )
    else:
        host, _, port = m.target.rpartition(":")
        client = ModbusTcpClient(host, port=int(port), timeout=m.timeout, retries=0)
    if not client.connect():
        raise OSError(f"pymodbus could not connect to {m.target}")
    values = expected_values(m)

    def call() -> int | str | None:
        try:
            rr = client.read_holding_registers(m.address, count=m.count, device_id=m.unit)
        except ModbusException as exc:
            return f"{type(exc).__name__}: {exc}"[:200]
        if rr.isError():
            code = getattr(rr, "exception_code", None)
            return code if isinstance(code, int) else f"error response {rr!r}"[:200]
        if rr.dev_id != m.unit or list(rr.registers) != values:
            return f"unit {rr.dev_id} registers {list(rr.registers)[:12]}"
        return None

    return call, client.close


def _open(m: Master) -> tuple[Call, Callable[[], None]]:
    if m.client == "pymodbus":
        return _pymodbus(m)
    if m.client == "raw":
        return _raw_rtu(m) if m.transport == "rtu" else _raw_tcp(m)
    raise ValueError(f"unknown client {m.client!r}")


# --- the run ----------------------------------------------------------------------------------


def run(m: Master, call: Call, t0: int, t1: int) -> dict[str, Any]:
    """Lock-step calls until T1; what ended inside [T0, T1] is measured."""
    clock = time.monotonic_ns
    latencies: list[int] = []
    exceptions: dict[str, int] = {}
    samples: list[str] = []
    sent = answered = good = errors = 0
    want_exception = m.expect == "gateway-exception"
    watchdog = Watchdog(m.timeout)
    try:
        while (start := clock()) < t1 and errors < _GIVE_UP:
            watchdog.progress(start / 1e9)
            sent += 1
            outcome = call()
            end = clock()
            wrong: str | None = None
            if isinstance(outcome, int):
                answered += 1
                exceptions[f"0x{outcome:02x}"] = exceptions.get(f"0x{outcome:02x}", 0) + 1
                if not (want_exception and outcome in GATEWAY_EXCEPTIONS):
                    wrong = f"exception 0x{outcome:02x}"
            elif outcome is None:
                answered += 1
                if want_exception:
                    wrong = "an answer from the unit that should be silent"
            else:
                wrong = outcome
            if wrong is not None:
                errors += 1
                if len(samples) < _MAX_SAMPLES:
                    samples.append(wrong)
            else:
                good += 1
                if t0 <= end <= t1:
                    latencies.append(end - start)
    except NoReply as exc:
        errors += 1
        samples.append(str(exc))
    finally:
        watchdog.stop()
    seconds = (t1 - t0) / 1e9
    lat = sorted(latencies)
    return {
        "calls": len(lat),
        "seconds": round(seconds, 4),
        "rate": round(len(lat) / seconds, 2) if seconds > 0 else 0.0,
        "sent": sent,
        "answered": answered,
        "good": good,
        "errors": errors,
        "error_samples": samples,
        "exceptions": exceptions,
        "latency_us": percentiles(lat),
        "latencies_ns": lat,
        "unit": m.unit,
        "client": m.client,
    }


def main(text: str, window: Callable[[], tuple[int, int]]) -> dict[str, Any]:
    """Connect (or open the pty), wait for the window, call: the RESULT object."""
    m = Master.from_json(text)
    call, close = _open(m)
    try:
        t0, t1 = window()
        return run(m, call, t0, t1)
    finally:
        close()
