"""Known deviation deepspeed-fused-lamb-step-size (reports/known.toml). CUDA only.

DeepSpeed's FusedLamb (csrc/lamb/fused_lamb_cuda_kernel.cu, 0.19.8) takes the trust ratio on the
uncorrected update m/(sqrt(v) + eps) and applies lr*sqrt(1 - beta2^t)/(1 - beta1^t) after it: each
tensor moves by sqrt(bc2)/bc1 * lr*||w|| (0.316 x at step 1 with betas (0.9, 0.999)), where LAMB
(You et al. 2020, Algorithm 2) moves it by lr*phi(||w||) = lr*||w|| whatever the bias correction.

One step at lr 1e-3, weight decay 0, max_coeff 10, min_coeff 0.01 on a 64-element float32 CUDA
param (trust ratio ||w||/||u|| inside the clamp). Exit 0 (reproduces): ||p1 - p0|| / (lr*||p0||) is
sqrt(1 - 0.999)/(1 - 0.9) within 1e-3; 1 otherwise (2 without CUDA).
"""
import math
import sys

import torch

if not torch.cuda.is_available():
    print("needs a CUDA device")
    sys.exit(2)
from deepspeed.ops.lamb import FusedLamb  # noqa: E402

LR, B1, B2 = 1e-3, 0.9, 0.999
torch.manual_seed(0)
p0 = torch.randn(64, device="cuda")
p = torch.nn.Parameter(p0.clone())
p.grad = torch.randn(64, device="cuda")
FusedLamb([p], lr=LR, betas=(B1, B2), weight_decay=0.0, max_coeff=10.0, min_coeff=0.01).step()
ratio = ((p.detach() - p0).double().norm() / (LR * p0.double().norm())).item()
expected = math.sqrt(1 - B2) / (1 - B1)
print(f"FusedLamb step 1 moved the param by {ratio:.5g} x lr*||w|| (LAMB: 1; sqrt(bc2)/bc1 = {expected:.5g})")
sys.exit(0 if abs(ratio - expected) < 1e-3 * expected else 1)
