"""The warm worker pool and sharding: --jobs N and --shard K/N + merge change nothing in the report
but its timings."""
import json
import re
import shutil

import pytest

from oracle.compare.running import shard
from oracle.compare.cli import main

# Passing torch paths, a user optimizer that fails (findings), a skipped target per CUDA-only path.
# (Not torch.adamw.compiled: compiling in every worker made each run 4x longer and tests nothing more
# about the pool or the shards.)
SELECTION = ["--optimizer", "adamw", "--target", "torch.adamw.forloop", "--target", "torch.adamw.fused",
             "--target", "torch.adamw.fused_capturable", "--impl", "tests.broken.adamw:OffByOneAdamW",
             "--dtype", "fp32", "--case", "adamw/fp32/wd0.1/s*", "--scenario", "none", "--seed", "0", "--seed", "3",
             "--quiet", "--timeout", "120"]


def untimed(path) -> str:
    """report.json's bytes with the creation time and the timings blanked out."""
    text = path.read_text()
    text = re.sub(r'"created": "[^"]*"', '"created": "-"', text)
    return re.sub(r'"seconds": [0-9.eE+-]+', '"seconds": 0', text)


def test_jobs_1_and_2_write_the_same_report(tmp_path):
    out = tmp_path / "r"
    # one crashing target too: its error rows must not depend on which worker died
    args = [*SELECTION, "--impl", "tests.broken.crashing:SegfaultAdamW", "--report-dir", str(out)]
    assert main([*args, "--jobs", "1"]) == 1
    one = untimed(out / "report.json")
    shutil.copy(out / "report.md", tmp_path / "one.md")
    assert main([*args, "--jobs", "2"]) == 1
    assert untimed(out / "report.json") == one
    doc = json.loads(one)
    assert "--jobs" not in doc["argv"]
    statuses = {(r["target"], r["status"]) for r in doc["results"]}
    assert {("impl:tests.broken.crashing:SegfaultAdamW", "error"), ("torch.adamw.forloop", "pass"),
            ("impl:tests.broken.adamw:OffByOneAdamW", "unexplained"), ("torch.adamw.fused_capturable", "skip")} <= statuses
    strip = lambda t: re.sub(r"- created: .*", "", t)  # noqa: E731
    assert strip((out / "report.md").read_text()) == strip((tmp_path / "one.md").read_text())


def test_merge_of_four_shards_equals_the_single_run(tmp_path):
    # --no-infer: the user optimizer is judged by its optimizer's default conventions in all five runs
    # (inference and its teaching probes were most of each run's time; the jobs test above keeps them)
    selection = [*SELECTION, "--no-infer"]
    single = tmp_path / "single"
    assert main([*selection, "--report-dir", str(single)]) == 1
    expected, expected_md = untimed(single / "report.json"), (single / "report.md").read_text()
    total = len(json.loads(expected)["results"])
    sizes = []
    for k in range(1, 5):
        code = main([*selection, "--shard", f"{k}/4", "--jobs", "1", "--report-dir", str(tmp_path / f"s{k}")])
        doc = json.loads((tmp_path / f"s{k}" / "report.json").read_text())
        assert doc["shard"]["index"] == k and doc["shard"]["count"] == 4
        assert code == (1 if any(r["status"] == "fail" for r in doc["results"]) else 0)
        sizes.append(len(doc["results"]))
    assert sum(sizes) == total and all(sizes)
    # merged into the single run's folder: the same command, so the same argv
    (single / "report.json").unlink()
    shards = [str(tmp_path / f"s{k}") for k in (3, 1, 4, 2)]  # any order
    assert main(["merge", *shards, "--report-dir", str(single)]) == 1
    assert untimed(single / "report.json") == expected
    strip = lambda t: re.sub(r"- created: .*", "", t)  # noqa: E731
    assert strip((single / "report.md").read_text()) == strip(expected_md)


def test_merge_refuses_incomplete_or_mixed_shards(tmp_path, capsys):
    base = ["--optimizer", "adamw", "--target", "torch.adamw.forloop", "--dtype", "fp32", "--scenario", "none",
            "--case", "adamw/fp32/wd0.1/single/normal", "--quiet"]
    for k in (1, 2):
        assert main([*base, "--shard", f"{k}/2", "--report-dir", str(tmp_path / f"s{k}")]) == 0
    assert main([*base, "--shard", "1/3", "--report-dir", str(tmp_path / "other")]) == 0
    merged = str(tmp_path / "m")
    assert main(["merge", str(tmp_path / "s1"), "--report-dir", merged]) == 2
    assert "missing 2" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "s1"), "--report-dir", merged]) == 2
    assert "repeated 1" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "other"), "--report-dir", merged]) == 2
    assert "different shard counts" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--report-dir", merged]) == 0
    # an empty shard (more shards than jobs) is a valid, empty part
    doc = json.loads((tmp_path / "s2" / "report.json").read_text())
    assert doc["results"] == [] and doc["complete"]


def test_shard_assignment_is_deterministic_and_balanced():
    from types import SimpleNamespace as NS
    work = [(NS(name=f"t{t}"), NS(name=f"c{c}", dtype="float32"), 0) for t in range(3) for c in range(40)]
    a = shard.assign(work, 4)
    assert a == shard.assign(list(work), 4)
    counts = [a.count(s) for s in range(4)]
    assert max(counts) - min(counts) <= 1  # equal costs: equal counts
    # by cost, not by count: t0's jobs cost 10x, and the loads still differ by less than one job
    table = ({("t0", "case:float32"): 10.0, ("t1", "case:float32"): 1.0}, {"case:float32": 1.0})
    loads = [0.0] * 4
    for job, s in zip(work, shard.assign(work, 4, table)):
        loads[s] += shard.job_cost(job, table)
    assert max(loads) - min(loads) <= 10.0 and sum(loads) == 40 * 12


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "x", "1/2/3", ""])
def test_bad_shard_is_a_usage_error(tmp_path, text, capsys):
    assert main(["--shard", text, "--report-dir", str(tmp_path), "--list"]) == 2
    assert "--shard" in capsys.readouterr().err
