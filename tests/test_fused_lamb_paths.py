"""The CPU LAMB kernel's two ways through a tensor give the same bits.

Tensors of at most 2**18 elements go whole to one thread (stage 1 then stage 2 while the tensor is in
cache); larger ones are cut into 64Ki chunks shared by the threads, with u streamed past the caches
when the chunked tensors hold 8 MiB or more (csrc/cpu_kernels.cpp). Which way a tensor goes depends on
its size and on the other tensors of the call, never on its values, so a tensor must come out the same
whether it is stepped alone or with others, on one thread or two; and its norms must be the plain
per-chunk sums of squares that the `sumsq` kernel computes.

A whole tensor's u goes to a per-thread scratch that stays in cache, not to the update buffer the call
is given (which then keeps its old contents): its u is observed by recomputing it in float32, in the
kernel's order, from the moments the kernel stored.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from fused import _ext

WHOLE_MAX = 2 ** 18
CHUNK = 2 ** 16
# Both sides of the whole/chunked boundary and of a chunk boundary, an empty tensor, and one large
# enough that the chunked tensors of the joint call stream u (8 MiB of u is 2**21 floats).
SIZES = [0, 5, CHUNK + 1, WHOLE_MAX, WHOLE_MAX + 1, 2 ** 21 + 3]
HYPER = dict(max_grad_norm=1.0, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-6, wd=0.01)


def tensors(seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in SIZES:
        g = torch.randn(n, generator=gen) * 1e-2
        p = torch.randn(n, generator=gen)
        m = torch.randn(n, generator=gen) * 1e-3
        v = torch.rand(n, generator=gen) * 1e-4
        out.append(dict(g=g, p=p, m=m, v=v, u=torch.full((n,), float("nan"))))
    return out


def step(items, grad_sumsq, threads):
    """One LAMB step of `items` in one kernel call; returns the kernel's per-tensor (p_sumsq, u_sumsq)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        h = HYPER
        return _ext.cpu().lamb([t["g"] for t in items], [t["p"] for t in items], [t["m"] for t in items],
                               [t["v"] for t in items], [t["u"] for t in items], [], grad_sumsq,
                               h["max_grad_norm"], h["lr"], h["beta1"], h["beta2"], h["eps"], h["wd"],
                               True, True, True, False, 3, 1.0)
    finally:
        torch.set_num_threads(before)


def u_of(item: dict, before: dict) -> torch.Tensor:
    """The u of a stepped tensor: the buffer's where the kernel wrote it, else u recomputed in float32
    from the stored moments and the param before the step, with the per-step scalars rounded once from
    double as csrc/optim_math.h rounds them: (m/bc1)/(sqrt(v)/sqrt(bc2) + eps) + wd*p."""
    if item["u"].numel() > WHOLE_MAX:
        return item["u"]
    # numpy, element by element in float32 (torch's float32 ops with 0-dim operands did not round the
    # same way on 0.4% of the elements).
    f32, t = np.float32, 3  # t: the step the calls run
    inv_bc1, inv_sqrt_bc2 = f32(1 / (1 - HYPER["beta1"] ** t)), f32(1 / math.sqrt(1 - HYPER["beta2"] ** t))
    m, v, p = item["m"].numpy(), item["v"].numpy(), before["p"].numpy()
    u = (m * inv_bc1) / (np.sqrt(v) * inv_sqrt_bc2 + f32(HYPER["eps"])) + f32(HYPER["wd"]) * p
    return torch.from_numpy(u)


def observed(item: dict, before: dict) -> dict:
    return dict(p=item["p"], m=item["m"], v=item["v"], u=u_of(item, before))


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32) if x.dtype == torch.float32 else x.view(torch.int64)


@pytest.fixture(scope="module")
def joint():
    """All sizes in one call on two threads, and the sums of squares of the params before it."""
    items = tensors()
    grad_sumsq = torch.tensor(sum(float((t["g"].double() ** 2).sum()) for t in items), dtype=torch.float64)
    p_before = _ext.cpu().sumsq([t["p"].clone() for t in items], 1.0)
    sums = step(items, grad_sumsq, threads=2)
    return items, grad_sumsq, p_before, sums


def test_norms_are_the_per_chunk_sums_of_squares(joint):
    items, _, p_before, (p_sumsq, u_sumsq) = joint
    assert torch.equal(bits(p_sumsq), bits(p_before))
    us = [u_of(t, fresh) for t, fresh in zip(items, tensors())]
    assert torch.equal(bits(u_sumsq), bits(_ext.cpu().sumsq(us, 1.0)))
    assert all(not u.isnan().any() for u in us)
    assert (p_sumsq[1:] > 0).all() and (u_sumsq[1:] > 0).all()


def test_whole_tensors_leave_the_update_buffer_alone(joint):
    items = joint[0]
    for t in items:
        assert t["u"].isnan().all() == (t["u"].numel() <= WHOLE_MAX), t["u"].numel()


def test_the_float32_recomputation_of_u_is_the_kernels(joint):
    """u_of stands in for the u of whole tensors: on the chunked ones, whose u the kernel writes, it
    gives the kernel's bits."""
    items = joint[0]
    for t, fresh in zip(items, tensors()):
        if t["u"].numel() > WHOLE_MAX:
            assert torch.equal(bits(u_of(dict(t, u=t["u"][:0]), fresh)), bits(t["u"]))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_tensor_alone_gets_the_bits_it_gets_among_others(joint, threads):
    items, grad_sumsq, _, (p_sumsq, u_sumsq) = joint
    for k, fresh in enumerate(tensors()):
        ps, us = step([fresh], grad_sumsq, threads)
        alone, joined = observed(fresh, tensors()[k]), observed(items[k], tensors()[k])
        for key in ("p", "m", "v", "u"):
            assert torch.equal(bits(alone[key]), bits(joined[key])), (SIZES[k], key, threads)
        assert torch.equal(bits(ps), bits(p_sumsq[k:k + 1])) and torch.equal(bits(us), bits(u_sumsq[k:k + 1]))


def test_one_thread_and_two_agree_on_a_joint_call(joint):
    items, grad_sumsq, _, sums = joint
    again = tensors()
    sums1 = step(again, grad_sumsq, threads=1)
    for a, b, before in zip(again, items, tensors()):
        a, b = observed(a, before), observed(b, before)
        for key in ("p", "m", "v", "u"):
            assert torch.equal(bits(a[key]), bits(b[key]))
    assert all(torch.equal(bits(x), bits(y)) for x, y in zip(sums1, sums))


def test_the_step_moves_every_param_by_lr_times_its_norm(joint):
    """The comparisons above would pass on a kernel that did nothing: the params did move, and by what
    LAMB prescribes, ||step|| = lr * ratio * ||u|| = lr * ||p|| per tensor (ratio = ||p||/||u||)."""
    items = joint[0]
    for k, fresh in enumerate(tensors()):
        if SIZES[k]:
            delta = (items[k]["p"].double() - fresh["p"].double())
            assert (delta != 0).double().mean() > 0.99
            assert float(delta.norm()) == pytest.approx(HYPER["lr"] * float(fresh["p"].double().norm()), rel=1e-4)


def test_reused_update_buffers_follow_new_and_larger_params():
    """FusedLAMB keeps its u views from step to step (fused/lamb.py); adding a larger group, which
    makes the scratch buffer grow, must give the bits that a fresh optimizer gives from the same state."""
    from fused import FusedLAMB

    def params(seed):
        gen = torch.Generator().manual_seed(seed)
        ps = [torch.randn(n, generator=gen).requires_grad_() for n in (300, 70)]
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen) * 1e-2
        return ps

    small, big = params(1), [torch.randn(5000).requires_grad_()]
    big[0].grad = torch.randn(5000) * 1e-2
    opt = FusedLAMB(small, lr=1e-2)
    for _ in range(2):
        opt.step()
    opt.add_param_group({"params": big})
    saved = copy.deepcopy(opt.state_dict())
    big_before = big[0].detach().clone()
    twins = [p.detach().clone().requires_grad_() for p in small + big]
    for t, p in zip(twins, small + big):
        t.grad = p.grad.clone()
    for _ in range(2):
        opt.step()
    fresh = FusedLAMB(twins[:2], lr=1e-2)
    fresh.add_param_group({"params": twins[2:]})
    fresh.load_state_dict(saved)
    for _ in range(2):
        fresh.step()
    for a, b in zip(small + big, twins):
        assert torch.equal(bits(a.detach()), bits(b.detach()))
    assert (big[0].detach() != big_before).all()  # the new group did step


def test_without_clipping_the_grad_norm_pass_is_skipped(monkeypatch):
    """max_grad_norm = 0 turns clipping off, so FusedLAMB skips the pass that reads every grad for the
    global norm. Against a clipping threshold no norm reaches (the pass runs, the divisor is 1): the
    same bits, step after step."""
    import fused.lamb
    from fused import FusedLAMB

    def params():
        gen = torch.Generator().manual_seed(5)
        ps = [torch.randn(n, generator=gen).requires_grad_() for n in (WHOLE_MAX + 7, 33)]
        for p in ps:
            p.grad = torch.randn(p.shape, generator=gen) * 10.0  # a norm far above 1: clipping would act
        return ps

    off, high = params(), params()
    opt_off = FusedLAMB(off, lr=1e-2, max_grad_norm=0.0)
    opt_high = FusedLAMB(high, lr=1e-2, max_grad_norm=1e30)
    passes = []
    real = fused.lamb.sumsq
    monkeypatch.setattr(fused.lamb, "sumsq", lambda *a: passes.append(1) or real(*a))
    for _ in range(3):
        opt_off.step()
    assert passes == []
    for _ in range(3):
        opt_high.step()
    assert len(passes) == 3
    for a, b in zip(off, high):
        assert torch.equal(bits(a.detach()), bits(b.detach()))
    for sa, sb in zip(opt_off.state.values(), opt_high.state.values()):
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(bits(sa[key]), bits(sb[key]))
    assert not torch.equal(off[0].detach(), params()[0].detach())  # the params did step
