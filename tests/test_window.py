"""The in-flight window, driven with explicit times: seqs, matching, deadlines, owners."""

from __future__ import annotations

import math
from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verld.session.calls import Call, CallResult
from verld.session.window import EPSILON, SEQ_MOD, Window


def call(
    owner: Hashable | None = "a", *, timeout: float = 1.0, retry: int = 0, ping: bool = False
) -> Call:
    def done(_: CallResult) -> None:
        return None

    return Call(owner, b"x", done, timeout=timeout, retry=retry, is_ping=ping)


def advance(window: Window, n: int) -> None:
    """Use up `n` seqs: each call added and answered at once."""
    for _ in range(n):
        c = call()
        window.add(c, 0.0)
        assert window.match(c.seq) is c


def near_wrap() -> Window:
    """A window holding seqs 0, 1 and 2 whose next seq is 65534 (built afresh: a compiled
    Window cannot be copied)."""
    w = Window(16)
    for _ in range(3):
        w.add(call("early"), 0.0)
    advance(w, SEQ_MOD - 2 - 3)
    return w


class TestSeqs:
    def test_first_seqs_count_up_from_zero(self) -> None:
        """A new window hands out 0, 1, 2, ... in the order calls are added."""
        w = Window(8)
        calls = [call() for _ in range(4)]
        for c in calls:
            w.add(c, 0.0)
        assert [c.seq for c in calls] == [0, 1, 2, 3]

    def test_answered_seq_is_not_reused_next(self) -> None:
        """A seq freed by its reply is not handed out again: the next seqs keep counting up."""
        w = Window(8)
        first = call()
        w.add(first, 0.0)
        assert w.match(0) is first
        second = call()
        w.add(second, 0.0)
        assert second.seq == 1

    def test_timed_out_seq_is_not_reused_for_a_long_while(self) -> None:
        """A removed (timed-out) seq comes back only after all 65536 seqs went round once."""
        w = Window(8)
        lost = call(timeout=0.5)
        w.add(lost, 0.0)
        w.remove(lost)
        seqs = []
        for _ in range(SEQ_MOD - 1):
            c = call()
            w.add(c, 1.0)
            seqs.append(c.seq)
            w.match(c.seq)
        assert seqs == list(range(1, SEQ_MOD))
        again = call()
        w.add(again, 2.0)
        assert again.seq == lost.seq == 0

    def test_seqs_wrap_from_65535_to_0(self) -> None:
        """After 65535 the next seq is 0."""
        w = Window(8)
        advance(w, SEQ_MOD - 1)
        last, wrapped = call(), call()
        w.add(last, 0.0)
        w.add(wrapped, 0.0)
        assert (last.seq, wrapped.seq) == (65535, 0)

    def test_outstanding_seq_is_skipped(self) -> None:
        """On wrapping, seqs still on the link are skipped, not handed out twice."""
        w = near_wrap()  # 0, 1, 2 outstanding; next is 65534
        fresh = [call() for _ in range(4)]
        for c in fresh:
            w.add(c, 0.0)
        assert [c.seq for c in fresh] == [65534, 65535, 3, 4]
        assert len(w) == 7 and len({c.seq for c in w}) == 7

    def test_an_abandoned_seq_of_a_small_field_waits_out_its_deadline(self) -> None:
        """With a 1-byte seq, a left owner's seq is not the next calls' until its deadline."""
        w = Window(4, modulus=256)
        gone = call("gone", timeout=1.0)
        w.add(gone, 0.0)
        w.drop_owner("gone")
        advance_to_wrap = [call() for _ in range(300)]
        for i, c in enumerate(advance_to_wrap):
            w.add(c, 0.5)  # (before the abandoned call's deadline)
            assert c.seq != gone.seq, i
            assert w.match(c.seq) is c
        assert w.match(gone.seq) is None  # its late reply: stale
        late = [call() for _ in range(256)]
        for c in late:
            w.add(c, 2.0)  # (after it)
            w.match(c.seq)
        assert gone.seq in {c.seq for c in late}

    def test_a_timed_out_seq_of_a_small_field_stays_unused_for_another_timeout(self) -> None:
        """With a 1-byte seq, a timed-out call's seq is not reused within one more timeout."""
        w = Window(4, modulus=256)
        slow = call(timeout=1.0)
        w.add(slow, 0.0)
        w.remove(slow)  # (its try ran out at 1.0)
        for _ in range(300):
            c = call()
            w.add(c, 1.5)
            assert c.seq != slow.seq
            w.match(c.seq)

    def test_a_small_field_full_of_retired_seqs_still_gives_one(self) -> None:
        """Retired seqs never leave a call without one: all of them in use frees them."""
        w = Window(4, modulus=4)
        for _ in range(4):
            c = call("gone", timeout=9.0)
            w.add(c, 0.0)
            w.drop_owner("gone")
        fresh = call()
        w.add(fresh, 1.0)
        assert fresh.seq in range(4) and w.match(fresh.seq) is fresh

    def test_add_all_hands_out_the_seqs_add_would(self) -> None:
        """add_all gives a batch the seqs one add each would (skipping outstanding ones)."""
        w, w2 = near_wrap(), near_wrap()
        batch = [call(timeout=t) for t in (5.0, 2.0, 9.0, 3.0)]
        one_by_one = [call(timeout=t) for t in (5.0, 2.0, 9.0, 3.0)]
        assert w.add_all(batch, 10.0) == 12.0  # the earliest deadline of the batch
        for c in one_by_one:
            w2.add(c, 10.0)
        assert [c.seq for c in batch] == [c.seq for c in one_by_one] == [65534, 65535, 3, 4]
        assert [c.deadline for c in batch] == [15.0, 12.0, 19.0, 13.0]
        assert all(c.tries == 1 and w.holds(c) for c in batch)
        assert w.add_all([], 10.0) == math.inf

    def test_seqs_continue_across_a_drain(self) -> None:
        """Draining (a lost link) does not restart the seqs: a reconnect continues counting."""
        w = Window(8)
        for _ in range(3):
            w.add(call(), 0.0)
        assert len(w.drain()) == 3
        after = call()
        w.add(after, 5.0)
        assert after.seq == 3


class TestAddAndRetry:
    def test_add_returns_the_deadline(self) -> None:
        """add returns now + timeout and stores it on the call, with one try counted."""
        w = Window(4)
        c = call(timeout=0.25)
        assert w.add(c, 10.0) == 10.25
        assert (c.deadline, c.tries) == (10.25, 1)

    def test_readd_keeps_the_seq_with_a_fresh_deadline(self) -> None:
        """A retry (remove, then readd) goes out under the same seq, due timeout s from now."""
        w = Window(4)
        c = call(timeout=0.5, retry=2)
        w.add(c, 0.0)
        seq = c.seq
        w.remove(c)
        assert w.readd(c, 0.5) == 1.0
        assert (c.seq, c.deadline, c.tries) == (seq, 1.0, 2)
        assert w.holds(c) and w.match(seq) is c

    def test_readd_of_an_outstanding_call_does_not_duplicate_it(self) -> None:
        """readd of a call still on the link moves its deadline; it is held once."""
        w = Window(4)
        c = call(timeout=1.0)
        w.add(c, 0.0)
        w.readd(c, 3.0)
        assert (len(w), c.deadline, c.tries) == (1, 4.0, 2)

    def test_room_counts_down_and_up(self) -> None:
        """room() is size minus the calls on the link, pings included."""
        w = Window(3)
        assert w.room() == 3
        a, p = call(), call(ping=True)
        w.add(a, 0.0)
        w.add(p, 0.0)
        assert w.room() == 1
        w.match(a.seq)
        assert w.room() == 2


class TestMatch:
    def test_match_by_seq_takes_that_call(self) -> None:
        """A reply's seq takes exactly its call off the link."""
        w = Window(4)
        a, b = call(), call()
        w.add(a, 0.0)
        w.add(b, 0.0)
        assert w.match(b.seq) is b
        assert not w.holds(b) and w.holds(a) and len(w) == 1

    def test_unknown_seq_is_stale(self) -> None:
        """A seq not on the link matches nothing and leaves the window unchanged."""
        w = Window(4)
        a = call()
        w.add(a, 0.0)
        assert w.match(a.seq + 1) is None
        assert w.match(a.seq) is a
        assert w.match(a.seq) is None  # answered twice: the second one is stale
        assert len(w) == 0

    def test_match_none_takes_the_one_outstanding_call(self) -> None:
        """Without seqs (None) a reply answers the single call on the link."""
        w = Window(1)
        a = call()
        w.add(a, 0.0)
        assert w.match(None) is a
        assert not w

    def test_match_none_on_an_empty_window_is_stale(self) -> None:
        """Without seqs and with nothing on the link, a reply is stale."""
        assert Window(1).match(None) is None

    def test_holds_is_about_this_very_call(self) -> None:
        """holds is false for a different call that was given the same seq."""
        w = Window(4)
        a = call()
        w.add(a, 0.0)
        other = call()
        other.seq = a.seq
        assert w.holds(a) and not w.holds(other)


class TestDeadlines:
    @pytest.mark.parametrize(
        ("now", "expired"),
        [
            (0.0, []),
            (0.999, []),
            (1.0 - 2 * EPSILON, []),
            (1.0 - EPSILON / 2, ["a"]),  # within EPSILON: it has passed
            (1.0, ["a"]),
            (1.5, ["a"]),
            (2.0, ["a", "b"]),
            (9.0, ["a", "b"]),
        ],
    )
    def test_expired_lists_the_deadlines_passed(self, now: float, expired: list[str]) -> None:
        """expired(now) lists the calls due by now (EPSILON early counts), in send order."""
        w = Window(4)
        w.add(call("a", timeout=1.0), 0.0)
        w.add(call("b", timeout=2.0), 0.0)
        assert [c.owner for c in w.expired(now)] == expired

    def test_expired_leaves_the_calls_on_the_link(self) -> None:
        """expired only lists: the caller removes (or resends) each one."""
        w = Window(4)
        w.add(call(timeout=1.0), 0.0)
        w.expired(5.0)
        assert len(w) == 1

    def test_earliest_is_the_next_deadline(self) -> None:
        """earliest() is the smallest deadline on the link, whatever the send order."""
        w = Window(4)
        w.add(call(timeout=3.0), 0.0)
        w.add(call(timeout=0.5), 1.0)
        w.add(call(timeout=2.0), 0.0)
        assert w.earliest() == 1.5

    def test_earliest_of_an_empty_window_is_infinity(self) -> None:
        """Nothing on the link: no deadline, earliest() is inf (also after a drain)."""
        w = Window(4)
        assert w.earliest() == math.inf
        w.add(call(), 0.0)
        w.drain()
        assert w.earliest() == math.inf


class TestOwners:
    def test_drop_owner_takes_its_calls_but_not_its_pings(self) -> None:
        """drop_owner returns the owner's calls; pings and other owners' calls stay."""
        w = Window(8)
        gone, stay = object(), object()
        g1, g2, ping, s1 = call(gone), call(gone), call(gone, ping=True), call(stay)
        for c in (g1, ping, s1, g2):
            w.add(c, 0.0)
        assert w.drop_owner(gone) == [g1, g2]
        assert set(w) == {ping, s1}
        assert w.drop_owner(gone) == []

    def test_owned_by_lists_and_leaves(self) -> None:
        """owned_by lists the owner's calls (pings too) and takes nothing off the link."""
        w = Window(8)
        me = object()
        mine, ping = call(me), call(me, ping=True)
        w.add(mine, 0.0)
        w.add(call(object()), 0.0)
        w.add(ping, 0.0)
        assert w.owned_by(me) == [mine, ping]
        assert len(w) == 3

    def test_calls_does_not_count_pings(self) -> None:
        """calls() counts client calls only; len() counts pings too."""
        w = Window(8)
        w.add(call(), 0.0)
        w.add(call(None, ping=True), 0.0)
        w.add(call(), 0.0)
        assert (w.calls(), len(w)) == (2, 3)


class TestDrainAndSize:
    def test_drain_empties_the_window(self) -> None:
        """drain returns every call, pings included, and leaves nothing on the link."""
        w = Window(4)
        cs = [call(), call(ping=True), call()]
        for c in cs:
            w.add(c, 0.0)
        assert w.drain() == cs
        assert (len(w), bool(w), w.room(), list(w)) == (0, False, 4, [])

    def test_len_and_bool_follow_the_calls(self) -> None:
        """len() is the calls on the link; the window is truthy while any is there."""
        w = Window(4)
        assert (len(w), bool(w)) == (0, False)
        c = call()
        w.add(c, 0.0)
        assert (len(w), bool(w)) == (1, True)
        w.remove(c)
        assert (len(w), bool(w)) == (0, False)

    def test_iteration_is_a_snapshot(self) -> None:
        """Iterating while removing calls sees every call once and raises nothing."""
        w = Window(4)
        cs = [call(), call(), call()]
        for c in cs:
            w.add(c, 0.0)
        seen = []
        for c in w:
            w.remove(c)
            seen.append(c)
        assert seen == cs and not w


# --- the allocator and the window against a model --------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.floats(0.01, 5.0)),
        st.tuples(st.just("add"), st.floats(0.01, 5.0)),  # twice: windows fill and wrap
        st.tuples(st.just("match"), st.integers(0, 63)),  # an outstanding one, by index
        st.tuples(st.just("stale"), st.integers(0, SEQ_MOD - 1)),
        st.tuples(st.just("match_none"), st.just(0)),
        st.tuples(st.just("remove"), st.integers(0, 63)),
        st.tuples(st.just("retry"), st.integers(0, 63)),
        st.tuples(st.just("drain"), st.just(0)),
    ),
    max_size=80,
)


class TestModel:
    @settings(max_examples=300, deadline=None)
    @given(ops, st.booleans())
    def test_window_matches_a_model(self, script: list[tuple[str, float]], wrap: bool) -> None:
        """Any add/match/remove/retry/drain run keeps seqs unique and len() right."""
        # Seqs unique and as the allocator says, len() right, and an unknown seq matches None
        # without
        # changing anything.
        w = near_wrap() if wrap else Window(16)
        model: dict[int, Call] = {c.seq: c for c in w}
        next_seq = 65534 if wrap else 0
        now = 0.0
        for op, arg in script:
            now += 0.01
            held = list(model.values())
            if op == "add" and w.room() > 0:
                expected = next_seq
                while expected in model:
                    expected = (expected + 1) % SEQ_MOD
                c = call(timeout=arg)
                assert w.add(c, now) == now + arg
                assert c.seq == expected
                next_seq = (expected + 1) % SEQ_MOD
                model[c.seq] = c
            elif op == "match" and held:
                c = held[int(arg) % len(held)]
                assert w.match(c.seq) is c
                del model[c.seq]
            elif op == "stale" and int(arg) not in model:
                before = (list(w), [c.deadline for c in w])
                assert w.match(int(arg)) is None
                assert (list(w), [c.deadline for c in w]) == before
            elif op == "match_none" and len(held) <= 1:
                assert w.match(None) is (held[0] if held else None)
                model.clear()
            elif op == "remove" and held:
                c = held[int(arg) % len(held)]
                w.remove(c)
                del model[c.seq]
            elif op == "retry" and held:
                c = held[int(arg) % len(held)]
                seq, tries = c.seq, c.tries
                w.remove(c)
                assert w.readd(c, now) == now + c.timeout
                assert (c.seq, c.tries) == (seq, tries + 1)
            elif op == "drain":
                assert set(w.drain()) == set(held)
                model.clear()
            on_link = list(w)
            assert len(w) == len(model) == len(on_link)
            assert len({c.seq for c in on_link}) == len(on_link)
            assert all(0 <= c.seq < SEQ_MOD and w.holds(c) for c in model.values())
            assert {id(c) for c in on_link} == {id(c) for c in model.values()}
            assert w.room() == w.size - len(model)
            assert w.earliest() == min((c.deadline for c in on_link), default=math.inf)
