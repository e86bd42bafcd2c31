"""Correct base optimizers in plain torch ops: the controls every mutant breaks.

Each base computes in float32 and rounds what it stores once (p, m, v, sum),
as torch's fused CPU kernels do, and declares its oracle convention through
the ORACLE_* class attributes that oracle.compare.targets.load_impl reads. Every
stage a real library got wrong is a small method, so a mutant overrides one
method and nothing else:

    _tensors(group)            which params take part (and the launch list)
    _advance(group, params)    the counters; returns each param's t
    _corrections(group, t)     (1 - b1^t, 1 - b2^t)
    _grad(p, group, scale)     the grad as fp32 math reads it (unscaling included)
    _update(...)               the per-element math
    _launch(fn, items)         the multi-tensor launcher (chunks of LAUNCH_SIZE tensors)
    _load_value(...)           how load_state_dict restores one state tensor

Bases:
    TorchAdamW / TorchAdam   torch.optim semantics: per-param tensor counter (float64:
                             exact at any horizon), moments in the param dtype.
    GroupAdamW / GroupAdam   apex / TransformerEngine FusedAdam: one int counter per
                             group, advanced on every step() for every group, empty ones
                             included (TE after #1986); FP32 moments and FP32 masters for
                             bf16/fp16 params; step(inv_scale=, found_inf=) grad scaling.
    Adagrad                  torch.optim.Adagrad math, eager state in __init__, over FP32
                             masters with FP32 state (DeepSpeed's wrapper after #8910).
    GroupLamb                apex FusedLAMB (oracle.lamb.APEX_LAMB).
    Float64AdamW             TorchAdamW in float64, rounded once on store: more precise than
                             its declared float32 math; a precision control (tests/test_hazards.py).
    TorchSGD                 torch.optim.SGD (oracle.sgd.TORCH_SGD): L2 decay, the first step
                             copies the grad into the buffer, no counter.
    ReferenceLion            the paper's Lion (oracle.lion.REFERENCE_LION): sign(0) = 0,
                             decoupled decay before the update, no counter.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from oracle.adagrad import TORCH_ADAGRAD
from oracle.adam import APEX_ADAMW, TORCH_ADAM, TORCH_ADAMW, AdamConvention
from oracle.lamb import APEX_LAMB
from oracle.lion import REFERENCE_LION
from oracle.sgd import TORCH_SGD

APEX_ADAM = AdamConvention(decay="l2", eps_mode="outside_corrected", counter="group", fp32_hparams=True)
LOW_PRECISION = (torch.bfloat16, torch.float16)


def f32(x: float) -> float:
    """A hyperparameter as a kernel holding it in float32 sees it."""
    return float(np.float32(x))


class _Base(torch.optim.Optimizer):
    """Shared machinery: fp32 math on a working copy, one rounding on store."""

    ORACLE_OPTIMIZER = "adamw"
    ORACLE_CONVENTION = TORCH_ADAMW
    ORACLE_COMPUTE = "float32"
    ORACLE_MASTERS = False
    ORACLE_STATE_DTYPE = "param"   # dtype of moments/accumulators: "param" or "float32"
    ORACLE_DEVICES = ("cpu", "cuda")
    ORACLE_OPTIONS = frozenset()
    ORACLE_SCALING = False          # step(inv_scale=, found_inf=) supported
    MASTERS = False                 # keep FP32 masters for bf16/fp16 params
    # tensors per launch of the multi-tensor launcher: apex's depth_to_max_tensors for
    # 4 lists (p, g, m, v). A 2-tensor launch would make TE #3207 unobservable.
    LAUNCH_SIZE = 36

    # --- the launcher: host-side packing, knows nothing of the math
    def _launch(self, fn, items):
        """Call fn(batch) on consecutive batches of at most LAUNCH_SIZE items
        (one "kernel launch" each); zero-numel tensors ride along."""
        batch = []
        for item in items:
            batch.append(item)
            if len(batch) == self.LAUNCH_SIZE:
                fn(batch)
                batch = []
        if batch:
            fn(batch)

    # --- pieces
    def _tensors(self, group):
        return [p for p in group["params"] if p.grad is not None]

    def _grad(self, p, group, inv_scale=1.0):
        g = p.grad.float()
        return g * inv_scale if inv_scale != 1.0 else g

    def _state_dtype(self, p):
        return torch.float32 if self.ORACLE_STATE_DTYPE == "float32" else p.dtype

    def _master(self, p, st):
        """The fp32 tensor the math runs on: the master, or an fp32 copy of p."""
        return st["master_param"] if "master_param" in st else p.float()

    def _store(self, p, st, pf):
        if "master_param" in st:
            st["master_param"].copy_(pf)
        p.copy_(pf)

    def _init_master(self, p, st):
        if self.MASTERS and p.dtype in LOW_PRECISION:
            st["master_param"] = p.detach().float().clone()

    # --- the one step loop every base shares; a base says what differs per group and per param
    @torch.no_grad()
    def step(self, closure=None, inv_scale=1.0, found_inf=False):
        """closure, then each group with a grad: `_step_group`. inv_scale/found_inf reach the bases that
        take them (ORACLE_SCALING); the others are never passed them."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._skip(inv_scale, found_inf):
            return loss
        for group, extra in zip(self.param_groups, self._group_extras()):
            self._step_group(group, self._tensors(group), extra, inv_scale)
        return loss

    def _skip(self, inv_scale, found_inf) -> bool:
        """Whether the whole step is skipped (found_inf, for the bases that take it)."""
        return False

    def _group_extras(self) -> list:
        """One value per group computed across groups before any steps (LAMB's global clip factor)."""
        return [None] * len(self.param_groups)

    def _step_group(self, group, params, extra, inv_scale) -> None:
        """Each param's state made, then `_update(p, state, group, *args)` per launch, with the
        per-param arguments `_per_param` gives (the counter, SGD's first step)."""
        for p in params:
            self._init_state(p, group)
        args = dict(zip(map(id, params), self._per_param(group, params)))
        self._launch(lambda batch: [self._update(p, self.state[p], group, *args[id(p)]) for p in batch], params)

    def _init_state(self, p, group) -> None:
        """Make p's state before its first update (bases that make it at construction keep this)."""

    def _per_param(self, group, params) -> list[tuple]:
        return [()] * len(params)

    # --- checkpoints
    def _load_value(self, p, key, value):
        """Restore one saved state tensor: device of the param, dtype as saved
        (torch's default would cast FP32 moments and masters to p's dtype)."""
        return value.to(device=p.device)

    def load_state_dict(self, state_dict):
        saved = state_dict["state"]
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        super().load_state_dict(state_dict)
        params = [p for g in self.param_groups for p in g["params"]]
        for pid, p in zip(ids, params):
            for key, value in saved.get(pid, {}).items():
                if isinstance(value, torch.Tensor):
                    self.state[p][key] = self._load_value(p, key, value.clone())


# --- Adam / AdamW --------------------------------------------------------

class TorchAdamW(_Base):
    """torch.optim.AdamW semantics (per-param counters), fp32 math, one rounding on store."""

    ORACLE_OPTIMIZER = "adamw"
    ORACLE_CONVENTION = TORCH_ADAMW
    ORACLE_OPTIONS = frozenset({"amsgrad", "maximize"})
    DECOUPLED = True
    # torch uses a float32 tensor, exact only up to 2**24 (declared for torch.* targets by
    # oracle.compare.scenarios); float64, as torch under a float64 default dtype, stays exact.
    STEP_DTYPE = torch.float64

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 maximize=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0, dtype=self.STEP_DTYPE)
            dt = self._state_dtype(p)
            st["exp_avg"] = torch.zeros_like(p, dtype=dt, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, dtype=dt, memory_format=torch.preserve_format)
            if group["amsgrad"]:
                st["max_exp_avg_sq"] = torch.zeros_like(p, dtype=dt, memory_format=torch.preserve_format)
            self._init_master(p, st)
        return st

    def _advance(self, group, params):
        ts = []
        for p in params:
            st = self.state[p]
            st["step"] += 1
            ts.append(int(st["step"].item()))
        return ts

    def _corrections(self, group, t):
        b1, b2 = group["betas"]
        return 1 - b1 ** t, 1 - b2 ** t

    def _decay_before(self, pf, g, group):
        """Decay before the moments: decoupled shrinks p, L2 adds wd*p to g."""
        lr, wd = group["lr"], group["weight_decay"]
        if self.DECOUPLED:
            pf.mul_(1 - lr * wd)
            return g
        return g.add(pf, alpha=wd)

    def _decay_after(self, pf, group):
        """Hook for decay applied after the update (none here)."""

    def _denom_update(self, pf, m, vmax, group, bc1, bc2):
        denom = (vmax.sqrt() / math.sqrt(bc2)).add_(group["eps"])
        pf.addcdiv_(m, denom, value=-group["lr"] / bc1)

    def _moments(self, st, g, group):
        b1, b2 = group["betas"]
        m = st["exp_avg"].float().lerp_(g, 1 - b1)
        v = st["exp_avg_sq"].float().mul_(b2).addcmul_(g, g, value=1 - b2)
        vmax = v
        if group["amsgrad"]:
            vmax = torch.maximum(st["max_exp_avg_sq"].float(), v)
            self._store_max(st, vmax)
        return m, v, vmax

    def _store_max(self, st, vmax):
        st["max_exp_avg_sq"].copy_(vmax)

    def _update(self, p, st, group, t):
        g = self._grad(p, group)
        if group["maximize"]:
            g = -g
        pf = self._master(p, st)
        g = self._decay_before(pf, g, group)
        m, v, vmax = self._moments(st, g, group)
        bc1, bc2 = self._corrections(group, t)
        self._denom_update(pf, m, vmax, group, bc1, bc2)
        self._decay_after(pf, group)
        self._store(p, st, pf)
        st["exp_avg"].copy_(m)
        st["exp_avg_sq"].copy_(v)

    def _per_param(self, group, params) -> list[tuple]:
        return [(t,) for t in self._advance(group, params)]


class Float64AdamW(TorchAdamW):
    """TorchAdamW computing in float64 and rounding once on store: a correct implementation more
    precise than any target. Declared as float32 math (what every AdamW target computes in), it
    must pass every check, the finite and bounds checks and the precision hazards included: a
    convention that rounds hyperparameters to float32 may not be enforced on one that keeps them."""

    def _grad(self, p, group, inv_scale=1.0):
        g = p.grad.double()
        return g * inv_scale if inv_scale != 1.0 else g

    def _master(self, p, st):
        return p.double()

    def _moments(self, st, g, group):
        b1, b2 = group["betas"]
        m = st["exp_avg"].double().lerp_(g, 1 - b1)
        v = st["exp_avg_sq"].double().mul_(b2).addcmul_(g, g, value=1 - b2)
        vmax = v
        if group["amsgrad"]:
            vmax = torch.maximum(st["max_exp_avg_sq"].double(), v)
            self._store_max(st, vmax)
        return m, v, vmax


class TorchAdam(TorchAdamW):
    """torch.optim.Adam: L2 decay (g += wd*p), wd 0 by default."""

    ORACLE_OPTIMIZER = "adam"
    ORACLE_CONVENTION = TORCH_ADAM
    DECOUPLED = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)


class GroupAdamW(_Base):
    """apex / TransformerEngine FusedAdam (adam_w_mode=True), oracle.adam.APEX_ADAMW:
    u = (m/bc1)/(sqrt(v/bc2) + eps) + wd*p; p -= lr*u; bias corrections from fp32 betas."""

    ORACLE_OPTIMIZER = "adamw"
    ORACLE_CONVENTION = APEX_ADAMW
    ORACLE_MASTERS = True
    ORACLE_STATE_DTYPE = "float32"
    ORACLE_SCALING = True
    MASTERS = True
    ADAM_W_MODE = True
    CAPTURABLE = False   # counter as an int32 tensor on the params' device

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["exp_avg"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
            self._init_master(p, st)
        return st

    def _counter_device(self, group):
        return group["params"][0].device if group["params"] else torch.device("cpu")

    def _advance(self, group, params):
        """Every group advances on every step, empty groups included (TE after #1986)."""
        if self.CAPTURABLE:
            if "step" not in group:
                group["step"] = torch.zeros((), dtype=torch.int32, device=self._counter_device(group))
            group["step"] += 1
            t = int(group["step"].item())
        else:
            group["step"] = group.get("step", 0) + 1
            t = group["step"]
        return [t] * len(params)

    def _corrections(self, group, t):
        b1, b2 = (f32(b) for b in group["betas"])
        return 1 - b1 ** t, 1 - b2 ** t

    def _update_batch(self, batch, group, t, inv_scale):
        b1, b2 = (f32(b) for b in group["betas"])
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        bc1, bc2 = self._corrections(group, t)
        for p in batch:
            st = self.state[p]
            g = self._grad(p, group, inv_scale)
            pf = self._master(p, st)
            if not self.ADAM_W_MODE:
                g = g + wd * pf
            m = st["exp_avg"].float() * b1 + g * (1 - b1)
            v = st["exp_avg_sq"].float() * b2 + g * g * (1 - b2)
            u = (m / bc1) / ((v / bc2).sqrt() + eps)
            if self.ADAM_W_MODE:
                u = u + wd * pf
            pf.sub_(lr * u)
            self._store(p, st, pf)
            st["exp_avg"].copy_(m)
            st["exp_avg_sq"].copy_(v)

    def _skip(self, inv_scale, found_inf) -> bool:
        """found_inf skips the whole step: params, state and counters."""
        return bool(found_inf)

    def _step_group(self, group, params, extra, inv_scale) -> None:
        # the group's counter advances before its params are looked at (TE #1986: even when it has none)
        ts = self._advance(group, params)
        if not params:
            return
        for p in params:
            self._init_state(p, group)
        self._launch(lambda batch: self._update_batch(batch, group, ts[0], inv_scale), params)


class GroupAdam(GroupAdamW):
    """apex FusedAdam with adam_w_mode=False: L2 decay into the grad."""

    ORACLE_OPTIMIZER = "adam"
    ORACLE_CONVENTION = APEX_ADAM
    ADAM_W_MODE = False


class GroupAdamWCapturable(GroupAdamW):
    """GroupAdamW with capturable=True: the counter is an int32 tensor."""

    CAPTURABLE = True


# --- Adagrad -------------------------------------------------------------

class Adagrad(_Base):
    """torch.optim.Adagrad semantics (eager `step` and `sum` for every param in
    __init__, L2 decay, lr_decay), over FP32 masters for bf16/fp16 params with
    all state in FP32, as DeepSpeed's ZeRO-0 wrapper holds it after #8910."""

    ORACLE_OPTIMIZER = "adagrad"
    ORACLE_CONVENTION = TORCH_ADAGRAD
    ORACLE_OPTIONS = frozenset({"lr_decay", "initial_accumulator_value", "maximize"})
    ORACLE_MASTERS = True
    ORACLE_STATE_DTYPE = "float32"
    MASTERS = True

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
                 maximize=False):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize))
        for group in self.param_groups:
            for p in group["params"]:
                self._make_state(p, group)

    def _make_state(self, p, group):
        """torch's Adagrad makes its state at construction (the step loop's _init_state is not used)."""
        st = self.state[p]
        st["step"] = torch.tensor(0.0, dtype=torch.float64)
        self._init_master(p, st)
        st["sum"] = torch.full_like(p, group["initial_accumulator_value"], dtype=self._sum_dtype(p),
                                    memory_format=torch.preserve_format)

    def _sum_dtype(self, p):
        return self._state_dtype(p)

    def _update(self, p, st, group):
        if not st:  # a group added after construction
            self._make_state(p, group)
        st["step"] += 1
        t = int(st["step"].item())
        g = self._grad(p, group)
        if group["maximize"]:
            g = -g
        pf = self._master(p, st)
        g = g.add(pf, alpha=group["weight_decay"]) if group["weight_decay"] else g
        clr = group["lr"] / (1 + (t - 1) * group["lr_decay"])
        h = st["sum"].float().addcmul_(g, g)
        pf.addcdiv_(g, h.sqrt().add_(group["eps"]), value=-clr)
        self._store(p, st, pf)
        st["sum"].copy_(h)



# --- LAMB ----------------------------------------------------------------

class GroupLamb(_Base):
    """apex FusedLAMB, oracle.lamb.APEX_LAMB: global-norm clipping over all groups
    (max_grad_norm of group 0), per-tensor norms, trust ratio ||p||/||u|| when
    wd != 0 (1 when either norm is 0), per-group counter advanced every step."""

    ORACLE_OPTIMIZER = "lamb"
    ORACLE_CONVENTION = APEX_LAMB
    ORACLE_STATE_DTYPE = "float32"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, grad_averaging=True,
                 max_grad_norm=1.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      grad_averaging=grad_averaging, max_grad_norm=max_grad_norm))

    def _clip_factors(self):
        """Stage 1: one divisor per group (the same for all: the global norm)."""
        sq = [torch.zeros((), dtype=torch.float32)]
        for group in self.param_groups:
            sq += [self._grad(p, group).square().sum() for p in self._tensors(group)]
        norm = float(torch.stack(sq).sum().sqrt())
        mgn = self.param_groups[0]["max_grad_norm"]
        clip = norm / mgn if mgn > 0 and norm > mgn else 1.0
        return [clip] * len(self.param_groups)

    def _norms(self, pfs, us):
        """Stage 4 inputs: per-tensor norms of p and u."""
        return [float(x.norm()) for x in pfs], [float(x.norm()) for x in us]

    def _trust(self, pn, un, group):
        if group["weight_decay"] == 0:
            return 1.0
        return pn / un if pn != 0 and un != 0 else 1.0

    def _group_extras(self) -> list:
        return self._clip_factors()

    def _step_group(self, group, params, clip, inv_scale) -> None:
        """Every param's update direction first, then the trust ratios from their norms."""
        group["step"] = group.get("step", 0) + 1
        t = group["step"]
        b1, b2 = group["betas"]
        b3 = 1 - b1 if group["grad_averaging"] else 1.0
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        pfs, us, moments = [], [], []
        for p in params:
            st = self.state[p]
            if not st:
                st["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                st["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
            g = self._grad(p, group) / clip
            pf = p.float()
            m = st["exp_avg"] * b1 + g * b3
            v = st["exp_avg_sq"] * b2 + g * g * (1 - b2)
            u = (m / bc1) / ((v / bc2).sqrt() + group["eps"]) + group["weight_decay"] * pf
            pfs.append(pf)
            us.append(u)
            moments.append((m, v))
        pns, uns = self._norms(pfs, us)
        for p, pf, u, pn, un, (m, v) in zip(params, pfs, us, pns, uns, moments):
            r = self._trust(pn, un, group)
            p.copy_(pf - group["lr"] * r * u)
            self.state[p]["exp_avg"].copy_(m)
            self.state[p]["exp_avg_sq"].copy_(v)


# --- SGD -----------------------------------------------------------------

class TorchSGD(_Base):
    """torch.optim.SGD semantics (oracle.sgd.TORCH_SGD), fp32 math, one rounding on store:
    g += wd*p (only when wd != 0); buf <- g on a param's first step (its buffer is
    absent), mu*buf + (1-dampening)*g afterwards; nesterov g + mu*buf, else buf;
    p -= lr*g. No counter; momentum_buffer (param dtype) exists only while momentum != 0."""

    ORACLE_OPTIMIZER = "sgd"
    ORACLE_CONVENTION = TORCH_SGD
    ORACLE_OPTIONS = frozenset({"dampening", "nesterov", "maximize"})

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 maximize=False):
        for name, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            if not value >= 0.0:
                raise ValueError(f"Invalid {name} value: {value}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    def _decay(self, pf, g, group):
        """L2 decay into the grad, skipped at wd == 0 (0*p is NaN for an infinite p)."""
        wd = group["weight_decay"]
        return g.add(pf, alpha=wd) if wd != 0 else g

    def _first_steps(self, group, params):
        """Which params take the first-step form buf <- g: those without a buffer yet."""
        return ["momentum_buffer" not in self.state[p] for p in params]

    def _momentum(self, p, st, g, group, first):
        """The new buffer (stored in the param dtype) and the update direction."""
        mu, dampening = group["momentum"], group["dampening"]
        if first:
            buf = g.clone()
        else:
            old = st["momentum_buffer"].float() if "momentum_buffer" in st else torch.zeros_like(g)
            buf = old.mul_(mu).add_(g, alpha=1 - dampening)
        if "momentum_buffer" in st:
            st["momentum_buffer"].copy_(buf)
        else:
            st["momentum_buffer"] = buf.to(p.dtype).clone(memory_format=torch.preserve_format)
        return self._direction(g, buf, group)

    def _direction(self, g, buf, group):
        """torch's Nesterov: g + mu*buf with the new buffer; plain momentum: buf."""
        return g.add(buf, alpha=group["momentum"]) if group["nesterov"] else buf

    def _update(self, p, st, group, first):
        g = self._grad(p, group)
        if group["maximize"]:
            g = -g
        pf = self._master(p, st)
        g = self._decay(pf, g, group)
        if group["momentum"] != 0:
            g = self._momentum(p, st, g, group, first)
        pf.add_(g, alpha=-group["lr"])
        self._store(p, st, pf)

    def _per_param(self, group, params) -> list[tuple]:
        firsts = self._first_steps(group, params) if group["momentum"] != 0 else [False] * len(params)
        return [(first,) for first in firsts]


# --- Lion ----------------------------------------------------------------

class ReferenceLion(_Base):
    """The paper's Lion (oracle.lion.REFERENCE_LION; google/automl lion_pytorch.py,
    lucidrains/lion-pytorch): c = b1*m + (1-b1)*g; p *= 1 - lr*wd; p -= lr*sign(c)
    with sign(0) = 0; m = b2*m + (1-b2)*g. exp_avg in the param dtype, no counter."""

    ORACLE_OPTIMIZER = "lion"
    ORACLE_CONVENTION = REFERENCE_LION
    ORACLE_OPTIONS = frozenset({"maximize"})

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, maximize=False):
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not all(0.0 <= b <= 1.0 for b in betas):
            raise ValueError(f"Invalid betas: {betas}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay, maximize=maximize))

    def _init_state(self, p, group):
        st = self.state[p]
        if not st:
            st["exp_avg"] = torch.zeros_like(p, dtype=self._state_dtype(p), memory_format=torch.preserve_format)
            self._init_master(p, st)
        return st

    def _decay(self, pf, g, group):
        """Decoupled decay on p before the update; the grad the moments see is unchanged."""
        pf.mul_(1 - group["lr"] * group["weight_decay"])
        return g

    def _moments(self, m, g, group):
        """(c, new m), both from the previous m."""
        b1, b2 = group["betas"]
        return m * b1 + g * (1 - b1), m * b2 + g * (1 - b2)

    def _sign(self, c):
        """sign(0) = 0 (torch.sign): an element whose c is exactly 0 only decays."""
        return torch.sign(c)

    def _update(self, p, st, group):
        g = self._grad(p, group)
        if group["maximize"]:
            g = -g
        pf = self._master(p, st)
        g = self._decay(pf, g, group)
        c, m = self._moments(st["exp_avg"].float(), g, group)
        pf.add_(self._sign(c), alpha=-group["lr"])
        self._store(p, st, pf)
        st["exp_avg"].copy_(m)



CONTROLS = [TorchAdamW, TorchAdam, GroupAdamW, GroupAdam, GroupAdamWCapturable, Adagrad, GroupLamb, TorchSGD,
            ReferenceLion]
