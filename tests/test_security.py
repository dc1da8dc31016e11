"""Who may do what, and input that cannot hurt (issue 6; docs/security.md).

`TestRoles` runs real non-root peers (`setpriv` to nobody) against a real daemon
and checks SO_PEERCRED → role, reload, refusal at connect and the socket's mode.
`TestHostileClients` throws garbage, truncated and oversize frames, deep and huge
JSON, wrong field types, unread floods, connection storms and 1000 idle
connections at one daemon while a well-behaved client keeps calling and checking
every reply; afterwards the daemon's fd count is back at its baseline and its RSS
grew by a bounded amount. `TestDenialOfService` and `TestInjection` each need a
daemon of their own. Tests of bugs found here are regression tests now (see the
findings in docs/security.md).
"""

from __future__ import annotations

import base64
import contextlib
import grp
import json
import os
import pwd
import random
import re
import resource
import selectors
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import (
    AS_NOBODY,
    DaemonProc,
    SimProc,
    need,
    nobody_python,
    rss_kib,
    settled_fd_count,
    stop_process,
    wait_for,
    write_config,
)

from verld.client import Client, ClientError
from verld.config import RoleList, RolesConfig
from verld.roles import role_for
from verld.sockfile import bind_socket

pytestmark = pytest.mark.timeout(60)

NOBODY = 65534  #: uid and gid of the unprivileged test peer
OTHER = 4242  #: a uid/gid nobody here has: makes the role lists non-empty
MAX_MESSAGE = 1 << 20
ECHO = b"\x01"


# --- helpers -----------------------------------------------------------------------
def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def jframe(obj: Any) -> bytes:
    return frame(json.dumps(obj).encode())


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Raw:
    """A raw API connection: bytes out, framed JSON in."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)  # blocking: waits while verld's listen backlog is full
        self.sock.settimeout(timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("closed by verld")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self) -> dict[str, Any]:
        (n,) = struct.unpack(">I", self._exact(4))
        msg: dict[str, Any] = json.loads(self._exact(n))
        return msg

    def ask(self, data: bytes) -> dict[str, Any]:
        self.send(data)
        return self.recv()

    def closed_by_peer(self) -> bool:
        """True once verld closes the connection (unread data is discarded)."""
        try:
            while self.sock.recv(1 << 20):
                pass
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()


# --- non-root peers ------------------------------------------------------------------
#: A peer as its own process: each stdin line is a request (null: just read), each
#: stdout line the next message from verld, or {"closed": ...}.
PEER = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[2]))
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect_error": exc.errno}), flush=True)
    sys.exit(0)
print(json.dumps({"connected": True}), flush=True)
buf = b""
def exact(n):
    global buf
    while len(buf) < n:
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError("closed")
        buf += chunk
    out, buf = buf[:n], buf[n:]
    return out
while line := sys.stdin.readline():
    req = json.loads(line)
    try:
        if req is not None:
            body = json.dumps(req).encode()
            s.sendall(struct.pack(">I", len(body)) + body)
        (n,) = struct.unpack(">I", exact(4))
        msg = json.loads(exact(n))
    except (EOFError, OSError) as exc:
        msg = {"closed": str(exc) or type(exc).__name__}
    print(json.dumps(msg), flush=True)
"""


class Peer:
    """An API client running as another uid/gid (setpriv, no supplementary groups)."""

    def __init__(
        self, path: str, uid: int = NOBODY, gid: int = NOBODY, timeout: float = 10.0
    ) -> None:
        cmd = [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            *nobody_python(),  # (a Python another uid may run; -I: the stdlib only)
            "-I",
            "-c",
            PEER,
            path,
            str(timeout),
        ]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/"
        )
        self.first = self._line()
        self._ids = 0

    @property
    def connected(self) -> bool:
        return bool(self.first.get("connected"))

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"peer exited {self.proc.wait()}")
        msg: dict[str, Any] = json.loads(line)
        return msg

    def ask(self, op: str | None, **fields: Any) -> dict[str, Any]:
        """Send one request (None: send nothing) and return the next message."""
        assert self.proc.stdin is not None
        req = None
        if op is not None:
            self._ids += 1
            req = {"op": op, "id": self._ids, **fields}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._line()

    def code(self, op: str, **fields: Any) -> str:
        """The outcome of one request: "ok", an error code, or "closed"."""
        msg = self.ask(op, **fields)
        if "closed" in msg:
            return "closed"
        return "ok" if msg["ok"] else str(msg["error"]["code"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="non-root peers need root and setpriv",
)


@pytest.fixture
def sim(pubdir: Path) -> Iterator[SimProc]:
    s = SimProc(pubdir)
    yield s
    s.stop()


class World:
    """A daemon whose config the test rewrites (roles, mode, group) and reloads."""

    def __init__(self, pubdir: Path, sim: SimProc) -> None:
        self.pubdir, self.sim = pubdir, sim
        self.daemon: DaemonProc | None = None
        self.peers: list[Peer] = []

    def config(self, roles: dict[str, Any] | None = None, **api: Any) -> Path:
        api = {"mode": "0666", **api, "roles": roles or {}}
        return write_config(self.pubdir, self.sim.link, {"api": api, "log": {"level": "INFO"}})

    def start(self, roles: dict[str, Any] | None = None, **api: Any) -> DaemonProc:
        self.daemon = DaemonProc(self.config(roles, **api))
        return self.daemon

    @property
    def socket(self) -> str:
        assert self.daemon is not None
        return str(self.daemon.socket)

    def peer(self, uid: int = NOBODY, gid: int = NOBODY, timeout: float = 10.0) -> Peer:
        p = Peer(self.socket, uid, gid, timeout)
        self.peers.append(p)
        return p

    def stop(self) -> None:
        for p in self.peers:
            p.close()
        self.peers.clear()
        if self.daemon is not None:
            self.daemon.stop()


@pytest.fixture
def world(pubdir: Path, sim: SimProc) -> Iterator[World]:
    w = World(pubdir, sim)
    yield w
    w.stop()


def root_reload(w: World) -> list[str]:
    with Client(w.socket, timeout=10) as c:
        changed: list[str] = c.request("reload")["changed"]
    return changed


# --- roles -----------------------------------------------------------------------------
@needs_root
class TestRoles:
    def test_observer_reads_but_cannot_drive(self, world: World) -> None:
        """A peer in no list (observer lists empty) is an observer: status yes, call forbidden."""
        world.start(roles={"controller": {"uids": [OTHER]}})
        p = world.peer()
        assert p.connected
        hello = p.ask("hello", client="nobody")
        assert (hello["ok"], hello["role"]) == (True, "observer")
        assert p.ask("status")["link"]["state"] == "up"
        for op in ("subscribe", "unsubscribe", "logs", "metrics"):
            fields = {"topics": ["link"]} if op == "subscribe" else {}
            assert p.code(op, **fields) == "ok", op
        assert p.code("call", data=b64(ECHO + b"x")) == "forbidden"
        assert p.code("lease", seconds=5) == "forbidden"
        assert p.code("release") == "forbidden"
        assert p.code("reconnect") == "forbidden"
        assert p.code("reload") == "forbidden"
        assert p.ask("status")["ok"] is True  # forbidden never closes the connection

    def test_gid_added_then_reload_lets_it_call(self, world: World) -> None:
        """Adding the peer's gid to controller.gids and sending `reload` as root: it may call."""
        world.start(roles={"controller": {"uids": [OTHER]}})
        assert world.peer().code("call", data=b64(ECHO)) == "forbidden"
        world.config(roles={"controller": {"uids": [OTHER], "gids": [NOBODY]}})
        assert "api.roles.controller.gids" in root_reload(world)
        p = world.peer()
        assert p.ask("hello")["role"] == "controller"
        reply = p.ask("call", data=b64(ECHO + b"\x00mine\xff"))
        assert (reply["ok"], base64.b64decode(reply["data"])) == (True, b"\x00mine\xff")
        assert p.code("lease", seconds=2) == "ok"
        assert p.code("release") == "ok"
        assert p.code("reconnect") == "forbidden"  # admin only
        assert p.code("reload") == "forbidden"

    def test_sighup_applies_new_roles(self, world: World) -> None:
        """SIGHUP re-reads the config like `reload`: new connections get the new role."""
        d = world.start(roles={"controller": {"uids": [OTHER]}})
        world.config(roles={"controller": {"gids": [NOBODY]}})
        os.kill(d.pid, signal.SIGHUP)
        wait_for(lambda: '"reloaded"' in d.log(), 10, "reload after SIGHUP")
        p = world.peer()
        assert p.ask("hello")["role"] == "controller"
        assert p.code("call", data=b64(ECHO)) == "ok"

    def test_reload_promotes_a_connected_peer(self, world: World) -> None:
        """Roles are re-evaluated on reload: a connected observer whose gid was added may call."""
        world.start(roles={"controller": {"uids": [OTHER]}})
        p = world.peer()
        assert p.code("call", data=b64(ECHO)) == "forbidden"
        world.config(roles={"controller": {"gids": [NOBODY]}})
        root_reload(world)
        assert p.code("call", data=b64(ECHO)) == "ok"

    def test_reload_demotes_a_connected_peer(self, world: World) -> None:
        """A connected controller removed from the lists by a reload can no longer call."""
        world.start(roles={"controller": {"gids": [NOBODY]}})
        p = world.peer()
        assert p.code("call", data=b64(ECHO)) == "ok"
        world.config(roles={"controller": {"uids": [OTHER]}})
        root_reload(world)
        assert p.code("call", data=b64(ECHO)) == "forbidden"

    def test_reload_refuses_a_connected_peer_left_without_a_role(self, world: World) -> None:
        """A reload whose observer lists exclude a connected peer: forbidden (id null), closed."""
        world.start(roles={"controller": {"gids": [NOBODY]}})
        p = world.peer(timeout=2)
        assert p.code("status") == "ok"
        world.config(roles={"observer": {"uids": [OTHER]}})
        root_reload(world)
        msg = p.ask(None)
        assert (msg.get("id"), msg.get("error", {}).get("code")) == (None, "forbidden")
        assert "closed" in p.ask(None)

    def test_refused_at_connect_when_observer_lists_miss(self, world: World) -> None:
        """Observer lists non-empty and no match: a forbidden error (id null), then close."""
        d = world.start(roles={"observer": {"uids": [OTHER]}})
        p = world.peer()
        msg = p.ask(None)
        assert (msg["id"], msg["ok"], msg["error"]["code"]) == (None, False, "forbidden")
        assert "closed" in p.ask(None)
        assert d.status()["clients"] == 1  # only the status client itself

    def test_observer_list_match_admits_as_observer(self, world: World) -> None:
        """A peer matching an observer list is admitted with role observer."""
        world.start(roles={"observer": {"gids": [NOBODY]}, "controller": {"uids": [OTHER]}})
        p = world.peer()
        assert p.ask("hello")["role"] == "observer"
        assert p.code("call", data=b64(ECHO)) == "forbidden"

    def test_admin_may_reconnect_and_reload(self, world: World) -> None:
        """A peer in admin.gids gets admin: reconnect and reload work."""
        d = world.start(roles={"admin": {"gids": [NOBODY]}})
        p = world.peer()
        assert p.ask("hello")["role"] == "admin"
        assert p.ask("reload")["changed"] == []
        assert p.code("reconnect") == "ok"
        d.wait_state("up", min_generation=2)
        assert p.code("call", data=b64(ECHO)) == "ok"

    def test_highest_role_wins(self, world: World) -> None:
        """A peer in several lists gets the highest of them."""
        world.start(
            roles={
                "observer": {"uids": [NOBODY]},
                "controller": {"gids": [NOBODY]},
                "admin": {"uids": [OTHER]},
            }
        )
        assert world.peer().ask("hello")["role"] == "controller"

    def test_root_is_always_admin(self, world: World) -> None:
        """Root matches no list yet is admin, even with observer lists that exclude it."""
        world.start(roles={"observer": {"uids": [OTHER]}, "admin": {"uids": [OTHER]}})
        with Client(world.socket, timeout=10) as c:
            assert c.hello()["role"] == "admin"
            assert c.request("reload")["ok"] is True

    def test_no_lists_any_peer_is_a_controller(self, world: World) -> None:
        """With no role lists, any peer the socket mode lets in is a controller."""
        world.start()
        p = world.peer()
        assert p.ask("hello")["role"] == "controller"
        assert p.code("call", data=b64(ECHO)) == "ok"
        assert p.code("reload") == "forbidden"

    def test_supplementary_groups_from_the_user_database_count(self, world: World) -> None:
        """A gid listed only as the user's supplementary group (in /etc/group) grants the role."""
        found = next(
            (
                (pw, g.gr_gid)
                for g in grp.getgrall()
                for name in g.gr_mem
                if (pw := _user(name)) is not None and pw.pw_gid != g.gr_gid and pw.pw_uid
            ),
            None,
        )
        if found is None:
            pytest.skip("no user with a supplementary group in the user database")
        pw, gid = found
        world.start(roles={"controller": {"gids": [gid]}})
        p = world.peer(pw.pw_uid, pw.pw_gid)  # its process holds no supplementary group
        assert p.ask("hello")["role"] == "controller"
        other = world.peer()
        assert other.ask("hello")["role"] == "observer"


def _user(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


class TestRoleTable:
    """`role_for` without processes: the mapping rules of docs/security.md ("Roles")."""

    @pytest.mark.parametrize(
        ("roles", "uid", "groups", "expected"),
        [
            ({}, 1000, {1000}, "controller"),
            ({}, 0, {0}, "admin"),
            ({"admin": RoleList(uids=(7,))}, 0, {0}, "admin"),
            ({"controller": RoleList(uids=(7,))}, 1000, {1000}, "observer"),
            ({"controller": RoleList(gids=(20,))}, 1000, {1000, 20}, "controller"),
            ({"observer": RoleList(uids=(7,))}, 1000, {1000}, None),
            ({"observer": RoleList(gids=(20,))}, 1000, {1000, 20}, "observer"),
            (
                {"observer": RoleList(uids=(1000,)), "admin": RoleList(gids=(20,))},
                1000,
                {20},
                "admin",
            ),
            (
                {"admin": RoleList(uids=(7,)), "controller": RoleList(uids=(1000,))},
                1000,
                {1000},
                "controller",
            ),
        ],
    )
    def test_mapping(
        self,
        monkeypatch: pytest.MonkeyPatch,
        roles: dict[str, RoleList],
        uid: int,
        groups: set[int],
        expected: str | None,
    ) -> None:
        """Highest matching role wins; root is admin; unmatched: observer or refused."""
        monkeypatch.setattr("verld.roles.peer_groups", lambda _uid, _gid: groups)
        assert role_for(uid, min(groups), RolesConfig(**roles), own_uid=0) == expected

    def test_the_daemons_own_uid_is_admin(self) -> None:
        """The daemon's own uid is admin like root, whatever the lists say; other uids are not."""
        roles = RolesConfig(observer=RoleList(uids=(OTHER,)), admin=RoleList(uids=(OTHER,)))
        assert role_for(NOBODY, NOBODY, roles, own_uid=NOBODY) == "admin"
        assert role_for(NOBODY, NOBODY, roles, own_uid=OTHER + 1) is None
        assert role_for(0, 0, roles, own_uid=NOBODY) == "admin"


@needs_root
class TestSocketPermissions:
    def test_mode_applied_after_bind_under_umask_077(self, world: World) -> None:
        """api.mode 0660 is the socket's mode even when verld runs under umask 077."""
        old = os.umask(0o077)
        try:
            world.start(mode="0660")
        finally:
            os.umask(old)
        st = os.stat(world.socket)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
        p = Peer(world.socket)  # nobody: not the owner, not in group root
        assert p.first == {"connect_error": 13}  # EACCES from the kernel
        p.close()

    def test_group_applied_and_lets_its_members_in(self, world: World) -> None:
        """api.group chowns the socket: members of that group may connect (mode 0660)."""
        old = os.umask(0o077)
        try:
            world.start(mode="0660", group="nogroup")
        finally:
            os.umask(old)
        st = os.stat(world.socket)
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o660, grp.getgrnam("nogroup").gr_gid)
        p = world.peer()
        assert p.connected
        assert p.ask("hello")["role"] == "controller"

    def test_mode_and_group_never_set_through_the_path(self, world: World) -> None:
        """verld gives its socket mode and group with no chmod or chown naming the socket's path."""
        # A chmod(path) after bind follows whatever is at the path by then: with a
        # writable directory, a symlink swapped in would have root chmod any file.
        strace = need("strace")
        config = world.config(mode="0640", group="nogroup")
        sock, trace = world.pubdir / "verld.sock", world.pubdir / "verld.strace"
        argv = [
            strace,
            "-f",
            "-qq",
            "-e",
            "trace=%file",
            "-o",
            str(trace),
            sys.executable,
            "-m",
            "verld",
            "--config",
            str(config),
        ]
        with open(world.pubdir / "verld.log", "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: _answers(str(sock), proc), 45, "verld under strace to listen")
            st = os.stat(sock)
            assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o640, grp.getgrnam("nogroup").gr_gid)
        finally:
            _stop_traced(proc)
        lines = trace.read_text(errors="replace").splitlines()
        named = [line for line in lines if f'"{sock}"' in line]
        assert named, "strace printed no call naming the socket path"  # (paths not cut short)
        assert [line for line in named if re.search(r"\w*ch(?:mod|own)\w*\(", line)] == []

    def test_bound_socket_is_born_with_its_mode_and_group(self, pubdir: Path) -> None:
        """bind_socket under umask 0: the file has its mode and group at once, not listening yet."""
        path = str(pubdir / "s.sock")
        old = os.umask(0)
        try:
            sock, ident = bind_socket(path, 0o640, "nogroup")
        finally:
            os.umask(old)
        try:
            assert os.umask(old) == old  # the process umask is back
            st = os.lstat(path)
            assert stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == ident
            assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o640, grp.getgrnam("nogroup").gr_gid)
            with socket.socket(socket.AF_UNIX) as probe, pytest.raises(ConnectionRefusedError):
                probe.connect(path)
        finally:
            sock.close()

    @pytest.mark.parametrize("umask", [0o000, 0o077], ids=["umask-000", "umask-077"])
    def test_missing_socket_directory_is_created_0755(self, world: World, umask: int) -> None:
        """Missing levels of the socket's directory are made 0755, verld's, whatever the umask."""
        top = world.pubdir / "run"
        old = os.umask(umask)
        try:
            world.start(mode="0660", socket=str(top / "verld" / "verld.sock"))
        finally:
            os.umask(old)
        for d in (top, top / "verld"):
            st = os.stat(d)
            assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o755, os.geteuid()), d
        st = os.stat(world.socket)
        assert stat.S_IMODE(st.st_mode) == 0o660

    @pytest.mark.parametrize(
        ("mode", "owner", "below"),
        [(0o777, 0, ""), (0o775, 0, ""), (0o755, OTHER, ""), (0o777, 0, "sub")],
        ids=["world-writable", "group-writable", "another-users", "an-ancestor"],
    )
    def test_directory_others_may_write_is_refused(
        self, world: World, mode: int, owner: int, below: str
    ) -> None:
        """A socket directory (or one above) that others may write, not sticky: exit 1 naming it."""
        open_dir = world.pubdir / "open"
        open_dir.mkdir()
        os.chown(open_dir, owner, owner)
        open_dir.chmod(mode)
        sock_dir = open_dir / below
        sock_dir.mkdir(mode=0o755, exist_ok=True)
        config = world.config(socket=str(sock_dir / "verld.sock"))
        r = subprocess.run(
            [sys.executable, "-m", "verld", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        out = r.stdout + r.stderr
        assert r.returncode == 1, out
        assert "Traceback" not in out
        naming = [line for line in out.splitlines() if f"{open_dir} " in line]
        assert len(naming) == 1 and "another user could replace the API socket" in naming[0], out
        assert list(sock_dir.iterdir()) == []  # no socket, no lock file: nothing touched

    def test_sticky_world_writable_directory_is_accepted(self, world: World) -> None:
        """A world-writable directory with the sticky bit, like /tmp, may hold the socket."""
        sticky = world.pubdir / "sticky"
        sticky.mkdir()
        sticky.chmod(0o1777)
        world.start(mode="0660", socket=str(sticky / "verld.sock"))
        st = os.stat(world.socket)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
        assert world.daemon is not None and world.daemon.status()["link"]["state"] == "up"


def _answers(path: str, proc: subprocess.Popen[bytes]) -> bool:
    """Whether something accepts connections at `path` (AssertionError once `proc` exited)."""
    if proc.poll() is not None:
        raise AssertionError(f"exited {proc.returncode} before listening")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
    except OSError:
        return False
    return True


def _stop_traced(proc: subprocess.Popen[bytes]) -> None:
    """Stop the program strace (`proc`) runs: SIGTERM to it, then strace ends with it."""
    kids = [int(k) for k in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
    for pid in kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    stop_process(proc)


@needs_root
class TestDaemonUid:
    @pytest.mark.timeout(90)  # nobody_python may copy verld first
    def test_the_daemons_own_uid_is_admin(self, sim: SimProc, pubdir: Path) -> None:
        """verld run as uid 65534 makes a uid 65534 peer admin (lists exclude it): reload works."""
        python = nobody_python()
        os.chown(pubdir, NOBODY, NOBODY)  # verld's socket and lock go there
        os.chmod(os.path.realpath(sim.link), 0o666)  # the pty's device end, for uid 65534
        roles = {"observer": {"uids": [OTHER]}, "admin": {"uids": [OTHER]}}
        config = write_config(pubdir, sim.link, {"api": {"mode": "0600", "roles": roles}})
        config.chmod(0o644)
        sock = str(pubdir / "verld.sock")
        with open(pubdir / "verld.log", "wb") as log:
            proc = subprocess.Popen(
                [*AS_NOBODY, *python, "-m", "verld", "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
            )
        peer: Peer | None = None
        try:
            wait_for(lambda: _answers(sock, proc), 45, "verld as uid 65534 to listen")
            assert os.stat(sock).st_uid == NOBODY
            peer = Peer(sock)  # uid 65534 too (mode 0600: only it and root get in)
            hello = peer.ask("hello", client="own-uid")
            assert (hello["ok"], hello["role"]) == (True, "admin"), hello
            reply = peer.ask("reload")
            assert (reply["ok"], reply["changed"]) == (True, []), reply
        finally:
            if peer is not None:
                peer.close()
            stop_process(proc)


class TestSimImportPath:
    @pytest.mark.timeout(60)
    def test_sim_comes_up_from_a_directory_with_a_broken_verld_package(
        self, tmp_path: Path
    ) -> None:
        """`device.port: sim` started in a directory holding a broken `verld/` package: link up."""
        # verld itself runs with -P (as its console script would: the script's directory
        # first, not the working directory); the sim it starts must not import ./verld.
        work = tmp_path / "work"
        (work / "verld").mkdir(parents=True)
        (work / "verld" / "__init__.py").write_text("raise SystemExit('imported ./verld')\n")
        config = write_config(tmp_path, "sim")
        sock = str(tmp_path / "verld.sock")
        with open(tmp_path / "verld.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "verld", "--config", str(config)],
                cwd=work,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_for(lambda: _answers(sock, proc), 30, "verld to listen")
            with Client(sock, timeout=10) as c:
                wait_for(lambda: c.status()["link"]["state"] == "up", 15, "the sim's link up")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{(tmp_path / 'verld.log').read_text()}") from None
        finally:
            assert stop_process(proc) == 0
        assert "imported ./verld" not in (tmp_path / "verld.log").read_text()


# --- hostile clients -------------------------------------------------------------------
class Hostile:
    """One daemon for the whole battery, with its fd and RSS baselines."""

    def __init__(self, tmp: Path) -> None:
        self.sim = SimProc(tmp)
        self.daemon = DaemonProc(write_config(tmp, self.sim.link, {"log": {"level": "INFO"}}))
        with Client(self.daemon.socket, timeout=10) as c:  # warm up the call path
            for i in range(200):
                assert c.call(ECHO + bytes([i]) * 64).data == bytes([i]) * 64
        self.fds = settled_fd_count(self.daemon)
        self.rss = rss_kib(self.daemon.pid)

    @property
    def socket(self) -> str:
        return str(self.daemon.socket)

    def raw(self, timeout: float = 10.0) -> Raw:
        return Raw(self.socket, timeout)

    def stop(self) -> None:
        self.daemon.stop()
        self.sim.stop()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    h = Hostile(tmp_path_factory.mktemp("hostile"))
    yield h
    h.stop()


class GoodClient:
    """A well-behaved client calling echo in a thread and checking every reply."""

    def __init__(self, path: str) -> None:
        self.client = Client(path, timeout=20).connect()
        self.ok = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rng = random.Random(6)
        while not self._stop.is_set():
            body = rng.randbytes(rng.randint(0, 48))
            try:
                reply = self.client.call(ECHO + body)
            except ClientError as exc:
                self.errors.append(f"{exc.code}: {exc.message}")
                return
            if (reply.status, reply.data) != (0, body):
                self.errors.append(f"wrong reply {reply} for {body.hex()}")
            else:
                self.ok += 1
            self._stop.wait(0.005)

    def wait_calls(self, n: int = 5) -> None:
        """Wait for n more successful calls (proves the daemon serves others right now)."""
        target = self.ok + n
        wait_for(lambda: self.ok >= target or bool(self.errors), 20, "good client calls")
        assert not self.errors, self.errors

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(25)
        self.client.close()


@pytest.fixture
def good(hostile: Hostile) -> Iterator[GoodClient]:
    """A concurrent good client; afterwards: no wrong reply, daemon up, fds at baseline."""
    g = GoodClient(hostile.socket)
    g.wait_calls(3)
    yield g
    g.wait_calls(5)
    g.stop()
    assert not g.errors, g.errors
    d = hostile.daemon
    assert d.proc.poll() is None, d.log()[-3000:]
    wait_for(lambda: d.fd_count() <= hostile.fds, 15, f"fds back to {hostile.fds}")


def _reply_code(msg: dict[str, Any]) -> str:
    return "ok" if msg.get("ok") else str(msg["error"]["code"])


def _cases(
    base: dict[str, Any], field: str, values: tuple[Any, ...], code: str = "bad_request"
) -> list[tuple[dict[str, Any], str]]:
    return [({**base, field: value}, code) for value in values]


CALL = {"op": "call", "data": "AQ=="}
NOT_NUMBER: tuple[Any, ...] = (True, "1", [], {}, [1])
NOT_INT: tuple[Any, ...] = (*NOT_NUMBER, 1.5)
#: (request fields besides id, expected code): every field of every op, wrong
WRONG_TYPES: list[tuple[dict[str, Any], str]] = [
    *_cases({}, "op", (None, 1, 1.5, True, [], {}, ["status"])),
    *_cases({}, "op", ("", "nope", "STATUS", "status ", "call\u0000"), "unknown_op"),
    *_cases({"op": "call"}, "data", (*NOT_INT, 0, "!!!!", "AQ=", "A", "AQ==\n", "é", "AQ== ")),
    *_cases({"op": "call"}, "text", (True, 0, 1.5, [], {})),
    ({"op": "call"}, "bad_request"),
    ({**CALL, "text": "x"}, "bad_request"),
    *_cases(CALL, "timeout", (*NOT_NUMBER, False, 0, -1, -0.5, 3600.001, 1e308, 10**30)),
    *_cases(CALL, "retry", (*NOT_INT, -1, 101, 10**30)),
    *_cases(CALL, "wait", (0, 1, "true", [], {})),
    *_cases({"op": "lease"}, "seconds", (*NOT_NUMBER, 0, -1, 0.5, 61, 1e9)),
    ({"op": "lease"}, "bad_request"),
    *_cases({"op": "release"}, "lease", (True, 0, [], {}, "nottoken")),
    *_cases({"op": "logs"}, "lines", (*NOT_INT, -1)),
    *_cases({"op": "hello"}, "client", (True, 0, 1.5, [], {})),
    ({"op": "subscribe"}, "bad_request"),
    *_cases(
        {"op": "subscribe"},
        "topics",
        (None, True, 0, {}, [0], [None], ["nope"], "nope", [[]], ["events", 1]),
    ),
    *_cases({"op": "unsubscribe"}, "topics", (True, 0, {}, [0], ["nope"], "nope")),
    *(({"op": op, "junk": [1, {"x": None}]}, "ok") for op in ("status", "metrics", "hello")),
    ({**CALL, "timeout": 600, "retry": 10, "junk": 1}, "ok"),
    ({**CALL, "timeout": 601}, "bad_request"),
    ({**CALL, "retry": 11}, "bad_request"),
    ({"op": "logs", "lines": 10**300}, "ok"),
]


#: raw JSON requests whose values Python's json.dumps cannot write
WRONG_RAW: list[tuple[bytes, str]] = [
    (b'{"op":"call","id":"r","data":"AQ==","timeout":1e999}', "bad_request"),
    (b'{"op":"lease","id":"r","seconds":1e999}', "bad_request"),
    (b'{"op":"lease","id":"r","seconds":-1e999}', "bad_request"),
    (b'{"op":"call","id":"r","text":"\\ud800"}', "bad_request"),  # lone surrogate
    (b'{"op":"call","id":"r","data":"AQ==","retry":' + b"9" * 4000 + b"}", "bad_request"),
    # regression: an int above ~1.8e308 made math.isfinite raise OverflowError, and
    # asyncio closed the connection without a reply
    (b'{"op":"call","id":"r","data":"AQ==","timeout":1' + b"0" * 400 + b"}", "bad_request"),
]


class TestHostileClients:
    @pytest.mark.parametrize(("fields", "expected"), WRONG_TYPES, ids=repr)
    def test_wrong_field_types(
        self, hostile: Hostile, fields: dict[str, Any], expected: str
    ) -> None:
        """A wrong type for any field of any op gets the matching error with its id."""
        c = hostile.raw()
        try:
            msg = c.ask(jframe({"id": "r", **fields}))
            assert (msg["id"], _reply_code(msg)) == ("r", expected), msg
            assert c.ask(jframe({"op": "status", "id": 2}))["ok"] is True
        finally:
            c.close()

    @pytest.mark.parametrize(
        ("body", "expected"),
        WRONG_RAW,
        ids=lambda v: repr(v)[:40],
    )
    def test_wrong_values_only_raw_json_can_carry(
        self, hostile: Hostile, body: bytes, expected: str
    ) -> None:
        """Infinite and huge numbers, lone surrogates: the matching error, connection kept."""
        c = hostile.raw()
        try:
            msg = c.ask(frame(body))
            assert (msg["id"], _reply_code(msg)) == ("r", expected), msg
            assert c.ask(jframe({"op": "status", "id": 2}))["ok"] is True
        finally:
            c.close()

    @pytest.mark.parametrize(
        ("id_json", "echo"),
        [
            (b"0", 0),
            (b"-1", -1),
            (b"9007199254740993", 9007199254740993),
            (b"1" + b"0" * 4000, 10**4000),
            (b'""', ""),
            (b'"x"', "x"),
            (b'"\\u0000\\udc80\\u00e9"', "\x00\udc80é"),
            (b"null", None),
            (b"true", None),
            (b"false", None),
            (b"1.0", None),
            (b"1.5", None),
            (b"1e999", None),
            (b"[]", None),
            (b"[1]", None),
            (b"{}", None),
            (b'{"id":1}', None),
            (b"1" + b"0" * 5000, None),  # past Python's int-parsing limit: not JSON to us
        ],
        ids=lambda v: repr(v)[:30],
    )
    def test_ids_of_every_json_type(self, hostile: Hostile, id_json: bytes, echo: Any) -> None:
        """Integer and string ids are echoed; every other JSON type is bad_request, id null."""
        c = hostile.raw()
        try:
            msg = c.ask(frame(b'{"op":"status","id":' + id_json + b"}"))
            assert msg["id"] == echo
            assert _reply_code(msg) == ("ok" if echo is not None else "bad_request")
            assert c.ask(frame(b'{"op":"status"}'))["error"]["code"] == "bad_request"
            assert c.ask(jframe({"op": "status", "id": 3}))["ok"] is True
        finally:
            c.close()

    @pytest.mark.parametrize(
        "body",
        [
            b"",
            b"{",
            b"[]",
            b"1",
            b'"x"',
            b"null",
            b"true",
            b"NaN",
            b"-Infinity",
            b'{"op":"status","id":NaN}',
            b'{"op":"status","id":1} x',
            b'\xef\xbb\xbf{"op":"status","id":1}',  # BOM
            b'{"op":"status","id":1,"x":"\xff\xfe"}',  # invalid UTF-8
            b'{"op":"status","id":1,"x":"\xed\xa0\x80"}',  # UTF-8-encoded surrogate
            b"[" * 100_000 + b"]" * 100_000,
            b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
            b'{"op":"status","id":1,"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            b"\x00" * 1000,
        ],
        ids=lambda v: repr(v)[:30],
    )
    def test_unparsable_bodies_get_bad_request(
        self, hostile: Hostile, good: GoodClient, body: bytes
    ) -> None:
        """Not JSON, not an object, deep nesting, bad UTF-8: bad_request id null, still open."""
        c = hostile.raw()
        try:
            msg = c.ask(frame(body))
            assert (msg["id"], _reply_code(msg)) == (None, "bad_request"), msg
            assert c.ask(jframe({"op": "status", "id": 2}))["ok"] is True
        finally:
            c.close()

    def test_garbage_streams(self, hostile: Hostile, good: GoodClient) -> None:
        """Random bytes, framed or not, on 200 connections: the daemon and others carry on."""
        rng = random.Random(1)
        for i in range(200):
            c = hostile.raw()
            try:
                if i % 2:
                    c.send(rng.randbytes(rng.randint(1, 5000)))
                else:  # plausible lengths, random bodies
                    c.send(b"".join(frame(rng.randbytes(rng.randint(0, 300))) for _ in range(20)))
            except OSError:
                pass  # verld may close it (too_large) while we write
            finally:
                c.close()
        good.wait_calls()

    def test_framed_garbage_keeps_the_connection(self, hostile: Hostile, good: GoodClient) -> None:
        """Each framed garbage body gets one bad_request; the connection stays usable."""
        rng = random.Random(2)
        c = hostile.raw()
        try:
            bodies = [b"\xff" + rng.randbytes(rng.randint(0, 200)) for _ in range(300)]
            c.send(b"".join(frame(b) for b in bodies))
            for _ in bodies:
                msg = c.recv()
                assert (msg["id"], msg["error"]["code"]) == (None, "bad_request")
            assert c.ask(jframe({"op": "status", "id": 1}))["ok"] is True
        finally:
            c.close()

    @pytest.mark.parametrize(
        "data",
        [
            b"\x00",
            b"\x00\x00\x00",
            struct.pack(">I", 1000) + b'{"op":',
            struct.pack(">I", MAX_MESSAGE) + b"x" * 65536,
            jframe({"op": "status", "id": 1})[:-1],
        ],
        ids=["1-byte-header", "3-byte-header", "short-body", "1MiB-announced", "last-byte-missing"],
    )
    def test_truncated_frame_then_close(
        self, hostile: Hostile, good: GoodClient, data: bytes
    ) -> None:
        """A frame cut short and the connection closed: no reply owed, nothing leaks."""
        for _ in range(20):
            c = hostile.raw()
            c.send(data)
            c.close()
        good.wait_calls()

    @pytest.mark.parametrize("length", [MAX_MESSAGE + 1, 0x7FFFFFFF, 0xFFFFFFFF])
    def test_oversize_length_is_too_large_then_closed(
        self, hostile: Hostile, good: GoodClient, length: int
    ) -> None:
        """A length above max_message: too_large (id null), then verld closes the connection."""
        c = hostile.raw(timeout=5)
        try:
            msg = c.ask(struct.pack(">I", length) + b'{"op":"status","id":1}')
            assert (msg["id"], msg["error"]["code"]) == (None, "too_large")
            assert c.closed_by_peer()
        finally:
            c.close()

    def test_message_of_exactly_max_message_is_read(
        self, hostile: Hostile, good: GoodClient
    ) -> None:
        """A 1 MiB message is parsed: a call that big is too_large with its id, not closed."""
        head = b'{"op":"call","id":"big","text":"'
        body = head + b"A" * (MAX_MESSAGE - len(head) - 2) + b'"}'
        assert len(body) == MAX_MESSAGE
        c = hostile.raw()
        try:
            msg = c.ask(frame(body))
            assert (msg["id"], msg["error"]["code"]) == ("big", "too_large")
            escaped = b'{"op":"call","id":"esc","text":"' + b"\\u0041" * 170_000 + b'"}'
            msg = c.ask(frame(escaped))
            assert (msg["id"], msg["error"]["code"]) == ("esc", "too_large")
            many = json.dumps({"op": "status", "id": "n", "x": [0] * 300_000}).encode()
            assert c.ask(frame(many))["id"] == "n"
            assert c.ask(jframe({"op": "status", "id": 1}))["ok"] is True
        finally:
            c.close()

    def test_thousands_of_requests_never_read(self, hostile: Hostile, good: GoodClient) -> None:
        """3000 calls and 3000 status requests written, no reply read, then close."""
        c = hostile.raw()
        call = jframe({"op": "call", "id": 1, "data": b64(ECHO + bytes(200))})
        status = jframe({"op": "status", "id": 2})
        try:
            for _ in range(30):
                c.send((call + status) * 100)
        except OSError:
            pass  # dropped past max_backlog: allowed
        finally:
            c.close()
        good.wait_calls()

    def test_unread_replies_past_max_backlog_drop_the_client(
        self, hostile: Hostile, good: GoodClient
    ) -> None:
        """A client that never reads while its replies pile up past max_backlog is dropped."""
        c = hostile.raw(timeout=10)
        status = jframe({"op": "status", "id": 1})
        try:
            with contextlib.suppress(OSError):
                for _ in range(100):
                    c.send(status * 500)  # ~1 KiB of reply for every 30 bytes sent
            good.wait_calls()
            assert c.closed_by_peer()
        finally:
            c.close()

    def test_connect_disconnect_storm(self, hostile: Hostile, good: GoodClient) -> None:
        """1000 connections in a row, closed at once, mid-frame, or with a call unanswered."""
        half = jframe({"op": "status", "id": 1})[:7]
        call = jframe({"op": "call", "id": 1, "data": b64(ECHO + b"storm")})
        for i in range(1000):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(hostile.socket)
                if i % 4 == 1:
                    s.send(half)
                elif i % 4 == 2:
                    s.send(call)
                elif i % 4 == 3:
                    s.send(jframe({"op": "subscribe", "id": 1, "topics": ["link", "events"]}))
            finally:
                s.close()
        good.wait_calls()
        wait_for(lambda: hostile.daemon.fd_count() <= hostile.fds + 1, 15, "storm fds reaped")

    def test_thousand_idle_connections_up_to_max_clients(
        self, hostile: Hostile, good: GoodClient
    ) -> None:
        """1022 idle + 2 working clients fill max_clients 1024; all served; the next gets busy."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard < 1200:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below 1200")
        if soft < 1200:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
        probe = Client(hostile.socket, timeout=10).connect()
        idle: list[socket.socket] = []
        try:
            for _ in range(1022):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                idle.append(s)
                s.connect(hostile.socket)
            wait_for(lambda: probe.status()["clients"] == 1024, 15, "1024 clients")
            good.wait_calls()
            extra = Raw(hostile.socket, timeout=5)
            msg = extra.recv()
            assert (msg["id"], msg["error"]["code"]) == (None, "busy")
            assert extra.closed_by_peer()
            extra.close()
            for s in idle[::50]:  # idle ones are still served
                s.sendall(jframe({"op": "status", "id": "idle"}))
            assert _answered(idle[::50], 10) == len(idle[::50])
        finally:
            for s in idle:
                s.close()
            probe.close()
        wait_for(lambda: hostile.daemon.fd_count() <= hostile.fds + 1, 15, "idle fds reaped")

    def test_reconnect_storm_of_leases_is_released(self, hostile: Hostile) -> None:
        """A client taking a lease and vanishing, 100 times: the device is never left leased."""
        for _ in range(100):
            c = hostile.raw()
            c.ask(jframe({"op": "lease", "id": 1, "seconds": 60}))
            c.close()
        with Client(hostile.socket, timeout=10) as client:
            wait_for(lambda: client.status()["lease"] is None, 5, "lease freed")
            assert client.call(ECHO + b"free").data == b"free"

    def test_unsubscribe_empty_list_keeps_subscriptions(self, hostile: Hostile) -> None:
        """`unsubscribe` with topics [] removes nothing (only an absent field means all)."""
        c = hostile.raw()
        try:
            c.ask(jframe({"op": "subscribe", "id": 1, "topics": ["link", "events"]}))
            msg = c.ask(jframe({"op": "unsubscribe", "id": 2, "topics": []}))
            assert msg["topics"] == ["events", "link"]
        finally:
            c.close()

    def test_random_hostile_mix(self, hostile: Hostile, good: GoodClient) -> None:
        """4 threads × 5 s of random, mutated, chunked requests: replies only to their sender."""
        errors: list[str] = []
        threads = [
            threading.Thread(target=_hostile_worker, args=(hostile.socket, n, 5.0, errors))
            for n in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors[:5]
        good.wait_calls()

    def test_memory_stays_bounded(self, hostile: Hostile) -> None:
        """After the whole battery the daemon's RSS grew by less than 64 MiB (runs last)."""
        d = hostile.daemon
        assert d.proc.poll() is None
        wait_for(lambda: d.fd_count() <= hostile.fds, 15, "fds at baseline")
        grown = rss_kib(d.pid) - hostile.rss
        print(f"verld RSS {hostile.rss} KiB → {hostile.rss + grown} KiB, fds {hostile.fds}")
        assert grown < 64 * 1024, f"RSS grew by {grown} KiB"
        with Client(hostile.socket, timeout=10) as c:
            assert c.call(ECHO + b"still here").data == b"still here"


#: values of every JSON type, for any field (no `lease` / `reconnect` ops: they would
#: legitimately stop the concurrent good client's calls)
_POOL: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    1.5,
    1e308,
    10**20,
    "",
    "x",
    "AQ==",
    "events",
    "link",
    [],
    ["logs"],
    {},
    {"a": [1]},
    "é\u0000",
)
_OPS = (
    "hello",
    "status",
    "subscribe",
    "unsubscribe",
    "logs",
    "metrics",
    "call",
    "release",
    "reload",
    "nope",
    7,
    None,
)
_FIELDS = ("data", "text", "timeout", "retry", "wait", "topics", "lines", "client", "lease")


def _random_body(rng: random.Random, req_id: Any) -> bytes:
    """One request with random fields; sometimes byte-mutated (never inside its id)."""
    req: dict[str, Any] = {"id": req_id, "op": rng.choice(_OPS)}
    for key in rng.sample(_FIELDS, rng.randint(0, 3)):
        req[key] = rng.choice(_POOL)
    if req["op"] == "call" and rng.random() < 0.5:
        req.pop("text", None)
        req["data"] = b64(ECHO + rng.randbytes(rng.randint(0, 40)))
    body = bytearray(json.dumps(req).encode())
    keep = body.index(b', "op"') + 1  # `{"id": ID,` stays intact
    for _ in range(rng.choice((0, 0, 0, 1, 3))):
        pos = rng.randrange(keep, len(body))
        body[pos : pos + rng.randint(0, 2)] = rng.randbytes(rng.randint(0, 2))
    return bytes(body)


def _hostile_worker(path: str, n: int, seconds: float, errors: list[str]) -> None:
    """Random connections: mutated requests in random chunks, read or not, closed anytime."""
    rng = random.Random(n)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        c = Raw(path, timeout=10)
        sent: set[Any] = {None}
        try:
            data = b""
            for i in range(rng.randint(1, 40)):
                req_id = rng.choice((f"c{n}-{i}", n * 1_000_000 + i))
                sent.add(req_id)
                body = _random_body(rng, req_id)
                data += frame(body) if rng.random() < 0.95 else rng.randbytes(rng.randint(1, 9))
            while data:
                cut = rng.randint(1, len(data))
                c.send(data[:cut])
                data = data[cut:]
            if rng.random() < 0.3:
                continue  # close without reading
            c.sock.settimeout(0.05)
            with contextlib.suppress(TimeoutError, EOFError, ConnectionResetError):
                while True:
                    msg = c.recv()
                    if "event" not in msg and msg.get("id") not in sent:
                        errors.append(f"worker {n} got a reply it did not ask for: {msg}")
        except OSError:
            pass  # verld closed it (too_large from a garbage length): allowed
        finally:
            c.close()


def _answered(socks: list[socket.socket], timeout: float) -> int:
    """How many of `socks` receive something within `timeout` seconds."""
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    got = 0
    deadline = time.monotonic() + timeout
    while got < len(socks) and time.monotonic() < deadline:
        for key, _ in sel.select(0.2):
            sel.unregister(key.fileobj)
            got += 1
    sel.close()
    return got


# --- verld bugs that need their own daemon --------------------------------------------------
class TestDenialOfService:
    def test_abandoned_calls_cannot_wedge_the_device(self, tmp_path: Path) -> None:
        """A window of abandoned calls with the longest timeout does not wedge the device."""
        # A window of unanswered calls with the longest timeout, client gone: others call.
        #
        # Regression: timeouts had no bound and in-flight calls outlived their client; with no
        # heartbeat while calls are outstanding, the device stayed wedged for everyone.
        sim = SimProc(tmp_path)
        cfg = {"api": {"drain": 0.2, "max_timeout": 3600}}
        d = DaemonProc(write_config(tmp_path, sim.link, cfg))
        try:
            bad = d.client()
            sim.control("hang")
            for i in range(8):  # device.window
                bad.send({"op": "call", "id": i, "data": b64(ECHO), "timeout": 3600})
            wait_for(lambda: d.status()["inflight"] == 8, 5, "window full")
            sim.control("unhang")
            bad.close()
            with Client(d.socket, timeout=6) as c:
                assert c.call(ECHO + b"ok", timeout=1).data == b"ok"
        finally:
            d.stop()
            sim.stop()

    def test_a_vanished_client_cannot_flood_the_log(self, tmp_path: Path) -> None:
        """25,000 empty frames then close give a few log lines, all of them structured JSON."""
        # Regression: each reply written after the peer vanished made asyncio log a plain
        # `socket.send() raised exception.` line.
        sim = SimProc(tmp_path)
        d = DaemonProc(write_config(tmp_path, sim.link, {"log": {"level": "INFO"}}))
        try:
            gone = d.log().count("client_disconnected")
            d.proc.send_signal(signal.SIGSTOP)  # so verld reads only after the close
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.socket)
            s.sendall(frame(b"") * 25_000)
            s.close()
            d.proc.send_signal(signal.SIGCONT)
            wait_for(lambda: d.log().count("client_disconnected") > gone, 10, "client reaped")
            time.sleep(0.2)
            plain = [line for line in d.log().splitlines() if not line.startswith("{")]
            assert len(plain) < 10, plain[:3]
        finally:
            d.proc.send_signal(signal.SIGCONT)
            d.stop()
            sim.stop()

    def test_client_waits_for_a_full_listen_backlog(self, tmp_path: Path) -> None:
        """While verld's listen backlog is full, a Client waits (up to its timeout) to connect."""
        # Regression: a connect with a timeout is non-blocking, and on AF_UNIX a full backlog gave
        # EAGAIN at once: a connection storm made well-behaved clients "unreachable".
        sim = SimProc(tmp_path)
        d = DaemonProc(write_config(tmp_path, sim.link, {"log": {"level": "INFO"}}))
        socks: list[socket.socket] = []
        result: dict[str, Any] = {}

        def connect() -> None:
            try:
                with Client(d.socket, timeout=5) as c:
                    result["ok"] = c.status()["ok"]
            except ClientError as exc:
                result["error"] = str(exc)

        try:
            d.proc.send_signal(signal.SIGSTOP)  # nobody accepts: the backlog fills
            with contextlib.suppress(BlockingIOError):
                for _ in range(5000):
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    socks.append(s)
                    s.setblocking(False)
                    s.connect(d.socket)
            worker = threading.Thread(target=connect)
            worker.start()
            time.sleep(0.3)
            d.proc.send_signal(signal.SIGCONT)
            worker.join(10)
            assert result == {"ok": True}
        finally:
            d.proc.send_signal(signal.SIGCONT)
            for s in socks:
                s.close()
            d.stop()
            sim.stop()

    def test_max_clients_holds_under_a_1024_fd_limit(self, tmp_path: Path) -> None:
        """Under a soft NOFILE of 1024, 1024 clients are served and the link reopens."""
        # Regression: accept() hit EMFILE at ~1011 clients (no busy reply, the link could not
        # reopen); verld now raises its soft limit to max_clients + 64 where the hard one allows.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard < 1200:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below 1200")
        sim = SimProc(tmp_path)
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        try:
            d = DaemonProc(write_config(tmp_path, sim.link, {"log": {"level": "INFO"}}))
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
        socks: list[socket.socket] = []
        try:
            admin = d.client()
            for _ in range(1023):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                socks.append(s)
                s.connect(d.socket)
                s.sendall(jframe({"op": "status", "id": 1}))
            answered = _answered(socks, 3)
            admin.request("reconnect")
            time.sleep(0.5)
            link = admin.status()["link"]
            assert (answered, link["state"]) == (1023, "up"), link
        finally:
            for s in socks:
                s.close()
            d.stop()
            sim.stop()


class TestInjection:
    """Regressions: verlctl printed client- and device-chosen text raw to the terminal."""

    def test_client_strings_never_reach_the_operators_terminal(self, tmp_path: Path) -> None:
        """A request id full of escape sequences shows up escaped in `verlctl logs`."""
        sim = SimProc(tmp_path)
        d = DaemonProc(write_config(tmp_path, sim.link))  # log level DEBUG
        try:
            with Client(d.socket, timeout=10) as c:
                c.send({"op": "call", "id": "\x1b]0;owned\x07\x1b[2J", "data": b64(ECHO)})
                assert c.receive()["ok"] is True
            out = subprocess.run(
                [sys.executable, "-m", "verld.ctl", "--socket", d.socket, "logs", "-n", "500"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
            assert "call_received" in out
            assert "\x1b" not in out and "\x07" not in out
        finally:
            d.stop()
            sim.stop()

    def test_device_text_never_reaches_the_operators_terminal(self, tmp_path: Path) -> None:
        """A line device's event with escape sequences shows up escaped in `verlctl events`."""
        sim = SimProc(tmp_path, codec="line")
        d = DaemonProc(write_config(tmp_path, sim.link, {"device": {"codec": "line"}}))
        events = subprocess.Popen(
            [sys.executable, "-m", "verld.ctl", "--socket", d.socket, "events"],
            stdout=subprocess.PIPE,
        )
        try:
            assert events.stdout is not None
            out = b""
            deadline = time.monotonic() + 15
            while b"owned" not in out and time.monotonic() < deadline:
                sim.control("event " + b"\x1b]0;owned\x07\x1b[2J".hex())
                sel = selectors.DefaultSelector()
                sel.register(events.stdout, selectors.EVENT_READ)
                if sel.select(0.3):
                    out += os.read(events.stdout.fileno(), 65536)
                sel.close()
            assert b"owned" in out
            assert b"\x1b" not in out and b"\x07" not in out
        finally:
            events.send_signal(signal.SIGINT)
            events.communicate(timeout=10)
            d.stop()
            sim.stop()

    def test_c1_controls_never_reach_the_operators_terminal(self, tmp_path: Path) -> None:
        """A request id holding C1 controls (U+009B CSI, U+009D OSC) shows up escaped."""
        sim = SimProc(tmp_path)
        d = DaemonProc(write_config(tmp_path, sim.link))  # log level DEBUG
        try:
            with Client(d.socket, timeout=10) as c:
                c.send({"op": "call", "id": "c1\x9b2J\x9d0;owned\x9c", "data": b64(ECHO)})
                assert c.receive()["ok"] is True
            out = subprocess.run(
                [sys.executable, "-m", "verld.ctl", "--socket", d.socket, "logs", "-n", "500"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
            assert "c1" in out
            assert not any("\x80" <= ch <= "\x9f" for ch in out)
        finally:
            d.stop()
            sim.stop()
