"""verlctl and the daemon's command line, run as real subprocesses."""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import queue
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import DaemonProc, SimProc, nobody_python, write_config

from verld.client import AsyncClient, ClientError, PermissionDenied, Reply, Unreachable
from verld.client import messages as client_messages
from verld.ctl.cli import default_socket
from verld.ctl.render import render_sent, reply_obj
from verld.testing import Processes

pytestmark = pytest.mark.timeout(60)


def verlctl(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verld.ctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class TestVerlctl:
    def test_status_table(self, daemon: DaemonProc) -> None:
        """`status` prints a readable table with the link state and generation."""
        r = verlctl("--socket", daemon.socket, "status")
        assert r.returncode == 0
        assert "link        up (connected)" in r.stdout
        assert "generation  1" in r.stdout

    def test_call_hex_echoes_with_hexdump(self, daemon: DaemonProc) -> None:
        """`call --hex 01aabb` shows status 0 and a hex dump of aa bb."""
        r = verlctl("--socket", daemon.socket, "call", "--hex", "01aabb")
        assert r.returncode == 0
        assert "status 0x00" in r.stdout
        assert "aa bb" in r.stdout

    def test_json_output(self, daemon: DaemonProc) -> None:
        """--json works before or after the command and prints one JSON object."""
        for args in (("--json", "call", "--hex", "01aabb"), ("call", "--hex", "01aabb", "--json")):
            r = verlctl("--socket", daemon.socket, *args)
            assert json.loads(r.stdout)["hex"] == "aabb"

    def test_device_error_exits_1(self, daemon: DaemonProc) -> None:
        """A non-zero device status exits 1 (0xFF included)."""
        assert verlctl("--socket", daemon.socket, "call", "--hex", "0507").returncode == 1
        assert verlctl("--socket", daemon.socket, "call", "--hex", "04").returncode == 1

    def test_unreachable_exits_3(self, tmp_path: Path) -> None:
        """No daemon at the socket: exit 3 with a one-line reason and no traceback."""
        r = verlctl("--socket", str(tmp_path / "none.sock"), "ping", "-c", "1")
        assert r.returncode == 3
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1

    def test_usage_errors_exit_2(self, daemon: DaemonProc) -> None:
        """Bad hex and a too-large request both exit 2."""
        assert verlctl("--socket", daemon.socket, "call", "--hex", "zz").returncode == 2
        big = "01" + "00" * 5000
        assert verlctl("--socket", daemon.socket, "call", "--hex", big).returncode == 2

    def test_timeout_exits_4(self, daemon: DaemonProc) -> None:
        """A call that times out exits 4."""
        r = verlctl(
            "--socket", daemon.socket, "call", "--hex", "030bb8", "--timeout", "0.2", "--retry", "0"
        )
        assert r.returncode == 4

    def test_ping_count(self, daemon: DaemonProc) -> None:
        """`ping -c 5` prints five replies and a min/avg/max/mdev summary, exit 0."""
        r = verlctl("--socket", daemon.socket, "ping", "-c", "5", "-i", "0.05")
        assert r.returncode == 0
        assert r.stdout.count("reply seq=") == 5
        assert "5 sent, 5 received, 0% lost" in r.stdout
        assert "rtt min/avg/max/mdev" in r.stdout

    def test_metrics_parse_and_count_calls(self, daemon: DaemonProc) -> None:
        """`metrics` is valid Prometheus text and its ok-call counter equals the calls made."""
        c = daemon.client()
        for _ in range(7):
            c.call(b"\x01x")
        r = verlctl("--socket", daemon.socket, "metrics")
        families = {f.name: f for f in text_string_to_metric_families(r.stdout)}
        ok = [s.value for s in families["verld_calls"].samples if s.labels.get("outcome") == "ok"]
        assert ok == [7.0]
        assert "verld_call_latency_seconds" in families

    def test_metrics_as_data_are_the_texts_families(self, daemon: DaemonProc) -> None:
        """`metrics` with `"format": "json"` gives the text's families and samples as data."""
        c = daemon.client()
        c.call(b"\x01x")
        sent = c.request("metrics", format="json")["families"]
        text = text_string_to_metric_families(c.request("metrics")["text"])
        parsed = {f.name: f for f in text}
        for family in sent:
            same = parsed[family["name"].removesuffix("_total")]
            assert (same.type, same.documentation) == (family["type"], family["help"])
            assert [(s.name, s.labels) for s in same.samples] == [
                (s["name"], s["labels"]) for s in family["samples"]
            ]
        assert len(sent) == len(parsed)
        calls = next(f for f in sent if f["name"] == "verld_calls_total")["samples"]
        assert calls[0] == {"name": "verld_calls_total", "labels": {"outcome": "ok"}, "value": 1}

    def test_metrics_in_another_format_is_a_bad_request(self, daemon: DaemonProc) -> None:
        """`metrics` with a `format` other than "text" or "json" is refused as bad_request."""
        with pytest.raises(ClientError) as refused:
            daemon.client().request("metrics", format="xml")
        assert refused.value.code == "bad_request"

    def test_logs_shows_lifecycle(self, daemon: DaemonProc) -> None:
        """`logs -n` prints recent records, link_up among them."""
        r = verlctl("--socket", daemon.socket, "logs", "-n", "50")
        assert r.returncode == 0
        assert "link_up" in r.stdout

    def test_reconnect_bumps_generation(self, daemon: DaemonProc) -> None:
        """`reconnect` (admin) drops and reopens the link: generation grows."""
        assert verlctl("--socket", daemon.socket, "reconnect").returncode == 0
        daemon.wait_state("up", min_generation=2)

    def test_events_streams_into_a_pipe(self, daemon: DaemonProc, procs: Processes) -> None:
        """`events` writes a device event as a line into a pipe and exits 0 on SIGTERM."""
        proc = procs.popen(
            [sys.executable, "-m", "verld.ctl", "--socket", daemon.socket, "events"],
            stdout=subprocess.PIPE,
            text=True,
        )
        out, lines = proc.stdout, queue.Queue[str]()
        assert out is not None

        def read() -> None:
            """verlctl's lines onto `lines` as they come, to the end of its output."""
            for line in out:
                lines.put(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        seen: list[str] = []
        # An event before verlctl has subscribed is (rightly) not its, and a busy machine
        # may start it late: the device sends an event every 0.2 s until a device line
        # comes (a link line a loaded machine's heartbeat may cause first is passed over).
        c, deadline = daemon.client(), time.monotonic() + 30
        while not any(line.split()[1:2] == ["device"] for line in seen):
            assert time.monotonic() < deadline, f"no device event from verlctl: {seen}"
            try:
                c.call(b"\x06\x00\x01")  # the device sends one event
            except Unreachable:
                raise
            except ClientError:
                pass  # the call failed on a loaded machine (a timeout): the next may not
            try:
                seen.append(lines.get(timeout=0.2))
            except queue.Empty:
                pass
        proc.terminate()
        assert proc.wait(30) == 0
        reader.join(10)


@pytest.fixture
def line_daemon(tmp_path: Path) -> Iterator[DaemonProc]:
    """verld on a verld-sim speaking `line` (PING answered PONG, no idle pings)."""
    overrides = {
        "device": {"codec": "line", "timeout": 0.5, "retry": 0},
        "heartbeat": {"interval": 60, "misses": 3, "timeout": 0.5, "payload": "PING"},
    }
    with (
        SimProc(tmp_path, codec="line") as sim,
        DaemonProc(write_config(tmp_path, sim.link, overrides)) as d,
    ):
        yield d


class TestNoReply:
    def test_no_reply_says_sent(self, line_daemon: DaemonProc) -> None:
        """`call --no-reply` prints `sent, no reply awaited`, its time and generation, exit 0."""
        r = verlctl("--socket", line_daemon.socket, "call", "--text", "ECHO set", "--no-reply")
        assert r.returncode == 0, r.stderr
        assert re.fullmatch(r"sent, no reply awaited  \d+\.\d{3} ms  generation 1\n", r.stdout)
        again = verlctl("--socket", line_daemon.socket, "call", "--text", "ECHO heard")
        assert again.returncode == 0 and "heard" in again.stdout

    def test_no_reply_json(self, line_daemon: DaemonProc) -> None:
        """`--json call --no-reply` prints the reply with `"reply": false`, status 0 and no data."""
        r = verlctl(
            "--socket", line_daemon.socket, "--json", "call", "--text", "ECHO x", "--no-reply"
        )
        assert r.returncode == 0, r.stderr
        obj = json.loads(r.stdout)
        assert obj["reply"] is False
        assert (obj["status"], obj["hex"], obj["text"], obj["generation"]) == (0, "", "", 1)

    def test_no_reply_on_verl_exits_2(self, daemon: DaemonProc) -> None:
        """`call --no-reply` on a verl device (every request answered) is a bad_request: exit 2."""
        r = verlctl("--socket", daemon.socket, "call", "--hex", "01aa", "--no-reply")
        assert r.returncode == 2
        assert "bad_request" in r.stderr

    def test_awaited_reply_json_has_no_reply_key(self) -> None:
        """A call's --json object carries `reply` only when no answer was awaited."""
        assert "reply" not in reply_obj(Reply(0, b"x", 0.4, 1))
        quiet = Reply(0, b"", 0.412, 1, text="", reply=False)
        assert reply_obj(quiet)["reply"] is False
        assert render_sent(quiet) == "sent, no reply awaited  0.412 ms  generation 1"


class TestDaemonCli:
    def test_check_config_ok(self) -> None:
        """--check-config on a valid file exits 0."""
        r = subprocess.run(
            [sys.executable, "-m", "verld", "--check-config", "configs/verld.yaml"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 0

    def test_check_config_typo_suggests(self, tmp_path: Path) -> None:
        """A `timout:` typo exits 2 and suggests `timeout`, naming file and line."""
        bad = tmp_path / "bad.yaml"
        bad.write_text("device:\n  port: /dev/ttyUSB0\n  timout: 3\n")
        r = subprocess.run(
            [sys.executable, "-m", "verld", "--check-config", str(bad)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 2
        assert f"{bad}:3" in r.stderr and "did you mean 'timeout'" in r.stderr
        assert "Traceback" not in r.stderr

    def test_bad_config_refuses_to_start(self, tmp_path: Path) -> None:
        """verld --config with an invalid file exits 2 without starting."""
        bad = tmp_path / "bad.yaml"
        bad.write_text("max_wait_time: 3\n")
        r = subprocess.run(
            [sys.executable, "-m", "verld", "--config", str(bad)],
            capture_output=True,
            text=True,
            check=False,
            timeout=20,
        )
        assert r.returncode == 2
        assert "max_wait_time" in r.stderr and "timeout'?" in r.stderr


class TestHttpMetrics:
    def test_metrics_over_http(self, tmp_path: Path, sim: SimProc) -> None:
        """metrics.listen serves the Prometheus text on GET /metrics."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with DaemonProc(
            write_config(tmp_path, sim.link, {"metrics": {"listen": f"127.0.0.1:{port}"}})
        ):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            assert "verld_link_up 1" in text


class TestAsyncClient:
    def test_concurrent_calls(self, daemon: DaemonProc) -> None:
        """The asyncio client runs many calls at once on one connection, each with its reply."""

        async def run() -> list[bytes]:
            async with AsyncClient(daemon.socket) as c:
                replies = await asyncio.gather(*(c.call(b"\x01" + bytes([i])) for i in range(50)))
                assert (await c.execute({"action": "echo", "params": "x"}))["data"] == b"x"
                return [r.data for r in replies]

        assert asyncio.run(run()) == [bytes([i]) for i in range(50)]


class TestDefaultSocket:
    """No --socket, no $VERLD_SOCKET, no --config: /run/verld/verld.sock, else
    $XDG_RUNTIME_DIR/verld.sock when only that one exists."""

    def test_system_socket_when_both_exist(self, tmp_path: Path) -> None:
        """The system socket wins when it exists."""
        system, xdg = tmp_path / "system.sock", tmp_path / "xdg"
        xdg.mkdir()
        system.touch()
        (xdg / "verld.sock").touch()
        env = {"XDG_RUNTIME_DIR": str(xdg)}
        assert default_socket(env, str(system)) == str(system)

    def test_runtime_dir_socket_when_only_it_exists(self, tmp_path: Path) -> None:
        """Only $XDG_RUNTIME_DIR/verld.sock exists (a user's quick start): that one."""
        (tmp_path / "verld.sock").touch()
        env = {"XDG_RUNTIME_DIR": str(tmp_path)}
        assert default_socket(env, str(tmp_path / "none.sock")) == str(tmp_path / "verld.sock")

    def test_system_socket_when_neither_exists(self, tmp_path: Path) -> None:
        """Neither: the system socket (what the error then names)."""
        env = {"XDG_RUNTIME_DIR": str(tmp_path)}
        assert default_socket(env, "/run/verld/verld.sock") == "/run/verld/verld.sock"
        assert default_socket({}, "/run/verld/verld.sock") == "/run/verld/verld.sock"

    def test_verld_socket_wins(self, tmp_path: Path) -> None:
        """$VERLD_SOCKET comes before both."""
        (tmp_path / "verld.sock").touch()
        env = {"VERLD_SOCKET": "/srv/a.sock", "XDG_RUNTIME_DIR": str(tmp_path)}
        assert default_socket(env, str(tmp_path / "none.sock")) == "/srv/a.sock"

    def test_verlctl_reaches_a_daemon_in_the_runtime_dir(self, sim: SimProc) -> None:
        """A real verlctl without --socket finds a daemon on $XDG_RUNTIME_DIR/verld.sock."""
        if os.path.lexists("/run/verld/verld.sock"):
            pytest.skip("a system verld socket exists here: verlctl takes that one")
        xdg = Path(sim.link).parent / "xdg"
        xdg.mkdir()
        with DaemonProc(
            write_config(
                Path(sim.link).parent, sim.link, {"api": {"socket": str(xdg / "verld.sock")}}
            )
        ):
            env = {k: v for k, v in os.environ.items() if k != "VERLD_SOCKET"}
            r = subprocess.run(
                [sys.executable, "-m", "verld.ctl", "status"],
                capture_output=True,
                text=True,
                timeout=20,
                env={**env, "XDG_RUNTIME_DIR": str(xdg)},
                check=False,
            )
            assert r.returncode == 0, r.stderr
            assert "link        up (connected)" in r.stdout

    def test_unreachable_default_says_how_to_name_a_socket(self, tmp_path: Path) -> None:
        """No daemon on the default socket: exit 3, one line naming it and --socket."""
        if os.path.lexists("/run/verld/verld.sock"):
            pytest.skip("a system verld socket exists here")
        env = {k: v for k, v in os.environ.items() if k != "VERLD_SOCKET"}
        r = subprocess.run(
            [sys.executable, "-m", "verld.ctl", "status"],
            capture_output=True,
            text=True,
            timeout=20,
            env={**env, "XDG_RUNTIME_DIR": str(tmp_path)},
            check=False,
        )
        assert r.returncode == 3
        [line] = r.stderr.strip().splitlines()
        assert line.startswith("verlctl: unreachable: cannot connect to /run/verld/verld.sock")
        assert "--socket PATH" in line


# --- a socket this user may not open: who owns it, and what to do --------------------------


def outsider_group() -> grp.struct_group:
    """A group nobody is not in (neither root's nor nogroup): the socket's group."""
    nobody = pwd.getpwnam("nobody")
    for g in grp.getgrall():
        if g.gr_gid not in (0, nobody.pw_gid) and "nobody" not in g.gr_mem:
            return g
    pytest.skip("no group here that nobody is not a member of")


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    """`argv` run as nobody:nogroup with no supplementary groups."""
    return subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=20,
        cwd="/",
        check=False,
    )


def verlctl_as_nobody(sock: str, *args: str) -> subprocess.CompletedProcess[str]:
    # nobody_python: a readable copy of verld where nobody cannot read this checkout
    return as_nobody(*nobody_python(), "-m", "verld.ctl", "--socket", sock, *args)


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="running verlctl as another user needs root and setpriv",
)


@pytest.fixture
def public_daemon(pubdir: Path) -> Iterator[DaemonProc]:
    """A root verld whose socket (mode 0660) is in a directory everyone may traverse."""
    with (
        SimProc(pubdir) as sim,
        DaemonProc(write_config(pubdir, sim.link, {"api": {"mode": "0660"}})) as d,
    ):
        yield d


@needs_root
@pytest.mark.timeout(60)
class TestPermissionDenied:
    def test_group_socket_says_which_group_to_join(self, public_daemon: DaemonProc) -> None:
        """A socket of another group: exit 3 naming owner, group, mode and the group to join."""
        g = outsider_group()
        os.chown(public_daemon.socket, 0, g.gr_gid)
        r = verlctl_as_nobody(public_daemon.socket, "status")
        assert r.returncode == 3
        assert r.stderr == (
            f"verlctl: permission denied on {public_daemon.socket} (owner root, group "
            f"{g.gr_name}, mode 0660): join group '{g.gr_name}' (sudo usermod -aG {g.gr_name} "
            "$USER, then log in again)\n"
        )

    def test_json_error_carries_the_same_message(self, public_daemon: DaemonProc) -> None:
        """--json prints the error as JSON too, code unreachable."""
        g = outsider_group()
        os.chown(public_daemon.socket, 0, g.gr_gid)
        r = verlctl_as_nobody(public_daemon.socket, "--json", "status")
        assert r.returncode == 3
        error = json.loads(r.stdout)["error"]
        assert error["code"] == "unreachable"
        assert error["message"].startswith(f"permission denied on {public_daemon.socket} ")

    def test_root_group_socket_says_who_may(self, public_daemon: DaemonProc) -> None:
        """A root:root socket: joining root is no advice; run as root, or set api.group."""
        r = verlctl_as_nobody(public_daemon.socket, "status")
        assert r.returncode == 3
        [line] = r.stderr.splitlines()
        head = f"verlctl: permission denied on {public_daemon.socket} (owner root, group root"
        assert line.startswith(f"{head}, mode 0660): only root may open it")
        assert "api.group" in line and "join group" not in line

    def test_closed_directory_is_named(self, public_daemon: DaemonProc, pubdir: Path) -> None:
        """A directory on the way nobody may not enter is named, not the socket."""
        pubdir.chmod(0o750)
        try:
            r = verlctl_as_nobody(public_daemon.socket, "status")
        finally:
            pubdir.chmod(0o755)
        assert r.returncode == 3
        assert r.stderr.startswith(
            f"verlctl: permission denied on {pubdir} (owner root, "
            "group root, mode 0750), the directory of "
        )

    def test_python_clients_raise_permission_denied(self, public_daemon: DaemonProc) -> None:
        """Client and AsyncClient raise PermissionDenied (an Unreachable) with the message."""
        g = outsider_group()
        os.chown(public_daemon.socket, 0, g.gr_gid)
        script = (
            "import asyncio, sys\n"
            "from verld.client import AsyncClient, Client, PermissionDenied, Unreachable\n"
            "path = sys.argv[1]\n"
            "try:\n    Client(path).connect()\nexcept PermissionDenied as e:\n"
            "    assert isinstance(e, Unreachable) and e.code == 'unreachable'; print(e.message)\n"
            "async def a():\n"
            "    try:\n        await AsyncClient(path).connect()\n"
            "    except PermissionDenied as e:\n        print(e.message)\n"
            "asyncio.run(a())\n"
        )
        r = as_nobody(*nobody_python(), "-c", script, public_daemon.socket)
        assert r.returncode == 0, r.stderr
        blocking, aio = r.stdout.splitlines()
        assert blocking == aio
        assert f"join group '{g.gr_name}'" in blocking


def test_member_not_yet_in_this_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the socket's group by /etc/group but not in this login: told to log in again."""
    sock = tmp_path / "v.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
    sock.chmod(0o660)
    if sock.stat().st_gid == 0:  # (as root) root's group is never the advice: another one
        os.chown(sock, -1, outsider_group().gr_gid)
    group = grp.getgrgid(sock.stat().st_gid).gr_name
    monkeypatch.setattr(client_messages, "_member_elsewhere", lambda _name, _gid: True)
    message = client_messages.permission_denied(str(sock))
    assert message.endswith(
        f"you are in group '{group}', but this login session is not yet: "
        f"log in again (or run newgrp {group})"
    )
    error = client_messages.connect_failed(str(sock), PermissionError(13, "Permission denied"))
    assert isinstance(error, PermissionDenied) and error.message == message


def test_member_elsewhere_reads_the_group_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member by /etc/group whose process lacks the gid; not one who has it or is not in it."""
    user = pwd.getpwuid(os.getuid()).pw_name
    members: list[str] = [user]
    monkeypatch.setattr(grp, "getgrgid", lambda gid: grp.struct_group(("g", "x", gid, members)))
    assert client_messages._member_elsewhere("g", 4242)
    assert not client_messages._member_elsewhere("g", os.getgid())
    members.clear()
    assert not client_messages._member_elsewhere("g", 4242)
