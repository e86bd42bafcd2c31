"""How the CPU kernels' threads share out chunks (csrc/work_shares.h): each thread walks its own
contiguous share in order, then takes the far end of the shares of threads still busy. Driven through
the extension's claim_order, which records which thread claimed which unit, in order.

The kernels' results cannot tell which thread ran a chunk (test_fused_lamb_paths.py checks bits
across thread counts); what can go wrong here is a unit run twice or never, or a thread's own share
walked out of order (its streams then no longer follow the prefetchers).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fused import _ext


@pytest.fixture(scope="session")
def ext():
    return _ext.cpu()


def check_once(order, units):
    claimed = [u for thread in order for u in thread]
    assert sorted(claimed) == list(range(units)), "every unit claimed exactly once"


def test_one_thread_walks_its_share_then_the_other_from_the_far_end(ext):
    # Planned for 2, run by 1: the second share is all taken over, from its far end.
    assert ext.claim_order([0, 4, 10], 1, False) == [[0, 1, 2, 3, 9, 8, 7, 6, 5, 4]]
    assert ext.claim_order([0, 4, 10], 1, True) == [[3, 2, 1, 0, 4, 5, 6, 7, 8, 9]]


def test_empty_shares_and_no_units(ext):
    assert ext.claim_order([0, 0, 3], 1, False) == [[2, 1, 0]]
    assert ext.claim_order([0, 0, 0], 2, False) == [[], []]


@pytest.mark.parametrize("backward", [False, True])
def test_a_fast_thread_takes_over_the_end_of_a_slow_ones_share(ext, backward):
    bounds = [0, 40, 80]
    order = ext.claim_order(bounds, 2, backward, slow_us=2000)
    check_once(order, 80)
    fast, slow = order
    own = list(range(40))[::-1] if backward else list(range(40))
    assert fast[:40] == own, "the fast thread walks its own share first, in order"
    taken = fast[40:]
    assert taken, "the fast thread took units of the slow one"
    # Taken from the slow share's far end, one after another, and the slow thread walked the rest in order.
    slow_own = list(range(40, 80))[::-1] if backward else list(range(40, 80))
    assert taken == slow_own[::-1][:len(taken)]
    assert slow == slow_own[:40 - len(taken)]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 50), min_size=1, max_size=5), threads=st.integers(1, 4),
       backward=st.booleans())
def test_every_unit_is_claimed_once_by_any_team(ext, sizes, threads, backward):
    bounds = [0]
    for n in sizes:
        bounds.append(bounds[-1] + n)
    order = ext.claim_order(bounds, threads, backward)
    check_once(order, bounds[-1])


def test_bad_bounds_are_refused(ext):
    with pytest.raises(ValueError, match="bounds"):
        ext.claim_order([0, 5, 3], 2, False)
    with pytest.raises(ValueError, match="bounds"):
        ext.claim_order([1, 5], 1, False)
    with pytest.raises(ValueError, match="threads"):
        ext.claim_order([0, 5], 0, False)
