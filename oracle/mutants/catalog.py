"""The mutants: each a correct base (oracle.mutants.base) with exactly one defect that
shipped in a widely used library.

Every class declares
    PROVENANCE   library and issue / PR number
    DESCRIPTION  the defect in one line
    EXPECT       (check, tensor substring, step, case substring): the check expected
                 to catch it, and the tensor, step (None: any) and case one of its
                 findings must name (asserted by tests/test_mutants.py)
    GPU_ONLY     the defect cannot show on CPU (listed, run under tox -e gpu)
and inherits the ORACLE_* attributes of the correct implementation it breaks.
"""
from __future__ import annotations

import numpy as np
import torch

from . import base as B

INT32_MAX = 2**31 - 1


class Mutant:
    PROVENANCE = ""
    DESCRIPTION = ""
    EXPECT = ("", "")
    GPU_ONLY = False


def _zero_grad_step(opt, **overrides):
    """What the wrappers do in their constructor: step() once with zero grads
    (hyperparameters temporarily overridden), then restore the grads."""
    saved = {}
    for group in opt.param_groups:
        saved[id(group)] = {k: group[k] for k in overrides}
        group.update(overrides)
        for p in group["params"]:
            p.grad = torch.zeros_like(p)
    opt.step()
    for group in opt.param_groups:
        group.update(saved[id(group)])
        for p in group["params"]:
            p.grad = None


# --- counters ------------------------------------------------------------

class TE1986EmptyGroupCounter(Mutant, B.GroupAdamW):
    PROVENANCE = "TransformerEngine #1986 (fixed by PR #3318)"
    DESCRIPTION = "per-group counter not advanced for an empty group (skipped before the counter update)"
    EXPECT = ('counters', 'group 1 step', 1, 'empty_group')

    def _advance(self, group, params):
        if not group["params"]:
            return []
        return super()._advance(group, params)


class TE1986CapturableEmptyGroup(Mutant, B.GroupAdamWCapturable):
    PROVENANCE = "TransformerEngine #1986 (PR #3318, capturable=True)"
    DESCRIPTION = "tensor-valued (capturable) per-group counter never created for an empty group"
    EXPECT = ('counters', 'group 1 step', 1, 'empty_group')

    def _advance(self, group, params):
        if not group["params"]:
            return []
        return super()._advance(group, params)


class Apex1615GroupCounterAsParam(Mutant, B.TorchAdamW):
    PROVENANCE = "apex PR #1615 (FusedAdam as a drop-in AdamW)"
    DESCRIPTION = ("one per-group counter where per-param counters are expected: a param first updated at "
                   "step k gets bias correction for step k")
    EXPECT = ('counters', 'group 0 param 1 step', 3, 'grad_none')

    def _advance(self, group, params):
        group["_t"] = group.get("_t", 0) + 1
        for p in params:
            self.state[p]["step"].fill_(group["_t"])
        return [group["_t"]] * len(params)


class DS8471LastParamCounter(Mutant, B.TorchAdamW):
    PROVENANCE = "DeepSpeed PR #8471 (FusedAdam bias correction per parameter)"
    DESCRIPTION = "only the last param with a grad advances its counter, and that count is used for the whole group"
    EXPECT = ('counters', 'group 0 param 0 step', 1, '')

    def _advance(self, group, params):
        if not params:
            return []
        st = self.state[params[-1]]
        st["step"] += 1
        return [int(st["step"].item())] * len(params)


class DS7819RunningBetaProduct(Mutant, B.GroupAdamW):
    PROVENANCE = "DeepSpeed #7819"
    DESCRIPTION = "non-idempotent counter update: bias corrections from a running float32 product of beta^t"
    EXPECT = ('lockstep', 'group 0 param 0 param', 2, '')

    def _advance(self, group, params):
        b1, b2 = group["betas"]
        p1, p2 = group.get("beta_pow", (1.0, 1.0))
        group["beta_pow"] = (float(np.float32(p1) * np.float32(b1)), float(np.float32(p2) * np.float32(b2)))
        return super()._advance(group, params)

    def _corrections(self, group, t):
        p1, p2 = group["beta_pow"]
        return 1 - p1, 1 - p2


class DS562CounterOutsideState(Mutant, B.TorchAdamW):
    PROVENANCE = "DeepSpeed #562 ('Optimizer lost track of step count')"
    DESCRIPTION = "per-param counter kept in an attribute outside the state dict: lost on reload"
    EXPECT = ('counters', 'group 0 param 0 step', 1, '')

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._steps = {}

    def _init_state(self, p, group):
        st = super()._init_state(p, group)
        st.pop("step", None)
        return st

    def _advance(self, group, params):
        for p in params:
            self._steps[p] = self._steps.get(p, 0) + 1
        return [self._steps[p] for p in params]


class ZenFlow8496Bf16Counter(Mutant, B.TorchAdamW):
    PROVENANCE = "DeepSpeed PR #8496 (ZenFlow Adam counters)"
    DESCRIPTION = ("step counter stored in the param dtype: stops advancing at 256 in bf16, 2048 in fp16, "
                   "2**24 in fp32")
    EXPECT = ('long_horizon.counters@16777216', 'step', 16777217, '')

    def _init_state(self, p, group):
        st = super()._init_state(p, group)
        if st["step"].dtype != p.dtype:
            st["step"] = st["step"].to(p.dtype)
        return st


# --- constructors that step ---------------------------------------------

class DS5104CtorStep(Mutant, B.GroupAdamW):
    PROVENANCE = "DeepSpeed PR #5104 / #5151 (ZeRO 1/2/3 step on initialization)"
    DESCRIPTION = "FusedAdam wrapper constructor calls step() with zero grads: group counters start at 1"
    EXPECT = ('counters', 'group 0 step', 1, '')

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _zero_grad_step(self)


class Megatron5974CtorStepLr0(Mutant, B.TorchAdam):
    PROVENANCE = "Megatron-LM #5974 (fixed by PR #5976)"
    DESCRIPTION = ("state-materializing zero-grad step with lr = 0: params stay put but counters advance, "
                   "and with L2 decay wd*p enters the moments")
    EXPECT = ('counters', 'group 0 param 0 step', 1, '')

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _zero_grad_step(self, lr=0.0)


class DS8910AdagradSumNotPromoted(Mutant, B.Adagrad):
    PROVENANCE = "DeepSpeed #8910 (review follow-up: eager Adagrad state on the FP32 masters)"
    DESCRIPTION = "torch Adagrad's eagerly created `sum` left in the bf16/fp16 param dtype under FP32 masters"
    EXPECT = ('schema', 'sum', None, 'bf16')
    # Undeclared, a bf16 accumulator beside FP32 masters is a legitimate configuration (state in the
    # param's dtype): the defect is against DeepSpeed's declared FP32 state, which the declared gate
    # holds it to. (It once died undeclared too, only through the construction check expecting 0.1
    # exactly where a bf16 accumulator holds 0.100097656: a false failure, since fixed.)
    LEGITIMATE_UNDECLARED = "state_dtype='param' beside FP32 masters is a legitimate configuration when undeclared"

    def _sum_dtype(self, p):
        return p.dtype


# --- checkpoints ---------------------------------------------------------

class Fairscale50MomentsCastOnLoad(Mutant, B.GroupAdamW):
    PROVENANCE = "fairscale #50 / torch Optimizer.load_state_dict's cast"
    DESCRIPTION = "FP32 moments and masters cast to the param dtype on load (torch's default load policy)"
    EXPECT = ('roundtrip', 'exp_avg', 20, 'bf16')

    def load_state_dict(self, state_dict):
        torch.optim.Optimizer.load_state_dict(self, state_dict)


class Torch74424StepCastOnLoad(Mutant, B.TorchAdamW):
    PROVENANCE = "PyTorch #74424 (fixed by PR #75214)"
    DESCRIPTION = "load_state_dict casts state['step'] with the other state tensors to the param's dtype"
    EXPECT = ('roundtrip', 'step', 20, '')

    def _load_value(self, p, key, value):
        return value.to(device=p.device, dtype=p.dtype)


class Torch173901StepDtypeOnLoad(Mutant, B.TorchAdamW):
    PROVENANCE = "PyTorch PR #173901"
    DESCRIPTION = "load_state_dict forces a user's float64 step tensor to float32"
    EXPECT = ('roundtrip', 'step', 20, '')

    def _load_value(self, p, key, value):
        return value.to(device=p.device, dtype=torch.float32 if key == "step" else value.dtype)


class Torch103256CapturableStepDevice(Mutant, B.TorchAdamW):
    PROVENANCE = "PyTorch #103256"
    DESCRIPTION = "capturable step tensor left on the CPU after load_state_dict of a map_location='cpu' checkpoint"
    EXPECT = ('checkpoint.roundtrip', 'step', None, '')
    GPU_ONLY = True
    ORACLE_DEVICES = ("cuda",)

    def _init_state(self, p, group):
        st = super()._init_state(p, group)
        if st["step"].device != p.device:
            st["step"] = st["step"].to(p.device)   # capturable: step lives with the param
        return st

    def _load_value(self, p, key, value):
        return value if key == "step" else value.to(device=p.device)


class Torch78807AmsgradMaxNotPersisted(Mutant, B.TorchAdamW):
    PROVENANCE = "PyTorch #78807 (multi-tensor Adam amsgrad)"
    DESCRIPTION = "amsgrad's running max computed each step but not written back to state"
    EXPECT = ('lockstep', 'max_exp_avg_sq', 1, 'amsgrad')

    def _store_max(self, st, vmax):
        pass


# --- grad scaling --------------------------------------------------------

class Torch95847FoundInfNeedsScale(Mutant, B.GroupAdamW):
    PROVENANCE = "PyTorch PR #95847 (fixes #95781)"
    DESCRIPTION = "found_inf honoured only when a grad scale is given: a step with inf grads and no scale updates"
    EXPECT = ('grad_scaling.found_inf', 'group 0 param 0', 6, '')

    def _skip(self, inv_scale, found_inf):
        return bool(found_inf) and inv_scale != 1.0


class Torch94060DoubleUnscale(Mutant, B.GroupAdamW):
    PROVENANCE = "PyTorch #94060"
    DESCRIPTION = "grads unscaled twice (by the scaler and again in the kernel)"
    EXPECT = ('grad_scaling.scaled_step', 'group 0 param 0 param', 2, '')

    def _grad(self, p, group, inv_scale=1.0):
        return super()._grad(p, group, inv_scale) * inv_scale


# --- the per-element math ------------------------------------------------

class Torch126514LrInDenominator(Mutant, B.TorchAdamW):
    PROVENANCE = "PyTorch #126514 / #97004 (capturable Adam)"
    DESCRIPTION = "capturable form folds -lr/bc1 into the denominator: NaN at lr = 0 where v = 0, overflow at tiny lr"
    EXPECT = ('lockstep', 'group 0 param 0 param', 1, 'lr0_zero_grads')

    def _denom_update(self, pf, m, vmax, group, bc1, bc2):
        step_size_neg = -group["lr"] / bc1
        bc2_sqrt = bc2 ** 0.5
        denom = (vmax.sqrt() / (bc2_sqrt * step_size_neg)).add_(group["eps"] / step_size_neg
                                                                if step_size_neg else float("-inf"))
        pf.addcdiv_(m, denom)


class FlagGems4988DecaySwapped(Mutant, B.TorchAdamW):
    PROVENANCE = "FlagGems #4988"
    DESCRIPTION = "L2 and decoupled decay swapped: AdamW adds wd*p to the grad"
    EXPECT = ('lockstep', 'exp_avg', 1, '')
    DECOUPLED = False


class BNB2010DecayAfterUpdate(Mutant, B.TorchAdamW):
    PROVENANCE = "bitsandbytes #2010 (PR #2040)"
    DESCRIPTION = "decoupled decay applied after the Adam update instead of before: p = (p - lr*u)(1 - lr*wd)"
    EXPECT = ('lockstep', 'group 0 param 0 param', 1, '')

    def _decay_before(self, pf, g, group):
        return g

    def _decay_after(self, pf, group):
        pf.mul_(1 - group["lr"] * group["weight_decay"])


class Apex1728Bf16NoMaster(Mutant, B.GroupAdamW):
    PROVENANCE = "apex #1728"
    DESCRIPTION = ("master weights silently unused for bf16 params: the math runs on the bf16 param, "
                   "updates below bf16 resolution are lost")
    EXPECT = ('lockstep', 'master', 2, 'bf16')

    def _master(self, p, st):
        return p.float() if p.dtype == torch.bfloat16 else super()._master(p, st)


class BNB1185ContiguousGrads(Mutant, B.TorchAdamW):
    PROVENANCE = "bitsandbytes #1185"
    DESCRIPTION = "kernel assumes contiguous grads: reads a strided grad's storage in memory order"
    EXPECT = ('irregular.noncontiguous', '[noncontiguous] group 0 param 0', 1, '')

    def _grad(self, p, group, inv_scale=1.0):
        g = p.grad
        flat = torch.as_strided(g, (g.numel(),), (1,), g.storage_offset()) if g.numel() else g.reshape(-1)
        g = flat.reshape(p.shape).float()
        return g * inv_scale if inv_scale != 1.0 else g


class Optax1754StorageEpsUnderflow(Mutant, B.TorchAdamW):
    PROVENANCE = "optax #1754 (torch: pytorch #147437)"
    DESCRIPTION = ("every op in the param dtype, declared honestly (compute = storage): eps = 1e-8 rounds to 0 "
                   "in float16, so a zero grad divides 0 by 0")
    EXPECT = ('finite', 'group 0 param 0', 1, 'fp16/defaults')
    ORACLE_COMPUTE = "storage"

    def _update(self, p, st, group, t):
        # torch's forloop order, each op rounding to p's dtype: only `finite` can object, as the
        # declared arithmetic predicts the same 0/0 (the lockstep bound there is unbounded)
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        b1, b2 = group["betas"]
        g = -p.grad if group["maximize"] else p.grad
        m, v = st["exp_avg"], st["exp_avg_sq"]
        p.mul_(1 - lr * wd)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        vmax = v
        if group["amsgrad"]:
            vmax = torch.maximum(st["max_exp_avg_sq"], v)
            st["max_exp_avg_sq"].copy_(vmax)
        bc1, bc2 = self._corrections(group, t)
        denom = (vmax.sqrt() / (bc2 ** 0.5)).add_(torch.tensor(eps, dtype=p.dtype))
        p.addcdiv_(m, denom, value=-lr / bc1)


# --- the multi-tensor launcher -------------------------------------------

class TE3207ZeroNumelLast(Mutant, B.GroupAdamW):
    PROVENANCE = "TransformerEngine #3207"
    DESCRIPTION = "a zero-numel tensor last in the list: the pending launch is dropped with the preceding tensors"
    EXPECT = ('irregular.zero_numel', '[zero_numel] group 0 param 1', 1, '')

    def _launch(self, fn, items):
        batch = []
        for k, item in enumerate(items):
            batch.append(item)
            last = k == len(items) - 1
            # launch when the batch is full, or on the last tensor's last chunk; a
            # zero-numel tensor has no chunks, so the final launch never happens
            if len(batch) == self.LAUNCH_SIZE or (last and item.numel() > 0):
                fn(batch)
                batch = []


class StridedOnePastEnd(Mutant, B.TorchAdamW):
    PROVENANCE = "torch 2.13 CPU fused kernels (reports/known.toml torch-fused-cpu-strided-writes-outside-view)"
    DESCRIPTION = ("the kernel walks numel elements at the view's stride from its start, one too many: "
                   "it writes one element past a strided view")
    EXPECT = ('irregular.bounds', '[noncontiguous] nc_s param', 1, '')

    def _store(self, p, st, pf):
        super()._store(p, st, pf)
        if p.dim() == 1 and p.numel() and p.stride(0) > 1:
            past = p.storage_offset() + p.numel() * p.stride(0)
            if past < p.untyped_storage().nbytes() // p.element_size():  # never past the allocation itself
                torch.as_strided(p, (p.numel() + 1,), (p.stride(0),))[-1] = pf[-1]


class DS7640Int32Sizes(Mutant, B.GroupAdamW):
    PROVENANCE = "DeepSpeed #7640"
    DESCRIPTION = "tensor sizes narrowed to 32 bits in the launcher: elements past 2**31 are never updated"
    EXPECT = ('gpu_large_tensor', 'tail', 1, '')
    GPU_ONLY = True

    def _update_batch(self, batch, group, t, inv_scale):
        heads = []
        for p in batch:
            n = min(p.numel(), INT32_MAX)  # the kernel's int32 element index stops at 2**31 - 1
            if n < p.numel():
                heads.append((p, p.detach().reshape(-1)[n:].clone()))
        super()._update_batch(batch, group, t, inv_scale)
        for p, tail in heads:
            p.detach().reshape(-1)[-tail.numel():].copy_(tail)


# --- LAMB ----------------------------------------------------------------

class Apex819LambGroupClip(Mutant, B.GroupLamb):
    PROVENANCE = "apex PR #819"
    DESCRIPTION = "LAMB clips each group by its own grad norm instead of the global norm"
    EXPECT = ('lockstep', 'param', 1, 'clip/empty_group')

    def _clip_factors(self):
        out = []
        mgn = self.param_groups[0]["max_grad_norm"]
        for group in self.param_groups:
            sq = [torch.zeros((), dtype=torch.float32)] + [self._grad(p, group).square().sum()
                                                           for p in self._tensors(group)]
            norm = float(torch.stack(sq).sum().sqrt())
            out.append(norm / mgn if mgn > 0 and norm > mgn else 1.0)
        return out


class PytorchLamb6ZeroTrust(Mutant, B.GroupLamb):
    PROVENANCE = "cybertronai/pytorch-lamb PR #6"
    DESCRIPTION = "trust ratio ||p||/||u|| taken as 0 when ||p|| = 0: zero-initialized layers never move"
    EXPECT = ('lockstep', 'group 0 param 0 param', 1, 'small_params')

    def _trust(self, pn, un, group):
        if group["weight_decay"] == 0:
            return 1.0
        return pn / un if un != 0 else 1.0


class DS490LambFlatNorm(Mutant, B.GroupLamb):
    PROVENANCE = "DeepSpeed #490"
    DESCRIPTION = "LAMB norms taken over the group's flattened buffer instead of per tensor"
    EXPECT = ('lockstep', 'param', 1, '')

    def _norms(self, pfs, us):
        if not pfs:
            return [], []
        pn = float(torch.cat([x.reshape(-1) for x in pfs]).norm())
        un = float(torch.cat([x.reshape(-1) for x in us]).norm())
        return [pn] * len(pfs), [un] * len(us)


# --- SGD -----------------------------------------------------------------

class MLX440ZeroBufferDampened(Mutant, B.TorchSGD):
    PROVENANCE = "ml-explore/mlx #440 (fixed by PR #473)"
    DESCRIPTION = ("momentum buffer started at zeros and updated as mu*buf + (1-dampening)*g from the first "
                   "step: the first buffer is (1-dampening)*g where torch copies g")
    EXPECT = ("lockstep", "momentum_buffer", 1, "dampening")

    def _first_steps(self, group, params):
        return [False] * len(params)


class MLX440DecayOnlyWithMomentum(Mutant, B.TorchSGD):
    PROVENANCE = "ml-explore/mlx #440 (fixed by PR #473)"
    DESCRIPTION = "weight decay applied inside the momentum branch only: with momentum = 0 it has no effect"
    EXPECT = ("lockstep", "param", 1, "plain")

    def _decay(self, pf, g, group):
        return super()._decay(pf, g, group) if group["momentum"] != 0 else g


class ApexFusedSGDFirstRunLastParam(Mutant, B.TorchSGD):
    PROVENANCE = ("apex FusedSGD.get_momentums, apex/optimizers/fused_sgd.py at 00dbe4b (as read; no issue "
                  "found): first_run is the last param's")
    DESCRIPTION = ("one first_run flag per launch, set by the last param of the list: a param whose first grad "
                   "arrives later is dampened from a zero buffer, or, when it is last, every buffer is reset to g")
    EXPECT = ("lockstep", "momentum_buffer", 3, "grad_none")

    def _first_steps(self, group, params):
        first_run = "momentum_buffer" not in self.state[params[-1]] if params else True
        return [first_run] * len(params)


class Paddle12231NesterovSign(Mutant, B.TorchSGD):
    PROVENANCE = "PaddlePaddle PR #12231 (momentum_op nesterov; also closes #11539)"
    DESCRIPTION = "Nesterov momentum term subtracted: p -= lr*(g - mu*buf) instead of lr*(g + mu*buf)"
    EXPECT = ("lockstep", "param", 1, "nesterov")

    def _direction(self, g, buf, group):
        return g.sub(buf, alpha=group["momentum"]) if group["nesterov"] else buf


class KerasSGDVelocity(Mutant, B.TorchSGD):
    PROVENANCE = ("keras.optimizers.SGD update rule, as documented (velocity = momentum*velocity - lr*g); "
                  "the two parameterizations: jax PR #1528, PyTorch #1099")
    DESCRIPTION = ("TF/Keras momentum form behind torch's interface: momentum_buffer holds the velocity "
                   "v = mu*v - lr*g (from zero, no dampening), p += mu*v - lr*g (nesterov) or p += v")
    EXPECT = ("lockstep", "momentum_buffer", 1, "")

    def _momentum(self, p, st, g, group, first):
        mu, lr = group["momentum"], group["lr"]
        old = st["momentum_buffer"].float() if "momentum_buffer" in st else torch.zeros_like(g)
        v = old.mul_(mu).sub_(g, alpha=lr)
        if "momentum_buffer" in st:
            st["momentum_buffer"].copy_(v)
        else:
            st["momentum_buffer"] = v.to(p.dtype).clone(memory_format=torch.preserve_format)
        step = v.mul(mu).sub_(g, alpha=lr) if group["nesterov"] else v
        # the base applies p -= lr*direction; Keras adds `step` to p
        return step.div(-lr) if lr != 0 else torch.zeros_like(g)


# --- Lion ----------------------------------------------------------------

class DSLionCopysignZero(Mutant, B.ReferenceLion):
    PROVENANCE = ("DeepSpeed CPU Lion, ops/csrc/lion/cpu_lion_impl.cpp (0.19.8, as read): "
                  "-copysign(lr, c); documented behaviour, not an issue")
    DESCRIPTION = "sign(c) as copysign(1, c): an exactly-zero c (+0) steps by -lr instead of only decaying"
    EXPECT = ("lockstep", "param", 1, "zero_grads")

    def _sign(self, c):
        return torch.copysign(torch.ones_like(c), c)


class BNB1992LionCoupledDecay(Mutant, B.ReferenceLion):
    PROVENANCE = "bitsandbytes #1992 (fixed by PR #1993; Triton path PR #2001)"
    DESCRIPTION = ("Lion weight decay coupled (L2): wd*p folded into the grad before the sign and the "
                   "momentum, p not decayed")
    EXPECT = ("lockstep", "exp_avg", 1, "")

    def _decay(self, pf, g, group):
        return g.add(pf, alpha=group["weight_decay"])


class OLMo119LionDecayLrRatio(Mutant, B.ReferenceLion):
    PROVENANCE = "allenai/OLMo PR #119 (LionW decay was lr*wd/initial_lr, mosaicml DecoupledLionW's form)"
    DESCRIPTION = ("decay p *= 1 - wd*lr/initial_lr (1 - wd at a constant lr; 1 - wd when initial_lr = 0) "
                   "instead of 1 - lr*wd")
    EXPECT = ("lockstep", "param", 1, "")

    def _decay(self, pf, g, group):
        initial_lr = group.setdefault("initial_lr", group["lr"])
        pf.mul_(1 - (group["lr"] / initial_lr if initial_lr else 1.0) * group["weight_decay"])
        return g


class Jl129LionMomentumFirst(Mutant, B.ReferenceLion):
    PROVENANCE = ("FluxML/Optimisers.jl PR #129 (Lion written with the momentum updated first and the sign "
                  "taken from the new momentum; the uncompensated form of that order)")
    DESCRIPTION = ("momentum updated before the update direction: c = b1*m_t + (1-b1)*g with "
                   "m_t = b2*m + (1-b2)*g, instead of the previous m")
    EXPECT = ("lockstep", "param", 2, "")

    def _moments(self, m, g, group):
        b1, b2 = group["betas"]
        m = m * b2 + g * (1 - b2)
        return m * b1 + g * (1 - b1), m


MUTANTS = [cls for cls in list(globals().values())
           if isinstance(cls, type) and issubclass(cls, Mutant) and cls is not Mutant]
