"""A crashing, hanging or raising target costs one error row; the sweep goes on."""
import json

from oracle.compare.cli import main

CASE = "adamw/fp32/wd0.1/single/normal"


def sweep(tmp_path, *impls, timeout="60"):
    args = ["--optimizer", "adamw", "--case", CASE, "--timeout", timeout, "--report-dir", str(tmp_path), "--quiet"]
    for impl in impls:
        args += ["--impl", impl]
    code = main(args)
    doc = json.loads((tmp_path / "report.json").read_text())
    return code, {r["target"].split(":")[-1]: r for r in doc["results"]}, (tmp_path / "report.md").read_text()


def test_segfault_is_an_error_row_and_the_sweep_continues(tmp_path):
    code, rows, md = sweep(tmp_path, "tests.broken.crashing:SegfaultAdamW", "tests.broken.adamw:CorrectAdamW")
    assert code == 1
    assert rows["SegfaultAdamW"]["status"] == "error" and "SIGSEGV" in rows["SegfaultAdamW"]["reason"]
    assert rows["CorrectAdamW"]["status"] == "pass"
    assert "## Errors" in md and "SIGSEGV" in md


def test_hang_is_killed_at_the_time_limit(tmp_path):
    code, rows, _ = sweep(tmp_path, "tests.broken.crashing:HangingAdamW", "tests.broken.adamw:CorrectAdamW",
                          timeout="30")  # long enough for a correct case on a loaded 2-core machine
    assert code == 1
    assert rows["HangingAdamW"]["status"] == "error" and "timed out after 30 s" in rows["HangingAdamW"]["reason"]
    assert rows["CorrectAdamW"]["status"] == "pass"


def test_exception_mid_step_is_reported_with_its_cause(tmp_path):
    code, rows, _ = sweep(tmp_path, "tests.broken.crashing:RaisingAdamW")
    row = rows["RaisingAdamW"]
    assert code == 1 and row["status"] == "error"
    assert "RuntimeError: kernel launch failed" in row["reason"]
    assert "kernel launch failed" in row["checks"]["error"]["note"]


def test_memory_limit_kills_the_worker_and_costs_one_row(tmp_path):
    args = ["--optimizer", "adamw", "--case", CASE, "--timeout", "120", "--report-dir", str(tmp_path), "--quiet",
            "--memory-limit", "1000", "--impl", "tests.broken.crashing:MemoryHogAdamW",
            "--impl", "tests.broken.adamw:CorrectAdamW"]
    assert main(args) == 1
    rows = {r["target"].split(":")[-1]: r for r in json.loads((tmp_path / "report.json").read_text())["results"]}
    assert rows["MemoryHogAdamW"]["status"] == "error"
    assert "exceeded the memory limit of 1000 MB" in rows["MemoryHogAdamW"]["reason"]
    assert rows["CorrectAdamW"]["status"] == "pass"
