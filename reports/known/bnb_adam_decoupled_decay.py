"""Known deviation bnb-adam-decoupled-decay (reports/known.toml).

bitsandbytes' `Adam` (Adam32bit, CPU backend) decays decoupled: p <- p*(1 - lr*wd) before the
Adam step, which is AdamW (Loshchilov & Hutter 2019, Algorithm 2), not Adam with L2 decay
(Kingma & Ba 2015 with g + wd*p entering the moments, what torch.optim.Adam computes). Under the
name Adam that is a deviation, not a form of the algorithm (oracle/adam.py DECAY_FORMS).

Both rules are transcribed here in float64 for one step at lr 0.1, wd 0.1, betas (0.9, 0.999),
eps 1e-8 on a 64-element float32 param. Exit 0 (reproduces): bitsandbytes matches the decoupled
rule to float32 roundoff and is farther than 1e-3 from the L2 rule; 1 otherwise.
"""
import sys

import numpy as np
import torch
import bitsandbytes as bnb

LR, WD, B1, B2, EPS = 0.1, 0.1, 0.9, 0.999, 1e-8
rng = np.random.default_rng(0)
p0 = rng.standard_normal(64).astype(np.float32)
g = rng.standard_normal(64).astype(np.float32)


def adam_step1(p, grad):
    """Step 1 of Adam in float64: m_hat = grad, v_hat = grad^2."""
    m, v = (1 - B1) * grad, (1 - B2) * grad * grad
    return p - LR * (m / (1 - B1)) / (np.sqrt(v / (1 - B2)) + EPS)


p64, g64 = p0.astype(np.float64), g.astype(np.float64)
l2 = adam_step1(p64, g64 + WD * p64)
decoupled = adam_step1(p64 * (1 - LR * WD), g64)

p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
p.grad = torch.from_numpy(g.copy())
bnb.optim.Adam32bit([p], lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD).step()
got = p.detach().double().numpy()
to_decoupled, to_l2 = np.abs(got - decoupled).max(), np.abs(got - l2).max()
print(f"bitsandbytes {bnb.__version__} Adam32bit: max |got - decoupled| = {to_decoupled:.3g}, "
      f"max |got - L2 (Adam's decay)| = {to_l2:.3g}")
sys.exit(0 if to_decoupled < 1e-5 and to_l2 > 1e-3 else 1)
