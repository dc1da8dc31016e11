"""Tests for verld-mqtt's sans-I/O parts: topics and payloads, call requests and
their replies, redelivery, and the bounded outbox."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verld.mqtt.calls import (
    MAX_DEPTH,
    Answer,
    CallRequest,
    Drop,
    Echo,
    Intake,
    Joined,
    Rejected,
    ReplyCache,
    Route,
    Run,
    call_reply,
    parse_call,
)
from verld.mqtt.outbox import Outbox
from verld.mqtt.topics import (
    DeviceState,
    Topics,
    bridge_state,
    discovery,
    event_payload,
    ha_host,
    status_payload,
)

T = Topics("verld/h1")


def obj(payload: bytes) -> Any:
    return json.loads(payload)


def bad(payload: bytes) -> str:
    """The bad_request message `payload` gets."""
    result = parse_call(payload)
    assert isinstance(result, Rejected), result
    assert result.reply["error"]["code"] == "bad_request"
    return str(result.reply["error"]["message"])


class TestTopics:
    def test_names(self) -> None:
        """Every topic hangs off the base."""
        assert (T.bridge_state, T.call_filter) == ("verld/h1/bridge/state", "verld/h1/+/call")
        assert [T.state("d"), T.event("d"), T.status("d"), T.call("d"), T.response("d")] == [
            "verld/h1/d/state",
            "verld/h1/d/event",
            "verld/h1/d/status",
            "verld/h1/d/call",
            "verld/h1/d/call/response",
        ]

    @pytest.mark.parametrize(
        ("topic", "device"),
        [
            ("verld/h1/psu/call", "psu"),
            ("verld/h1/call", None),
            ("verld/h2/psu/call", None),
            ("verld/h1/a/b/call", None),
            ("verld/h1/psu/call/response", None),
        ],
    )
    def test_device_of_call(self, topic: str, device: str | None) -> None:
        """Only <base>/<one level>/call is a request topic."""
        assert T.device_of_call(topic) == device

    @pytest.mark.parametrize(
        "topic",
        [
            "verld/h2/psu/call",
            "x/call",
            "call",
            "verld/h1/psu/call/response",
            "verld/h1",
            "verld/h1/anything",
            "homeassistant/x",
            "homeassistant",
            "a/+/b",
            "a/#",
            "",
            "$SYS/x",
        ],
    )
    def test_refused_response_topics(self, topic: str) -> None:
        """Replies never go where they could be a request, or into our or HA's tree."""
        assert T.refusal(topic) is not None

    @pytest.mark.parametrize("topic", ["my/reply", "verld/h1x/r", "clients/7/calls", "r"])
    def test_allowed_response_topics(self, topic: str) -> None:
        """Any other topic takes replies."""
        assert T.refusal(topic) is None

    def test_bridge_state_payloads(self) -> None:
        """online and offline, as JSON objects."""
        assert obj(bridge_state(True)) == {"state": "online"}
        assert obj(bridge_state(False)) == {"state": "offline"}


STATUS = {
    "id": 3,
    "ok": True,
    "link": {"state": "up", "generation": 4, "port": "/dev/x", "codec": "verl", "reason": "ok"},
    "uptime": 9.5,
}
OK = {"ok": True, "status": 0, "data": "AQ==", "ms": 0.3, "generation": 1}


class TestDeviceState:
    def test_never_known(self) -> None:
        """Before any contact: unreachable with every other field null."""
        assert obj(DeviceState().payload()) == {
            "state": "unreachable",
            "generation": None,
            "port": None,
            "codec": None,
        }

    def test_from_status(self) -> None:
        """A status reply's link block gives all four fields."""
        state = DeviceState().from_status(STATUS)
        assert obj(state.payload()) == {
            "state": "up",
            "generation": 4,
            "port": "/dev/x",
            "codec": "verl",
        }

    def test_link_event_keeps_port_and_codec(self) -> None:
        """A link event changes state and generation only."""
        state = (
            DeviceState()
            .from_status(STATUS)
            .from_link_event({"event": "link", "state": "down", "reason": "eof", "generation": 4})
        )
        assert (state.state, state.generation, state.port) == ("down", 4, "/dev/x")

    def test_unreachable_keeps_last_known(self) -> None:
        """Unreachable keeps the last known generation, port and codec."""
        state = DeviceState().from_status(STATUS).unreachable()
        assert obj(state.payload()) == {
            "state": "unreachable",
            "generation": 4,
            "port": "/dev/x",
            "codec": "verl",
        }

    def test_status_payload_drops_id_and_ok(self) -> None:
        """The status topic is verld's reply without the request's id and ok."""
        assert set(obj(status_payload(STATUS))) == {"link", "uptime"}


class TestEvents:
    def test_event_payload(self) -> None:
        """A device event becomes data, lowercase hex and generation."""
        ev = {"event": "device", "data": "ZXZ0AAAAAA==", "generation": 1}
        assert obj(event_payload(ev) or b"") == {
            "data": "ZXZ0AAAAAA==",
            "hex": "65767400000000",
            "generation": 1,
        }

    def test_event_text_kept(self) -> None:
        """Line devices' text is carried along."""
        ev = {"event": "device", "data": "SEk=", "text": "HI", "generation": 2}
        assert obj(event_payload(ev) or b"")["text"] == "HI"

    def test_other_events_are_not_device_events(self) -> None:
        """Link and overflow events publish nothing on the event topic."""
        assert event_payload({"event": "link", "state": "up"}) is None


class TestDiscovery:
    def test_host_sanitised(self) -> None:
        """Ids use the host in [a-z0-9_]."""
        assert ha_host("Lab-PC.2") == "lab_pc_2"

    def test_three_configs_with_unique_ids(self) -> None:
        """A connectivity binary_sensor and two total_increasing sensors, all retained."""
        configs = {
            t: obj(p) for t, p in discovery(T, "Lab-1", "psu", "verl", "verld 0.1.0").items()
        }
        link = configs["homeassistant/binary_sensor/verld_lab_1_psu/link/config"]
        assert (link["unique_id"], link["device_class"]) == ("verld_lab_1_psu_link", "connectivity")
        assert link["state_topic"] == "verld/h1/psu/state"
        assert link["availability_topic"] == "verld/h1/bridge/state"
        assert link["device"]["identifiers"] == ["verld_lab_1_psu"]
        assert (link["device"]["model"], link["device"]["sw_version"]) == ("verl", "0.1.0")
        calls = configs["homeassistant/sensor/verld_lab_1_psu/calls/config"]
        errors = configs["homeassistant/sensor/verld_lab_1_psu/errors/config"]
        assert calls["value_template"] == "{{ value_json.counters.calls }}"
        assert errors["value_template"] == "{{ value_json.counters.calls_failed }}"
        assert calls["state_class"] == errors["state_class"] == "total_increasing"

    def test_unknown_model_left_out(self) -> None:
        """Before verld answered, the device block has no null model (HA refuses nulls)."""
        for payload in discovery(T, "h", "d", None, None).values():
            assert "model" not in obj(payload)["device"]


class TestParseCall:
    def test_hex(self) -> None:
        """hex becomes base64 data for the API."""
        req = parse_call(b'{"hex":"01aabb"}')
        assert isinstance(req, CallRequest)
        assert (req.fields, req.size, req.echo) == ({"data": "Aaq7"}, 3, None)

    def test_data_text_timeout_retry_transaction(self) -> None:
        """data, text, timeout, retry pass through; transaction is echoed."""
        req = parse_call(b'{"data":"AQ==","timeout":2.5,"retry":3,"transaction":{"a":[1]}}')
        assert isinstance(req, CallRequest) and req.echo is not None
        assert (req.fields, req.echo.value) == (
            {"data": "AQ==", "timeout": 2.5, "retry": 3},
            {"a": [1]},
        )
        text = parse_call(b'{"text":"PING"}')
        assert isinstance(text, CallRequest) and text.fields == {"text": "PING"}

    def test_reply_passes_through_as_a_boolean(self) -> None:
        """reply: false (a command with no answer) and reply: true go to verld as given."""
        for value in (False, True):
            req = parse_call(json.dumps({"text": "VOLT 5.0", "reply": value}).encode())
            assert isinstance(req, CallRequest)
            assert req.fields == {"text": "VOLT 5.0", "reply": value}

    def test_null_transaction_is_echoed(self) -> None:
        """A transaction of null is still a transaction."""
        req = parse_call(b'{"hex":"01","transaction":null}')
        assert isinstance(req, CallRequest) and req.echo is not None and req.echo.value is None

    @pytest.mark.parametrize(
        ("payload", "words"),
        [
            (b"not json", "not valid JSON"),
            (b"[1]", "JSON object"),
            (b"\xff", "not valid JSON"),
            (b'{"hex":"01","NaN":NaN}', "not valid JSON"),
            (b"{}", "needs one of"),
            (b'{"hex":"01","text":"a"}', "give one of"),
            (b'{"hex":"0g"}', "'hex' is not hex"),
            (b'{"data":"AQ"}', "'data' is not valid base64"),
            (b'{"data":"A Q=="}', "base64"),
            (b'{"data":1}', "'data' must be"),
            (b'{"text":"\\ud800"}', "lone surrogate"),
            (b'{"hex":"01","timeout":0}', "'timeout'"),
            (b'{"hex":"01","timeout":3601}', "'timeout'"),
            (b'{"hex":"01","timeout":true}', "'timeout'"),
            (b'{"hex":"01","retry":101}', "'retry'"),
            (b'{"hex":"01","retry":1.0}', "'retry'"),
            (b'{"hex":"01","wait":1}', "field 'wait'"),
            (b'{"hex":"01","transacton":1}', "did you mean 'transaction'?"),
            (b'{"hex":"01","reply":0}', "'reply' must be true or false"),
            (b'{"hex":"01","reply":null}', "'reply' must be true or false"),
            (b'{"hex":"01","reply":"false"}', "'reply' must be true or false"),
            (b'{"hex":"01","replay":false}', "did you mean 'reply'?"),
        ],
    )
    def test_bad_requests(self, payload: bytes, words: str) -> None:
        """Each malformed request gets a bad_request saying what is wrong."""
        assert words in bad(payload)

    def test_bad_request_echoes_transaction(self) -> None:
        """A request with a transaction but bad fields still gets it back."""
        result = parse_call(b'{"hex":"zz","transaction":"t1"}')
        assert isinstance(result, Rejected) and result.reply["transaction"] == "t1"

    def test_deep_transaction_refused(self) -> None:
        """A transaction nested past MAX_DEPTH is refused (it must encode again)."""
        deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
        assert "nests deeper" in bad(f'{{"hex":"01","transaction":{deep}}}'.encode())

    def test_too_large(self) -> None:
        """A request above 1 MiB is refused without being parsed."""
        assert "larger than" in bad(b" " * (1 << 20 + 1))

    @settings(max_examples=400, deadline=None)
    @given(st.binary(max_size=300))
    def test_any_bytes_give_a_request_or_a_reply(self, payload: bytes) -> None:
        """Any bytes: a request or a bad_request reply that encodes, never an exception."""
        result = parse_call(payload)
        if isinstance(result, Rejected):
            json.dumps(result.reply)
        else:
            assert set(result.fields) <= {"data", "text", "timeout", "retry", "reply"}

    @settings(max_examples=400, deadline=None)
    @given(
        st.dictionaries(
            st.sampled_from(
                ["data", "hex", "text", "timeout", "retry", "reply", "transaction", "x"]
            ),
            st.recursive(
                st.none()
                | st.booleans()
                | st.integers()
                | st.floats(allow_nan=False)
                | st.text(max_size=8),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3)
                ),
                max_leaves=8,
            ),
            max_size=4,
        )
    )
    def test_any_json_object_gives_a_request_or_a_reply(self, body: dict[str, Any]) -> None:
        """Any JSON object: a request or a bad_request, transaction echoed when valid."""
        result = parse_call(json.dumps(body).encode())
        if isinstance(result, Rejected):
            reply = json.loads(json.dumps(result.reply))
            assert reply["ok"] is False and reply["error"]["code"] == "bad_request"
        elif "transaction" in body:
            assert result.echo is not None and result.echo.value == body["transaction"]


class TestCallReply:
    def test_success(self) -> None:
        """The API's reply fields, without id, plus hex and transaction."""
        api = {"id": 9, "ok": True, "status": 0, "data": "qrs=", "ms": 0.4, "generation": 1}
        req = parse_call(b'{"hex":"01aabb","transaction":7}')
        assert isinstance(req, CallRequest)
        assert call_reply(api, req.echo) == {
            **{k: v for k, v in api.items() if k != "id"},
            "hex": "aabb",
            "transaction": 7,
        }

    def test_a_reply_not_awaited_says_so(self) -> None:
        """verld's reply to a reply: false call keeps its "reply": false."""
        api = {
            "id": 3,
            "ok": True,
            "status": 0,
            "data": "",
            "ms": 100.2,
            "generation": 1,
            "reply": False,
        }
        assert call_reply(api, Echo("t"))["reply"] is False

    def test_device_error_keeps_status_and_data(self) -> None:
        """A device error carries status, data and its hex."""
        api = {
            "id": 1,
            "ok": False,
            "status": 7,
            "data": "",
            "ms": 1.0,
            "generation": 1,
            "error": {"code": "device_error", "message": "device status 0x07"},
        }
        reply = call_reply(api, None)
        assert (reply["status"], reply["hex"], reply["error"]["code"]) == (7, "", "device_error")
        assert "transaction" not in reply and "id" not in reply


def intake(**kw: Any) -> Intake:
    return Intake(T, ["psu"], **kw)


class TestIntake:
    def test_run_replies_on_response_topic_with_correlation(self) -> None:
        """A valid request runs; its reply goes to the Response Topic with the Correlation Data."""
        i = intake()
        run = i.receive("psu", b'{"hex":"01"}', 0.0, response_topic="my/r", correlation=b"c")
        assert isinstance(run, Run) and run.route == Route("my/r", b"c")
        answer = i.finish(run, OK, 0.1)
        assert answer.routes == (Route("my/r", b"c"),) and obj(answer.reply)["hex"] == "01"

    def test_without_response_topic_reply_on_call_response(self) -> None:
        """No Response Topic (or MQTT 3.1.1): the reply goes to <base>/<device>/call/response."""
        run = intake().receive("psu", b'{"hex":"01"}', 0.0)
        assert isinstance(run, Run) and run.route == Route("verld/h1/psu/call/response")

    def test_refused_response_topic(self) -> None:
        """A refused Response Topic: forbidden on call/response, with correlation, transaction."""
        a = intake().receive(
            "psu",
            b'{"hex":"01","transaction":5}',
            0.0,
            response_topic="verld/h2/x/call",
            correlation=b"c",
        )
        assert isinstance(a, Answer) and a.routes == (Route("verld/h1/psu/call/response", b"c"),)
        assert (obj(a.reply)["error"]["code"], obj(a.reply)["transaction"]) == ("forbidden", 5)

    def test_calls_off(self) -> None:
        """calls: false answers every request forbidden, on its normal route."""
        a = intake(calls=False).receive("psu", b'{"hex":"01"}', 0.0, response_topic="my/r")
        assert isinstance(a, Answer) and a.code == "forbidden" and a.routes[0].topic == "my/r"

    def test_unknown_device(self) -> None:
        """A request for a device the bridge does not have gets bad_request."""
        a = intake().receive("nope", b'{"hex":"01"}', 0.0)
        assert isinstance(a, Answer) and a.code == "bad_request"
        assert a.routes == (Route("verld/h1/nope/call/response"),)

    def test_malformed(self) -> None:
        """Malformed JSON gets bad_request, counted."""
        i = intake()
        a = i.receive("psu", b"{", 0.0)
        assert isinstance(a, Answer) and a.code == "bad_request" and i.counters.bad_requests == 1

    def test_expired_on_arrival_is_dropped(self) -> None:
        """Message Expiry Interval 0 on delivery: dropped, counted, no reply."""
        i = intake()
        assert isinstance(i.receive("psu", b'{"hex":"01"}', 0.0, expiry=0), Drop)
        assert i.counters.expired == 1

    def test_expiry_gives_a_deadline(self) -> None:
        """The remaining expiry becomes the latest time the call may start."""
        run = intake().receive("psu", b'{"hex":"01"}', 100.0, expiry=5)
        assert isinstance(run, Run) and run.deadline == 105.0

    def test_redelivery_after_answer_gets_the_stored_reply(self) -> None:
        """The same Correlation Data within 60 s: the first reply again, not run again."""
        i = intake()
        run = i.receive(
            "psu", b'{"hex":"01","transaction":1}', 0.0, response_topic="o/r", correlation=b"c"
        )
        assert isinstance(run, Run)
        first = i.finish(run, OK, 1.0)
        again = i.receive(
            "psu", b'{"hex":"01","transaction":1}', 30.0, response_topic="o/r", correlation=b"c"
        )
        assert isinstance(again, Answer) and again.reply == first.reply
        assert again.routes == (Route("o/r", b"c"),) and i.counters.duplicates == 1

    def test_another_request_reusing_a_correlation_data_runs(self) -> None:
        """Another payload reusing a Correlation Data is a new request, run, not the old reply."""
        # Two callers counting from 1: not answered with the other's reply.
        i = intake()
        run = i.receive("psu", b'{"hex":"01aa"}', 0.0, response_topic="o/r", correlation=b"1")
        assert isinstance(run, Run)
        i.finish(run, OK, 1.0)
        other = i.receive("psu", b'{"hex":"01bb"}', 2.0, response_topic="o/r", correlation=b"1")
        assert isinstance(other, Run) and i.counters.duplicates == 0

    def test_an_empty_correlation_data_is_never_a_redelivery(self) -> None:
        """A zero-length Correlation Data identifies nothing: both copies run."""
        i = intake()
        first = i.receive("psu", b'{"hex":"01"}', 0.0, response_topic="o/r", correlation=b"")
        assert isinstance(first, Run)
        i.finish(first, OK, 1.0)
        again = i.receive("psu", b'{"hex":"01"}', 2.0, response_topic="o/r", correlation=b"")
        assert isinstance(again, Run)

    def test_redelivery_after_60_s_runs_again(self) -> None:
        """After 60 s the correlation data is free again."""
        i = intake()
        run = i.receive("psu", b'{"hex":"01"}', 0.0, correlation=b"c")
        assert isinstance(run, Run)
        i.finish(run, OK, 1.0)
        assert isinstance(i.receive("psu", b'{"hex":"01"}', 61.5, correlation=b"c"), Run)

    def test_redelivery_in_flight_joins(self) -> None:
        """A duplicate of a running request is not run; each copy gets the reply."""
        i = intake()
        run = i.receive("psu", b'{"hex":"01"}', 0.0, response_topic="a/r", correlation=b"c")
        dup = i.receive("psu", b'{"hex":"01"}', 0.1, response_topic="a/r", correlation=b"c")
        assert isinstance(run, Run) and isinstance(dup, Joined)
        assert i.finish(run, OK, 0.2).routes == (Route("a/r", b"c"), Route("a/r", b"c"))

    def test_each_copy_in_flight_gets_its_reply(self) -> None:
        """Two copies on the same Response Topic: one run, two replies (one per request)."""
        i = intake()
        run = i.receive("psu", b'{"hex":"01"}', 0.0, response_topic="a/r", correlation=b"c")
        assert isinstance(run, Run)
        assert isinstance(
            i.receive("psu", b'{"hex":"01"}', 0.1, response_topic="a/r", correlation=b"c"), Joined
        )
        assert i.finish(run, OK, 0.2).routes == (Route("a/r", b"c"),) * 2

    def test_correlation_is_per_device(self) -> None:
        """The same Correlation Data on another device is another request."""
        i = Intake(T, ["a", "b"])
        assert isinstance(i.receive("a", b'{"hex":"01"}', 0.0, correlation=b"c"), Run)
        assert isinstance(i.receive("b", b'{"hex":"01"}', 0.0, correlation=b"c"), Run)

    def test_expired_in_the_bridge_frees_the_correlation(self) -> None:
        """A run dropped for its deadline is forgotten: a later copy runs."""
        i = intake()
        run = i.receive("psu", b'{"hex":"01"}', 0.0, correlation=b"c", expiry=1)
        assert isinstance(run, Run)
        i.expire(run)
        assert isinstance(i.receive("psu", b'{"hex":"01"}', 2.0, correlation=b"c"), Run)

    def test_cache_is_bounded(self) -> None:
        """At most `size` answered entries are kept, oldest out."""
        cache = ReplyCache(size=3)
        for n in range(5):
            cache.store(("d", bytes([n]), None, b""), b"r", float(n))
        assert [k[1] for k in cache.answered] == [b"\x02", b"\x03", b"\x04"]


class TestOutbox:
    def test_retained_coalesce_to_latest(self) -> None:
        """A retained topic changed many times while away is sent once, with its last value."""
        box = Outbox()
        for n in range(5):
            box.retain("t", bytes([n]))
        box.connect()
        item = box.pop()
        assert item is not None and (item.payload, item.retain) == (b"\x04", True)
        assert box.pop() is None

    def test_reconnect_resends_every_retained_topic(self) -> None:
        """After each connect every retained topic is due again."""
        box = Outbox()
        box.connect()
        box.retain("a", b"1")
        box.retain("b", b"2")
        while box.pop():
            pass
        box.disconnect()
        box.connect()
        assert sorted(i.topic for i in iter(box.pop, None)) == ["a", "b"]

    def test_unchanged_value_not_resent(self) -> None:
        """Setting a retained topic to its current value sends nothing."""
        box = Outbox()
        box.connect()
        box.retain("a", b"1")
        box.pop()
        box.retain("a", b"1")
        assert box.pop() is None

    def test_events_bounded_oldest_dropped(self) -> None:
        """Past the bound the oldest events go, counted."""
        box = Outbox(events_max=3)
        for n in range(5):
            box.event("e", bytes([n]))
        box.connect()
        assert [i.payload for i in iter(box.pop, None)] == [b"\x02", b"\x03", b"\x04"]
        assert box.events_dropped == 2 and box.drops_to_report() == 2 and box.drops_to_report() == 0

    def test_replies_dropped_while_disconnected(self) -> None:
        """A reply with no broker connection is dropped, not queued."""
        box = Outbox()
        assert box.reply("r", b"x", None) is False and box.replies_dropped == 1
        box.connect()
        assert box.pop() is None

    def test_replies_pending_at_disconnect_dropped(self) -> None:
        """Replies still queued when the connection goes are dropped and counted."""
        box = Outbox()
        box.connect()
        box.reply("r", b"x", b"c")
        box.disconnect()
        box.connect()
        assert box.pop() is None and box.replies_dropped == 1

    def test_replies_first_then_retained_then_events(self) -> None:
        """Requesters wait: replies go out before retained topics and events."""
        box = Outbox()
        box.event("e", b"1")
        box.retain("s", b"2")
        box.connect()
        box.reply("r", b"3", b"c")
        assert [(i.kind, i.correlation) for i in iter(box.pop, None)] == [
            ("reply", b"c"),
            ("retained", None),
            ("event", None),
        ]

    def test_home_assistant_resend(self) -> None:
        """resend(prefix) marks only the topics under it due again."""
        box = Outbox()
        box.connect()
        box.retain("homeassistant/x/config", b"1")
        box.retain("verld/h/s/state", b"2")
        while box.pop():
            pass
        box.resend("homeassistant/")
        assert [i.topic for i in iter(box.pop, None)] == ["homeassistant/x/config"]
