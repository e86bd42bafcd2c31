"""torch.compile'd optimizer steps: `torch.<opt>.compiled`.

The optimizer is torch's own class, constructed as a user would (no foreach /
fused flag: torch picks its default path), and its `step` is replaced by
`torch.compile(opt.step)` (inductor; on CPU it generates and builds C++).
Everything else (param_groups, state, state_dict, load_state_dict) is the
eager optimizer's, so the harness reads and reloads it unchanged.

Three things keep the run honest:
- dynamo compiles one code object (Optimizer.step) for every instance, and
  after `recompile_limit` recompilations it silently runs the frame eagerly.
  A case builds several optimizers, so every compiled optimizer gets a fresh
  dynamo cache (torch._dynamo.reset() at construction), and a step that would
  fall back to eager raises instead (fail_on_recompile_limit_hit).
- each compiled step counts the frames dynamo compiled for it
  (`CompiledStep.frames`), so tests and the lr-change scenario can see that a
  graph ran and when a change of hyperparameter recompiled it.
- inductor's CPU code computes bf16/fp16 elementwise math in fp32 and rounds
  on store (it upcasts low-precision loads), so these targets are judged with
  the fp32 compute model, like the fused paths, not the per-op rounding of
  torch's eager forloop/foreach paths.

Compile time decides the subset of the case matrix these targets run
(SUBSET below, with the measurement that sets it): they are not part of a
sweep that names no --target; select them with --target 'torch.*.compiled'.
"""
from __future__ import annotations

import shutil
from dataclasses import replace

import oracle

from . import classes
from ..lazy_torch import torch
from .base import Target
from .torch_optim import TORCH_DECLARED, accepted_options, float32_counter

# Measured on this project's 2-core CPU machine (tests/test_compiled.py
# prints it; docs/wrappers.md): the first compile of a step is ~2-3 s with a
# warm inductor cache (20 s cold), and a matrix case builds five optimizers
# (lockstep, two save/reload round trips), each compiled afresh (see above):
# ~15 s a case, ~7 min for one optimizer's 30 cases. The subset keeps every
# layout and regime of the plan in fp32 and bf16 (inductor's upcast is what
# bf16 tests); fp16 differs from bf16 only in format, not in the compiled
# code path, and is left to --case when wanted.
SUBSET = ("*/fp32/*", "*/bf16/*")
SUBSET_REASON = ("compile time: every optimizer a case builds is compiled afresh (~3 s each, 5 per case); "
                 "torch.*.compiled targets run the fp32 and bf16 cases, fp16 uses the same inductor code path")


# Measured (torch 2.13, CPU): rank_skew's ranks forked after the parent's warm-up compile never
# finished (ASGD: rank 0 gave no result in 120 s, ~28 s of CPU in 160 s); spawned, both worlds
# passed in 64 s.
NO_FORK = ("torch.compile: a rank forked after the parent compiled a step hangs in its own compile "
           "(inductor's compile workers and threads do not survive fork); its ranks are spawned")


def compiler_missing(device: str) -> str | None:
    """inductor builds C++ on CPU: without a compiler torch.compile cannot run."""
    if device == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return "torch.compile on CPU needs a C++ compiler (inductor builds its kernels); none on PATH"
    return None


class CompiledStep:
    """opt.step compiled with inductor; counts the frames dynamo compiled."""

    def __init__(self, step):
        self.eager = step
        self.compiled = torch.compile(step)
        self.frames = 0  # frames compiled by this step's calls (first compile + recompilations)

    def __call__(self, closure=None):
        from torch._dynamo.utils import counters
        before = counters["stats"]["unique_graphs"]
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            out = self.compiled() if closure is None else self.compiled(closure)
        self.frames += counters["stats"]["unique_graphs"] - before
        return out


def compiled_make(path: str):
    def make(groups, defaults):
        torch._dynamo.reset()  # a fresh cache: no silent eager fallback after many instances
        opt = classes.class_at(path)(groups, **defaults)
        opt.step = CompiledStep(opt.step)  # instance attribute: shadows Optimizer.step
        return opt
    return make


# The convention options that say whether a counter-dependent scalar (a bias correction, a
# step-size schedule) is formed on the host in float64 or as array operations in the compute dtype.
COUNTER_MATH_PRECISION = ("bias_correction_precision", "schedule_precision")


def compiled_convention(name: str):
    """torch's eager convention (its float32 counter included: compiling keeps the
    same 0-dim float32 step tensor), with what compiling changes: the step takes the
    counter's value as a tensor when compiling (_get_value returns the float32 step
    tensor under torch.compiler.is_compiling()), so 1 - beta**t and any schedule of t
    are formed in float32, not in Python doubles (measured for Adam: 142 ULPs of the
    param off the float64-bias-correction model at step 1, fp32)."""
    conv = float32_counter(oracle.SPECS[name].convention)
    for option in COUNTER_MATH_PRECISION:
        if hasattr(conv, option):
            conv = replace(conv, **{option: "compute"})
    return conv


def compiled_compute(name: str) -> str:
    """Inductor fuses an elementwise step into one kernel that upcasts a bf16/fp16 param to
    float32 and rounds once on store. A step that reduces (Adafactor's row and column means,
    Muon's matmuls) becomes several kernels, and the buffers between them keep the eager
    graph's dtype: intermediate values round to the param's format, as eager's do (measured:
    compiled Adafactor's bf16 row_var 1.25 ULPs off the float32-compute model at step 1)."""
    return "storage" if oracle.SPECS[name].reduces else "float32"


def compiled_targets(records: dict) -> list[Target]:
    """A compiled target for every optimizer torch has (its comparison record names a torch class)."""
    out = []
    for name, rec in records.items():
        if rec.torch_class is None:
            continue
        cls = classes.info(rec.torch_class)
        out.append(Target(
            name=f"torch.{name}.compiled", optimizer=name, make=compiled_make(rec.torch_class),
            convention=compiled_convention(name), devices=("cpu", "cuda"), compute=compiled_compute(name),
            options=accepted_options(cls, name), declared=TORCH_DECLARED, requires=compiler_missing,
            in_default=False, subset=SUBSET, subset_reason=SUBSET_REASON, no_fork=NO_FORK,
            notes=f"torch {classes.torch_version()} torch.compile({cls.name}(...).step), inductor"))
    return out


__all__ = ["CompiledStep", "SUBSET", "compiled_make", "compiled_targets", "compiler_missing"]
