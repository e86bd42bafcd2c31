"""Known finding torch-radam-foreach-fp16-factor-overflow (reports/known.toml).

torch.optim.RAdam's foreach path folds the rectified step into one per-element factor before it
multiplies by m (torch/optim/radam.py, _multi_tensor_radam):

    buffer = 1 / ((sqrt(v) + eps) / (sqrt(bc2) * lr * r / bc1 * -1))

evaluated in the param's dtype. On float16 params the middle quotient exceeds float16's largest
value (65504) whenever (sqrt(v) + eps) * bc1 / (lr * r * sqrt(bc2)) does: it overflows to -inf, its
reciprocal is -0, and the element's update is lost although the update itself,
lr * r * sqrt(bc2)/bc1 * m / (sqrt(v) + eps), is an ordinary float16 value. r is smallest on the
first rectified steps (step 6 at beta2 = 0.999), so with lr = 1e-3 any sqrt(v) + eps above about
0.28 loses its step there. The forloop path divides in another order and keeps it.

Seen by the oracle as a lockstep failure on torch.radam.foreach radam/fp16/wd0/two_groups/tiny_grads
(seed 4, step 6: expected -0.000142462, got the unchanged -0.000141978, 4.06 ULP).

Exit 0: the defect reproduces (foreach leaves p unchanged at step 6 where the float64 update moves it
and forloop does); 1: it does not. Plain torch; run with
`python reports/known/torch_radam_foreach_fp16_factor_overflow.py`.
"""
import math
import sys

import torch

LR, EPS, B1, B2, T = 1e-3, 0.3, 0.9, 0.999, 6
p0 = torch.linspace(-1e-3, 1e-3, 32, dtype=torch.float16)   # small params: a small update shows
grad = torch.full((32,), 0.5, dtype=torch.float16)


def after(foreach: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(p before step T, p after step T) for a constant grad."""
    p = p0.clone().requires_grad_()
    opt = torch.optim.RAdam([p], lr=LR, eps=EPS, foreach=foreach)
    for _ in range(T - 1):
        p.grad = grad.clone()
        opt.step()
    before = p.detach().clone()
    p.grad = grad.clone()
    opt.step()
    return before, p.detach().clone()


# float64 reference of the step-T update for the constant grad 0.5 (m and v have closed forms)
g = 0.5
m = g * (1 - B1 ** T)
v = g * g * (1 - B2 ** T)
rho_inf = 2 / (1 - B2) - 1
rho_t = rho_inf - 2 * T * B2 ** T / (1 - B2 ** T)
r = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
factor = math.sqrt(1 - B2 ** T) * LR * r / (1 - B1 ** T)
update = m * factor / (math.sqrt(v) + EPS)
print(f"step {T}: (sqrt(v) + eps) / factor = {(math.sqrt(v) + EPS) / factor:.6g} (float16 max 65504); "
      f"update = {update:.4g}")

b_each, a_each = after(True)
b_loop, a_loop = after(False)
moved_each = int((a_each != b_each).sum())
moved_loop = int((a_loop != b_loop).sum())
# the update is larger than half a float16 ulp of every param at step T, so a correct step moves each
half_ulp = (torch.finfo(torch.float16).eps / 2) * b_loop.abs().double().clamp_min(2.0 ** -14)
assert bool((half_ulp < update).all()), "the chosen params are too large to show the update"
print(f"foreach: {moved_each} of 32 params moved at step {T}; forloop: {moved_loop} of 32")
reproduced = moved_each == 0 and moved_loop == 32
print(f"torch {torch.__version__}: " + ("the defect reproduces" if reproduced else "the defect does NOT reproduce"))
sys.exit(0 if reproduced else 1)
