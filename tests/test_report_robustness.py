"""Reports survive interruption, are written atomically, and their repro commands reproduce."""
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from oracle.compare.reporting import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args, **kw):
    # SIGINT at its default in the child, as a terminal leaves it (a pytest started with `&` ignores it)
    return subprocess.Popen([sys.executable, "-m", "oracle.compare", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupt_writes_the_finished_cases_marked_incomplete(tmp_path, how):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and SIGTERM to the CLI alone
    (what a CI runner sends when a job is cancelled) both keep every finished case; 130 and 143."""
    proc = cli("--optimizer", "adamw", "--target", "torch.adamw.forloop", "--scenario", "none",
               "--report-dir", str(tmp_path), start_new_session=True)
    deadline = time.monotonic() + 240
    seen = ""
    while "[3/" not in seen and time.monotonic() < deadline:  # progress lines go to stderr
        seen += proc.stderr.readline()
    assert "[3/" in seen, seen
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if how == "ctrl-c" else 143), err
    assert "Traceback" not in err
    if how == "sigterm":
        assert "terminated (SIGTERM): writing the cases finished so far" in err
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["complete"] is False
    assert 3 <= len(doc["results"]) < 27 and all(r["status"] == "pass" for r in doc["results"])
    assert "complete: False" in (tmp_path / "report.md").read_text()


def test_atomic_write_leaves_the_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    report.atomic_write(str(path), "old")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        report.atomic_write(str(path), "new and half")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["report.json"]  # no temporary left behind


def test_repro_command_reproduces_the_row_bit_for_bit(tmp_path):
    first = tmp_path / "first"
    proc = cli("--impl", "tests.broken.adamw:OffByOneAdamW", "--optimizer", "adamw", "--dtype", "bf16",
               "--scenario", "none", "--seed", "3", "--report-dir", str(first), "--quiet")
    proc.communicate(timeout=600)
    assert proc.returncode == 1
    # no form explains the off-by-one AdamW: its failing rows are "unexplained"
    rows = [r for r in json.loads((first / "report.json").read_text())["results"] if r["status"] == "unexplained"]
    assert rows
    row = rows[0]  # a sample: each repro runs in a fresh process (10 s a row)
    # run as a person pastes it, in an empty folder: it writes a fresh temporary report folder (under
    # TMPDIR), nothing where it is typed, and judges the target as the run inferred it (no inference)
    here, scratch = tmp_path / "here", tmp_path / "scratch"
    here.mkdir()
    scratch.mkdir()
    assert f"--inferred-from {first / 'report.json'}" in row["repro"]
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(["bash", "-c", row["repro"].replace("python", shlex.quote(sys.executable), 1)],
                         cwd=here, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "inferring the conventions" not in out.stderr and "as " + str(first / "report.json") in out.stderr
    assert list(here.iterdir()) == []
    [again] = list(scratch.iterdir())
    [rerun] = json.loads((again / "report.json").read_text())["results"]
    assert rerun["case"] == row["case"] and rerun["seed"] == 3
    assert rerun["checks"] == row["checks"]  # every finding: same element, same expected/got floats
