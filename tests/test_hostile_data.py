"""Report folders and data files are never trusted: paths read from a journal, manifest or shard stay
inside their folder; nothing is opened through a symlink, locked through one or read from a FIFO or
an endless device; every value reaches report.html escaped; sizes in data are checked before use.
Each attack below worked against the engine before it was hardened (docs/robustness.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.compare.reporting import diff, html, publish, render as rerender
from oracle.compare.checking import known
from oracle.compare.running import shard
from oracle.compare.cli import UsageError, check_report_dir
from oracle.compare.isolation.untrusted import DataFileError, read_json

ROOT = Path(__file__).resolve().parent.parent
# the smallest report of ours (valid against report.schema.json): what the readers accept
REPORT = {"schema": "optimizer-oracle-report/2", "created": "2026-12-03T00:00:00Z", "complete": True,
          "versions": {"python": "3.11", "torch": "2.13.0", "numpy": "2.0"}, "argv": ["python", "-m", "oracle.compare"],
          "summary": [], "results": []}


def victim(tmp_path: Path) -> Path:
    """A folder outside the report folder that an attack would delete or fill."""
    where = tmp_path / "victim"
    where.mkdir()
    (where / "precious.txt").write_text("keep me")
    return where


def plant_journal(folder: Path, **journal) -> None:
    folder.mkdir(exist_ok=True)
    (folder / publish.JOURNAL).write_text(json.dumps({"run": "x", "files": {}, **journal}))


def test_a_journal_naming_a_folder_outside_is_refused_and_nothing_is_removed(tmp_path, capsys):
    target = victim(tmp_path)
    folder = tmp_path / "reports"
    plant_journal(folder, staging="../victim")
    (folder / "report.json").write_text(json.dumps(REPORT))
    assert rerender.main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert "staging folder '../victim' is not a plain file name" in err and len(err.strip().splitlines()) == 1
    assert (target / "precious.txt").read_text() == "keep me"
    with pytest.raises(UsageError, match="not a plain file name"):  # a run is refused before its work
        check_report_dir(str(folder))
    assert (target / "precious.txt").read_text() == "keep me"


def test_a_journal_moving_a_planted_file_outside_is_refused(tmp_path):
    folder = tmp_path / "reports"
    staging = folder / (publish.STAGING + "x")
    staging.mkdir(parents=True)
    (staging / "evil").write_text("planted")
    plant_journal(folder, staging=staging.name, files={"../outside.txt": {"sha256": "0" * 64, "bytes": 7}})
    with pytest.raises(publish.ReportDirError, match="not a plain file name"):
        publish.recover(str(folder))
    assert not (tmp_path / "outside.txt").exists()


def test_a_staging_symlink_is_not_followed_when_cleaning_up(tmp_path):
    target = victim(tmp_path)
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / (publish.STAGING + "evil")).symlink_to(target)
    (folder / (publish.LEGACY_TMP + "evil")).symlink_to(target / "precious.txt")
    publish.recover(str(folder))
    assert (target / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_the_lock_file_is_never_opened_through_a_link(tmp_path, link):
    outside = tmp_path / "important.cfg"
    outside.write_text("settings")
    folder = tmp_path / "reports"
    folder.mkdir()
    lock = folder / publish.LOCK
    lock.symlink_to(outside) if link == "symlink" else os.link(outside, lock)
    with pytest.raises(publish.ReportDirError, match="lock file"):
        publish.ReportLock(str(folder)).acquire()
    assert outside.read_text() == "settings"


def test_every_count_in_report_html_is_escaped():
    row = {"target": "t", "optimizer": "adamw", "dtype": "float32", "pass": "<script>alert(1)</script>",
           "fail": "<b>", "error": "<i>", "skip": "<u>"}
    page = html.summary_table_html({"summary": [row]})
    assert "<script>" not in page and "&lt;script&gt;" in page and "<b>" not in page
    counts = dict.fromkeys(("new", "known", "known_entries", "fixed", "not_run", "not_applicable"), "<script>x")
    page = html.known_html({"results": [], "known": {"file": "k", "device": "cpu", "ok": True, "counts": counts,
                                                     "entries": []}})
    assert "<script>" not in page


def test_diff_reads_no_file_a_manifest_names_outside_its_folder(tmp_path, capsys):
    for name in ("old", "new"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps(REPORT))
        (folder / publish.MANIFEST).write_text(json.dumps({"files": {"/dev/zero": {"sha256": "0" * 64, "bytes": 1}}}))
    assert diff.main([str(tmp_path / "old"), str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err
    assert "'/dev/zero' is not a plain file name" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "symlink", "huge"])
def test_data_files_that_are_not_plain_files_are_refused_at_once(tmp_path, kind):
    path = tmp_path / "known.toml"
    if kind == "fifo":
        os.mkfifo(path)  # opened without O_NONBLOCK, reading would block forever
    elif kind == "device":
        path = Path("/dev/zero")  # would read until MemoryError
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink":
        (tmp_path / "real.toml").write_text("")
        path.symlink_to(tmp_path / "real.toml")
    else:
        with open(path, "wb") as fh:
            fh.truncate(17 << 20)  # sparse: 17 MiB over the 16 MiB cap, no disk used
    with pytest.raises(known.KnownFileError, match="not a regular file|symbolic link|over the"):
        known.load(path)


def test_json_nested_past_the_recursion_limit_is_one_clear_error(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(DataFileError, match="nested too deeply"):
        read_json(str(path), 1 << 20, "report")
    path.write_bytes(b'{"schema": "\xff"}')
    with pytest.raises(DataFileError, match="not UTF-8"):
        read_json(str(path), 1 << 20, "report")


def shard_doc(**shard_fields) -> dict:
    fields = {"count": 2, "index": 1, "rows": [], "selection": "s", "device": "cpu", **shard_fields}
    return {**REPORT, "shard": fields}


@pytest.mark.parametrize("fields,message", [
    ({"count": 10 ** 9}, "shard.count must be an integer"),
    ({"count": "2"}, "shard.count must be an integer"),
    ({"index": 3}, "shard.index must be an integer"),
    ({"rows": "all"}, "shard.rows must be a list"),
])
def test_merge_checks_sizes_and_types_from_a_shard_before_using_them(tmp_path, fields, message):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(shard_doc(**fields)))
    with pytest.raises(shard.ShardError, match=message):
        shard.load(str(path))


def test_merge_judges_with_its_own_known_option_never_a_path_inside_a_shard(tmp_path):
    """A shard naming a known-findings file (here one that does not exist) changes nothing: merge
    judges with --known from its own command line (here: none)."""
    folders = []
    for k in (1, 2):
        folder = tmp_path / f"s{k}"
        folder.mkdir()
        doc = shard_doc(index=k, known=str(tmp_path / "planted.toml"))
        (folder / "report.json").write_text(json.dumps({**doc, "complete": True}))
        folders.append(str(folder))
    out = subprocess.run([sys.executable, "-m", "oracle.compare", "merge", *folders, "--known", "none",
                          "--report-dir", str(tmp_path / "merged")], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "planted.toml" not in out.stdout + out.stderr
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert merged["known"] is None  # judged as --known none said (the planted path would have been exit 2)


def test_an_absurd_shard_count_is_refused_at_once():
    with pytest.raises(shard.ShardError, match="N is at most"):
        shard.parse_shard("1/100000000")


@pytest.mark.parametrize("plant", ["report_json_dir", "garbage_journal", "html_symlink"])
def test_a_report_folder_that_would_fail_the_final_write_is_refused_before_the_work(tmp_path, plant):
    folder = tmp_path / "reports"
    folder.mkdir()
    if plant == "report_json_dir":
        (folder / "report.json").mkdir()
    elif plant == "garbage_journal":
        (folder / publish.JOURNAL).write_bytes(b"\x00garbage")
    else:
        (folder / "report.html").symlink_to(tmp_path / "elsewhere.html")
    with pytest.raises(UsageError, match="not a regular file|report journal"):
        check_report_dir(str(folder))


def test_a_report_dir_that_cannot_be_encoded_is_refused():
    with pytest.raises(UsageError, match="not UTF-8 encodable"):
        check_report_dir("reports/\udcff")


@pytest.mark.parametrize("steps", [0, -3, 1.5, True])
def test_the_library_api_refuses_fewer_than_one_step(steps):
    """Zero steps compared nothing, and passed an optimizer that writes NaN."""
    import torch

    from oracle.testing import assert_optimizer_matches
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        assert_optimizer_matches(torch.optim.AdamW, optimizer="adamw", dtypes=["float32"], steps=steps, infer=False)


# --- malformed reports, every reader ------------------------------------------------------------------

BASE_REPORT = ROOT / "reports" / "torchao" / "report.json"  # a real report (committed), made bad below


def _set(doc, path, value):
    *head, last = path
    for key in head:
        doc = doc[key]
    if value is DELETE:
        del doc[last]
    else:
        doc[last] = value


DELETE = object()
MALFORMED = {  # name -> a change of the real report, each one a reader used to crash on or believe
    "status_unknown": (("results", 0, "status"), "maybe"),
    "ratio_a_word": (("results", 0, "checks", "lockstep", "worst_ratio"), "big"),
    "row_without_target": (("results", 0, "target"), DELETE),
    "results_a_string": (("results",), "all"),
    "summary_an_object": (("summary",), {}),
    "versions_null": (("versions",), None),
    "hazard_without_cases": (("hazards", 0, "cases"), []),
    "created_a_number": (("created",), 7),
    "schema_unknown": (("schema",), "optimizer-oracle-report/9"),
    "steps_negative": (("results", 0, "steps"), -1),
}
RAW = {"not_utf8": b'{"schema": "\xff"}', "not_json": b"{schema", "a_list": b"[]", "nested": b"[" * 50000}


def _bad_report(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "bad"
    folder.mkdir()
    if name in RAW:
        (folder / "report.json").write_bytes(RAW[name])
    else:
        doc = json.loads(BASE_REPORT.read_text())
        # a row that ran its checks first (the report also holds skipped rows, which have none)
        doc["results"].sort(key=lambda r: "lockstep" not in r.get("checks", {}))
        _set(doc, *MALFORMED[name])
        doc["shard"] = {"count": 1, "index": 1, "rows": [], "selection": "s", "device": "cpu"}  # merge reads it
        (folder / "report.json").write_text(json.dumps(doc))
    return folder


def _readers(tmp_path: Path, bad: Path) -> dict:
    """Each data-reading subcommand run on the bad folder: name -> (exit status, stderr)."""
    good = tmp_path / "good"
    good.mkdir()
    (good / "report.json").write_text(BASE_REPORT.read_text())
    runs = {"render": ["render", str(bad)], "diff": ["diff", str(good), str(bad)],
            "merge": ["merge", str(bad), "--known", "none", "--report-dir", str(tmp_path / "merged")]}
    out = {}
    for name, argv in runs.items():
        proc = subprocess.run([sys.executable, "-m", "oracle.compare", *argv], capture_output=True, text=True,
                              cwd=ROOT, timeout=300)
        out[name] = (proc.returncode, proc.stderr)
    try:
        from oracle.compare.cli import recorded_inferences
        recorded_inferences(str(bad / "report.json"))
        out["--inferred-from"] = (0, "")
    except UsageError as exc:
        out["--inferred-from"] = (2, f"error: {exc}\n")
    return out


@pytest.mark.parametrize("name", sorted(MALFORMED) + sorted(RAW))
def test_every_reader_answers_a_malformed_report_with_one_line_and_exit_2(tmp_path, name):
    """render, diff, merge and --inferred-from read a report through one gate (oracle.compare.reporting.schema.load):
    a report that departs from report.schema.json anywhere is exit 2 with one line naming the file and
    where, before anything of it is used; nothing is written."""
    bad = _bad_report(tmp_path, name)
    before = (bad / "report.json").read_bytes()
    for reader, (code, err) in _readers(tmp_path, bad).items():
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, f"{reader}: exit {code}, stderr:\n{err[-3000:]}"
        assert str(bad / "report.json") in lines[0] and "Traceback" not in err, (reader, lines[0])
    assert (bad / "report.json").read_bytes() == before
    assert not (bad / "report.md").exists() and not (bad / "report.html").exists()
    assert not (tmp_path / "merged").exists()


def test_the_committed_reports_pass_the_readers_gate():
    """The gate refuses nothing we write: every committed report.json loads."""
    from oracle.compare.reporting.schema import load
    for path in sorted((ROOT / "reports").glob("*/report.json")):
        assert load(str(path))["results"], path
