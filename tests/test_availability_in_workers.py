"""Whether a library's targets are usable here is asked in a worker process, never in the CLI's: the
check imports the library (bitsandbytes: its import pulls in torch's compiler stack, 2.7 s) and runs
one of its kernels. A library that kills or hangs the process on import then costs its targets one
skip row each, naming what happened; it can neither end the run nor change another target's rows.

The misbehaving library is a stand-in `bitsandbytes` package put first on the workers' PYTHONPATH."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oracle.compare import registry
from oracle.compare.running import workers
from oracle.compare.targets.base import checked_in_worker, no_requirements

REPO = Path(__file__).resolve().parent.parent
CASE = "adamw/fp32/wd0.1/single/normal"


def stand_in(tmp_path: Path, body: str) -> Path:
    """A folder holding a `bitsandbytes` package whose import runs `body`."""
    pkg = tmp_path / "shadow" / "bitsandbytes"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    return pkg.parent


def pythonpath(folder: Path) -> str:
    return os.pathsep.join([str(folder), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])


def shadow_in_workers(monkeypatch, folder: Path) -> None:
    """Workers are spawned with this process's sys.path: the stand-in goes first there. This process
    never imports it (the check runs in the workers only)."""
    monkeypatch.setenv("PYTHONPATH", pythonpath(folder))
    monkeypatch.syspath_prepend(str(folder))


def test_which_targets_are_asked_in_a_worker():
    bnb = registry.find("bnb.adamw32bit", "adamw")
    forloop = registry.find("torch.adamw.forloop", "adamw")
    assert checked_in_worker(bnb, "cpu")
    assert forloop.requires is no_requirements and not checked_in_worker(forloop, "cpu")
    assert not checked_in_worker(bnb, "cuda")  # ruled out by its declared devices: no worker needed


def test_a_check_that_kills_its_worker_makes_that_target_unusable_and_the_pool_goes_on(tmp_path, monkeypatch):
    folder = stand_in(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    shadow_in_workers(monkeypatch, folder)
    targets = [registry.find("bnb.adamw32bit", "adamw"), registry.find("torchao.adamw", "adamw")]
    pool = workers.Pool(2, timeout=120)
    try:
        reasons = pool.probe(targets, "cpu")
        assert "ended its worker process" in reasons["bnb.adamw32bit"]
        assert "SIGKILL" in reasons["bnb.adamw32bit"]
        # the other library's check ran in the same pool and says what it says without the stand-in
        from oracle.compare.targets.bitsandbytes_torchao import torchao_unavailable
        assert reasons["torchao.adamw"] == torchao_unavailable()
        # and the pool still runs jobs (a fresh worker replaced the dead one)
        forloop = registry.find("torch.adamw.forloop", "adamw")
        from oracle.compare.checking import cases as C
        case = next(c for c in C.cases("adamw", ("float32",), 3) if c.name == CASE)
        (row,) = [r for r in pool.run([(forloop, case, 0)], "cpu")]
        assert row.status == "pass", row
    finally:
        pool.close()


def test_a_check_that_hangs_is_cut_at_the_timeout(tmp_path, monkeypatch):
    folder = stand_in(tmp_path, "import time\ntime.sleep(600)\n")
    shadow_in_workers(monkeypatch, folder)
    pool = workers.Pool(1)
    try:
        reasons = pool.probe([registry.find("bnb.adamw32bit", "adamw")], "cpu", timeout=3)
    finally:
        pool.close()
    assert "ended its worker process (timed out after 3 s" in reasons["bnb.adamw32bit"]


def test_the_run_survives_a_library_that_kills_whoever_imports_it(tmp_path):
    """Before, the CLI imported bitsandbytes itself to plan the run: this stand-in killed the CLI."""
    folder = stand_in(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    env = {**os.environ, "PYTHONPATH": pythonpath(folder)}
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "oracle.compare", "--optimizer", "adamw", "--target", "bnb.adamw32bit",
                           "--target", "torch.adamw.forloop", "--case", CASE, "--scenario", "none", "--steps", "3",
                           "--report-dir", str(out), "--known", "none"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = {r["target"]: r for r in json.loads((out / "report.json").read_text())["results"]}
    assert rows["torch.adamw.forloop"]["status"] == "pass"
    assert rows["bnb.adamw32bit"]["status"] == "skip"
    assert "ended its worker process" in rows["bnb.adamw32bit"]["reason"]


def test_the_cli_process_never_imports_the_library_it_checks():
    pytest.importorskip("bitsandbytes")
    code = ("import sys\nfrom oracle.compare import cli\n"
            "args, optimizers = cli.parse(['--optimizer', 'adamw', '--target', 'bnb.adamw32bit'])\n"
            "from oracle.compare.running.workers import Pool\n"
            "pool = Pool(1)\n"
            "try:\n"
            "    work, skipped = cli.plan(args, optimizers, pool)\n"
            "finally:\n"
            "    pool.close()\n"
            "print(len(work), len(skipped), 'bitsandbytes' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    jobs, skipped, imported = done.stdout.split()
    # usable (its kernel ran in the worker), planned, and never loaded here
    assert int(jobs) > 0 and skipped == "0" and imported == "False"


def test_what_a_check_sets_in_its_environment_is_set_in_the_cli_too(monkeypatch):
    """DeepSpeed's check sets DS_ACCELERATOR and TORCH_EXTENSIONS_DIR (where its ops are built) before
    importing it; asked in a worker, the CLI still gets both, so every worker started later inherits
    them and loads the ops from the same folder."""
    import importlib.util
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed")
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    engine = next(t for t in registry.every_target() if t.engine is not None and t.engine.client == "adamw")
    assert checked_in_worker(engine, "cpu")
    pool = workers.Pool(1)
    try:
        reasons = pool.probe([engine], "cpu")
    finally:
        pool.close()
    assert reasons == {engine.name: None}
    from oracle.compare.targets.deepspeed import default_extensions_dir
    assert os.environ.get("DS_ACCELERATOR") == "cpu"
    assert os.environ.get("TORCH_EXTENSIONS_DIR") == default_extensions_dir()
