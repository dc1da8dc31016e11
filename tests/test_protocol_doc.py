"""A client written from docs/protocol.md alone, and checks that the page stays true.

`DocClient` uses nothing but a Unix socket, `json`, `struct` and `base64` (no
`verld.client`): it frames requests as section 2.2 says, matches replies by id
and keeps events apart (section 2.3). The tests check reply shapes field by field
against the page, run the page's Node.js and Python example clients against a
live daemon, and check that every hex dump on the page is the frame of the JSON
shown above it and that the `verl` worked example encodes as shown.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import DaemonProc, SimProc, write_config

DOC = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"
Msg = dict[str, Any]


def b64(hexstr: str) -> str:
    return base64.b64encode(bytes.fromhex(hexstr)).decode()


class DocClient:
    """Section 2 of the page, verbatim: u32 BE length + UTF-8 JSON, replies by id."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.events: deque[Msg] = deque()
        self.replies: dict[Any, Msg] = {}
        self._next = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, body: bytes) -> None:
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def send(self, obj: Msg) -> None:
        self.send_raw(json.dumps(obj).encode("utf-8"))

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("verld closed the connection")
            buf += chunk
        return buf

    def recv_raw(self) -> bytes:
        """One message's JSON bytes, exactly as verld wrote them."""
        (n,) = struct.unpack(">I", self._exact(4))
        return self._exact(n)

    def recv(self) -> Msg:
        msg: Msg = json.loads(self.recv_raw().decode("utf-8"))
        return msg

    def reply(self, req_id: Any) -> Msg:
        """The reply to `req_id`; events and other replies met meanwhile are kept."""
        while req_id not in self.replies:
            msg = self.recv()
            if "event" in msg:
                self.events.append(msg)
            else:
                self.replies[msg["id"]] = msg
        return self.replies.pop(req_id)

    def request(self, op: str, **fields: Any) -> Msg:
        self._next += 1
        self.send({"op": op, "id": self._next, **fields})
        return self.reply(self._next)

    def event(self) -> Msg:
        while not self.events:
            msg = self.recv()
            if "event" in msg:
                return msg
            self.replies[msg["id"]] = msg
        return self.events.popleft()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProc]:
    """verld on verld-sim, shared by the read-only tests of this module."""
    tmp = tmp_path_factory.mktemp("doc")
    sim = SimProc(tmp)
    try:
        # misses: 10, so the deliberate timeouts here never take the shared link down
        d = DaemonProc(write_config(tmp, sim.link, {"heartbeat": {"misses": 10}}))
        try:
            yield d
        finally:
            d.stop()
    finally:
        sim.stop()


@pytest.fixture
def client(live: DaemonProc) -> Iterator[DocClient]:
    c = DocClient(live.socket)
    yield c
    c.close()


def is_error(msg: Msg, code: str, req_id: Any) -> bool:
    """An error reply exactly as section 2.3 shows it."""
    assert set(msg) >= {"id", "ok", "error"}, msg
    assert set(msg["error"]) == {"code", "message"}, msg
    assert isinstance(msg["error"]["message"], str)
    return bool(msg["ok"] is False and msg["error"]["code"] == code and msg["id"] == req_id)


class TestOps:
    @pytest.mark.timeout(20)
    def test_hello_reply_has_the_documented_fields(self, client: DocClient) -> None:
        """The hello reply has the documented version, daemon and device fields."""
        # hello: version "1", daemon "verld X.Y.Z", device {port, codec, max_payload, window, ping}.
        r = client.request("hello", client="doc-test")
        assert set(r) == {"id", "ok", "version", "daemon", "device", "role"}
        assert (r["ok"], r["version"]) == (True, "1")
        assert re.fullmatch(r"verld \d+\.\d+\.\d+\S*", r["daemon"])
        assert set(r["device"]) == {"port", "codec", "max_payload", "window", "ping"}
        assert (r["device"]["codec"], r["device"]["max_payload"], r["device"]["window"]) == (
            "verl",
            4096,
            8,
        )
        assert r["role"] in ("observer", "controller", "admin")

    @pytest.mark.timeout(20)
    def test_status_reply_has_the_documented_fields(self, client: DocClient) -> None:
        """status: link, uptime, counters, latency_ms, clients, queue, lease as the table lists."""
        r = client.request("status")
        assert r["ok"] is True
        assert set(r) >= {"link", "uptime", "counters", "latency_ms", "clients", "queue", "lease"}
        link = r["link"]
        assert set(link) >= {"state", "reason", "generation", "port", "codec", "since"}
        assert (link["state"], link["generation"], link["codec"]) == ("up", 1, "verl")
        assert set(r["counters"]) >= {
            *("calls", "calls_ok", "calls_failed", "timeouts", "retries", "stale"),
            *("bad_frames", "reconnects", "pings", "bytes_tx", "bytes_rx"),
            *("frames_tx", "frames_rx", "events"),
        }
        assert all(isinstance(v, int) for v in r["counters"].values())
        assert set(r["latency_ms"]) >= {"p50", "p90", "p99", "max"}
        assert r["clients"] >= 1 and r["queue"] == 0 and r["lease"] is None

    @pytest.mark.timeout(20)
    def test_hex_echo_call(self, client: DocClient) -> None:
        """call 01 aa bb: status 0, data aa bb in base64, ms, generation; nothing else."""
        r = client.request("call", data=b64("01aabb"))
        assert set(r) == {"id", "ok", "status", "data", "ms", "generation"}
        assert (r["ok"], r["status"], r["data"], r["generation"]) == (True, 0, "qrs=", 1)
        assert isinstance(r["ms"], float | int) and r["ms"] >= 0

    @pytest.mark.timeout(20)
    def test_text_is_sent_as_utf8_and_empty_data_is_a_ping(self, client: DocClient) -> None:
        """text goes out as its UTF-8 bytes; data "" is a ping answered with status 0."""
        r = client.request("call", text="\u0001héllo")
        assert base64.b64decode(r["data"]) == "héllo".encode()
        assert client.request("call", data="")["status"] == 0

    @pytest.mark.timeout(20)
    def test_device_statuses_are_errors_that_keep_status_and_data(self, client: DocClient) -> None:
        """0xFF is remote_failure, 7 is device_error; both keep status, data, ms and generation."""
        fail = client.request("call", data=b64("04"))
        assert is_error(fail, "remote_failure", fail["id"]) and fail["status"] == 0xFF
        err = client.request("call", data=b64("05076f6f7073"))
        assert is_error(err, "device_error", err["id"])
        assert (err["status"], base64.b64decode(err["data"])) == (7, b"oops")
        assert set(err) == {"id", "ok", "status", "data", "ms", "generation", "error"}

    @pytest.mark.timeout(20)
    def test_replies_come_as_calls_finish_matched_by_id(self, client: DocClient) -> None:
        """A slow call sent first is overtaken by a fast one; ids tell them apart."""
        client.send({"op": "call", "id": "slow", "data": b64("030320")})  # an 800 ms delay
        client.send({"op": "call", "id": "fast", "data": b64("0166")})
        first = client.recv()
        assert (first["id"], base64.b64decode(first["data"])) == ("fast", b"f")
        assert client.reply("slow")["ok"] is True

    @pytest.mark.timeout(20)
    def test_call_timeout_is_per_try(self, client: DocClient) -> None:
        """No answer within timeout on each of 1 + retry tries: timeout, with generation."""
        t0 = time.monotonic()
        r = client.request("call", data=b64("0302bc"), timeout=0.2, retry=1)  # a 700 ms delay
        assert is_error(r, "timeout", r["id"]) and r["generation"] == 1
        assert time.monotonic() - t0 >= 0.4

    @pytest.mark.timeout(20)
    def test_logs_and_metrics(self, client: DocClient) -> None:
        """logs gives records {ts, level, msg, ...}; metrics gives Prometheus text."""
        records = client.request("logs", lines=3)["records"]
        assert 0 < len(records) <= 3
        assert all({"ts", "level", "msg"} <= set(rec) for rec in records)
        assert "verld_calls_total" in client.request("metrics")["text"]

    @pytest.mark.timeout(20)
    def test_logs_and_metrics_sizes(self, client: DocClient) -> None:
        """logs never gives more than the ring's 1000 records; metrics is about 5 KB."""
        assert len(client.request("logs", lines=5000)["records"]) <= 1000
        client.send({"op": "metrics", "id": "m"})
        assert 4000 < len(client.recv_raw()) < 8000


class TestIds:
    @pytest.mark.timeout(20)
    def test_ids_come_back_as_json_values_not_bytes(self, client: DocClient) -> None:
        """An id is re-encoded: "café" as "caf\\u00e9", "\\u0074" as "t", -0 as 0."""
        cases = [
            ('"café"'.encode(), b'"caf\\u00e9"'),
            (b'"\\u0074"', b'"t"'),
            (b"-0", b"0"),
            (b"9223372036854775807", b"9223372036854775807"),
            (b"-9223372036854775808", b"-9223372036854775808"),
        ]
        for sent, back in cases:
            for op in (b'"call","data":"AXg="', b'"status"'):  # the fast and the general path
                client.send_raw(b'{"op":%s,"id":%s}' % (op, sent))
                raw = client.recv_raw()
                assert raw.startswith(b'{"id":' + back + b',"ok":true,'), (sent, raw[:60])
                assert json.loads(raw)["id"] == json.loads(sent)

    @pytest.mark.timeout(20)
    def test_a_key_given_twice_counts_with_its_last_value(self, client: DocClient) -> None:
        """{"id":1,"id":2} is answered as id 2."""
        client.send_raw(b'{"op":"status","id":1,"id":2}')
        assert client.recv()["id"] == 2

    @pytest.mark.timeout(20)
    def test_two_outstanding_requests_with_one_id_are_both_answered(
        self, client: DocClient
    ) -> None:
        """Both replies carry the id; only their content (here, the order) differs."""
        client.send({"op": "call", "id": 7, "data": b64("03012c01")})  # 300 ms, then 01
        client.send({"op": "call", "id": 7, "data": b64("0102")})
        first, second = client.recv(), client.recv()
        assert (first["id"], second["id"]) == (7, 7)
        assert (first["data"], second["data"]) == (b64("02"), b64("01"))

    @pytest.mark.timeout(20)
    def test_ms_is_written_with_a_point_and_three_decimals(self, client: DocClient) -> None:
        """A successful call's ms: digits, '.', exactly three decimals."""
        client.send({"op": "call", "id": "ms", "data": b64("01aabb")})
        assert re.search(rb',"ms":\d+\.\d{3},', client.recv_raw())


class TestEvents:
    @pytest.mark.timeout(20)
    def test_subscribe_receive_device_events_unsubscribe(self, client: DocClient) -> None:
        """Subscribed: 06 00 03 gives three device events; unsubscribed: none."""
        sub = client.request("subscribe", topics=["events"])
        assert set(sub) == {"id", "ok", "topics"} and sub["topics"] == ["events"]
        assert client.request("call", data=b64("060003"))["status"] == 0
        got = [client.event() for _ in range(3)]
        assert all(set(ev) == {"event", "data", "generation"} for ev in got)
        assert all(ev["event"] == "device" and ev["generation"] == 1 for ev in got)
        assert [base64.b64decode(ev["data"]) for ev in got] == [
            b"evt" + i.to_bytes(4, "big") for i in range(3)
        ]
        assert client.request("unsubscribe")["topics"] == []
        client.request("call", data=b64("060002"))
        time.sleep(0.3)
        client.request("status")
        assert not client.events

    @pytest.mark.timeout(30)
    def test_link_events_on_reconnect(self, tmp_path: Path) -> None:
        """reconnect: link down (old generation), connecting, up (generation + 1)."""
        sim = SimProc(tmp_path)
        roles = {"admin": {"uids": [os.getuid()], "gids": []}}
        d = DaemonProc(write_config(tmp_path, sim.link, {"api": {"roles": roles}}))
        c = DocClient(d.socket)
        try:
            assert c.request("subscribe", topics="link")["topics"] == ["link"]
            assert set(c.request("reconnect")) == {"id", "ok"}
            seen: list[Msg] = []
            while not seen or seen[-1]["state"] != "up":
                seen.append(c.event())
            assert all(set(ev) == {"event", "state", "reason", "generation"} for ev in seen)
            states = [(ev["state"], ev["generation"]) for ev in seen]
            assert states[0] == ("down", 1) and ("connecting", 1) in states
            assert states[-1] == ("up", 2)
        finally:
            c.close()
            d.stop()
            sim.stop()

    @pytest.mark.timeout(20)
    def test_unsubscribe_from_an_empty_list_keeps_subscriptions(self, client: DocClient) -> None:
        """unsubscribe with topics [] changes nothing (only an absent list means all)."""
        client.request("subscribe", topics=["events", "link"])
        assert client.request("unsubscribe", topics=[])["topics"] == ["events", "link"]


BAD_REQUESTS: list[tuple[bytes, str, Any]] = [
    (b"\xff\xfe not utf-8", "bad_request", None),
    (b"{not json", "bad_request", None),
    (b"", "bad_request", None),
    (b"[1, 2]", "bad_request", None),
    (b'{"op": "status"}', "bad_request", None),
    (b'{"op": "status", "id": true}', "bad_request", None),
    (b'{"op": "status", "id": 1.5}', "bad_request", None),
    (b'{"op": "status", "id": 1.0}', "bad_request", None),
    (b'{"op": "status", "id": 1e3}', "bad_request", None),
    (b'{"op": "status", "id": null}', "bad_request", None),
    (b'{"op": "call", "id": 1, "data": "AQ==", "timeout": NaN}', "bad_request", None),
    (b"[" * 100000 + b"]" * 100000, "bad_request", None),
    (b'{"op": "frobnicate", "id": 2}', "unknown_op", 2),
    (b'{"op": "call", "id": "c"}', "bad_request", "c"),
    (b'{"op": "call", "id": 3, "data": "AQ==", "text": "x"}', "bad_request", 3),
    (b'{"op": "call", "id": 4, "data": "AQ"}', "bad_request", 4),
    (b'{"op": "call", "id": 5, "data": "AQ==", "timeout": -1}', "bad_request", 5),
    (b'{"op": "call", "id": 6, "data": "AQ==", "retry": 1.0}', "bad_request", 6),
    (b'{"op": "call", "id": 13, "data": "AQ==", "retry": 101}', "bad_request", 13),
    (b'{"op": "call", "id": 14, "data": "AQ==", "retry": -1}', "bad_request", 14),
    (b'{"op": "call", "id": 15, "data": "AQ==", "timeout": 3600.5}', "bad_request", 15),
    (b'{"op": "call", "id": 7, "data": "AQ==", "wait": "yes"}', "bad_request", 7),
    (b'{"op": "call", "id": 8, "text": "\\ud800"}', "bad_request", 8),
    (b'{"op": "subscribe", "id": 9, "topics": ["bogus"]}', "bad_request", 9),
    (b'{"op": "lease", "id": 10, "seconds": 0.5}', "bad_request", 10),
    (b'{"op": "lease", "id": 16, "seconds": 60.5}', "bad_request", 16),
    (b'{"op": "release", "id": 11}', "bad_request", 11),
    (b'{"op": "call", "id": 12, "data": "' + b"A" * 5464 + b'"}', "too_large", 12),
]


class TestErrors:
    @pytest.mark.timeout(30)
    def test_error_table(self, client: DocClient) -> None:
        """Every malformed request of section 2.8 gets its code and id; the connection stays."""
        for body, code, req_id in BAD_REQUESTS:
            client.send_raw(body)
            reply = client.recv()
            assert is_error(reply, code, req_id), (body[:60], reply)
        assert client.request("status")["ok"] is True

    @pytest.mark.timeout(20)
    def test_oversize_frame_gets_too_large_then_close(self, live: DaemonProc) -> None:
        """A header above max_message: too_large with id null, then verld closes."""
        c = DocClient(live.socket)
        try:
            c.sock.sendall(struct.pack(">I", 2_000_000))
            assert is_error(c.recv(), "too_large", None)
            with pytest.raises(EOFError):
                c.recv()
        finally:
            c.close()

    @pytest.mark.timeout(20)
    def test_null_timeout_and_retry_are_bad_requests(self, client: DocClient) -> None:
        """timeout: null and retry: null are not numbers: bad_request, like wait: null."""
        for field in ("wait", "timeout", "retry"):
            r = client.request("call", data=b64("01"), **{field: None})
            assert is_error(r, "bad_request", r["id"]), (field, r)


# --- the page itself ------------------------------------------------------------------------
def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def code_block(lang: str, first_line_contains: str) -> str:
    for m in re.finditer(rf"```{lang}\n(.*?)```", doc_text(), re.S):
        if first_line_contains in m.group(1).split("\n", 1)[0]:
            return m.group(1)
    raise AssertionError(f"no ```{lang} block starting with {first_line_contains!r}")


def output_after(marker: str) -> list[str]:
    """The lines of the ```text block that shows a command's run, without the $ line."""
    text = doc_text()
    start = text.index(marker)
    block = re.search(r"```text\n(.*?)```", text[start:], re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if not line.startswith("$ ")]


def normalize(lines: list[str]) -> list[str]:
    """Drop what differs between runs: timings and the role (root is admin)."""
    return [re.sub(r"role \w+", "role R", re.sub(r"\d+(\.\d+)? ms", "N ms", s)) for s in lines]


HEXLINE = re.compile(r"^[0-9a-f]{8}  ((?:[0-9a-f]{2} ){1,16})")


def dumps() -> Iterator[tuple[str, bytes, int | None]]:
    """(arrow line, dumped bytes, total length when cut) for every arrow line with a dump."""
    lines = doc_text().splitlines()
    for i, line in enumerate(lines):
        if not line.startswith(("→ ", "← ")):
            continue
        data, total = b"", None
        for nxt in lines[i + 1 :]:
            m = HEXLINE.match(nxt)
            if m:
                data += bytes.fromhex(m.group(1))
                continue
            cut = re.match(r"\.\.\. \((\d+) bytes in all\)", nxt)
            total = int(cut.group(1)) if cut else None
            break
        if data:
            yield line, data, total


class TestThePage:
    @pytest.mark.timeout(10)
    def test_every_hex_dump_is_the_frame_of_its_json(self) -> None:
        """Each dump is u32 BE length + the JSON shown above it (a prefix when cut)."""
        count = 0
        for line, data, total in dumps():
            shown = line[2:]
            if shown.startswith("("):  # a bare header, described in words
                continue
            (n,) = struct.unpack(">I", data[:4])
            assert n + 4 == (total if total is not None else len(data)), shown
            body = shown.removesuffix("…").encode("utf-8")
            if shown.endswith("…") or total is not None:
                assert data[4:].startswith(body[: len(data) - 4]), shown
            else:
                assert data[4:] == body, shown
            if line.startswith("←"):  # verld's replies are valid JSON (requests may not be)
                json.loads(body)
            count += 1
        assert count >= 40

    @pytest.mark.timeout(10)
    def test_verl_worked_example_encodes_as_shown(self) -> None:
        """The worked request and reply: CRC-32, COBS and wire bytes as the page prints them."""
        text = doc_text()
        section = text[text.index("#### Worked example") : text.index("#### What the receiver")]
        fields = ("type", "seq", "payload", "CRC-32", "body", "COBS", "wire")
        blocks = re.findall(r"```\n(type .*?)```", section, re.S)
        assert len(blocks) == 2
        for block in blocks:
            got = {}
            for line in block.splitlines():
                name, _, rest = line.partition(" ")
                hexpart = re.match(r"\s*((?:[0-9a-f]{2} ?)+)", rest)
                if name in fields and hexpart:
                    got[name] = bytes.fromhex(hexpart.group(1))
            head = got["type"] + got["seq"] + got["payload"]
            assert got["CRC-32"] == zlib.crc32(head).to_bytes(4, "big")
            assert got["body"] == head + got["CRC-32"]
            assert got["COBS"] == cobs(got["body"])
            assert got["wire"] == b"\x00" + got["COBS"] + b"\x00"

    @pytest.mark.timeout(30)
    def test_python_example_runs_as_shown(self, live: DaemonProc) -> None:
        """The page's Python raw-socket client prints what the page shows."""
        source = code_block("python", "verld_client.py")
        proc = subprocess.run(
            [sys.executable, "-c", source, live.socket],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        shown = output_after("### Python (raw socket")
        assert normalize(proc.stdout.splitlines()) == normalize(shown)

    @pytest.mark.timeout(30)
    @pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
    def test_node_example_runs_as_shown(self, live: DaemonProc, tmp_path: Path) -> None:
        """The page's Node.js client prints what the page shows."""
        script = tmp_path / "verld-client.js"
        script.write_text(code_block("js", "verld-client.js"))
        proc = subprocess.run(
            ["node", str(script), live.socket],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        shown = output_after("### Node.js")
        assert normalize(proc.stdout.splitlines()) == normalize(shown)


def cobs(data: bytes) -> bytes:
    """COBS as section 3.1 describes it: cut at zeros, each piece as len+1 then the piece."""
    out = b""
    for piece in data.split(b"\x00"):
        full = len(piece) // 254 * 254
        for at in range(0, full, 254):
            out += b"\xff" + piece[at : at + 254]
        out += bytes([len(piece) - full + 1]) + piece[full:]
    return out
