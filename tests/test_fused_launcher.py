"""The multi-tensor launch planner (csrc/launch_plan.h), driven with synthetic
sizes through the CPU extension: no GPU and no memory needed for sizes over
2^31. The CUDA launcher fills one kernel-argument table per planned launch;
the CPU loops run the single unbounded plan.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fused import FusedAdam, _ext


@pytest.fixture(scope="session")  # not module: xdist may interleave other modules, re-running it
def ext():
    return _ext.cpu()


def check_plan(ext, sizes, chunk, max_tensors, max_blocks):
    """Every chunk of every non-empty tensor is planned exactly once, in order;
    no launch exceeds its limits or holds an idle slot or no block; block
    numbering agrees with chunk_offsets. Returns the plan."""
    plan = ext.plan_launches(sizes, chunk, max_tensors, max_blocks)
    offsets = ext.chunk_offsets(sizes, chunk)
    planned = []
    next_block = 0
    for k, launch in enumerate(plan):
        tensors, slots, chunks = launch["tensors"], launch["block_slot"], launch["block_chunk"]
        assert 1 <= len(tensors) <= max_tensors, f"launch {k}: {len(tensors)} tensors"
        assert 1 <= len(slots) <= max_blocks, f"launch {k}: {len(slots)} blocks"
        assert sorted(set(slots)) == list(range(len(tensors))), f"launch {k}: idle or unknown slot"
        assert launch["first_block"] == next_block, f"launch {k}: first_block"
        for j, (s, c) in enumerate(zip(slots, chunks)):
            t = tensors[s]
            assert sizes[t] > 0, f"launch {k}: zero-numel tensor {t} got a block"
            assert next_block + j == offsets[t] + c, f"launch {k} block {j}: numbering"
            planned.append((t, c))
        next_block += len(slots)
    expected = [(t, c) for t, n in enumerate(sizes) for c in range(-(-n // chunk))]
    assert planned == expected
    assert offsets[-1] == len(expected)
    return plan


@pytest.mark.parametrize("position", range(5))
def test_zero_numel_in_every_position(ext, position):
    sizes = [3, 5, 1, 4, 2]
    sizes[position] = 0
    for max_tensors in (1, 2, 3, 5):
        for max_blocks in (1, 2, 3, 7):
            check_plan(ext, sizes, 2, max_tensors, max_blocks)


def test_only_zero_numel_tensors_plan_nothing(ext):
    assert ext.plan_launches([0, 0, 0], 4, 2, 2) == []
    assert ext.plan_launches([], 4, 2, 2) == []


def test_zero_numel_last_after_a_full_launch(ext):
    # The last non-empty tensor fills the launch exactly; the trailing empty
    # tensor must neither open a launch nor drop the full one.
    plan = check_plan(ext, [4, 4, 0], 2, 2, 4)
    assert len(plan) == 1 and plan[0]["tensors"] == [0, 1]


def test_exact_fill_by_blocks_and_by_tensors(ext):
    assert len(check_plan(ext, [2, 2, 2, 2], 1, 8, 4)) == 2   # 8 blocks, 4 per launch
    assert len(check_plan(ext, [1, 1, 1, 1], 1, 2, 100)) == 2  # 4 tensors, 2 per launch
    plan = check_plan(ext, [3, 1], 1, 8, 3)  # tensor 0 fills launch 0; tensor 1 alone in launch 1
    assert [p["tensors"] for p in plan] == [[0], [1]]


def test_tensor_straddles_launches(ext):
    plan = check_plan(ext, [10, 1], 1, 4, 4)
    assert [p["tensors"] for p in plan] == [[0], [0], [0, 1]]
    assert plan[1]["block_chunk"] == [4, 5, 6, 7]


def test_sizes_over_2_to_the_31(ext):
    big = 2**31 + 5
    sizes = [big, 0, 3, 2**33, 0]
    chunk = 2**20
    plan = check_plan(ext, sizes, chunk, 30, 320)
    last = plan[-1]
    t, c = last["tensors"][last["block_slot"][-1]], last["block_chunk"][-1]
    assert t == 3 and c * chunk < 2**33 <= (c + 1) * chunk
    first_big = [(p["tensors"][s], c) for p in plan for s, c in zip(p["block_slot"], p["block_chunk"])]
    assert (0, big // chunk) in first_big  # the 5 elements past 2^31 have their own chunk


def test_chunk_count_over_2_to_the_31_elements_with_default_chunk(ext):
    offsets = ext.chunk_offsets([2**40, 1], 65536)
    assert offsets == [0, 2**24, 2**24 + 1]


def test_bad_arguments(ext):
    for args in (([1], 0, 1, 1), ([1], 1, 0, 1), ([1], 1, 1, 0), ([-1], 1, 1, 1)):
        with pytest.raises(ValueError):
            ext.plan_launches(*args)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0, 0, 1, 2, 3, 5, 8, 17]), max_size=12),
       st.integers(1, 4), st.integers(1, 5), st.integers(1, 6))
def test_plan_invariants(sizes, chunk, max_tensors, max_blocks):
    check_plan(_ext.cpu(), sizes, chunk, max_tensors, max_blocks)


@pytest.mark.parametrize("zeros_at", [(0,), (2,), (4,), (0, 2, 4)], ids=str)
def test_cpu_step_with_zero_numel_tensors_updates_the_others(zeros_at):
    shapes = [(5,), (70000,), (3, 3), (1,), (2,)]  # 70000 > one CPU chunk
    params = [torch.zeros(0 if i in zeros_at else s[0] * (s[1] if len(s) > 1 else 1)).requires_grad_()
              for i, s in enumerate(shapes)]
    for p in params:
        p.grad = torch.ones_like(p)
    FusedAdam(params, lr=0.1).step()
    for i, p in enumerate(params):
        if i not in zeros_at:
            assert torch.all(p.detach() < 0), f"param {i} (numel {p.numel()}) not fully updated"
