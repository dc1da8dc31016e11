"""Call requests over MQTT, sans-I/O: parsing, reply routing, redelivery, replies.

Strategy: `Intake.receive` takes one message published on `<base>/<device>/call`
(its payload and MQTT 5 properties, and the time) and returns what to do with it:
`Answer` (publish this reply on these routes now), `Run` (send this call to verld,
then `Intake.finish` it), `Joined` (a redelivery of a request still running: its
route is added to that request's) or `Drop` (expired: no reply at all). Nothing
here touches a socket or a clock, so every rule is a unit test:

- where a reply goes: the request's Response Topic with its Correlation Data, else
  `<base>/<device>/call/response`; a Response Topic that could make the reply a
  request (or land in the bridge's or Home Assistant's tree) is refused, and the
  `forbidden` reply goes to `call/response` instead;
- a Message Expiry Interval of 0 means the request expired on the way: dropped;
- a request repeating the Correlation Data of one answered in the last 60 s (per
  device) gets that first reply again, and one repeating a request still running
  is not run a second time: when it completes, its reply goes to each copy's route
  (so every copy, like every request, gets exactly one reply);
- malformed requests get `bad_request`, `calls: false` gets `forbidden`; every
  reply echoes the request's `transaction` as given (and verld's `"reply": false`).
"""

from __future__ import annotations

import binascii
import hashlib
import math
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from verld import wire
from verld.config.suggest import closest
from verld.mqtt.topics import Topics, b64, data_hex, encode

#: the largest request payload read (a call's data is far smaller: verld's max_payload)
MAX_REQUEST = 1 << 20
#: how long an answered request's reply is kept for a redelivery, and how many are kept
REPLAY_SECONDS = 60.0
REPLAY_ENTRIES = 4096
#: how deep a `transaction` may nest (it is echoed: it must encode again anywhere)
MAX_DEPTH = 32
FIELDS = ("data", "hex", "text", "timeout", "retry", "reply", "transaction")
_PAYLOADS = ("data", "hex", "text")


@dataclass(frozen=True, slots=True)
class Echo:
    """The request's `transaction`, when it had one (any JSON value, null included)."""

    value: Any


@dataclass(frozen=True, slots=True)
class CallRequest:
    """A valid request: the API call's fields (`data`|`text`, `timeout`, `retry`, `reply`)."""

    fields: dict[str, Any]
    size: int  #: payload bytes, for the device's max_payload
    echo: Echo | None = None


@dataclass(frozen=True, slots=True)
class Rejected:
    """A request that cannot run; `reply` is its error reply."""

    reply: dict[str, Any]


def error_reply(code: str, message: str, echo: Echo | None = None) -> dict[str, Any]:
    reply: dict[str, Any] = {"ok": False, "error": {"code": code, "message": message}}
    if echo is not None:
        reply["transaction"] = echo.value
    return reply


def call_reply(api_reply: dict[str, Any], echo: Echo | None) -> dict[str, Any]:
    """verld's reply to a call → the MQTT reply: its fields (not `id`), the data's
    `hex`, and the request's `transaction`."""
    out = {k: v for k, v in api_reply.items() if k != "id"}
    out.setdefault("ok", False)
    hexed = data_hex(out.get("data"))
    if hexed is not None:
        out["hex"] = hexed
    if echo is not None:
        out["transaction"] = echo.value
    return out


def parse_call(payload: bytes) -> CallRequest | Rejected:
    """Any bytes → a request, or the `bad_request` reply saying what is wrong."""
    if len(payload) > MAX_REQUEST:
        return _bad(f"a request of {len(payload)} bytes is larger than {MAX_REQUEST}", None)
    try:
        obj = wire.decode_json(payload)
    except ValueError as exc:
        return _bad(f"not valid JSON: {exc}", None)
    if type(obj) is not dict:
        return _bad("a request must be a JSON object", None)
    echo = Echo(obj["transaction"]) if "transaction" in obj else None
    if echo is not None and _depth(echo.value) > MAX_DEPTH:
        return _bad(f"'transaction' nests deeper than {MAX_DEPTH} levels", None)
    problem = _field_problem(obj)
    if problem is not None:
        return _bad(problem, echo)
    try:
        data, fields = _payload(obj)
    except ValueError as exc:
        return _bad(str(exc), echo)
    for key in ("timeout", "retry", "reply"):
        if key in obj:
            fields[key] = obj[key]
    return CallRequest(fields, len(data), echo)


def _bad(message: str, echo: Echo | None) -> Rejected:
    return Rejected(error_reply("bad_request", message, echo))


def _depth(value: Any) -> int:
    """How deep a JSON value nests, without recursion (decoded JSON has no cycles)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                children = item.values() if isinstance(item, dict) else item
                stack.extend((child, depth + 1) for child in children)
    return deepest


def _field_problem(obj: dict[str, Any]) -> str | None:
    for key in obj:
        if key not in FIELDS:
            near = closest(key, FIELDS)
            hint = f"; did you mean '{near}'?" if near else f" (fields: {', '.join(FIELDS)})"
            return f"unknown field {_quoted(key)}{hint}"
    given = [k for k in _PAYLOADS if k in obj]
    if not given:
        return "a request needs one of 'data' (base64), 'hex' or 'text'"
    if len(given) > 1:
        return f"give one of 'data', 'hex' or 'text', not {' and '.join(given)}"
    if "timeout" in obj and not _seconds(obj["timeout"]):
        return f"'timeout' must be a number of seconds, 0 < timeout <= {wire.MAX_SECONDS}"
    if "retry" in obj and not _retry(obj["retry"]):
        return f"'retry' must be an integer 0..{wire.MAX_RETRY}"
    if "reply" in obj and type(obj["reply"]) is not bool:
        return "'reply' must be true or false (false: the device gives no answer)"
    return None


def _seconds(value: Any) -> bool:
    if type(value) is not int and type(value) is not float:  # (not bool)
        return False
    return math.isfinite(value) and 0 < value <= wire.MAX_SECONDS


def _retry(value: Any) -> bool:
    return type(value) is int and 0 <= value <= wire.MAX_RETRY


def _quoted(key: str) -> str:
    return repr(key if len(key) <= 40 else key[:40] + "...")


def _payload(obj: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """(the bytes, the API fields carrying them); ValueError says what is wrong."""
    if "text" in obj:
        text = obj["text"]
        if type(text) is not str:
            raise ValueError("'text' must be a string")
        try:
            return text.encode("utf-8"), {"text": text}
        except UnicodeEncodeError:
            raise ValueError("'text' is not valid Unicode (a lone surrogate)") from None
    if "hex" in obj:
        value = obj["hex"]
        if type(value) is not str:
            raise ValueError("'hex' must be a string of hex digits")
        try:
            data = bytes.fromhex(value)
        except ValueError:
            raise ValueError("'hex' is not hex digits (two per byte)") from None
    else:
        value = obj["data"]
        if type(value) is not str:
            raise ValueError("'data' must be a base64 string")
        try:
            data = binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
        except (binascii.Error, ValueError):
            raise ValueError("'data' is not valid base64 (standard alphabet, padded)") from None
    return data, {"data": b64(data)}


# ---------------------------------------------------------------------------
# Routing, redelivery and the decision per request


@dataclass(frozen=True, slots=True)
class Route:
    """Where one reply goes: a topic, with the request's Correlation Data (MQTT 5)."""

    topic: str
    correlation: bytes | None = None


#: (device, correlation data, response topic, a digest of the request): a QoS 1
#: redelivery repeats all four; another request that reuses a correlation data (two
#: callers counting from 1, say) is a new request and runs
Key = tuple[str, bytes, str | None, bytes]


class ReplyCache:
    """Requests still running, and recent replies, by (device, correlation data).

    Answered entries live `ttl` seconds and at most `size` of them are kept (oldest
    out); running ones stay until finished, since each is owed its reply."""

    def __init__(self, ttl: float = REPLAY_SECONDS, size: int = REPLAY_ENTRIES) -> None:
        self.ttl, self.size = ttl, size
        self.running: dict[Key, list[Route]] = {}
        self.answered: OrderedDict[Key, tuple[float, bytes]] = OrderedDict()

    def replay(self, key: Key, now: float) -> bytes | None:
        """The reply stored for `key`, if it was answered in the last `ttl` seconds."""
        self._expire(now)
        entry = self.answered.get(key)
        return entry[1] if entry is not None else None

    def join(self, key: Key, route: Route) -> bool:
        """Owe a running request's reply to one more copy of it (on `route`, which may
        be the first copy's too: each request gets its one reply); False when `key` is
        not running."""
        routes = self.running.get(key)
        if routes is None:
            return False
        routes.append(route)
        return True

    def begin(self, key: Key, route: Route) -> None:
        self.running[key] = [route]

    def finish(self, key: Key, reply: bytes, now: float) -> list[Route]:
        """Store the reply; the routes it is owed to."""
        routes = self.running.pop(key, [])
        self.store(key, reply, now)
        return routes

    def store(self, key: Key, reply: bytes, now: float) -> None:
        self.answered.pop(key, None)
        self.answered[key] = (now, reply)
        while len(self.answered) > self.size:
            self.answered.popitem(last=False)

    def abandon(self, key: Key) -> None:
        """A running request dropped without a reply (it expired while waiting)."""
        self.running.pop(key, None)

    def _expire(self, now: float) -> None:
        while self.answered:
            key, (at, _) = next(iter(self.answered.items()))
            if now - at < self.ttl:
                return
            del self.answered[key]


@dataclass(slots=True)
class Counters:
    """What happened to requests, for logs."""

    requests: int = 0
    replies: int = 0
    bad_requests: int = 0
    refused: int = 0
    expired: int = 0
    duplicates: int = 0


@dataclass(frozen=True, slots=True)
class Answer:
    routes: tuple[Route, ...]
    reply: bytes
    code: str | None = None  #: the error code, None on success


@dataclass(frozen=True, slots=True)
class Run:
    device: str
    request: CallRequest
    route: Route
    key: Key | None
    deadline: float | None  #: from the Message Expiry Interval: drop if not started by then


@dataclass(frozen=True, slots=True)
class Joined:
    route: Route


@dataclass(frozen=True, slots=True)
class Drop:
    reason: str


Action = Answer | Run | Joined | Drop


@dataclass
class Intake:
    """Decides what each request gets; see the module docstring."""

    topics: Topics
    devices: Collection[str]
    calls: bool = True
    cache: ReplyCache = field(default_factory=ReplyCache)
    counters: Counters = field(default_factory=Counters)

    def receive(
        self,
        device: str,
        payload: bytes,
        now: float,
        *,
        response_topic: str | None = None,
        correlation: bytes | None = None,
        expiry: int | None = None,
    ) -> Action:
        self.counters.requests += 1
        if expiry is not None and expiry <= 0:
            self.counters.expired += 1
            return Drop("its message expiry interval had passed")
        refusal = None if response_topic is None else self.topics.refusal(response_topic)
        topic = response_topic if response_topic is not None and refusal is None else None
        route = Route(topic or self.topics.response(device), correlation)
        key = None
        if correlation:  # (an empty Correlation Data identifies nothing)
            digest = hashlib.blake2b(payload, digest_size=16).digest()
            key = (device, correlation, response_topic, digest)
        if key is not None:
            stored = self.cache.replay(key, now)
            if stored is not None:
                self.counters.duplicates += 1
                return Answer((route,), stored, _code(stored))
            if self.cache.join(key, route):
                self.counters.duplicates += 1
                return Joined(route)
        request = parse_call(payload)
        echo = request.echo if isinstance(request, CallRequest) else None
        if refusal is not None:
            self.counters.refused += 1
            reply = error_reply(
                "forbidden", f"replies may not go to {response_topic!r}: {refusal}", echo
            )
        elif device not in self.devices:
            self.counters.bad_requests += 1
            known = ", ".join(sorted(self.devices)) or "none"
            reply = error_reply(
                "bad_request", f"no device {device!r} here (devices: {known})", echo
            )
        elif not self.calls:
            self.counters.refused += 1
            reply = error_reply("forbidden", "calls are off on this bridge (calls: false)", echo)
        elif isinstance(request, Rejected):
            self.counters.bad_requests += 1
            reply = request.reply
        else:
            if key is not None:
                self.cache.begin(key, route)
            deadline = now + expiry if expiry is not None else None
            return Run(device, request, route, key, deadline)
        return self._answer(key, (route,), reply, now)

    def finish(self, run: Run, api_reply: dict[str, Any], now: float) -> Answer:
        """verld answered `run` (or the bridge answered for it: link_down, busy)."""
        reply = call_reply(api_reply, run.request.echo)
        payload = encode(reply)  # (once: for the reply cache and for the publish)
        routes = [run.route]
        if run.key is not None:
            routes = self.cache.finish(run.key, payload, now) or routes
        return self._answer(None, tuple(routes), reply, now, payload)

    def expire(self, run: Run) -> None:
        """`run` waited in the bridge past its deadline: dropped, no reply."""
        self.counters.expired += 1
        if run.key is not None:
            self.cache.abandon(run.key)

    def _answer(
        self,
        key: Key | None,
        routes: tuple[Route, ...],
        reply: dict[str, Any],
        now: float,
        payload: bytes | None = None,
    ) -> Answer:
        payload = encode(reply) if payload is None else payload
        if key is not None:
            self.cache.store(key, payload, now)
        self.counters.replies += len(routes)
        error = reply.get("error")
        return Answer(routes, payload, error.get("code") if isinstance(error, dict) else None)


def _code(stored: bytes) -> str | None:
    reply = wire.decode_json(stored)  # (the bridge's own encoding: always an object)
    error = reply.get("error")
    return error.get("code") if isinstance(error, dict) else None
