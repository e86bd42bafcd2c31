"""The CLI plans and reports a run without importing torch (oracle.compare.targets.classes,
oracle.compare.lazy_torch): its workers read the optimizer classes and send what the target list needs,
and the target list made from that is the one made by reading the classes directly."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str, stdin: bytes | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, input=stdin,
                          capture_output=True, timeout=timeout)


LISTING = """
    import json, sys
    from oracle.compare.registry import every_target
    rows = [dict(name=t.name, optimizer=t.optimizer, options=sorted(t.options), dtypes=list(t.dtypes),
                 devices=list(t.devices), compute=t.compute, notes=t.notes, convention=repr(t.convention),
                 in_default=t.in_default, reason=t.reason if hasattr(t, "reason") else None)
            for t in every_target()]
    print(json.dumps({"rows": rows, "torch": "torch" in sys.modules}))
"""


def test_targets_listed_from_a_workers_facts_are_the_targets_listed_with_torch():
    read = _python("""
        import pickle, sys
        from oracle.compare.registry import class_paths
        from oracle.compare.targets import classes
        sys.stdout.buffer.write(pickle.dumps(classes.read_all(class_paths())))
    """)
    assert read.returncode == 0, read.stderr.decode()
    facts = pickle.loads(read.stdout)
    assert {"torch.optim.AdamW", "torch.optim.SGD", "fused.adam.FusedAdam"} <= set(facts["classes"])
    assert type(facts["torch_version"]) is str  # a plain str: unpickling it must not import torch

    learned = _python(textwrap.dedent("""
        import pickle, sys
        from oracle.compare.targets import classes
        classes.learn(pickle.loads(sys.stdin.buffer.read()))
    """) + textwrap.dedent(LISTING), stdin=read.stdout)
    assert learned.returncode == 0, learned.stderr.decode()
    direct = _python(LISTING)
    assert direct.returncode == 0, direct.stderr.decode()
    without, with_torch = json.loads(learned.stdout), json.loads(direct.stdout)
    assert without["torch"] is False, "listing from a worker's facts imported torch"
    assert with_torch["torch"] is True  # the direct listing read the classes itself
    assert without["rows"] == with_torch["rows"]
    by_name = {r["name"]: r for r in without["rows"]}
    # the facts decide options and paths: a wrong read would drop these
    assert "amsgrad" in by_name["torch.adamw.fused"]["options"]
    assert by_name["fused.sgd"]["options"] == ["dampening", "maximize", "nesterov"]
    assert by_name["torch.adamw.forloop"]["notes"].startswith(f"torch {facts['torch_version']} AdamW(")


def test_a_run_leaves_torch_out_of_the_cli_process(tmp_path):
    run = _python(f"""
        import sys
        from oracle.compare import cli
        code = cli.main(["--optimizer", "adamw", "--target", "torch.adamw.f*", "--target", "fused.adamw",
                         "--case", "adamw/bf16/wd0.1/single/normal", "--scenario", "none",
                         "--report-dir", {str(tmp_path)!r}, "-q"])
        print("exit", code, "torch" in sys.modules)
    """)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout.decode().split()[-3:] == ["exit", "0", "False"], run.stdout.decode()[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    ran = [r for r in report["results"] if r["status"] != "skip"]  # the capturable paths need CUDA
    # each of the four targets ran the case in the workers
    assert {r["target"] for r in ran} == {"torch.adamw.forloop", "torch.adamw.foreach", "torch.adamw.fused",
                                          "fused.adamw"}
    assert len(ran) == 4 and all(r["status"] == "pass" for r in ran), [(r["target"], r["status"]) for r in ran]
    assert report["versions"]["torch"].startswith("2.")


def test_the_stand_in_reads_torch_and_bind_puts_torch_in_its_place():
    import torch

    from oracle.compare import lazy_torch
    from oracle.compare.checking import case_run

    stand_in = lazy_torch.LazyModule("torch")
    assert stand_in.float16 is torch.float16 and stand_in.Tensor is torch.Tensor
    with pytest.raises(AttributeError):
        stand_in.no_such_attribute  # noqa: B018 - the read is the test
    lazy_torch.bind()
    assert case_run.torch is torch  # bound in a module that imported the stand-in
    assert case_run.torch_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(KeyError):
        case_run.torch_dtype("int8")

    @lazy_torch.no_grad
    def grad_mode():
        return torch.is_grad_enabled()
    assert grad_mode() is False and torch.is_grad_enabled() is True


def test_the_fused_package_lists_its_classes_without_torch():
    out = _python("""
        import sys
        import fused
        listed = dict(fused.CLASSES)
        before = "torch" in sys.modules
        optimizers = fused.OPTIMIZERS
        same = all(optimizers[n][0] is fused.class_of(path) and optimizers[n][1] == flags
                   for n, (path, flags) in listed.items())
        print(before, sorted(optimizers) == sorted(listed), same, "torch" in sys.modules)
    """)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["False", "True", "True", "True"]
