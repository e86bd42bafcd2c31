"""Build our CUDA kernels and prove the build loads: one FusedAdam step on a small CUDA tensor.

The fused package compiles its extension on first use (torch.utils.cpp_extension, ninja), cached
under TORCH_EXTENSIONS_DIR; running one step forces that build here, where its time and errors are
logged on their own, instead of inside the first test that happens to touch it.
"""
from __future__ import annotations

import os
import sys
import time


def main() -> int:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    if CUDA_HOME is None:
        print("build_kernels: no CUDA toolkit found (nvcc): install one whose major version matches "
              f"torch's CUDA {torch.version.cuda} and set CUDA_HOME (see docs/gpu.md)", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    import fused  # noqa: F401  (the import alone may build)

    p = torch.nn.Parameter(torch.ones(1000, device="cuda"))
    p.grad = torch.full_like(p, 0.5)
    opt = fused.FusedAdam([p], lr=1e-3, weight_decay=0.0, adam_w_mode=True)
    opt.step()
    torch.cuda.synchronize()
    secs = time.monotonic() - t0
    if not torch.all(p.detach() < 1):
        print("build_kernels: the built FusedAdam step left the parameter unchanged", file=sys.stderr)
        return 1
    print(f"build_kernels: fused kernels built and ran in {secs:.1f} s "
          f"(TORCH_EXTENSIONS_DIR={os.environ.get('TORCH_EXTENSIONS_DIR', '<torch default>')}, "
          f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '<visible device>')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
