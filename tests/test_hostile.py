"""Hostile input through the real CLI (`python -m oracle.compare` in a subprocess): each bad input gets
its exit status and a clear message, a previous complete report in the report dir stays as it was,
and no process the run started outlives it (each run carries a tag in its environment; every process
that inherits it is looked for in /proc). docs/robustness.md lists each input and what it gets."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASE = "adamw/fp32/wd0.1/single/normal"
TAG = "ORACLE_TEST_TAG"
PREVIOUS = {"report.json": json.dumps({"schema": "optimizer-oracle-report/1", "complete": True, "results": []}),
            "report.md": "# Optimizer oracle report\n\n- complete: True\n"}

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def tagged(tag: str) -> list[str]:
    """Live processes whose environment carries this run's tag (pid and command line)."""
    out = []
    needle = f"{TAG}={tag}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in env.split(b"\0"):
            out.append(f"{pid}: {cmd[:160]}")
    return out


def none_survive(tag: str, within: float = 30.0) -> list[str]:
    deadline = time.monotonic() + within
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def default_sigint() -> None:
    """In the child: SIGINT as a terminal leaves it. A pytest started in the background by a
    non-interactive shell (`cmd &`, nohup) ignores SIGINT, the CLI would inherit that, and the Ctrl-C
    tests would test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Run:
    def __init__(self, tmp_path: Path, *args, env=None, preexec_fn=None):
        self.tag = uuid.uuid4().hex
        self.tmp = tmp_path / "tmp"  # the run's TMPDIR: whatever it leaves there is visible
        self.tmp.mkdir(exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "oracle.compare", *args], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {}), TAG: self.tag, "TMPDIR": str(self.tmp)},
                                     preexec_fn=preexec_fn or default_sigint)

    def finish(self, timeout=300):
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err


def previous_report(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in PREVIOUS.items():
        (folder / name).write_text(text)
    return folder


def intact(folder: Path) -> bool:
    return all((folder / name).read_text() == text for name, text in PREVIOUS.items())


def cli(tmp_path, *args, report_dir=None, timeout=300, **kw):
    """Run to the end; returns (exit status, stderr). Asserts that nothing it started survives."""
    run = Run(tmp_path, *args, *(["--report-dir", str(report_dir)] if report_dir is not None else []), **kw)
    code, _, err = run.finish(timeout)
    left = none_survive(run.tag)
    assert not left, f"processes outlived the run: {left}"
    return code, err


ONE_CASE = ["--optimizer", "adamw", "--case", CASE, "--scenario", "none", "--quiet"]


# --- bad option values ------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--timeout", "nan"], "--timeout must be a positive number of seconds, got nan"),
    (["--timeout", "inf"], "--timeout must be a positive number of seconds, got inf"),
    (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0"),
    (["--seed", "-1"], "--seed must be a non-negative integer, got -1"),
    (["--jobs", "0"], "--jobs must be at least 1, got 0"),
    (["--memory-limit", "nan"], "--memory-limit must be a positive number of megabytes"),
    (["--shard", "5/4"], "--shard 5/4: K must be between 1 and N"),
    (["--shard", "half"], "--shard expects K/N"),
    (["--timeout", "1e10"], "--timeout must be at most 604800 s (a week) per case, got 1e+10"),
    (["--case", "adamw/fp33/*"], "--case 'adamw/fp33/*' matches no case of adamw (case names look like "),
    (["--junit-xml", "/"], "--junit-xml '/' is a folder; name a file"),
    (["--junit-xml", "/nonexistent-folder/run.xml"], "--junit-xml '/nonexistent-folder/run.xml': its folder "
                                                     "/nonexistent-folder does not exist"),
], ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_bad_option_values_are_usage_errors(tmp_path, args, message):
    folder = previous_report(tmp_path / "rep")
    code, err = cli(tmp_path, *ONE_CASE, *args, report_dir=folder)
    assert code == 2, err
    assert f"error: {message}" in err and "Traceback" not in err
    assert intact(folder)


MINIMAL_REPORT = {"schema": "optimizer-oracle-report/2", "created": "2026-12-03T00:00:00Z", "complete": True,
                  "versions": {"python": "3.11", "torch": "2.13.0", "numpy": "2.0"},
                  "argv": ["python", "-m", "oracle.compare"], "summary": [], "results": []}


def inferred(target, candidate):
    """An inference record as report.json holds it (valid against the schema)."""
    return {"target": target, "optimizer": "adamw", "explained": candidate is not None, "candidate": candidate,
            "label": None, "declaration": None, "separating": [], "also_consistent": [], "declared_axes": [],
            "candidates_tried": 1, "probe_runs": 1, "seconds": 0.0}


BAD_CANDIDATE = {"preset": "x", "counter": "param", "counter_format": "float32", "compute": "float32",
                 "state_dtype": "param", "masters": False}  # in the schema's shape, naming no preset


@pytest.mark.parametrize("content,message", [
    (None, "is not a regular file"),
    (MINIMAL_REPORT, 'no "inferred" record (that run inferred nothing)'),
    ({**MINIMAL_REPORT, "inferred": [inferred("impl:other:Adam", None)]},
     "no inference of impl:tests.broken.adamw:OffByOneAdamW there (it has impl:other:Adam)"),
    ({**MINIMAL_REPORT, "inferred": [inferred("impl:tests.broken.adamw:OffByOneAdamW", BAD_CANDIDATE)]},
     "an unusable inference record (KeyError: "),
    ({**MINIMAL_REPORT, "inferred": ["junk"]}, "the report is not a report of ours: inferred/0: 'junk' is not of type"),
    ({"results": []}, "the report is not a report of ours: schema None"),
], ids=["dev-zero", "no-record", "other-target", "bad-candidate", "not-a-record", "not-ours"])
def test_inferred_from_a_report_that_cannot_say(tmp_path, content, message):
    """--inferred-from reads a report.json we did not write: every fault is exit 2 before any work."""
    path = tmp_path / "report.json"
    if content is None:
        path = Path("/dev/zero")
    else:
        path.write_text(json.dumps(content))
    folder = previous_report(tmp_path / "rep")
    code, err = cli(tmp_path, "--impl", "tests.broken.adamw:OffByOneAdamW", *ONE_CASE, "--inferred-from", str(path),
                    report_dir=folder)
    assert code == 2, err
    assert f"error: --inferred-from {path}" in err and message in err and "Traceback" not in err, err
    assert "inferring the conventions" not in err and intact(folder)


@pytest.mark.parametrize("name", ["report.json", "manifest.json", ".pending.json"])
def test_junit_xml_that_would_replace_a_report_file(tmp_path, name):
    folder = previous_report(tmp_path / "rep")
    code, err = cli(tmp_path, *ONE_CASE, "--junit-xml", str(folder / name), report_dir=folder)
    assert code == 2 and "is one of the report's own files in --report-dir" in err, err
    assert intact(folder)


# --- the report dir ---------------------------------------------------------------------------

def test_report_dir_that_is_a_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("not a folder")
    code, err = cli(tmp_path, *ONE_CASE, report_dir=target)
    assert code == 2 and f"--report-dir {str(target)!r} exists and is not a folder" in err
    assert target.read_text() == "not a folder"


def test_empty_report_dir(tmp_path):
    code, err = cli(tmp_path, *ONE_CASE, "--report-dir", "")
    assert code == 2 and "--report-dir is empty" in err
    assert not (ROOT / "report.json").exists()


@pytest.mark.parametrize("place,message", [
    ("/sys/oracle-report", "cannot be created"),   # a read-only place (sysfs)
    ("/proc/self", "is not writable"),             # exists, but nothing can be created in it
])
def test_report_dir_in_a_read_only_place(tmp_path, place, message):
    code, err = cli(tmp_path, *ONE_CASE, report_dir=place)
    assert code == 2 and f"--report-dir {place!r} {message}" in err, err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permissions")
def test_report_dir_without_permission(tmp_path):
    folder = previous_report(tmp_path / "rep")
    folder.chmod(0o555)
    try:
        code, err = cli(tmp_path, *ONE_CASE, report_dir=folder)
    finally:
        folder.chmod(0o755)
    assert code == 2 and "is not writable" in err and intact(folder)


def test_report_dir_on_a_full_disk(tmp_path):
    # A real write failure before any case runs: the run may write no file past 256 KiB (RLIMIT_FSIZE;
    # Python ignores SIGXFSZ, so the write fails with EFBIG as it would with ENOSPC on a full disk).
    folder = previous_report(tmp_path / "rep")

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    code, err = cli(tmp_path, *ONE_CASE, report_dir=folder, preexec_fn=small_files)
    assert code == 2 and "is not writable: File too large" in err, err
    assert intact(folder) and sorted(p.name for p in folder.iterdir()) == sorted(PREVIOUS)


def test_report_dir_without_free_space(tmp_path, monkeypatch, capsys):
    # The free-space check itself, in-process (a disk cannot be filled here).
    import shutil as sh
    from collections import namedtuple

    from oracle.compare.cli import main
    folder = previous_report(tmp_path / "rep")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(sh, "disk_usage", lambda path: usage(10 << 30, (10 << 30) - (1 << 20), 1 << 20))
    assert main([*ONE_CASE, "--report-dir", str(folder)]) == 2
    assert "its disk has 1.0 MB free" in capsys.readouterr().err and intact(folder)


# --- --impl modules that misbehave on import --------------------------------------------------

@pytest.mark.parametrize("module,message", [
    ("segfault", "importing tests.broken.on_import.segfault killed the interpreter with signal SIGSEGV"),
    ("hang", "importing tests.broken.on_import.hang did not finish within 5 s (killed)"),
    ("raises", "importing tests.broken.on_import.raises raised RuntimeError: CUDA driver initialization failed"),
    ("exits", "importing tests.broken.on_import.exits called sys.exit(7)"),
    ("missing", "cannot import: No module named 'tests.broken.on_import.missing'"),
])
def test_impl_module_that_misbehaves_on_import(tmp_path, module, message):
    folder = previous_report(tmp_path / "rep")
    code, err = cli(tmp_path, *ONE_CASE, "--impl", f"tests.broken.on_import.{module}:Opt", "--timeout", "5",
                    report_dir=folder, timeout=120)
    assert code == 2, err
    assert f"error: --impl tests.broken.on_import.{module}:Opt: {message}" in err, err
    assert "Traceback" not in err and intact(folder)


# --- interrupts -------------------------------------------------------------------------------

def test_ctrl_c_while_torch_imports_keeps_the_previous_report(tmp_path):
    folder = previous_report(tmp_path / "rep")
    # a case that never finishes: whenever the interrupt lands, no case has finished
    run = Run(tmp_path, *ONE_CASE, "--impl", "tests.broken.crashing:HangingAdamW", "--report-dir", str(folder))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.proc.poll() is None:
        try:
            if "libtorch" in Path(f"/proc/{run.proc.pid}/maps").read_text():
                break  # torch's libraries are being loaded: its Python modules come next
        except OSError:
            pass
        time.sleep(0.01)
    run.proc.send_signal(signal.SIGINT)
    code, _, err = run.finish(120)
    assert code == 130, err
    assert "Traceback" not in err and "no report written" in err
    assert intact(folder)
    assert not none_survive(run.tag)


def test_ctrl_c_during_the_final_write_finishes_the_report(tmp_path):
    # Ctrl-C arrives just as report.write starts: the report is written whole, then exit 130.
    folder = previous_report(tmp_path / "rep")
    script = ("import os, signal, sys\n"
              "from oracle.compare.reporting import report\n"
              "write = report.write\n"
              "def interrupted_write(*a, **k):\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "    return write(*a, **k)\n"
              "report.write = interrupted_write\n"
              "from oracle.compare.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    tag = uuid.uuid4().hex
    proc = subprocess.run([sys.executable, "-c", script, *ONE_CASE, "--target", "torch.adamw.forloop",
                           "--report-dir", str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, TAG: tag})
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "it was finished first" in proc.stderr
    doc = json.loads((folder / "report.json").read_text())
    assert doc["complete"] is True and [r["status"] for r in doc["results"]] == ["pass"]
    assert not none_survive(tag)


# --- processes that must not survive ----------------------------------------------------------

def _kill_9_while_hanging(tmp_path, *extra):
    """Start the CLI on a hanging impl, wait for its child, kill -9 the CLI; what outlived it."""
    run = Run(tmp_path, *ONE_CASE, "--impl", "tests.broken.crashing:HangingAdamW", "--report-dir",
              str(tmp_path / "rep"), *extra)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(tagged(run.tag)) < 2:  # the CLI and its child
        time.sleep(0.2)
    assert len(tagged(run.tag)) >= 2, "no child process started"
    time.sleep(3)  # the child is in the hanging step
    run.proc.kill()
    run.proc.communicate(timeout=60)
    return run, none_survive(run.tag)


def test_kill_9_of_the_cli_takes_its_worker_down(tmp_path):
    run, left = _kill_9_while_hanging(tmp_path, "--no-infer")  # straight to the case worker
    assert not left, f"outlived a kill -9 of the CLI: {left}"
    # the worker's folder could not be removed by a dead CLI; the next run sweeps it
    assert any(p.name.startswith("oracle-worker-") for p in run.tmp.iterdir())
    code, err = cli(tmp_path, *ONE_CASE, "--target", "torch.adamw.forloop", report_dir=tmp_path / "rep2")
    assert code == 0, err
    assert not any(p.name.startswith("oracle-worker-") for p in run.tmp.iterdir())


def test_kill_9_of_the_cli_takes_its_inference_down(tmp_path):
    """An --impl that declares nothing is fingerprinted first, in an interpreter of its own
    (python -m oracle.compare.inference.infer), here hanging in the impl's step."""
    _, left = _kill_9_while_hanging(tmp_path)
    assert not left, f"outlived a kill -9 of the CLI: {left}"


@pytest.mark.xdist_group("ranks")
def test_rank_skew_timeout_leaves_no_process_or_folder(tmp_path):
    # The ranks hang (the worker does not): the case times out while 2 ranks and the resource tracker run.
    code, err = cli(tmp_path, "--optimizer", "adamw", "--impl", "tests.broken.crashing:RankHangingAdamW",
                    "--scenario", "rank_skew", "--timeout", "20", "--quiet", report_dir=tmp_path / "rep")
    assert code == 1, err
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    [row] = doc["results"]
    assert row["status"] == "error" and "timed out after 20 s" in row["reason"]
    left = [str(p) for p in (tmp_path / "tmp").rglob("*") if p.name.startswith(("rank_skew_", "oracle-worker-"))]
    assert not left, f"temporary folders left behind: {left}"


def test_a_clean_run_leaves_nothing(tmp_path):
    code, err = cli(tmp_path, *ONE_CASE, "--target", "torch.adamw.forloop", "--jobs", "2", report_dir=tmp_path / "rep")
    assert code == 0, err
    assert not list((tmp_path / "tmp").iterdir())


@pytest.mark.parametrize("impl", ["NewSessionAdamW", "DaemonAdamW"])
def test_processes_a_target_starts_in_new_sessions_die_with_its_job(tmp_path, impl):
    """A child started with start_new_session=True, or a double-forked daemon holding the inherited
    pipes, leaves the worker's process group; it still dies with the job (its environment's tag), and
    the inference, whose pipes the daemon holds, is not stalled until its timeout."""
    # a stalled inference would wait out its budget, 10 x --timeout = 1200 s, past cli()'s 300 s limit
    code, err = cli(tmp_path, *ONE_CASE, "--impl", f"tests.broken.escaping:{impl}", "--timeout", "120",
                    report_dir=tmp_path / "rep")
    assert code == 0, err


@pytest.mark.parametrize("impl", ["TermParentAdamW", "KillParentAdamW", "KillGroupAdamW"])
def test_a_target_signalling_its_parent_costs_one_row(tmp_path, impl):
    """A target that signals its parent (or its process group) reaches the shield between it and the
    CLI (oracle.compare.isolation.processes.behind_shield): its own rows are errors, the inference it kills falls
    back to the declarations, and the run goes on to judge the other target and write its report."""
    code, err = cli(tmp_path, *ONE_CASE, "--impl", f"tests.broken.signalling:{impl}",
                    "--target", "torch.adamw.forloop", report_dir=tmp_path / "rep")
    assert code == 1, err
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    status = {r["target"]: r["status"] for r in doc["results"]}
    assert status == {f"impl:tests.broken.signalling:{impl}": "error", "torch.adamw.forloop": "pass"}, status
    [row] = [r for r in doc["results"] if r["status"] == "error"]
    assert "worker died with signal" in row["reason"], row["reason"]


def test_a_report_that_cannot_be_rendered_keeps_the_results_elsewhere(tmp_path, monkeypatch, capsys):
    """A crash while rendering report.md/html at the end (once: a module edited during a long sweep
    no longer imported) must not lose the run's results: they are saved as report.json elsewhere."""
    from oracle.compare.reporting import html, schema
    from oracle.compare.cli import main
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setenv("TMPDIR", str(spare))
    monkeypatch.setattr("tempfile.tempdir", None)

    def broken(doc):
        raise ImportError("cannot import name 'any_glob'")
    monkeypatch.setattr(html, "render", broken)
    folder = tmp_path / "rep"
    assert main([*ONE_CASE, "--target", "torch.adamw.forloop", "--report-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    [saved] = list(spare.glob("oracle-compare-report-*.json"))
    assert "rendering it failed (ImportError: cannot import name 'any_glob')" in err and str(saved) in err, err
    assert [(r["target"], r["status"]) for r in schema.load(str(saved))["results"]] == [("torch.adamw.forloop", "pass")]


def test_a_disk_that_fills_during_the_run_keeps_the_results_elsewhere(tmp_path, monkeypatch, capsys):
    """The folder passed its checks before the work; the final write then fails (ENOSPC, as on a disk
    that filled during the run). The results go to a file in the temporary folder, the message says
    where and how to render it, the previous report stays, and the exit status is 2."""
    import errno

    from oracle.compare.reporting import publish, schema
    from oracle.compare.cli import main
    folder = previous_report(tmp_path / "rep")
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setenv("TMPDIR", str(spare))
    monkeypatch.setattr("tempfile.tempdir", None)  # TMPDIR read again

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(publish, "publish", full)
    assert main([*ONE_CASE, "--target", "torch.adamw.forloop", "--report-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    [saved] = list(spare.glob("oracle-compare-report-*.json"))
    assert f"the report could not be written into {folder}: No space left on device; the results were saved to " \
           f"{saved}" in err, err
    doc = schema.load(str(saved))  # a whole report: `render` takes it
    assert [(r["target"], r["status"]) for r in doc["results"]] == [("torch.adamw.forloop", "pass")]
    assert intact(folder)
