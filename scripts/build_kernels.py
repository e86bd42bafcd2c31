"""Build our CUDA kernels, then prove the build works: one FusedAdam step on a small CUDA tensor.

fused._ext.cuda() compiles csrc/ with torch.utils.cpp_extension and ninja into FUSED_BUILD_DIR
(cached: a second run only loads it). Doing it here logs the build's time and compiler output on
their own (logs/build.log), instead of inside the first test that happens to touch the kernels.
"""
from __future__ import annotations

import os
import sys
import time


def main() -> int:
    os.environ.setdefault("FUSED_BUILD_VERBOSE", "1")
    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    if CUDA_HOME is None:
        print("build_kernels: no CUDA toolkit found (nvcc): install one whose major version matches "
              f"torch's CUDA {torch.version.cuda} and set CUDA_HOME (see docs/gpu.md)", file=sys.stderr)
        return 1
    print(f"build_kernels: CUDA_HOME={CUDA_HOME}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"FUSED_BUILD_DIR={os.environ.get('FUSED_BUILD_DIR', '<fused default>')}, "
          f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '<visible device>')}", flush=True)

    t0 = time.monotonic()
    from fused import _ext

    _ext.cuda()
    built = time.monotonic() - t0
    print(f"build_kernels: CUDA extension built/loaded in {built:.1f} s", flush=True)

    from fused import FusedAdam

    p = torch.nn.Parameter(torch.ones(1000, device="cuda"))
    p.grad = torch.full_like(p, 0.5)
    FusedAdam([p], lr=1e-3, weight_decay=0.0, adam_w_mode=True).step()
    torch.cuda.synchronize()
    if not bool(torch.all(p.detach() < 1)):
        print("build_kernels: one FusedAdam step on CUDA left the parameter unchanged", file=sys.stderr)
        return 1
    print("build_kernels: one FusedAdam step on CUDA updated every element")
    return 0


if __name__ == "__main__":
    sys.exit(main())
