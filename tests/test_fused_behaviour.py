"""Fused optimizers' bookkeeping on the CPU: counters, grad scaling, lazy
state, checkpoints, errors, storage conversions."""
from __future__ import annotations

import copy
import io
import math

import pytest
import torch

from fused import CONVENTIONS, FusedAdagrad, FusedAdam, FusedLAMB, _ext
from oracle.adagrad import AdagradConvention
from oracle.adam import AdamConvention
from oracle.lamb import APEX_LAMB

OPTIMIZERS = [FusedAdam, FusedAdagrad, FusedLAMB]
ids = [c.__name__ for c in OPTIMIZERS]


def model(dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in [(10, 3), (100,), (0,)]]


def fill_grads(params, seed):
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)


def snapshot(opt, params):
    return [p.detach().clone() for p in params], copy.deepcopy(opt.state_dict())


def assert_same_tensors(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and torch.equal(x, y)


def test_conventions_are_the_oracles():
    assert CONVENTIONS["adam"] == AdamConvention(decay="l2", eps_mode="outside", counter="group")
    assert CONVENTIONS["adamw"] == AdamConvention(decay="decoupled", eps_mode="outside", counter="group")
    assert CONVENTIONS["adagrad"] == AdagradConvention(decay="l2", counter="group")
    assert CONVENTIONS["adagrad_w"] == AdagradConvention(decay="decoupled", counter="group")
    assert CONVENTIONS["lamb"] == APEX_LAMB


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_nothing_happens_at_construction(cls):
    params = model(torch.bfloat16)
    fill_grads(params, 0)
    before = [p.detach().clone() for p in params]
    opt = cls(params, weight_decay=0.1)
    assert len(opt.state) == 0
    sd = opt.state_dict()
    assert sd["state"] == {} and len(opt.state) == 0
    assert [g["step"] for g in sd["param_groups"]] == [0]
    assert_same_tensors([p.detach() for p in params], before)


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_counters_advance_for_empty_and_gradless_groups(cls):
    a, b = model(), model(seed=1)
    fill_grads(a, 0)  # b has no grads
    opt = cls([{"params": a}, {"params": []}, {"params": b}])
    for _ in range(3):
        opt.step()
    assert [g["step"] for g in opt.param_groups] == [3, 3, 3]
    assert all(len(opt.state[p]) == 0 for p in b)
    assert all(isinstance(g["step"], int) for g in opt.param_groups)


@pytest.mark.parametrize("found_inf", [True, torch.tensor(1.0)], ids=["bool", "tensor"])
@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_found_inf_skips_everything(cls, found_inf):
    params = model(torch.bfloat16)
    opt = cls([{"params": params}, {"params": []}], weight_decay=0.1)
    fill_grads(params, 0)
    opt.step()
    fill_grads(params, 1)
    values, sd = snapshot(opt, params)
    opt.step(found_inf=found_inf, inv_scale=0.5)
    assert_same_tensors([p.detach() for p in params], values)
    after = opt.state_dict()
    assert [g["step"] for g in after["param_groups"]] == [1, 1]
    for k, st in sd["state"].items():
        assert_same_tensors(list(after["state"][k].values()), list(st.values()))
    opt.step(found_inf=torch.tensor(0.0))
    assert [g["step"] for g in opt.param_groups] == [2, 2]


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_found_inf_on_first_step_creates_no_state(cls):
    params = model()
    fill_grads(params, 0)
    opt = cls(params)
    opt.step(found_inf=True)
    assert len(opt.state) == 0 and opt.param_groups[0]["step"] == 0


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_inv_scale_tensor_equals_float(cls):
    results = []
    for inv in (0.25, torch.tensor(0.25)):
        params = model()
        opt = cls(params, weight_decay=0.1)
        for s in range(3):
            fill_grads(params, s)
            opt.step(inv_scale=inv)
        results.append([p.detach() for p in params])
    assert_same_tensors(*results)


def run(opt, params, seeds):
    for s in seeds:
        fill_grads(params, s)
        opt.step()


@pytest.mark.parametrize("moment_dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_checkpoint_round_trip_continues_bit_exactly(cls, dtype, moment_dtype):
    def make():
        params = model(dtype)
        groups = [{"params": params[:1]}, {"params": []}, {"params": params[1:], "lr": 3e-3}]
        return params, cls(groups, weight_decay=0.1, moment_dtype=moment_dtype)

    ref_params, ref = make()
    run(ref, ref_params, range(5))

    params, opt = make()
    run(opt, params, range(2))
    buf = io.BytesIO()
    torch.save({"model": [p.detach() for p in params], "optim": opt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, map_location="cpu")
    params2, opt2 = make()
    with torch.no_grad():
        for p, v in zip(params2, saved["model"]):
            p.copy_(v)
    opt2.load_state_dict(saved["optim"])
    assert [g["step"] for g in opt2.param_groups] == [2, 2, 2]
    assert all(isinstance(g["step"], int) for g in opt2.param_groups)
    for p, q in zip(params, params2):
        for key, v in opt.state[p].items():
            w = opt2.state[q][key]
            assert w.dtype == v.dtype and torch.equal(w, v), key
            assert w.numel() == 0 or w.data_ptr() != v.data_ptr()
    run(opt2, params2, range(2, 5))
    assert_same_tensors([p.detach() for p in params2], [p.detach() for p in ref_params])
    for p, q in zip(ref_params, params2):
        assert_same_tensors(list(opt2.state[q].values()), list(ref.state[p].values()))


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_low_precision_state_is_fp32_master_and_moments(cls):
    params = model(torch.bfloat16)
    opt = cls(params)
    run(opt, params, [0])
    state = opt.state[params[0]]
    assert state["master_param"].dtype == torch.float32
    assert all(v.dtype == torch.float32 for v in state.values())
    assert torch.equal(params[0].detach(), state["master_param"].to(torch.bfloat16))


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_grad_none_param_is_skipped(cls):
    params = model()
    fill_grads(params, 0)
    params[0].grad = None
    before = params[0].detach().clone()
    opt = cls(params, weight_decay=0.1)
    run_steps = 2
    for _ in range(run_steps):
        opt.step()
    assert params[0] not in opt.state or not opt.state[params[0]]
    assert torch.equal(params[0].detach(), before)


def test_capturable_counters_on_cpu_are_tensors():
    params = model()
    opt = FusedAdam([{"params": params}, {"params": []}], capturable=True)
    run(opt, params, range(2))
    assert all(isinstance(g["step"], torch.Tensor) and int(g["step"]) == 2 for g in opt.param_groups)
    ref_params = model()
    ref = FusedAdam(ref_params)
    run(ref, ref_params, range(2))
    assert_same_tensors([p.detach() for p in params], [p.detach() for p in ref_params])


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
@pytest.mark.parametrize("bad", [dict(lr=-1.0), dict(lr=math.nan), dict(eps=-1e-8), dict(weight_decay=-0.1)],
                         ids=str)
def test_bad_hyperparameters(cls, bad):
    with pytest.raises(ValueError, match="group 0"):
        cls(model(), **bad)


@pytest.mark.parametrize("cls", [FusedAdam, FusedLAMB], ids=["FusedAdam", "FusedLAMB"])
@pytest.mark.parametrize("betas", [(1.0, 0.999), (0.9, -0.1), (math.nan, 0.9)], ids=str)
def test_bad_betas(cls, betas):
    with pytest.raises(ValueError, match="group 0: betas"):
        cls(model(), betas=betas)


def test_bad_hyperparameter_in_later_group_is_named():
    with pytest.raises(ValueError, match="group 1: lr"):
        FusedAdam([{"params": model()}, {"params": model(seed=1), "lr": -1.0}])


@pytest.mark.parametrize("flag", ["amsgrad", "maximize"])
def test_unsupported_flags(flag):
    with pytest.raises(ValueError, match=flag):
        FusedAdam(model(), **{flag: True})
    with pytest.raises(ValueError, match="maximize"):
        FusedAdagrad(model(), maximize=True)


def test_complex_and_float64_params_are_rejected():
    with pytest.raises(ValueError, match="group 0 param 1: complex"):
        FusedAdam([torch.zeros(2, requires_grad=True), torch.zeros(2, dtype=torch.complex64, requires_grad=True)])
    with pytest.raises(ValueError, match="group 0 param 0: dtype torch.float64"):
        FusedAdam([torch.zeros(2, dtype=torch.float64, requires_grad=True)])


def test_sparse_grad_is_rejected():
    params = model()
    fill_grads(params, 0)
    params[1].grad = params[1].grad.to_sparse()
    with pytest.raises(RuntimeError, match="group 0 param 1: sparse"):
        FusedAdam(params).step()


def test_mixed_devices_in_a_group_are_rejected():
    meta = torch.zeros(2, device="meta", requires_grad=True)
    with pytest.raises(ValueError, match="group 0: params on several devices"):
        FusedAdam([torch.zeros(2, requires_grad=True), meta])


def test_bad_moment_dtype():
    with pytest.raises(ValueError, match="moment_dtype"):
        FusedAdam(model(), moment_dtype=torch.float16)


def test_master_weights_off_updates_low_precision_in_place():
    params = model(torch.bfloat16)
    opt = FusedAdam(params, master_weights=False, lr=0.1)
    run(opt, params, [0])
    assert "master_param" not in opt.state[params[0]]


class TestStorageConversions:
    """csrc/storage.h against torch's own (round to nearest even) casts."""

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
    def test_every_16_bit_pattern_widens_exactly(self, dtype):
        bits = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
        got = _ext.cpu().convert(bits, torch.float32)
        want = bits.to(torch.float32)
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got[~want.isnan()].view(torch.int32), want[~want.isnan()].view(torch.int32))

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
    def test_float32_rounds_to_nearest_even(self, dtype):
        gen = torch.Generator().manual_seed(0)
        wide = torch.randint(-2**31, 2**31 - 1, (1 << 20,), generator=gen, dtype=torch.int64).to(torch.int32)
        # every 16-bit pattern with every low half-word that matters for rounding: ties, ties +- 1, 0
        halves = torch.arange(-2**15, 2**15, dtype=torch.int64).to(torch.int32) << 16
        lows = torch.tensor([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1000, 0x0FFF, 0x2000], dtype=torch.int32)
        patterns = torch.cat([wide, (halves[:, None] | lows[None, :]).flatten()])
        x = patterns.view(torch.float32)
        got = _ext.cpu().convert(x, dtype)
        want = x.to(dtype)
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan)
        mismatch = (got.view(torch.int16) != want.view(torch.int16)) & ~nan
        assert not mismatch.any(), f"{int(mismatch.sum())} mismatches, e.g. {x[mismatch][:4].tolist()}"


class _Wrapped(torch.Tensor):
    """A wrapper tensor subclass (as FSDP2's DTensor is): its data is not behind its own data_ptr()."""

    @staticmethod
    def __new__(cls, t):
        return torch.Tensor._make_wrapper_subclass(cls, t.shape, dtype=t.dtype, device=t.device)

    def __init__(self, t):
        self.t = t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return func(*[a.t if isinstance(a, _Wrapped) else a for a in args], **(kwargs or {}))


@pytest.mark.parametrize("name", sorted(__import__("fused").OPTIMIZERS))
def test_wrapper_subclass_params_are_refused_at_construction(name):
    """Our kernels read a param's own storage: a DTensor (FSDP2) param segfaulted them in the wrapped
    scenarios. Such params are a TypeError naming the param; plain tensors and Parameters still work."""
    from fused import OPTIMIZERS
    cls, kwargs = OPTIMIZERS[name]
    with pytest.raises(TypeError, match="group 0 param 0: _Wrapped params are not supported"):
        cls([_Wrapped(torch.zeros(3))], **kwargs)
    cls([torch.nn.Parameter(torch.zeros(3))], **kwargs)
