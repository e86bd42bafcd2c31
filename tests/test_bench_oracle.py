"""benchmarks/bench_oracle.py runs end to end on a small tensor: the oracle (with and without output
recycling) and the in-place floor agree, and --out writes the medians and ratios (no timing asserted)."""
import json
import sys
from pathlib import Path

import oracle.common as common

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_oracle  # noqa: E402


def test_bench_oracle_writes_its_ratios(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "_spares", [])
    out = tmp_path / "oracle.json"
    # 40000 elements: sliced (more than SLICE) and, with --recycle-bytes 0, recycled
    assert bench_oracle.main(["--numel", "40000", "--rounds", "2", "--recycle-bytes", "0", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["median_ms"]) == {"in-place NumPy", "oracle", "oracle, fresh outputs"}
    assert set(doc["over_in_place"]) == {"oracle", "oracle, fresh outputs"} and all(r > 0 for r in doc["over_in_place"].values())
    assert doc["command"].startswith("python benchmarks/bench_oracle.py --numel 40000")
    assert common._spares, "the recycled runner kept its outputs for reuse"
