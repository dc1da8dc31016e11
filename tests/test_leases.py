"""The lease, Core's: one owner's exclusive hold on the device, on the core's clock.

No loop and no front: the real core of the session rig (link up, time a
`ManualClock`), with plain strings for owners, as any front's owners would be.
"""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from verld.fronts.leases import LeaseRefused
from verld.session.calls import CallResult
from verld.testing.session import SessionRig

CFG = (
    "device: {port: /dev/fake, timeout: 1.0, retry: 0}\n"
    "heartbeat: {interval: 0}\n"  # (no pings on the wire but the handshake's)
    "api: {socket: /tmp/verld.sock}\n"
)


def _rig() -> SessionRig:
    rig = SessionRig(CFG, core=True)
    rig.connect()
    return rig


def _shown(name: str) -> Any:
    return lambda: {"pid": 7, "uid": 1000, "client": name}


def _call(rig: SessionRig, owner: str) -> list[CallResult]:
    results: list[CallResult] = []
    rig.core.submit(rig.core.make_call(None, owner, b"\x01hi", results.append))
    rig.answer()
    return results


class TestTake:
    def test_only_the_holders_calls_reach_the_device(self) -> None:
        """While `a` holds the lease, `b`'s call fails busy and `a`'s is answered."""
        rig = _rig()
        rig.core.take_lease("a", 5, _shown("a"))
        theirs, ours = _call(rig, "b"), _call(rig, "a")
        assert (theirs[0].error, theirs[0].message) == (
            "busy",
            "the device is leased to another client",
        )
        assert (ours[0].error, ours[0].data) == (None, b"hi")

    def test_asking_again_renews_with_the_same_token(self) -> None:
        """The holder asking again keeps its token and gets the new length from now."""
        rig = _rig()
        token = rig.core.take_lease("a", 5, _shown("a"))
        rig.clock.advance(4)
        assert rig.core.take_lease("a", 5, _shown("a")) == token
        rig.clock.advance(4)
        assert rig.core.lease_status() == {"pid": 7, "uid": 1000, "client": "a", "seconds_left": 1}

    def test_another_owner_is_refused_with_the_holder_named(self) -> None:
        """A second owner's lease is refused, the message naming the holder by its repr."""
        rig = _rig()
        rig.core.take_lease("a", 5, _shown("a"))
        with pytest.raises(LeaseRefused, match=r"^the device is leased to 'a'$"):
            rig.core.take_lease("b", 5, _shown("b"))

    def test_status_reads_the_holder_each_time(self) -> None:
        """`status.lease` shows the holder as its front shows it now, and the time left."""
        rig = _rig()
        names = ["first"]
        rig.core.take_lease("a", 5, lambda: {"client": names[-1]})
        names.append("renamed")
        rig.clock.advance(1.5)
        assert rig.core.lease_status() == {"client": "renamed", "seconds_left": 3.5}


class TestEnd:
    def test_it_expires_on_the_cores_clock(self) -> None:
        """At `seconds` on the core's clock the lease ends and everyone is served again."""
        rig = _rig()
        rig.core.take_lease("a", 5, _shown("a"))
        rig.clock.advance(4.9)
        assert rig.core.lease_status() is not None
        with capture_logs() as logs:
            rig.clock.advance(0.1)
        assert rig.core.lease_status() is None
        assert {"event": "lease_ended", "client": "'a'", "reason": "expired"}.items() <= (
            logs[0].items()
        )
        assert _call(rig, "b")[0].error is None

    def test_release_needs_the_holder_and_its_token(self) -> None:
        """Release by another owner or with another token fails; by the holder it ends it."""
        rig = _rig()
        token = rig.core.take_lease("a", 5, _shown("a"))
        assert not rig.core.release_lease("b", None)
        assert not rig.core.release_lease("a", "0000")
        assert rig.core.release_lease("a", token)
        assert rig.core.lease_status() is None
        assert not rig.core.release_lease("a", None)

    def test_the_holder_going_away_ends_it(self) -> None:
        """`Core.forget` of the holder ends its lease; of anyone else, not."""
        rig = _rig()
        rig.core.take_lease("a", 5, _shown("a"))
        rig.core.forget("b")
        assert rig.core.lease_status() is not None
        rig.core.forget("a")
        assert rig.core.lease_status() is None
        assert _call(rig, "b")[0].error is None

    def test_holding_the_port_ends_it_and_refuses_a_new_one(self) -> None:
        """`Core.hold` ends the lease; while the port is held a lease is refused, saying why."""
        rig = _rig()
        rig.core.take_lease("a", 5, _shown("a"))
        closed = rig.core.hold({"front": "test"}, "inhibited by pid 7", lambda why: None)
        closed.close()  # (letting go of the port is not run here)
        assert rig.core.lease_status() is None
        with pytest.raises(LeaseRefused, match=r"^inhibited by pid 7$"):
            rig.core.take_lease("a", 5, _shown("a"))
