"""Known defect bnb-cpu-blockwise-quantize-not-nearest (reports/known.toml).

bitsandbytes' CPU blockwise quantizer (csrc/common.cpp quantize_block: "do binary search to find the
closest value", then compare the two neighbours' distances) stores codes that are not the nearest
code of its own dynamic map. Its search (BinSearch's Direct2 table) cannot resolve the map's
finest spacing: every value whose normalized magnitude |x| / absmax is below ~1e-5 gets a code
2e-5 or more away (0.0 itself is stored as 2.125e-5 * absmax, although 0 is a code), and values
near the midpoint of two codes get the farther one, up to a relative distance difference of ~1e-5.
An 8-bit optimizer's state (Adam8bit's exp_avg and exp_avg_sq on CPU) is stored through it every
step.

The script quantizes one block [absmax, 0, small values, near-midpoint values] with bitsandbytes'
own map and compares each code with the nearest code by exact float64 distance. Exit 0
(reproduces): some element of bitsandbytes' result is farther from its value than the nearest code
by more than float32 rounding could explain; 1 otherwise.
"""
import sys

import numpy as np
import torch
import bitsandbytes  # noqa: F401 - registers torch.ops.bitsandbytes
import bitsandbytes.functional as F

code = F.create_dynamic_map(signed=True)
block = np.zeros(256, dtype=np.float32)
block[0] = 1.0                                         # the absmax: values below are normalized already
block[1] = 0.0                                         # a code of the map
block[2:64] = np.logspace(-9, -5, 62, dtype=np.float32)    # tiny moments
mid = ((code[:-1] + code[1:]) / 2).numpy().astype(np.float32)
block[64:256] = mid[32:224] * np.float32(1 + 1e-6)     # just past a midpoint: the upper code is nearer

out, absmax = torch.ops.bitsandbytes.quantize_blockwise(torch.from_numpy(block), code, 256)
codes = code.numpy().astype(np.float64)
x = block.astype(np.float64) / float(absmax[0])
got = np.abs(x - codes[out.numpy().astype(np.int64)])
best = np.abs(x[:, None] - codes[None, :]).min(axis=1)
worse = got > best + 2 * np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)
print(f"bitsandbytes {bitsandbytes.__version__} CPU quantize_blockwise: {int(worse.sum())} of 256 codes are not "
      f"the nearest; worst excess distance {float((got - best).max()):.3g} (in units of absmax); "
      f"0.0 stored as {float(codes[int(out.numpy()[1])]):.4g}")
sys.exit(0 if worse.sum() > 0 else 1)
