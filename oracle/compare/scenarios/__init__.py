"""Scenarios: situations the case matrix cannot express, each checked against
the oracle and reported as an oracle.compare.checking.case_run.CaseResult, one module each.

    SCENARIOS[name].run(target, device, seed) -> CaseResult

case = "scenario:<name>/<variant>"; checks = {check name: CheckResult} whose
Findings name the step, the tensor, the expected and the observed value. A
scenario an implementation cannot express returns status "skip" with the
reason; a part of a scenario it cannot express is named in the check's note
and in `reason` (status stays pass/fail on what did run). docs/scenarios.md
says what each scenario checks and which real defect it catches.

Beside the scenario modules: torch_wrappers (torch's distributed wrappers, the
parameters of `wrapped`), and the workers rank_worker and wrapped_worker.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

# The order scenarios run and are listed in; each name is a module here
# defining SCENARIO (or SCENARIOS, several).
ORDER = ("rank_skew", "construction", "checkpoint", "grad_scaling", "irregular", "long_horizon",
         "inputs_unchanged", "lr_schedule", "wrapped", "deepspeed_engine")


@dataclass(frozen=True)
class Scenario:
    name: str
    doc: str
    run: Callable  # (target, device: str, seed: int) -> CaseResult, or a list of them
    # for training-engine targets (Target.engine) only; the others are for optimizers only
    engine: bool = False
    # run when a sweep names no --scenario; the multi-process wrapper scenarios (DDP, ZeRO-1, FSDP2, DCP:
    # minutes per target on 2 cores, and third-party kernels that take no DTensor) run when named
    in_default: bool = True

    def applies(self, target) -> bool:
        return self.engine == (target.engine is not None)


def scenario(name: str, fn: Callable) -> Scenario:
    return Scenario(name, (fn.__doc__ or "").strip().split("\n\n")[0], fn)


def _load() -> dict[str, Scenario]:
    out = {}
    for name in ORDER:
        module = importlib.import_module(f"{__name__}.{name}")
        for sc in getattr(module, "SCENARIOS", None) or (module.SCENARIO,):
            out[sc.name] = sc
    return out


SCENARIOS: dict[str, Scenario] = _load()

# the scenario functions by name, for callers that pass their extra keywords
from .checkpoint import run_checkpoint  # noqa: E402
from .construction import run_construction  # noqa: E402
from .grad_scaling import run_grad_scaling  # noqa: E402
from .inputs_unchanged import run_inputs_unchanged  # noqa: E402
from .irregular import run_irregular  # noqa: E402
from .long_horizon import run_long_horizon  # noqa: E402
from .lr_schedule import run_lr_schedule  # noqa: E402
from .rank_skew import run_rank_skew  # noqa: E402

__all__ = ["ORDER", "SCENARIOS", "Scenario", "run_checkpoint", "run_construction", "run_grad_scaling",
           "run_inputs_unchanged", "run_irregular", "run_long_horizon", "run_lr_schedule", "run_rank_skew", "scenario"]
