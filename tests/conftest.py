"""Shared fixtures. `outside_library/` is a library's own test suite run by test_pytest_plugin.py in
a subprocess, as its authors would run it; it is not part of this suite."""
import json

import pytest

collect_ignore = ["outside_library"]


@pytest.fixture(scope="session")
def failing_report(tmp_path_factory):
    """A report folder from a real run with new failures (a broken AdamW), an error row (a target that
    raises) and passing rows: (folder, report.json document)."""
    from oracle.compare.cli import main
    folder = tmp_path_factory.mktemp("failing") / "report"
    code = main(["--impl", "tests.broken.adamw:OffByOneAdamW", "--impl", "tests.broken.crashing:RaisingAdamW",
                 "--optimizer", "adamw", "--dtype", "fp32", "--case", "*/wd0.1/*", "--scenario", "none",
                 "--report-dir", str(folder), "--no-isolate", "--quiet"])
    assert code == 1
    return folder, json.loads((folder / "report.json").read_text())
