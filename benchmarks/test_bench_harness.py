"""The harness benchmark through pytest-benchmark (benchmarks/bench_harness.py says what is measured).

    pytest benchmarks/test_bench_harness.py --benchmark-json=bench.json
    python benchmarks/bench_harness.py --check benchmarks/harness_baseline.json --result bench.json

Not part of the test suite (testpaths is tests/) and asserts nothing about time: the comparison with
the committed baseline, with its tolerance, is the second command (CI runs both, .ci/run).
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_harness  # noqa: E402

pytestmark = pytest.mark.xdist_group("benchmark")  # alone on its worker if ever run under xdist


@pytest.mark.parametrize("name", list(bench_harness.SWEEPS))
def test_sweep(benchmark, name):
    load = bench_harness.load_average()
    result = benchmark.pedantic(bench_harness.sweep, args=(name,), rounds=1, iterations=1)
    benchmark.extra_info.update(result, load_average_before=load, load_average_after=bench_harness.load_average())
    assert result["exit"] in (0, 1) and result["cases"] > 0
    assert result["profile"]["worker start-up (imports)"]["times"] == result["workers"]
    assert result["profile"]["target step"]["times"] > 0


def test_breakdown(benchmark):
    load = bench_harness.load_average()
    result = benchmark.pedantic(bench_harness.breakdown, rounds=1, iterations=1)
    benchmark.extra_info.update(result, load_average_before=load, load_average_after=bench_harness.load_average())
    assert result["cases"] > 0
