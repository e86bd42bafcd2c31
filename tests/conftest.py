"""Shared fixtures. `outside_library/` is a library's own test suite run by test_pytest_plugin.py in
a subprocess, as its authors would run it; it is not part of this suite.

Suite-wide: no process a test started outlives the test session.

At the end of the session (of each pytest-xdist worker, or of a plain run) every descendant of the
pytest process must be gone within a grace period; what is left is killed and reported as an error
of the session. multiprocessing's resource tracker (which lives until its parent exits) is exempt.
Processes re-parented away from pytest are looked for by tests/test_hostile.py, which tags them.
"""
from __future__ import annotations

import collections
import functools
import json
import os
import signal
import sys
import time

import pytest

collect_ignore = ["outside_library"]


@pytest.fixture(scope="session")
def failing_report(tmp_path_factory):
    """A report folder from a real run with new failures (a broken AdamW, judged by its declaration
    alone: --no-infer, so its rows are plain numerical failures), an error row (a target that raises)
    and passing rows: (folder, report.json document)."""
    from oracle.compare.cli import main
    folder = tmp_path_factory.mktemp("failing") / "report"
    code = main(["--impl", "tests.broken.adamw:OffByOneAdamW", "--impl", "tests.broken.crashing:RaisingAdamW",
                 "--optimizer", "adamw", "--dtype", "fp32", "--case", "*/wd0.1/*", "--scenario", "none",
                 "--report-dir", str(folder), "--no-isolate", "--quiet", "--no-infer"])
    assert code == 1
    return folder, json.loads((folder / "report.json").read_text())


def _group(item) -> str:
    """The item's xdist group as pytest-xdist names it ("" for none): its xdist_group names, sorted and
    joined by "_"."""
    return "_".join(sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")}))


def _scheduling_order(items) -> dict:
    """item -> its place: grouped tests first, the largest group first (the mutation gate, the repro
    scripts, the rank scenarios, the tamper sweeps: each minutes on one worker, so started early they
    leave short tests to fill the end); tests that load DeepSpeed's ops last, a group of them only
    (DeepSpeed's repro scripts) after the ungrouped tests, and within a mixed group too: CI builds the
    ops in the background while the rest runs (pytest_runtest_setup below waits for them where a test
    needs one). pytest-xdist hands the work units out in this order (pytest_configure)."""
    groups = {item: _group(item) for item in items}
    sizes = collections.Counter(groups.values())
    deepspeed = {item: item.get_closest_marker("deepspeed_ops") is not None for item in items}
    with_plain_tests = {groups[item] for item in items if not deepspeed[item]}
    order = {}
    for index, item in enumerate(items):
        group, ds = groups[item], deepspeed[item]
        if not group:
            first = 1 + ds  # single tests, those that load an op after the rest
        elif group in with_plain_tests:
            first = 0       # groups first, largest first
        else:
            first = 2       # a group of DeepSpeed tests only: with the single tests that load an op
        order[item] = ((first, -sizes[group], group) if group else (first, 0, ""), ds, index)
    return order


def pytest_configure(config):
    """pytest-xdist (3.8) sorts its work units by size, largest first, unless told not to: the
    DeepSpeed repro group (25 tests, 45 s) then started early and its worker waited in setup for the
    background op build (345 s of a loaded CI run). The order _scheduling_order gives is already
    largest group first, so xdist keeps it."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Order the items for the scheduler (_scheduling_order; a stable sort, the same on every worker:
    pytest-xdist's loadgroup hands out groups and tests in the order collected).

    Make `--dist loadgroup` group again. pytest-xdist (3.8) marks an item's group by appending
    "@group" to `item._nodeid`, and its scheduler sends every id with the same suffix to one
    worker; pytest 9 keeps the id in `item._id`, so the suffix was lost and each group's tests were
    scattered over the workers (the mutation gate, a session fixture, then ran once per worker).
    Where a grouped item's id lacks the suffix, add it the way xdist means to."""
    order = _scheduling_order(items)
    items.sort(key=order.__getitem__)
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id
    for item in items:
        group = _group(item)
        if group and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = coerce_node_id(f"{item.nodeid}@{group}")


@functools.lru_cache(maxsize=None)
def _deepspeed_ops_loaded() -> dict:
    """Every DeepSpeed op built (or waited for, under fused.build_lock, while CI's background build holds
    it) and loaded into this worker, before a test that needs one starts: a test's rank processes and
    case runs have time limits that a build must not count against."""
    from oracle.compare.targets import deepspeed as ds
    if ds.deepspeed_unavailable():
        return {}  # the tests say why they skip
    return ds.build_ops()


def pytest_runtest_setup(item):
    if item.get_closest_marker("deepspeed_ops"):
        _deepspeed_ops_loaded()


EXEMPT = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _descendants(root: int) -> dict[int, str]:
    children: dict[int, list[int]] = {}
    cmds: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] == "Z":  # exited, waiting to be reaped
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
        cmds[int(name)] = cmd
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if not any(e in cmds.get(pid, "") for e in EXEMPT):
            out[pid] = cmds.get(pid, "")
        todo += children.get(pid, [])
    return out


@pytest.fixture(scope="session", autouse=True)
def no_process_survives(request):
    yield
    if not sys.platform.startswith("linux"):
        return
    config = request.config
    if not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no":
        return  # the pytest-xdist controller: its workers check their own
    deadline = time.monotonic() + 15
    while (left := _descendants(os.getpid())) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, "processes started by the test session outlived it:\n" + "\n".join(
        f"  {pid}: {cmd[:200]}" for pid, cmd in left.items())
