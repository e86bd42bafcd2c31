"""The report folder is one unit: a stop at any point leaves the old report or the new one (never a
new JSON beside an old markdown, never a stray temporary once the next run has been), and one run at
a time writes into a folder (oracle.compare.reporting.publish)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from oracle.compare.reporting import publish
from oracle.compare.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD = {"report.json": '{"run": "old"}\n', "report.md": "# old\n", "report.html": "<p>old</p>\n"}
NEW = {"report.json": '{"run": "new"}\n', "report.md": "# new\n", "report.html": "<p>new</p>\n"}

# Publishes NEW over OLD in a fresh process that dies (os._exit, as SIGKILL would: no cleanup runs)
# at the k-th file-system operation of the write.
KILLER = textwrap.dedent("""
    import os, sys
    from oracle.compare.reporting import publish
    folder, k, new = sys.argv[1], int(sys.argv[2]), dict(zip(sys.argv[3::2], sys.argv[4::2]))
    calls = [0]
    def hook(fn):
        def wrapped(*a, **kw):
            calls[0] += 1
            if calls[0] == k:
                os._exit(9)
            return fn(*a, **kw)
        return wrapped
    for name in ("replace", "fsync", "unlink", "write", "rmdir", "makedirs"):
        setattr(os, name, hook(getattr(os, name)))
    publish.publish(folder, new, run="new")
    print("finished", calls[0])
""")


def read_all(folder):
    return {n: (folder / n).read_text() for n in OLD if (folder / n).exists()}


def test_publish_writes_the_files_and_a_manifest_naming_them(tmp_path):
    m = publish.publish(str(tmp_path), NEW, run="r1")
    assert read_all(tmp_path) == NEW
    assert json.loads((tmp_path / "manifest.json").read_text()) == m
    assert set(m["files"]) == set(NEW) and m["run"] == "r1" and m["schema"] == publish.MANIFEST_SCHEMA
    assert publish.verify(str(tmp_path)) == []
    assert sorted(os.listdir(tmp_path)) == ["manifest.json", "report.html", "report.json", "report.md"]


def test_a_stop_at_any_point_leaves_one_whole_report(tmp_path):
    """Kill the writer at every file-system operation in turn: afterwards the folder holds the old
    report or (once the next run recovers it) the new one, whole, and nothing else."""
    outcomes = set()
    for k in range(1, 200):
        folder = tmp_path / f"k{k}"
        publish.publish(str(folder), OLD, run="old")
        args = [a for kv in NEW.items() for a in kv]
        out = subprocess.run([sys.executable, "-c", KILLER, str(folder), str(k), *args], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        if out.returncode == 0:
            assert "finished" in out.stdout
            break
        assert out.returncode == 9, out.stderr
        publish.recover(str(folder))  # what the next run into the folder does first
        files = read_all(folder)
        assert files in (OLD, NEW), (k, files)
        assert publish.verify(str(folder)) == [], k
        assert sorted(os.listdir(folder)) == ["manifest.json", "report.html", "report.json", "report.md"], k
        outcomes.add("new" if files == NEW else "old")
    else:
        pytest.fail("the writer never finished")
    assert outcomes == {"old", "new"}, outcomes  # stops before and after the commit point were both seen
    assert k > 10


def test_leftovers_of_older_writers_are_removed(tmp_path):
    (tmp_path / ".tmp-abcreport.json").write_text("half")
    (tmp_path / ".staging-x").mkdir()
    (tmp_path / ".staging-x" / "report.json").write_text("half")
    publish.publish(str(tmp_path), NEW)
    assert sorted(os.listdir(tmp_path)) == ["manifest.json", "report.html", "report.json", "report.md"]


def test_verify_notices_files_from_different_runs(tmp_path):
    publish.publish(str(tmp_path), OLD)
    (tmp_path / "report.md").write_text("# edited by hand\n")
    [problem] = publish.verify(str(tmp_path))
    assert "report.md is not the file run" in problem


def test_a_second_writer_is_refused_naming_the_first(tmp_path):
    with publish.ReportLock(str(tmp_path), ["python", "-m", "oracle.compare", "--first"]):
        with pytest.raises(publish.LockedError) as err:
            publish.ReportLock(str(tmp_path), ["second"]).acquire()
    msg = str(err.value)
    assert f"pid {os.getpid()}" in msg and "--first" in msg and "--wait" in msg and str(tmp_path) in msg
    publish.ReportLock(str(tmp_path)).acquire().release()  # free again


def test_a_second_writer_can_wait(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from oracle.compare.reporting.publish import ReportLock
        with ReportLock({str(tmp_path)!r}, ["holder"]):
            print("held", flush=True)
            time.sleep(1.5)
    """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    waited = []
    t0 = time.monotonic()
    with publish.ReportLock(str(tmp_path), ["waiter"], wait=True, on_wait=waited.append):
        assert time.monotonic() - t0 > 0.5
    holder.wait(30)
    assert waited and "holder" in waited[0]


def test_the_lock_dies_with_its_process(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from oracle.compare.reporting.publish import ReportLock
        ReportLock({str(tmp_path)!r}, ["holder"]).acquire()
        print("held", flush=True)
        time.sleep(60)
    """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    publish.ReportLock(str(tmp_path)).acquire().release()


def test_cli_refuses_a_folder_another_run_is_writing(tmp_path, capsys):
    with publish.ReportLock(str(tmp_path), ["python", "-m", "oracle.compare", "--other-run"]):
        code = main(["--optimizer", "adamw", "--target", "torch.adamw.forloop", "--case",
                     "adamw/fp32/wd0.1/single/normal", "--scenario", "none", "--report-dir", str(tmp_path),
                     "--no-isolate", "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert "is in use by another run" in err and "--other-run" in err
    assert not (tmp_path / "report.json").exists()


def test_cli_writes_the_three_files_as_one_unit(tmp_path):
    code = main(["--optimizer", "adamw", "--target", "torch.adamw.forloop", "--case", "adamw/fp32/wd0.1/single/normal",
                 "--scenario", "none", "--report-dir", str(tmp_path), "--no-isolate", "--quiet"])
    assert code == 0
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert set(m["files"]) == {"report.json", "report.md", "report.html"}
    assert publish.verify(str(tmp_path)) == []
