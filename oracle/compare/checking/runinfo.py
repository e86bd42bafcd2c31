"""What a report row needs to be reproduced: the command that reproduces it
and the versions of what ran (kept apart from report.py so that the known
findings can use them without importing the report writer)."""
from __future__ import annotations

import platform
import shlex

THIRD_PARTY = ("deepspeed", "bitsandbytes", "torchao", "apex", "transformer_engine", "pytorch-optimizer")


def repro_command(result, device: str = "cpu", inferred_from: str | None = None) -> str:
    """The command reproducing a row; `inferred_from`: the report.json whose inference it reuses."""
    if getattr(result, "repro", ""):
        return result.repro
    target = result.target
    sel = f"--impl {shlex.quote(target[5:])}" if target.startswith("impl:") else f"--target {shlex.quote(target)}"
    if result.case.startswith("scenario:"):
        name = result.case.split(":", 1)[1].split("/")[0]
        what = f"--scenario {name} --case {shlex.quote(result.case)}"
    else:
        what = f"--case {shlex.quote(result.case)} --steps {result.steps} --scenario none"
    # a fresh report folder: reproducing a row never writes into the folder it is typed in
    reuse = f" --inferred-from {shlex.quote(inferred_from)}" if inferred_from else ""
    return (f"python -m oracle.compare {sel} --optimizer {result.optimizer} {what} --seed {result.seed} "
            f"--device {device}{reuse} {SCRATCH_REPORT}")


SCRATCH_REPORT = '--report-dir "$(mktemp -d)"'


def reproducing(results, device: str, report_json: str, inferred: set) -> None:
    """Each row's repro command as written into this run's report: a row of an --impl judged under the
    convention this run inferred for it reuses that inference (--inferred-from this report.json)
    rather than inferring again, which costs more than the case and could settle elsewhere."""
    for r in results:
        if getattr(r, "repro", "") or r.target not in inferred:
            continue
        r.repro = repro_command(r, device, inferred_from=report_json)


def _torch_version(metadata) -> str:
    """torch's version as its distribution records it (the CLI imports no torch); torch.__version__
    where no distribution says (a source tree on the path)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        from ..targets.classes import torch_version
        return torch_version()


def versions() -> dict:
    """Versions of what ran: read from the installed distributions, since the
    libraries themselves are imported only inside the worker processes."""
    from importlib import metadata

    import numpy
    out = {"python": platform.python_version(), "torch": _torch_version(metadata), "numpy": numpy.__version__}
    for dist in THIRD_PARTY:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out
