"""Known finding bnb-zero-redundancy-resume-state-lost (reports/known.toml).

bitsandbytes' `Optimizer8bit.state_dict` (bitsandbytes/optim/optimizer.py:161-187, 0.50) moves the
quantization-state entries of each param's state (`state1`, `state2`, `absmax1`, ...) into a nested
dict under its `_FSDP_WRAPPED_QUANT_STATE_KEY`, and only its own `load_state_dict` unwraps them.
torch's ZeroRedundancyOptimizer.load_state_dict
(torch/distributed/optim/zero_redundancy_optimizer.py:1202-1215) assigns each saved per-param state
straight into the local optimizer's `state[param]`, as torch's state_dict contract allows, so after a
resume every bitsandbytes state lacks `state1` and the next step raises KeyError: a ZeRO-1 checkpoint
of a bitsandbytes optimizer (even its 32-bit ones) cannot be continued.

One process (gloo, world 1), Adam32bit inside ZeroRedundancyOptimizer: one step, consolidate, save the
state dict, load it into a fresh ZeRO, step. Control: the same round trip through bitsandbytes' own
load_state_dict steps fine. Exit 0 (reproduces): the ZeRO resume raises KeyError 'state1' and the
control does not; 1 otherwise.
"""
import os
import sys
import tempfile

import bitsandbytes as bnb
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer


def zero(p):
    return ZeroRedundancyOptimizer([p], optimizer_class=bnb.optim.Adam32bit, lr=0.01)


def stepped(opt, p):
    p.grad = torch.full_like(p, 0.5)
    opt.step()


store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
p = torch.nn.Parameter(torch.ones(8))
first = zero(p)
stepped(first, p)
first.consolidate_state_dict(to=0)
saved = first.state_dict()
print("keys of the saved per-param state:", sorted(saved["state"][0]))
resumed = zero(p)
resumed.load_state_dict(saved)
try:
    stepped(resumed, p)
    zero_fails = False
    print("ZeRO resume: stepped")
except KeyError as exc:
    zero_fails = True
    print(f"ZeRO resume: KeyError {exc} (the local state holds {sorted(resumed.optim.state[p])})")

q = torch.nn.Parameter(torch.ones(8))
own = bnb.optim.Adam32bit([q], lr=0.01)
stepped(own, q)
again = bnb.optim.Adam32bit([q], lr=0.01)
again.load_state_dict(own.state_dict())
stepped(again, q)
print("control (bitsandbytes' own load_state_dict): stepped")
dist.destroy_process_group()
print(f"bitsandbytes {bnb.__version__}, torch {torch.__version__}: " +
      ("the defect reproduces" if zero_fails else "the defect does NOT reproduce"))
sys.exit(0 if zero_fails else 1)
