"""What both clients share on the wire: errors, `Reply`, request/reply shapes, framing.

Framing is `verld.wire`'s (the 4-byte big-endian length + JSON of docs/protocol.md
section 2.2): `encode_message` frames a request, `new_decoder` splits the reply
stream into bodies and `parse_message` turns one body into a message.
"""

from __future__ import annotations

import base64
import errno
import grp
import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verld import wire
from verld.errors import VerldError

DEFAULT_SOCKET = "/run/verld/verld.sock"
#: the largest reply a client accepts: anything the 4-byte length can announce (the
#: daemon is trusted; its own max_message bounds requests, not replies)
MAX_REPLY = 0xFFFF_FFFF


class ClientError(VerldError):
    """An error reply from verld (`code` is one of the API's error codes)."""

    def __init__(self, code: str, message: str, reply: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reply = dict(reply or {})


class Unreachable(ClientError):
    """verld is not running or the socket cannot be reached."""

    def __init__(self, message: str) -> None:
        super().__init__("unreachable", message)


class PermissionDenied(Unreachable):
    """The socket (or a directory on its path) may not be opened by this user
    (EACCES): the message names its owner, group and mode and what to do."""


class RemoteFailure(ClientError):
    """The device answered status 0xFF (remote execution failed)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A device's answer to one call."""

    status: int
    data: bytes
    ms: float
    generation: int
    text: str | None = None
    #: a non-zero status's error code (`device_error`, `remote_failure`) and message
    #: (e.g. "modbus exception 0x02 (illegal data address)"); None on success
    error: str | None = None
    message: str | None = None
    #: False when no answer was awaited (the call was sent with `reply=False`, or the
    #: daemon's `device.line.no_reply` matched): status 0 and empty data then only say
    #: the request was written
    reply: bool = True

    @property
    def ok(self) -> bool:
        return self.status == 0


def default_socket() -> str:
    """$VERLD_SOCKET, else the system default."""
    return os.environ.get("VERLD_SOCKET") or DEFAULT_SOCKET


def connect_failed(path: str, exc: OSError) -> Unreachable:
    """The error for a connect to `path` that failed with `exc`."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return PermissionDenied(permission_denied(path))
    return Unreachable(f"cannot connect to {path}: {exc.strerror or exc}")


def permission_denied(path: str) -> str:
    """Why this user may not open the socket `path`, and what to do about it.

    The culprit is the first directory on the way this user may not search, else the
    socket itself (connect needs write permission on it). Its owner, group and mode
    are named; the way in is its group, when the mode lets the group in and the group
    is not root's: join it (or, already a member in /etc/group, log in again).
    Otherwise: run as its owner, or give the socket a group (a directory: move it).
    """
    culprit, need = path, stat.S_IWGRP
    for parent in reversed(Path(path).parents):
        if not os.access(parent, os.X_OK):
            culprit, need = str(parent), stat.S_IXGRP
            break
    try:
        st = os.stat(culprit)
    except OSError as exc:
        return f"permission denied on {path} ({culprit}: {exc.strerror or exc})"
    owner, group = _user_name(st.st_uid), _group_name(st.st_gid)
    where = (
        f"permission denied on {culprit} (owner {owner}, group {group}, "
        f"mode {stat.S_IMODE(st.st_mode):04o})"
    )
    if culprit != path:
        where += f", the directory of {path}"
    if st.st_gid == 0 or not st.st_mode & need:
        if culprit != path:
            return (
                f"{where}: only {owner} may enter it; run as {owner} (sudo), or put "
                "verld's api.socket in a directory its users may enter"
            )
        return (
            f"{where}: only {owner} may open it; run as {owner} (sudo), or set verld's "
            'api.group to a group of its users (with api.mode "0660")'
        )
    if _member_elsewhere(group, st.st_gid):
        return (
            f"{where}: you are in group '{group}', but this login session is not yet: "
            f"log in again (or run newgrp {group})"
        )
    return f"{where}: join group '{group}' (sudo usermod -aG {group} $USER, then log in again)"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _member_elsewhere(group: str, gid: int) -> bool:
    """This user is in `group` by /etc/group (or as its primary group) but this
    process does not have it: the membership came after this login."""
    if gid in os.getgroups() or gid == os.getgid():
        return False
    try:
        user = pwd.getpwuid(os.getuid())
        members = grp.getgrgid(gid).gr_mem
    except KeyError:
        return False
    return user.pw_name in members or user.pw_gid == gid


def encode_message(obj: Mapping[str, Any]) -> bytes:
    """One framed request (`wire.encode`: compact, ASCII-escaped JSON)."""
    return wire.encode(obj if isinstance(obj, dict) else dict(obj))


def new_decoder() -> wire.MessageDecoder:
    """A fresh decoder for one connection's reply stream."""
    return wire.MessageDecoder(MAX_REPLY)


def parse_message(body: bytes) -> dict[str, Any]:
    """One reply or event body → its JSON object; ValueError if it is not one."""
    msg = wire.decode_json(body)
    if not isinstance(msg, dict):
        raise ValueError("a message from verld must be a JSON object")
    return msg


def is_event(msg: Mapping[str, Any]) -> bool:
    """An event (pushed to subscribers), not a reply to a request."""
    return "event" in msg and "id" not in msg


def is_connection_error(msg: Mapping[str, Any]) -> bool:
    """An error answering no request: busy, forbidden, too_large, shutting_down."""
    return msg.get("id") is None and msg.get("ok") is False


def error_from(msg: Mapping[str, Any]) -> ClientError:
    """The ClientError an error reply stands for."""
    err = msg.get("error") or {}
    return ClientError(str(err.get("code", "unknown")), str(err.get("message", "")), msg)


def call_request(
    data: bytes | str,
    timeout: float | None,
    retry: int | None,
    wait: bool,
    reply: bool | None = None,
) -> dict[str, Any]:
    """The fields of a `call` request (`reply`: None leaves the field out, the daemon decides)."""
    req: dict[str, Any] = {"op": "call"}
    if isinstance(data, str):
        req["text"] = data
    else:
        req["data"] = base64.b64encode(data).decode("ascii")
    if timeout is not None:
        req["timeout"] = timeout
    if retry is not None:
        req["retry"] = retry
    if wait:
        req["wait"] = True
    if reply is not None:
        req["reply"] = bool(reply)
    return req


def reply_from(msg: Mapping[str, Any]) -> Reply:
    """A call's reply message → Reply, or raise ClientError for API-level errors."""
    status = msg.get("status")
    if status is None:
        raise error_from(msg)
    error = msg.get("error")
    code, message = (
        (error.get("code"), error.get("message")) if isinstance(error, dict) else (None, None)
    )
    return Reply(
        status=int(status),
        data=base64.b64decode(msg.get("data") or ""),
        ms=float(msg.get("ms", 0.0)),
        generation=int(msg.get("generation", 0)),
        text=msg.get("text"),
        error=code if isinstance(code, str) else None,
        message=message if isinstance(message, str) else None,
        reply=msg.get("reply") is not False,
    )


def check(msg: dict[str, Any]) -> dict[str, Any]:
    """A non-call reply, or raise ClientError if it is an error reply."""
    if msg.get("ok") is False and "status" not in msg:
        raise error_from(msg)
    return msg
