"""The systemd journal, both ways: send verld's records, read them back.

Sending: each structlog record becomes one journal entry whose fields are the
record's keys in upper case (`generation` → GENERATION), plus EVENT (the short
event name), MESSAGE (event and key=values, what `journalctl` shows), PRIORITY
and SYSLOG_IDENTIFIER=verld; `pid`/`uid`/`gid` of a client record become
CLIENT_PID/..., and link_up/link_down/link_connecting carry LINK_STATE.
systemd-python's `sendv` is used when installed; otherwise verld speaks
journald's native protocol itself: one datagram to
/run/systemd/journal/socket holding `KEY=value\\n` lines (a value containing a
newline is sent as `KEY\\n`, its length as 64-bit little-endian, the bytes and
`\\n`); an entry too big for a datagram travels in a sealed memfd (SCM_RIGHTS).

Reading (`verlctl logs --journal`): systemd-python's journal reader when
installed, else `journalctl -o json`. Entries come back in the shape of the `logs`
op's records, `{ts, level, msg, ...fields}`, field names in lower case.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import importlib
import json
import os
import re
import shutil
import socket
import struct
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from verld.errors import VerldError

SOCKET = "/run/systemd/journal/socket"
IDENTIFIER = "verld"
#: structlog method name → syslog priority
PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2, "exception": 3}
_LEVEL = {0: "critical", 1: "critical", 2: "critical", 3: "error", 4: "warning", 7: "debug"}
# Fields verld sets itself or journald gives a meaning: a record key with one of
# these names is sent as VERLD_<NAME> instead.
_RESERVED = {"MESSAGE", "MESSAGE_ID", "PRIORITY", "EVENT", "ERRNO", "SYSLOG_IDENTIFIER"}
# Fields a read-back record does not show (journald's own start with "_").
_HIDDEN = {"MESSAGE", "PRIORITY", "EVENT", "SYSLOG_IDENTIFIER", "SYSLOG_TIMESTAMP"}
_HIDDEN_PREFIXES = ("_", "CODE_", "SYSLOG_")
_JOURNAL_DIRS = ("/run/log/journal", "/var/log/journal")

Sender = Callable[[Mapping[str, str]], None]


class JournalUnavailable(VerldError):
    """No journal to write to or read from; the message says why, for a human."""


# --- sending ------------------------------------------------------------------------
def field_name(key: str) -> str:
    """A record key as a journal field name: `[A-Z0-9_]`, not starting with `_` or a digit."""
    name = re.sub(r"[^A-Z0-9_]", "_", key.upper()).lstrip("_0123456789")[:64]
    return "VERLD_" + name if name in _RESERVED else name


def entry_fields(method: str, event_dict: Mapping[str, Any]) -> dict[str, str]:
    """The journal fields of one structlog record."""
    event = str(event_dict.get("event", ""))
    about_client = event.startswith(("client_", "lease_")) or "client" in event_dict
    fields: dict[str, str] = {}
    shown: list[str] = []
    for key, value in event_dict.items():
        if key in ("event", "timestamp", "level"):
            continue
        text = value if isinstance(value, str) else str(value)
        shown.append(f"{key}={text}")
        # pid/uid/gid next to a client are the peer's credentials (SO_PEERCRED)
        name = "CLIENT_" + key.upper() if about_client and key in ("pid", "uid", "gid") else ""
        name = name or field_name(key)
        if name:
            fields[name] = text
    if event.startswith("link_") and "LINK_STATE" not in fields:
        fields["LINK_STATE"] = event.removeprefix("link_")
    fields["MESSAGE"] = " ".join([event, *shown])
    fields["EVENT"] = event
    fields["PRIORITY"] = str(PRIORITY.get(method, 6))
    fields["SYSLOG_IDENTIFIER"] = IDENTIFIER
    return fields


def encode(fields: Mapping[str, str]) -> bytes:
    """journald's native wire format for one entry."""
    out = bytearray()
    for key, value in fields.items():
        data = value.encode("utf-8", "surrogateescape")
        if b"\n" in data:
            out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key.encode() + b"=" + data + b"\n"
    return bytes(out)


class NativeSender:
    """Sends entries to journald without systemd-python."""

    def __init__(self, path: str = SOCKET) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        # A wedged journald must not stall the event loop for long: after this the
        # caller gets an OSError and writes the record to stderr instead.
        self._sock.settimeout(1.0)

    def __call__(self, fields: Mapping[str, str]) -> None:
        data = encode(fields)
        try:
            self._sock.sendto(data, self.path)
        except OSError as exc:
            if exc.errno not in (errno.EMSGSIZE, errno.ENOBUFS):
                raise
            self._send_memfd(data)

    def _send_memfd(self, data: bytes) -> None:
        fd = os.memfd_create("verld-journal", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))]
            self._sock.sendmsg([], rights, 0, self.path)
        finally:
            os.close(fd)

    def close(self) -> None:
        self._sock.close()


def sender(path: str = SOCKET) -> Sender:
    """systemd-python's sendv when installed, else the native protocol.

    Raises JournalUnavailable when no journald listens (systemd-python would
    drop every entry silently then).
    """
    if not os.path.exists(path):
        raise JournalUnavailable(f"no journald socket at {path}")
    if path == SOCKET:
        try:
            sendv = importlib.import_module("systemd.journal").sendv
        except (ImportError, AttributeError):
            pass
        else:
            return lambda fields: sendv(*(f"{k}={v}" for k, v in fields.items()))
    return _native(path)


@functools.cache
def _native(path: str) -> NativeSender:
    # one socket for the process, however often logging is set up again (reload)
    return NativeSender(path)


# --- reading --------------------------------------------------------------------------
def journal_present() -> bool:
    """True when this machine has a running journald or journal files."""
    if os.path.exists(SOCKET):
        return True
    for directory in _JOURNAL_DIRS:
        with contextlib.suppress(OSError):
            for _root, _dirs, files in os.walk(directory):
                if any(f.endswith((".journal", ".journal~")) for f in files):
                    return True
    return False


def matches_for(unit: str | None, matches: Sequence[str]) -> list[str]:
    """Journal matches: verld's identifier (or the unit's entries) plus FIELD=VALUE ones."""
    for m in matches:
        if not re.fullmatch(r"[A-Z0-9_]+=.*", m, re.DOTALL):
            raise ValueError(f"not a journal match (FIELD=VALUE, FIELD in upper case): {m!r}")
    if unit is None:
        return [f"SYSLOG_IDENTIFIER={IDENTIFIER}", *matches]
    if "." not in unit:
        unit += ".service"
    return [f"_SYSTEMD_UNIT={unit}", *matches]


def to_record(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One journal entry (reader or `journalctl -o json`) as a `logs` record."""
    realtime = entry.get("__REALTIME_TIMESTAMP", 0)
    if hasattr(realtime, "timestamp"):  # systemd-python gives a datetime
        ts = float(realtime.timestamp())
    else:
        ts = int(_text(realtime) or 0) / 1_000_000
    try:
        priority = int(_text(entry.get("PRIORITY", 6)))
    except ValueError:
        priority = 6
    record: dict[str, Any] = {
        "ts": round(ts, 6),
        "level": _LEVEL.get(priority, "info"),
        "msg": _text(entry.get("EVENT") or entry.get("MESSAGE", "")),
    }
    for key, value in entry.items():
        if key in _HIDDEN or key.startswith(_HIDDEN_PREFIXES):
            continue
        record[key.lower()] = _text(value)
    return record


def _text(value: Any) -> str:
    if isinstance(value, list):  # journalctl: binary data as bytes, repeated fields as a list
        if value and all(isinstance(v, int) for v in value):
            return bytes(value).decode("utf-8", "replace")
        return ", ".join(_text(v) for v in value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def read(
    matches: Sequence[str], lines: int = 100, follow: bool = False
) -> Iterator[dict[str, Any]]:
    """The last `lines` matching entries as records, then new ones while `follow`.

    Raises JournalUnavailable when there is no journal or no way to read it.
    """
    if not journal_present():
        raise JournalUnavailable(
            "no systemd journal on this machine (no journald socket, no journal files); "
            "`verlctl logs` without --journal reads verld's own recent records"
        )
    try:
        journal = importlib.import_module("systemd.journal")
    except ImportError:
        journalctl = shutil.which("journalctl")
        if journalctl is None:
            raise JournalUnavailable(
                "reading the journal needs systemd-python (pip install 'verld[systemd]') "
                "or journalctl"
            ) from None
        return _read_journalctl(journalctl, matches, lines, follow)
    return _read_reader(journal, matches, lines, follow)


def _read_reader(
    journal: Any, matches: Sequence[str], lines: int, follow: bool
) -> Iterator[dict[str, Any]]:
    reader = journal.Reader()
    try:
        for m in matches:
            reader.add_match(m)
        reader.seek_tail()
        newest: list[Mapping[str, Any]] = []
        for _ in range(max(lines, 0)):
            entry = reader.get_previous()
            if not entry:
                break
            newest.append(entry)
        yield from (to_record(e) for e in reversed(newest))
        if not follow:
            return
        reader.seek_tail()
        reader.get_previous()
        while True:
            for entry in reader:
                yield to_record(entry)
            reader.wait(1.0)
    finally:
        reader.close()


def _read_journalctl(
    journalctl: str, matches: Sequence[str], lines: int, follow: bool
) -> Iterator[dict[str, Any]]:
    cmd = [journalctl, "-q", "--no-pager", "-o", "json", "-n", str(max(lines, 0))]
    cmd += ["-f"] if follow else []
    with subprocess.Popen([*cmd, *matches], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                with contextlib.suppress(ValueError):
                    yield to_record(json.loads(line))
        finally:
            if proc.poll() is None:
                proc.terminate()
    if proc.returncode not in (0, -15):
        raise JournalUnavailable(f"journalctl failed (exit {proc.returncode})")
