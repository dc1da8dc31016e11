"""The fair queue, without I/O: round-robin, limits, shares, leases."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from verld.session.calls import Call, CallResult, FairQueue, LaneQueue


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

    def test_a_newcomer_goes_before_the_owner_just_served(self) -> None:
        """An owner arriving while a busy owner's call is out goes before that owner's next call."""
        q = FairQueue(100, 100)
        for i in range(3):
            admit_push(q, call("busy", f"b{i}"))
        assert [c.payload for c in q.take(1)] == [b"b0"]  # on the link
        admit_push(q, call("newcomer", "n0"))
        order = [(c.owner, c.payload.decode()) for c in q.take(3)]
        assert order == [("newcomer", "n0"), ("busy", "b1"), ("busy", "b2")]

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


def unit_call(owner: str, unit: int, tag: str = "") -> Call:
    c = call(owner, tag)
    c.unit = unit
    return c


class TestLanes:
    def test_units_take_turns_before_owners(self) -> None:
        """One owner's backlog on unit 9 does not hold unit 1's call: lanes alternate."""
        q = LaneQueue(100, 100)
        for i in range(3):
            admit_push(q, unit_call("flood", 9, f"f{i}"))
        admit_push(q, unit_call("poller", 1, "p0"))
        assert [c.payload.decode() for c in q.take(3)] == ["f0", "p0", "f1"]

    def test_owners_take_turns_within_a_unit(self) -> None:
        """Two owners on one unit alternate there, as in a FairQueue."""
        q = LaneQueue(100, 100)
        for i in range(2):
            admit_push(q, unit_call("a", 1, f"a{i}"))
            admit_push(q, unit_call("b", 1, f"b{i}"))
        assert [c.payload.decode() for c in q.take(4)] == ["a0", "b0", "a1", "b1"]

    def test_a_retry_is_first_of_its_unit_but_its_unit_goes_last(self) -> None:
        """A pushed-back retry leads its unit, but that unit waits behind another unit's call."""
        # Unit 9's try taken, unit 1's call comes, the try is pushed back: unit 1 first, then the
        # retry before its owner's next call.
        q = LaneQueue(100, 100)
        first = unit_call("a", 9, "a0")
        admit_push(q, first)
        assert q.take(1) == [first]
        admit_push(q, unit_call("b", 1, "b0"))
        admit_push(q, unit_call("a", 9, "a1"))
        q.push(first, front=True)
        assert [c.payload.decode() for c in q.take(3)] == ["b0", "a0", "a1"]

    def test_a_call_that_comes_during_a_silent_units_try_goes_before_its_next(self) -> None:
        """A call arriving during a silent unit's try goes before that unit's next try."""
        # Three owners on heavy unit 9, one on unit 1 arriving after each take: unit 1's calls
        # alternate with unit 9's tries, never two tries in between.
        q = LaneQueue(100, 100, heavy=lambda unit: unit == 9)
        for owner in "bcd":
            admit_push(q, unit_call(owner, 9, owner))
        order = []
        for i in range(3):
            order += [c.payload.decode() for c in q.take(1)]  # a try of unit 9 starts
            admit_push(q, unit_call("a", 1, f"a{i}"))  # unit 1's call comes meanwhile
            order += [c.payload.decode() for c in q.take(1)]
        assert order == ["b", "a0", "c", "a1", "d", "a2"]

    def test_a_call_sent_directly_was_its_units_turn_wherever_the_pointer_was(self) -> None:
        """A call sent directly uses up its unit's turn wherever the lane pointer was."""
        # Lanes 0, 2, 3, 1 known, the pointer on empty lane 0: unit 3 sent directly, then unit 3's
        # retry and unit 1's call wait: unit 1 goes first.
        q = LaneQueue(100, 100)
        for unit in (0, 2, 3, 1):
            admit_push(q, unit_call("x", unit))
        q.take(4)
        retry = unit_call("a", 3, "retry")
        q.sent_directly(3)
        admit_push(q, unit_call("b", 1, "b0"))
        assert q.admit(retry) is None
        q.push(retry, front=True)
        assert [c.payload.decode() for c in q.take(2)] == ["b0", "retry"]

    def test_a_cut_turn_ends_a_lanes_turn_at_once(self) -> None:
        """Unit 9's turn (two owners) is cut after one try timed out: unit 1 goes next."""
        q = LaneQueue(100, 100)
        for owner in "de":
            admit_push(q, unit_call(owner, 9, owner))
        admit_push(q, unit_call("a", 1, "a0"))
        assert [c.payload.decode() for c in q.take(1)] == ["d"]
        q.cut_turn(9)
        assert [c.payload.decode() for c in q.take(2)] == ["a0", "e"]

    def test_a_lease_takes_only_the_holders_calls_across_units(self) -> None:
        """While leased, only the holder's calls come out, whatever their unit."""
        q = LaneQueue(100, 100)
        admit_push(q, unit_call("other", 1, "o0"))
        admit_push(q, unit_call("holder", 2, "h0"))
        admit_push(q, unit_call("holder", 3, "h1"))
        q.exclusive = "holder"
        assert [c.payload.decode() for c in q.take(5)] == ["h0", "h1"]
        assert q.ready() is False and len(q) == 1

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 4), st.booleans()), max_size=40),
        st.integers(1, 5),
    )
    def test_every_call_comes_out_once_in_owner_order_per_unit(
        self, pushes: list[tuple[str, int, bool]], batch: int
    ) -> None:
        """Whatever is pushed or dropped, each call comes out once, in owner order per unit."""
        # One owner's calls to one unit keep their order.
        q = LaneQueue(1000, 1000, heavy=lambda unit: unit == 4)
        pushed: list[Call] = []
        taken: list[Call] = []
        for i, (owner, unit, flag) in enumerate(pushes):
            c = unit_call(owner, unit, str(i))
            admit_push(q, c)
            pushed.append(c)
            if flag and owner == "b":
                q.drop_owner("b")
            elif flag:  # lanes empty and fill again between takes
                taken += q.take(batch)
        while q.ready():
            taken += q.take(batch)
        assert len(q) == 0 and len({id(c) for c in taken}) == len(taken)
        assert len(set(q._order)) == len(q._order)  # each lane has one place
        waiting = {id(c) for c in taken}
        for owner in "abc":
            for unit in range(1, 5):
                order = [int(c.payload) for c in taken if (c.owner, c.unit) == (owner, unit)]
                assert order == sorted(order)
        assert all(not c.queued for c in pushed) and waiting <= {id(c) for c in pushed}

    def test_a_turn_serves_each_owner_of_the_lane_once(self) -> None:
        """Two owners on unit 1: both before unit 9's call, then unit 1 again."""
        q = LaneQueue(100, 100)
        admit_push(q, unit_call("a", 1, "a0"))
        admit_push(q, unit_call("b", 1, "b0"))
        admit_push(q, unit_call("d", 9, "d0"))
        admit_push(q, unit_call("a", 1, "a1"))
        assert [c.payload.decode() for c in q.take(4)] == ["a0", "b0", "d0", "a1"]

    def test_a_heavy_lanes_turn_is_one_call(self) -> None:
        """Unit 9 silent: its two owners get one try a round between unit 1's calls."""
        q = LaneQueue(100, 100, heavy=lambda unit: unit == 9)
        for owner in ("d", "e"):
            admit_push(q, unit_call(owner, 9, owner))
        admit_push(q, unit_call("a", 1, "a0"))
        admit_push(q, unit_call("a", 1, "a1"))
        assert [c.payload.decode() for c in q.take(4)] == ["d", "a0", "e", "a1"]

    def test_a_lane_that_empties_keeps_its_one_place(self) -> None:
        """Unit 1 emptied and filled again between unit 9's tries: still one turn each."""
        q = LaneQueue(100, 100, heavy=lambda unit: unit == 9)
        for owner in "bc":
            admit_push(q, unit_call(owner, 9, owner))
        order = []
        for i in range(4):
            admit_push(q, unit_call("a", 1, f"a{i}"))
            order += [c.payload.decode() for c in q.take(2)]
            admit_push(q, unit_call("bc"[i % 2], 9, "bc"[i % 2]))
        assert order == ["b", "a0", "c", "a1", "b", "a2", "c", "a3"]
        assert sorted(q._order) == [1, 9]
