"""inhibit: verld lets go of the device port for another program, then takes it back.

Real verld-sim and verld processes on real ptys and sockets, real `verlctl`
subprocesses, and a real second "flasher" program (tests/inhibit_device.py) that
opens the port, locks it and talks verl to the device while verld is off it.
The daemons use verld.testing.write_config's defaults (device.timeout 1 s,
heartbeat every 1 s, reconnect from 0.05 s) unless a test says otherwise.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from inhibit_device import REPLY, REQUEST, talk
from support import (
    AS_NOBODY,
    DaemonProc,
    SimProc,
    nobody_python,
    stop_process,
    wait_for,
    write_config,
)

from verld.client import Client, ClientError
from verld.codec.verl import FrameDecoder, VerlFrame, encode_frame

HELPER = str(Path(__file__).resolve().with_name("inhibit_device.py"))
NOBODY = 65534  #: uid and gid of the unprivileged peer (as in test_security.py)

Launch = Callable[..., DaemonProc]


# --- helpers ------------------------------------------------------------------------------


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launch]:
    """Start a daemon on a port with config overrides (`device={...}`); stopped at teardown."""
    started: list[DaemonProc] = []

    def run(port: str, **overrides: Any) -> DaemonProc:
        d = DaemonProc(write_config(tmp_path, port, overrides))
        started.append(d)
        return d

    yield run
    for d in started:
        d.stop()


def verlctl(
    sock: str, *args: str, timeout: float = 20.0, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """`verlctl --socket SOCK ARGS...` to its end (`prefix`: a setpriv and Python to run it)."""
    cmd = [*(prefix or [sys.executable]), "-m", "verld.ctl", "--socket", sock, *args]
    return subprocess.run(
        cmd, check=False, capture_output=True, text=True, timeout=timeout, cwd="/"
    )


def verlctl_hold(sock: str) -> subprocess.Popen[bytes]:
    """`verlctl inhibit` without a COMMAND, running (it holds until a signal)."""
    cmd = [sys.executable, "-m", "verld.ctl", "--socket", sock, "inhibit"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def call_msg(req_id: int, data: bytes, **fields: Any) -> dict[str, Any]:
    return {"op": "call", "id": req_id, "data": base64.b64encode(data).decode(), **fields}


def delay_call(ms: int, tag: bytes) -> bytes:
    """verld-sim's delay command: answer 00 + `tag` after `ms` milliseconds."""
    return b"\x03" + struct.pack(">H", ms) + tag


def refusal(c: Client, data: bytes, **kw: Any) -> ClientError:
    """The error a call fails with (it must fail)."""
    with pytest.raises(ClientError) as info:
        c.call(data, **kw)
    return info.value


def next_link(sub: Client) -> dict[str, Any]:
    """The next `link` event of a subscriber."""
    for ev in sub.events():
        if ev.get("event") == "link":
            return ev
    raise AssertionError("unreachable")


def wait_requests(sim: SimProc, more_than: int) -> None:
    """Until the sim has read more than `more_than` requests (a call is on the link)."""
    wait_for(lambda: sim.counters()["requests"] > more_than, 5.0, "the call to reach the sim")


def fds_on(pid: int, path: str) -> int:
    """How many fds of process `pid` are open on the file `path` leads to (Linux /proc)."""
    target, count = os.path.realpath(path), 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") == target:
                count += 1
        except OSError:
            continue
    return count


def tcp_established(pid: int, port: int) -> int:
    """ESTABLISHED TCP sockets of process `pid` with `port` at either end (Linux /proc)."""
    inodes = set()
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                ports = {int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)}
                if fields[3] == "01" and fields[9] in inodes and port in ports:
                    count += 1
    return count


def locked_elsewhere(path: str) -> bool:
    """True when another open file holds the flock of `path` (as pyserial's exclusive open)."""
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def sim_child(d: DaemonProc) -> int:
    """The pid of the simulator verld started for `device.port: sim` (its log says)."""
    for line in d.log().splitlines():
        if line.startswith("{") and json.loads(line).get("event") == "sim_started":
            return int(json.loads(line)["pid"])
    raise AssertionError("no sim_started in verld's log")


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def metric(c: Client, name: str) -> float:
    """One unlabelled sample of the `metrics` text."""
    text: str = c.request("metrics")["text"]
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in metrics"
    return float(found.group(1))


def back_up(d: DaemonProc, generation: int) -> None:
    """The inhibition is over: no holder, link up past `generation`, a call goes through."""
    d.wait_state("up", min_generation=generation + 1)
    assert d.status()["inhibit"] is None
    with Client(d.socket, timeout=5.0) as c:
        r = c.call(b"\x01back")
    assert (r.status, r.data) == (0, b"back")
    assert r.generation > generation


# --- verlctl inhibit -- COMMAND -----------------------------------------------------------


@pytest.mark.timeout(30)
def test_command_gets_the_port_and_verlctl_exits_with_its_status(
    sim: SimProc, daemon: DaemonProc
) -> None:
    """COMMAND locks the port, talks to the device, sees $VERLD_PORT; its status is verlctl's."""
    assert locked_elsewhere(sim.link)  # verld holds the port: the flock test below means something
    gen = daemon.status()["link"]["generation"]
    out = verlctl(daemon.socket, "inhibit", "--", sys.executable, HELPER, "{port}", "7")
    assert out.returncode == 7, out.stdout + out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["locked"] is True
    assert report["port"] == report["env"] == sim.link
    assert report["ok"] is True, report
    back_up(daemon, gen)


@pytest.mark.timeout(30)
def test_command_that_cannot_run_exits_127(sim: SimProc, daemon: DaemonProc) -> None:
    """A COMMAND that does not exist: exit 127, and the port is given back."""
    gen = daemon.status()["link"]["generation"]
    out = verlctl(daemon.socket, "inhibit", "--", str(Path(sim.link).parent / "no-such-flasher"))
    assert out.returncode == 127, out.stderr
    assert "cannot run" in out.stderr
    back_up(daemon, gen)


@pytest.mark.timeout(30)
def test_command_killed_by_a_signal_exits_128_plus_n(sim: SimProc, daemon: DaemonProc) -> None:
    """A COMMAND that SIGKILLs itself: exit 128+9, and the port is given back."""
    gen = daemon.status()["link"]["generation"]
    suicide = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    out = verlctl(daemon.socket, "inhibit", "--", sys.executable, "-c", suicide)
    assert out.returncode == 128 + signal.SIGKILL, out.stderr
    back_up(daemon, gen)


# --- verlctl inhibit (holding) ------------------------------------------------------------


@pytest.mark.timeout(30)
def test_hold_prints_the_port_and_sigint_gives_it_back(sim: SimProc, daemon: DaemonProc) -> None:
    """Without COMMAND verlctl says which port it let go of and holds it until SIGINT (exit 0)."""
    gen = daemon.status()["link"]["generation"]
    proc = verlctl_hold(daemon.socket)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().rstrip("\n")
        assert line == f"inhibited: verld let go of {sim.link}; Ctrl-C gives it back"
        assert daemon.status()["inhibit"]["pid"] == proc.pid
        assert not locked_elsewhere(sim.link)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        stop_process(proc)
    back_up(daemon, gen)


@pytest.mark.timeout(30)
def test_sigkilled_holder_gives_the_port_back(sim: SimProc, daemon: DaemonProc) -> None:
    """The inhibiting client SIGKILLed: its connection closes and the link comes back up."""
    gen = daemon.status()["link"]["generation"]
    proc = verlctl_hold(daemon.socket)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"inhibited: ")
        assert daemon.status()["link"]["state"] == "inhibited"
        proc.kill()
        proc.wait(10)
    finally:
        stop_process(proc)
    back_up(daemon, gen)


# --- calls while inhibited ----------------------------------------------------------------


@pytest.mark.timeout(30)
def test_call_without_wait_is_refused_busy(sim: SimProc, daemon: DaemonProc) -> None:
    """While inhibited a call without wait fails busy at once, naming the inhibitor's pid."""
    holder, c = daemon.client(), daemon.client()
    holder.inhibit()
    t0 = time.monotonic()
    err = refusal(c, b"\x01x")
    assert time.monotonic() - t0 < 0.5
    assert (err.code, err.message) == ("busy", f"inhibited by pid {os.getpid()}")


@pytest.mark.timeout(30)
def test_waiting_call_goes_out_after_uninhibit(sim: SimProc, daemon: DaemonProc) -> None:
    """A call with wait and a timeout longer than the inhibition is answered once it ends."""
    holder, c = daemon.client(), daemon.client()
    holder.inhibit()
    c.send(call_msg(1, b"\x01waited", timeout=8.0, wait=True))
    wait_for(lambda: daemon.status()["queue"] == 1, 5.0, "the call to wait in the queue")
    time.sleep(0.2)
    assert daemon.status()["queue"] == 1  # still waiting, not failed
    daemon.client().uninhibit()  # any admin may end it
    reply = c.receive()
    assert (reply["id"], reply["status"]) == (1, 0), reply
    assert base64.b64decode(reply["data"]) == b"waited"
    assert reply["generation"] == 2


@pytest.mark.timeout(30)
def test_waiting_call_fails_busy_when_its_timeout_passes(sim: SimProc, daemon: DaemonProc) -> None:
    """A waiting call still queued when its timeout passes fails busy."""
    holder, c = daemon.client(), daemon.client()
    holder.inhibit()
    t0 = time.monotonic()
    err = refusal(c, b"\x01x", timeout=0.3, wait=True)
    assert 0.25 <= time.monotonic() - t0 < 2.0
    assert err.code == "busy"
    assert err.message.startswith(f"inhibited by pid {os.getpid()}")
    assert daemon.status()["queue"] == 0


@pytest.mark.timeout(30)
def test_link_subscriber_sees_inhibited_then_connecting_and_up(
    sim: SimProc, daemon: DaemonProc
) -> None:
    """`link` events: inhibited (reason, same generation), then connecting and up (next one)."""
    sub = daemon.client()
    sub.subscribe(["link"])
    holder = daemon.client()
    assert holder.inhibit() == sim.link
    ev = next_link(sub)
    assert ev == {
        "event": "link",
        "state": "inhibited",
        "reason": f"inhibited by pid {os.getpid()}",
        "generation": 1,
    }
    holder.uninhibit()
    assert next_link(sub)["state"] == "connecting"
    up = next_link(sub)
    assert (up["state"], up["generation"]) == ("up", 2)


@pytest.mark.timeout(30)
def test_status_and_metrics_report_the_inhibition(sim: SimProc, daemon: DaemonProc) -> None:
    """status.inhibit names the holder (pid, uid, client, since); verld_inhibited and the total."""
    obs = daemon.client()
    assert obs.status()["inhibit"] is None
    assert metric(obs, "verld_inhibited") == 0
    holder = daemon.client(name="flasher-test")
    t0 = time.time()
    holder.inhibit()
    st = obs.status()
    assert st["link"]["state"] == "inhibited"
    info = st["inhibit"]
    assert (info["pid"], info["uid"], info["client"]) == (os.getpid(), os.getuid(), "flasher-test")
    assert t0 - 1 <= info["since"] <= time.time() + 1
    assert (metric(obs, "verld_inhibited"), metric(obs, "verld_inhibits_total")) == (1, 1)
    holder.uninhibit()
    daemon.wait_state("up", min_generation=2)
    assert (metric(obs, "verld_inhibited"), metric(obs, "verld_inhibits_total")) == (0, 1)
    obs.uninhibit()  # none in force: a no-op
    assert obs.status()["link"]["state"] == "up"


@pytest.mark.timeout(30)
def test_verld_stays_off_the_port_while_inhibited(sim: SimProc, launch: Launch) -> None:
    """While inhibited verld has no fd on the pty, sends no heartbeat and tries no reconnect."""
    d = launch(sim.link, heartbeat={"interval": 0.2})
    assert fds_on(d.pid, sim.link) == 1
    holder = d.client()
    holder.inhibit()
    assert fds_on(d.pid, sim.link) == 0
    link, requests = d.status()["link"], sim.counters()["requests"]
    time.sleep(1.0)  # 5 heartbeat intervals, 20 reconnect delays
    now = d.status()["link"]
    assert (now["state"], now["reason"], now["generation"]) == ("inhibited", link["reason"], 1)
    assert abs(now["since"] - link["since"]) < 0.05  # (wall time from the loop clock: jitters)
    assert sim.counters()["requests"] == requests
    assert fds_on(d.pid, sim.link) == 0
    holder.uninhibit()
    d.wait_state("up", min_generation=2)
    assert fds_on(d.pid, sim.link) == 1


# --- one inhibition at a time, admins only ------------------------------------------------


@pytest.mark.timeout(30)
def test_second_inhibit_is_busy(sim: SimProc, daemon: DaemonProc) -> None:
    """While one inhibition holds, another inhibit (other client, same client, verlctl) is busy."""
    holder, other = daemon.client(), daemon.client()
    holder.inhibit()
    for who in (other, holder):
        with pytest.raises(ClientError) as info:
            who.inhibit()
        assert info.value.code == "busy"
        assert info.value.message == f"already inhibited by pid {os.getpid()}"
    out = verlctl(daemon.socket, "inhibit", "--", "true")
    assert out.returncode == 6, out.stderr
    assert "busy" in out.stderr
    st = daemon.status()
    held = (st["link"]["state"], st["inhibit"]["pid"], st["inhibits"])
    assert held == ("inhibited", os.getpid(), 1)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="a non-root peer needs root and setpriv",
)
@pytest.mark.timeout(60)  # nobody_python may copy verld first
def test_non_admin_is_forbidden(sim: SimProc, pubdir: Path) -> None:
    """A controller (not admin) peer running verlctl inhibit gets forbidden: exit 5, port kept."""
    # nobody_python: a readable copy of verld where nobody cannot read this checkout
    python = nobody_python()
    roles = {"controller": {"uids": [NOBODY]}}
    d = DaemonProc(write_config(pubdir, sim.link, {"api": {"mode": "0666", "roles": roles}}))
    try:
        out = verlctl(d.socket, "inhibit", "--", "true", prefix=[*AS_NOBODY, *python])
        assert out.returncode == 5, out.stdout + out.stderr
        assert "forbidden" in out.stderr
        st = d.status()
        assert (st["link"]["state"], st["inhibit"], st["inhibits"]) == ("up", None, 0)
    finally:
        d.stop()


# --- what is on the link when inhibit comes ---------------------------------------------


@pytest.mark.timeout(30)
def test_in_flight_call_finishes_first_and_queued_call_fails_busy(
    sim: SimProc, launch: Launch
) -> None:
    """Window 1: a call on the link is answered before the inhibit reply, the queued one is busy."""
    d = launch(sim.link, device={"window": 1, "timeout": 2.0}, heartbeat={"interval": 0})
    c = d.client()
    requests = sim.counters()["requests"]
    t0 = time.monotonic()
    c.send(call_msg(1, delay_call(300, b"slow")))
    wait_requests(sim, requests)
    c.send(call_msg(2, b"\x01queued"))  # window full: queued
    c.send({"op": "inhibit", "id": 3})
    queued, slow, inhibit = (c.receive() for _ in range(3))
    assert queued["id"] == 2 and queued["ok"] is False, queued
    assert queued["error"] == {"code": "busy", "message": f"inhibited by pid {os.getpid()}"}
    assert (slow["id"], slow["status"], base64.b64decode(slow["data"])) == (1, 0, b"slow")
    assert inhibit == {"id": 3, "ok": True, "port": sim.link}
    assert time.monotonic() - t0 >= 0.3
    assert sim.counters()["requests"] == requests + 1  # the queued call never went out


@pytest.mark.timeout(30)
def test_call_still_running_after_device_timeout_fails_link_down(
    sim: SimProc, launch: Launch
) -> None:
    """A call still running device.timeout after the inhibit fails link_down, then it is granted."""
    d = launch(sim.link, device={"timeout": 0.5}, heartbeat={"interval": 0})
    c = d.client()
    requests = sim.counters()["requests"]
    c.send(call_msg(1, delay_call(3000, b"late"), timeout=5.0))
    wait_requests(sim, requests)
    t0 = time.monotonic()
    c.send({"op": "inhibit", "id": 2})
    late = c.receive()
    waited = time.monotonic() - t0
    assert late == {
        "id": 1,
        "ok": False,
        "error": {"code": "link_down", "message": f"link inhibited by pid {os.getpid()}"},
        "generation": 1,
    }
    assert 0.4 <= waited < 2.0
    assert c.receive() == {"id": 2, "ok": True, "port": sim.link}


@pytest.mark.timeout(30)
def test_lease_ends_when_inhibit_is_granted(sim: SimProc, daemon: DaemonProc) -> None:
    """A lease held by another client ends at the inhibit; leasing again while inhibited is busy."""
    leaser, holder = daemon.client(), daemon.client()
    leaser.request("lease", seconds=30)
    assert daemon.status()["lease"] is not None
    holder.inhibit()
    assert daemon.status()["lease"] is None
    with pytest.raises(ClientError) as info:
        leaser.request("lease", seconds=5)
    assert (info.value.code, info.value.message) == ("busy", f"inhibited by pid {os.getpid()}")
    holder.uninhibit()
    back_up(daemon, 1)  # a client other than the leaser is served: the lease is gone


# --- other ports ------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_tcp_connection_closed_while_inhibited_and_reopened_after(
    tmp_path: Path, launch: Launch
) -> None:
    """tcp://: verld closes its connection while inhibited (the sim sees it), reconnects after."""
    sim = SimProc(tmp_path, tcp=True)
    try:
        port = int(sim.address.rsplit(":", 1)[1])
        d = launch(sim.address)
        assert tcp_established(d.pid, port) == 1
        wait_for(lambda: tcp_established(sim.pid, port) == 1, 5.0, "the sim to have verld")
        holder = d.client()
        assert holder.inhibit() == sim.address
        assert tcp_established(d.pid, port) == 0
        wait_for(lambda: tcp_established(sim.pid, port) == 0, 5.0, "the sim to see verld go")
        # Another program has the device now, and verld does not come back meanwhile.
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as s:
            s.sendall(encode_frame(REQUEST, 7, b"\x01tool"))
            decoder = FrameDecoder(4096, frozenset({REPLY}))
            frames: list[VerlFrame] = []
            while not frames:
                chunk = s.recv(4096)
                assert chunk, "the sim closed the tool's connection"
                frames = decoder.feed(chunk)
            assert (frames[0].seq, frames[0].payload) == (7, b"\x00tool")
        time.sleep(0.3)  # several reconnect delays
        assert d.status()["link"]["state"] == "inhibited"
        assert tcp_established(d.pid, port) == 0
        holder.uninhibit()
        back_up(d, 1)
        assert tcp_established(d.pid, port) == 1
    finally:
        sim.stop()


@pytest.mark.timeout(30)
def test_builtin_sim_port_is_the_simulators_pty_link(launch: Launch) -> None:
    """device.port sim: the reply names the simulator's pty link, which can be locked and used."""
    d = launch("sim")
    holder = d.client()
    port = holder.inhibit()
    assert port != "sim" and os.path.islink(port)
    assert os.readlink(port).startswith("/dev/pts/")
    assert fds_on(d.pid, port) == 0
    report = talk(port)
    assert report["ok"] is True, report
    holder.uninhibit()
    back_up(d, 1)
    child = sim_child(d)
    assert alive(child)
    d.stop()
    wait_for(lambda: not alive(child), 5.0, "verld's simulator to stop with it")


# --- known bugs -------------------------------------------------------------------------


@pytest.mark.parametrize("ended_by", ["holder_closes", "other_admin_uninhibits"])
@pytest.mark.timeout(30)
def test_inhibit_ended_while_a_call_is_in_flight_keeps_verld_serving(
    sim: SimProc, launch: Launch, ended_by: str
) -> None:
    """Inhibit ended (holder gone, or uninhibit) while waiting for a call: verld keeps serving."""
    d = launch(sim.link, device={"timeout": 3.0}, heartbeat={"interval": 0})
    c = d.client()
    requests = sim.counters()["requests"]
    c.send(call_msg(1, delay_call(800, b"slow")))
    wait_requests(sim, requests)
    holder = Client(d.socket, timeout=5.0).connect()
    try:
        holder.send({"op": "inhibit", "id": 1})
        wait_for(lambda: d.status()["inhibit"] is not None, 5.0, "the inhibit to be taken")
        if ended_by == "holder_closes":
            holder.close()
        else:
            d.client().uninhibit()
        reply = c.receive()
        assert (reply["id"], reply["status"]) == (1, 0), reply
        time.sleep(0.2)
        assert d.proc.poll() is None, d.log()[-2000:]
        assert d.status()["link"]["state"] == "up"
        r = c.call(b"\x01still")
        assert (r.status, r.data) == (0, b"still")
    finally:
        holder.close()


def slow_call_in_flight(sim: SimProc, d: DaemonProc, ms: int) -> Client:
    """A client whose call (answered after `ms` ms) is on the link; its reply is id 1."""
    c = d.client()
    requests = sim.counters()["requests"]
    c.send(call_msg(1, delay_call(ms, b"slow")))
    wait_requests(sim, requests)
    return c


@pytest.mark.timeout(30)
def test_pending_inhibit_is_answered_when_uninhibited_first(sim: SimProc, launch: Launch) -> None:
    """An inhibit still waiting for a call when another admin uninhibits gets an error reply."""
    d = launch(sim.link, device={"timeout": 3.0}, heartbeat={"interval": 0})
    c = slow_call_in_flight(sim, d, 800)
    with Client(d.socket, timeout=3.0) as holder:
        holder.send({"op": "inhibit", "id": 1})
        wait_for(lambda: d.status()["inhibit"] is not None, 5.0, "the inhibit to be taken")
        d.client().uninhibit()
        assert c.receive()["status"] == 0
        answer = holder.receive()  # ClientError timeout when verld never answers
        assert (answer["id"], answer["ok"]) == (1, False), answer
    assert d.status()["link"]["state"] == "up"


@pytest.mark.timeout(30)
def test_inhibit_again_from_the_same_process_is_answered(sim: SimProc, launch: Launch) -> None:
    """A pending holder leaves and the same process inhibits again: the new inhibit is granted."""
    d = launch(sim.link, device={"timeout": 3.0}, heartbeat={"interval": 0})
    c = slow_call_in_flight(sim, d, 800)
    first = Client(d.socket, timeout=3.0).connect()
    first.send({"op": "inhibit", "id": 1})
    wait_for(lambda: d.status()["inhibit"] is not None, 5.0, "the inhibit to be taken")
    first.close()
    with Client(d.socket, timeout=3.0) as again:
        again.send({"op": "inhibit", "id": 1})
        assert c.receive()["status"] == 0
        assert again.receive() == {"id": 1, "ok": True, "port": sim.link}
        assert d.status()["link"]["state"] == "inhibited"
    back_up(d, 1)
