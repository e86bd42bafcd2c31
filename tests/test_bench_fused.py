"""benchmarks/bench_fused.py --quick runs every suite and reports every row it promises.

No timing is asserted (machines are noisy); what is checked is that each configuration ran both
implementations and the copy, and that the numbers are derived from the bytes model as documented.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_fused  # noqa: E402

EXPECTED = {("adamw", "float32", "float32", 1), ("adamw", "float32", "float32", 4),
            ("adamw", "bfloat16", "float32", 1), ("adamw", "bfloat16", "float32", 4),
            ("adamw", "bfloat16", "bfloat16", 1), ("adamw", "bfloat16", "bfloat16", 4),
            ("adagrad", "float32", "float32", 1), ("adagrad", "float32", "float32", 100),
            ("lamb", "float32", "float32", 1), ("lamb", "float32", "float32", 100),
            ("lamb_noclip", "float32", "float32", 1), ("lamb_noclip", "float32", "float32", 100),
            ("prefetch", "float32", "float32", 1), ("prefetch", "float32", "float32", 100)}


def test_quick_run_prints_and_writes_every_row(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rows = bench_fused.main(["--quick", "--out", str(out)])
    text = capsys.readouterr().out
    assert {(r["suite"], r["dtype"], r["moments"], r["tensors"]) for r in rows} == EXPECTED
    saved = json.loads(out.read_text())
    assert saved["numel"] == 2**16 and saved["rows"] == rows
    for r in rows:
        assert r["rounds"] == 3 and r["iters"] == 2
        for side in ("ours", "baseline"):
            assert r[f"{side}_ms"] > 0
            # GB/s is the bytes model over the median time; %copy that over the copy's GB/s
            gbs = r[f"{side}_bytes_per_param"] * 2**16 / r[f"{side}_ms"] / 1e6
            assert abs(r[f"{side}_gbs"] - gbs) <= 1e-9 * gbs
            assert abs(r[f"{side}_copy_fraction"] - gbs / r["copy_gbs"]) <= 1e-9 * gbs / r["copy_gbs"]
        assert r["ratio"] > 0
    lamb = [r for r in rows if r["suite"] == "lamb"]
    assert all(r["ours_name"] == "ours lamb" and r["baseline_name"] == "ours adamw" for r in lamb)
    # 64Ki params: every LAMB tensor takes the kernel's one-thread path (u stays in cache), 32 bytes
    assert all(r["ours_bytes_per_param"] == 32 and r["baseline_bytes_per_param"] == 28 for r in lamb)
    noclip = [r for r in rows if r["suite"] == "lamb_noclip"]  # without the grad-norm pass: 4 bytes less
    assert all(r["ours_name"] == "lamb mgn=0" and r["ours_bytes_per_param"] == 28 for r in noclip)
    assert all(r["ours_bytes_per_param"] == 20 for r in rows if r["suite"] == "adagrad")
    # one printed line per row, plus the header, rule, legend and the title
    assert len(text.strip().splitlines()) == len(EXPECTED) + 4
    assert sum(line.startswith("lamb ") for line in text.splitlines()) == 2
    assert sum(line.startswith("lamb_noclip ") for line in text.splitlines()) == 2


def test_suite_option_selects_rows(capsys):
    rows = bench_fused.main(["--quick", "--suite", "adagrad", "--rounds", "1", "--iters", "1"])
    assert [(r["suite"], r["tensors"]) for r in rows] == [("adagrad", 1), ("adagrad", 100)]
    assert "adagrad" in capsys.readouterr().out


def test_prefetch_suite_times_both_settings_and_restores_the_default(capsys):
    ext = bench_fused._ext.cpu()
    default = ext.prefetch()
    seen = []
    real = ext.prefetch

    class Spy:  # records every setting a step asks for, passing it on
        def __getattr__(self, name):
            return getattr(ext, name)

        def prefetch(self, enable=-1):
            if enable >= 0:
                seen.append(enable)
            return real(enable)

    original = bench_fused._ext.cpu
    bench_fused._ext.cpu = lambda: Spy()
    try:
        rows = bench_fused.main(["--quick", "--suite", "prefetch", "--rounds", "1", "--iters", "1"])
    finally:
        bench_fused._ext.cpu = original
    assert [(r["ours_name"], r["baseline_name"], r["tensors"]) for r in rows] == [
        ("adamw off", "adamw on", 1), ("adagrad off", "adagrad on", 100)]
    assert 0 in seen and 1 in seen
    assert ext.prefetch() is default
    assert "prefetch" in capsys.readouterr().out
