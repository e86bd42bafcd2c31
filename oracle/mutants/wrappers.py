"""Wrapper mutants: a mixed-precision wrapper (oracle.compare.targets.master_weights.MasterWeights,
the correct one) with one defect. They run through the construction scenario's
pluggable wrapper, around a correct inner optimizer (INNER, a oracle.mutants.base class).
"""
from __future__ import annotations

import torch

from oracle.compare.targets.master_weights import MasterWeights

from . import base as B


class DSZero0WrapperCtorStep(MasterWeights):
    PROVENANCE = "DeepSpeed #8910 (FP16/BF16 ZeRO-0 wrappers; the seed PR)"
    DESCRIPTION = ("mixed-precision wrapper calls optimizer.step() with zero grads in its constructor: "
                   "counters advance and AdamW decay is applied to the masters before training")
    EXPECT = ("construction.wrapper", "[wrapped bfloat16] group 0 param 0", 0, "")
    GPU_ONLY = False
    INNER = B.TorchAdamW

    def __init__(self, optimizer):
        super().__init__(optimizer)
        for masters in self.master_groups:
            for m in masters:
                m.grad = torch.zeros_like(m)
        self.optimizer.step()   # "initialize" the optimizer state
        with torch.no_grad():
            for params, masters in zip(self.model_groups, self.master_groups):
                for p, m in zip(params, masters):
                    m.grad = None
                    if m is not p:
                        p.copy_(m)


WRAPPER_MUTANTS = [DSZero0WrapperCtorStep]
