"""The fair queue, without I/O: round-robin, limits, shares, leases."""

from __future__ import annotations

from verld.calls import Call, CallResult, FairQueue


def call(owner: str, tag: str = "") -> Call:
    def done(_: CallResult) -> None:
        return None

    return Call(owner, tag.encode(), done, timeout=1.0, retry=0)


def admit_push(q: FairQueue, c: Call) -> None:
    assert q.admit(c) is None
    q.push(c)


class TestFairness:
    def test_round_robin_across_owners(self) -> None:
        """A chatty owner's backlog does not starve others: owners take turns."""
        q = FairQueue(100, 100)
        for i in range(5):
            admit_push(q, call("chatty", f"c{i}"))
        admit_push(q, call("quiet", "q0"))
        admit_push(q, call("other", "o0"))
        order = [(c.owner, c.payload.decode()) for c in q.take(4)]
        assert order == [("chatty", "c0"), ("quiet", "q0"), ("other", "o0"), ("chatty", "c1")]

    def test_fifo_within_an_owner(self) -> None:
        """One owner's calls leave in the order they came."""
        q = FairQueue(100, 100)
        for i in range(4):
            admit_push(q, call("a", str(i)))
        assert [c.payload for c in q.take(10)] == [b"0", b"1", b"2", b"3"]
        assert len(q) == 0 and not q.ready()

    def test_retry_goes_first(self) -> None:
        """A call pushed to the front is taken before everything else."""
        q = FairQueue(100, 100)
        admit_push(q, call("a", "1"))
        admit_push(q, call("b", "2"))
        retry = call("b", "retry")
        q.push(retry, front=True)
        assert q.take(1)[0] is retry


class TestLimits:
    def test_total_limit(self) -> None:
        """Past queue_limit waiting calls, admission is refused."""
        q = FairQueue(2, 100)
        admit_push(q, call("a"))
        admit_push(q, call("b"))
        assert q.admit(call("c")) == "the call queue is full"

    def test_share_counts_until_release(self) -> None:
        """An owner's share covers waiting and in-flight calls until each is released."""
        q = FairQueue(100, 2)
        first, second = call("a"), call("a")
        admit_push(q, first)
        admit_push(q, second)
        q.take(2)  # now in flight: still counted
        assert q.admit(call("a")) is not None
        q.release(first)
        assert q.admit(call("a")) is None

    def test_release_of_a_refused_call_changes_nothing(self) -> None:
        """Releasing a call that was never admitted frees no share."""
        q = FairQueue(100, 1)
        admit_push(q, call("a"))
        refused = call("a")
        assert q.admit(refused) is not None
        q.release(refused)
        assert q.admit(call("a")) is not None

    def test_drop_owner_frees_everything(self) -> None:
        """A departed owner's waiting calls are returned and its share freed."""
        q = FairQueue(100, 3)
        for _ in range(3):
            admit_push(q, call("gone"))
        admit_push(q, call("stay"))
        assert len(q.drop_owner("gone")) == 3
        assert len(q) == 1
        assert q.admit(call("gone")) is None


class TestLease:
    def test_only_the_holder_is_served(self) -> None:
        """While exclusive is set, take() serves only that owner; others wait."""
        q = FairQueue(100, 100)
        admit_push(q, call("other", "x"))
        admit_push(q, call("holder", "h"))
        q.exclusive = "holder"
        assert [c.payload for c in q.take(5)] == [b"h"]
        assert not q.ready()
        q.exclusive = None
        assert [c.payload for c in q.take(5)] == [b"x"]

    def test_remove_keeps_the_ring_consistent(self) -> None:
        """Removing an owner's last waiting call takes the owner out of the ring."""
        q = FairQueue(100, 100)
        c = call("a")
        admit_push(q, c)
        q.remove(c)
        assert not q.ready() and len(q) == 0 and q.take(1) == []
