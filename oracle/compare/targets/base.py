"""Targets: an optimizer implementation plus the conventions it declares.

A target builds a torch optimizer from parameter groups, and the harness
steps it and reads its state back in canonical form (oracle.compare.measuring.readback).
Anything that is a `torch.optim.Optimizer` works: torch's own paths, our
fused kernels, third-party libraries, a user's class passed with --impl.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable


def no_requirements(device: str) -> None:
    """The default `requires`: nothing beyond the target's declared devices (and CUDA for "cuda"). The
    CLI checks such a target's availability itself; one with a check of its own (which imports its
    library) is checked in a worker (oracle.compare.running.workers.Pool.probe)."""
    return None


@dataclass(frozen=True)
class Target:
    """One implementation under test.

    make(param_groups, defaults) -> torch.optim.Optimizer, where
        param_groups is torch's list of {"params": [...], **hparams}.
    convention: the oracle convention the implementation declares.
    compute: "float32" when the per-element math runs in fp32 and rounds on
        store (fused kernels, fp32 paths); "storage" when each op rounds to
        the param dtype (torch forloop/foreach on bf16/fp16 params).
    masters: keeps FP32 master weights for low-precision params.
    options: optimizer options this target accepts (amsgrad, maximize, ...).
    requires: returns None if usable on `device`, else the reason it is not.
    """

    name: str
    optimizer: str
    make: Callable
    convention: object
    devices: tuple = ("cpu",)
    dtypes: tuple = ("float32", "bfloat16", "float16")
    compute: str = "float32"
    masters: bool = False
    state_dtype: str = "param"  # dtype of moments/accumulators: "param" (torch) or "float32"
    state_names: tuple = ()     # (implementation key, canonical name) pairs, see readback.read
    quantized: tuple = ()       # QuantEntry per state entry kept quantized (oracle.compare.measuring.quantized_state)
    options: frozenset = frozenset()
    requires: Callable[[str], str | None] = no_requirements
    notes: str = ""
    scaling: Callable | None = None  # step(opt, inv_scale, found_inf) if grad scaling is supported
    in_default: bool = True  # part of a sweep that names no --target
    declared: tuple = ()     # (check, reason) pairs: deviations by design; the check runs, findings go to its note
    # (option, reason) pairs: convention options whose deviation (oracle.forms) the implementation
    # declares on purpose (ORACLE_DEVIATIONS); its rows then pass, saying so (oracle.compare.checking.deviation)
    deviations: tuple = ()
    # the spec's hyperparameters its constructor does not take (oracle.compare.targets.user_impl): never
    # passed; a case that sets one to other than its default is a skip saying so
    absent: frozenset = frozenset()
    # set when inference found no form that explains the target: the nearest one (judged) and the
    # probes that separate it; its failing rows are "unexplained", not defects (oracle.compare.checking.deviation)
    unexplained: str = ""
    # A training engine rather than an optimizer (DeepSpeed's): runs only the
    # scenarios marked engine=True, with this description of itself.
    engine: "EngineSpec | None" = None
    threads: int = 1  # torch/OpenMP threads a worker runs this target's jobs with (workers default to one)
    # why this target's step cannot take DTensor params (FSDP2's), "" when it can: the scenarios whose
    # wrapper hands the optimizer DTensors (fsdp2*, dcp_reshard) skip it, naming this
    no_dtensor: str = ""
    # why each of this target's jobs runs in a process of its own (forked for it from a worker where none
    # of its code stepped), "" when it need not: state the library keeps per process rather than per
    # optimizer, which would carry one job's history into the next and make a verdict depend on --jobs
    own_process: str = ""
    # why the ranks of a multi-process scenario (rank_skew) must be fresh interpreters rather than forks
    # of the calling process, "" when forking is safe: state the parent set up that a fork cannot carry
    no_fork: str = ""
    # its conventions are not declared but inferred before it is judged (oracle.compare.inference.infer): an
    # outside optimizer; `convention` etc. are then only the starting point
    infer: bool = False
    # A declared subset of the case matrix (case-name globs; empty: every case)
    # and why the rest is left out (e.g. compile time); other cases skip with it.
    subset: tuple = ()
    subset_reason: str = ""
    # how a param stored narrower than the compute dtype is rounded: "nearest" (round to nearest even),
    # or "stochastic" (toward or away from zero at random, oracle.compare.measuring.stochastic: judged
    # by the `rounding` check, and torch's generator seeded from the case's seed before each run)
    rounding: str = "nearest"
    # seconds a fresh process of this target may need before its steps run at their usual speed
    # (torch.compile compiling each param shape on the first step): added to the time limit of every
    # rank a multi-process scenario starts, since each rank compiles afresh
    start_s: float = 0.0

    def unavailable(self, device: str) -> str | None:
        if device not in self.devices:
            return f"{self.name} does not run on {device}"
        if device == "cuda" and not cuda_available():
            return "CUDA is not available"
        return self.requires(device)

    def outside_subset(self, case_name: str) -> str | None:
        """The reason this target does not run a case of the matrix, if it declares a subset without it."""
        import fnmatch
        if not self.subset or any(fnmatch.fnmatch(case_name, p) for p in self.subset):
            return None
        return f"outside {self.name}'s declared subset ({', '.join(self.subset)}): {self.subset_reason}"

    def read(self, opt):
        from ..measuring.readback import read
        return read(opt, self.state_names, self.quantized)

    def compute_dtype(self, storage: str) -> str:
        return storage if self.compute == "storage" else "float32"


@dataclass(frozen=True)
class EngineSpec:
    """What an engine target wraps: the ZeRO stage, the client optimizer (a
    name its library's engine scenarios know), the model dtype and the world
    sizes it is run at."""

    zero: int
    client: str
    dtype: str
    worlds: tuple = (1, 2)


def cuda_available() -> bool:
    """torch imported here only when a CUDA device is asked about: the CLI plans a CPU run without it
    (a second of CPU that its workers, which import torch anyway, would otherwise wait for)."""
    import torch
    return torch.cuda.is_available()


def torch_scaled_step(opt, inv_scale, found_inf):
    """torch's fused path reads grad_scale/found_inf attributes set by GradScaler."""
    import torch
    dev = opt.param_groups[0]["params"][0].device if opt.param_groups[0]["params"] else "cpu"
    opt.grad_scale = torch.tensor(1.0 / inv_scale, dtype=torch.float32, device=dev)
    opt.found_inf = torch.tensor(float(found_inf), dtype=torch.float32, device=dev)
    try:
        opt.step()
    finally:
        del opt.grad_scale, opt.found_inf


def with_counter(target: Target, counter: str) -> Target:
    """The same target with its declared counter location replaced."""
    return replace(target, convention=replace(target.convention, counter=counter))


def scaled_step_kwargs(opt, inv_scale, found_inf):
    """Grad scaling for optimizers whose step() takes inv_scale= and found_inf= (ours, ORACLE_SCALING)."""
    opt.step(inv_scale=inv_scale, found_inf=found_inf)


class FixedReason:
    """A `requires` that returns the reason it was made with: nothing to import, so the CLI asks it itself."""

    def __init__(self, reason: str):
        self.reason = reason

    def __call__(self, device: str) -> str:
        return self.reason


def unusable(name: str, optimizer: str, reason: str) -> Target:
    """A target that cannot be built here, carrying the reason (one skip row)."""
    return Target(name=name, optimizer=optimizer, make=None, convention=None, requires=FixedReason(reason))


def checked_in_worker(target: Target, device: str) -> bool:
    """Whether the target's availability on `device` is asked in a worker process: when its `requires`
    is a check of its own (importing its library, running a kernel: code the CLI process never runs)
    and the declared devices do not already rule the device out. An outside optimizer whose conventions
    are inferred (target.infer) was checked by the CLI before inference already."""
    return (device in target.devices and not target.infer and (device != "cuda" or cuda_available())
            and not isinstance(target.requires, FixedReason) and target.requires is not no_requirements)


__all__ = ["EngineSpec", "FixedReason", "Target", "checked_in_worker", "no_requirements", "scaled_step_kwargs",
           "torch_scaled_step", "unusable", "with_counter"]
