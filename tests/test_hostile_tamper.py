"""A target cannot change a verdict by changing the process that judges it (oracle.compare.isolation.tamper):
its own rows are errors naming the change, and every other target's rows are what they are without
it, for any --jobs, isolated or not."""
from __future__ import annotations

import json

import pytest

from oracle.compare.cli import main

# two cases (single, two_groups): each tampering job retires its worker, and a fresh worker's start is
# most of this module's time
CASES = ["--optimizer", "adamw", "--case", "adamw/fp32/wd0*/[st][iw]*/*",
         "--scenario", "none", "--no-infer", "--quiet"]
HOSTILE = ["tests.broken.tampering:DoubleLrAdamW", "tests.broken.tampering:NumpyPatchingAdamW",
           "tests.broken.tampering:DefaultDtypeAdamW"]
CORRECT = ["torch.optim:AdamW", "tests.broken.adamw:CorrectAdamW"]


# the module's fixture runs three sweeps: on one worker, once (under --dist loadgroup its tests were
# split over both workers, and each ran the fixture: 75 s twice)
pytestmark = pytest.mark.xdist_group("tamper")


def run(tmp_path, name, *extra):
    folder = tmp_path / name
    impls = [a for spec in HOSTILE + CORRECT for a in ("--impl", spec)]
    code = main([*CASES, *impls, "--report-dir", str(folder), *extra])
    doc = json.loads((folder / "report.json").read_text())
    return code, {(r["target"], r["case"]): (r["status"], r.get("reason", "")) for r in doc["results"]}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tamper")
    return {name: run(tmp, name, *extra) for name, extra in
            (("jobs1", ("--jobs", "1")), ("jobs3", ("--jobs", "3")), ("in_process", ("--no-isolate",)))}


@pytest.mark.parametrize("mode", ["jobs1", "jobs3", "in_process"])
def test_a_tampering_target_is_an_error_naming_what_it_changed(verdicts, mode):
    code, rows = verdicts[mode]
    assert code == 1
    said = {"DoubleLrAdamW": "oracle.adam.update replaced", "NumpyPatchingAdamW": "numpy.abs replaced",
            "DefaultDtypeAdamW": "torch default dtype torch.float32 -> torch.float64"}
    for (target, case), (status, reason) in rows.items():
        name = target.rpartition(":")[2]
        if name in said:
            assert status == "error" and "tampered" in reason and said[name] in reason, (target, case, reason)


@pytest.mark.parametrize("mode", ["jobs1", "jobs3", "in_process"])
def test_the_others_pass_whatever_ran_before_them(verdicts, mode):
    _, rows = verdicts[mode]
    others = {k: v for k, v in rows.items() if k[0].rpartition(":")[2] in ("AdamW", "CorrectAdamW")}
    assert len(others) >= 4 and all(status == "pass" for status, _ in others.values()), others


def test_verdicts_do_not_depend_on_jobs(verdicts):
    statuses = {mode: {k: v[0] for k, v in rows.items()} for mode, (_, rows) in verdicts.items()}
    assert statuses["jobs1"] == statuses["jobs3"] == statuses["in_process"]


def test_inference_of_a_tampering_target_is_refused(tmp_path, capsys):
    """Its probes ran against the oracle it replaced: the inference reports nothing, and the CLI judges
    the target by its declarations (its rows then error as above)."""
    code = main(["--optimizer", "adamw", "--case", "adamw/fp32/wd0.1/single/normal", "--scenario", "none",
                 "--quiet", "--impl", HOSTILE[0], "--report-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 1
    assert "inferring impl:tests.broken.tampering:DoubleLrAdamW failed" in err and "oracle.adam.update replaced" in err


def test_the_snapshot_holds_every_optimizer_module_even_where_none_was_imported_yet():
    """`import oracle` reads the specification on first use: a snapshot taken in a fresh process must
    still hold every optimizer module's functions, or a target importing oracle.adam itself and
    replacing its update would go unseen."""
    import subprocess
    import sys
    code = ("import sys; from oracle.compare.isolation import tamper; before = 'oracle.adam' in sys.modules; "
            "snap = tamper.snapshot(); print(before, 'update' in snap.members.get('oracle.adam', {}), "
            "'step' in snap.members.get('oracle.lion', {}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]
