"""Known deviation pytorch-optimizer-lamb-step-size-bc1 (reports/known.toml).

pytorch-optimizer 4.1's `Lamb` with its defaults applies lr/(1 - beta1^t) after the trust ratio
has normalised the update (optimizer/lamb.py): each tensor moves by lr*||w||/(1 - beta1^t), ten
times lr*||w|| at step 1 with beta1 0.9. LAMB (You et al. 2020, Algorithm 2; apex, NVIDIA's
examples, timm, optax, cybertronai/pytorch-lamb) moves it by lr*phi(||w||) = lr*||w||: the trust
ratio ||w||/||u|| normalises whatever bias correction scaled u. Its docstring says no bias correction.

One step, defaults (lr 1e-3, betas (0.9, 0.999), weight decay 0), a 64-element float32 param.
The float64 transcription here: LAMB's step moves the param by exactly lr*||w||. Exit 0 (reproduces):
||p1 - p0|| / (lr*||p0||) is 10 within 1e-4 (1/(1 - 0.9)); 1 otherwise.
Needs pytorch-optimizer (pip install --no-deps 'pytorch-optimizer>=4.1,<4.2').
"""
import sys

import numpy as np
import torch
from pytorch_optimizer import Lamb

rng = np.random.default_rng(0)
p0 = rng.standard_normal(64)
p = torch.nn.Parameter(torch.from_numpy(p0.astype(np.float32)))
p.grad = torch.from_numpy(rng.standard_normal(64).astype(np.float32))
opt = Lamb([p])
lr, beta1 = opt.param_groups[0]["lr"], opt.param_groups[0]["betas"][0]
opt.step()
moved = np.linalg.norm(p.detach().double().numpy() - p.detach().new_tensor(p0).double().numpy())
lamb_moves = lr * np.linalg.norm(p.detach().new_tensor(p0).double().numpy())
ratio = moved / lamb_moves
print(f"pytorch-optimizer Lamb, defaults (lr {lr}, beta1 {beta1}): step 1 moved the param by {ratio:.5g} x lr*||w|| "
      f"(LAMB: 1; lr/(1 - beta1) applied after the trust ratio: {1 / (1 - beta1):.5g})")
sys.exit(0 if abs(ratio - 1 / (1 - beta1)) < 1e-4 * ratio else 1)
