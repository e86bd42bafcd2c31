"""Where a run's time goes (oracle.compare.measuring.phases, --profile): nested phases are charged
their own time only, a worker's measurements reach the CLI, and children the CLI reaps are not
counted twice."""
import subprocess
import sys
import time

from oracle.compare.cli import main
from oracle.compare.measuring import phases


def busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_phase_is_charged_its_own_time_not_that_of_the_phases_inside_it():
    phases.take()
    with phases.phase("outer"):
        busy(0.05)
        with phases.phase("inner"):
            busy(0.15)
        with phases.phase("inner"):
            time.sleep(0.1)  # wall time, no CPU
    got = phases.take()
    assert got["inner"][2] == 2 and got["outer"][2] == 1
    # CPU is process time (load-proof); wall only from below and against the inner phases (a loaded
    # machine stretches it: an upper bound on wall failed once under two xdist workers)
    assert 0.14 <= got["inner"][1] < 0.2 and got["inner"][0] >= 0.24
    assert 0.04 <= got["outer"][1] < 0.1 and 0.04 <= got["outer"][0] < got["inner"][0]
    assert phases.take() == {}  # taken: counting starts afresh


def test_a_childs_cpu_is_counted_unless_the_phase_only_reaps_it():
    phases.take()
    spin = [sys.executable, "-c", "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"]
    with phases.phase("ranks"):
        subprocess.run(spin, check=True)
    with phases.phase("pool", count_children=False):
        subprocess.run(spin, check=True)
    got = phases.take()
    assert got["ranks"][1] >= 0.3 and got["pool"][1] < 0.1


def test_merge_adds_a_workers_totals():
    into = {"target step": [1.0, 0.5, 2]}
    phases.merge(into, {"target step": [2.0, 1.0, 3], "comparing": [1.0, 1.0, 1]})
    assert into == {"target step": [3.0, 1.5, 5], "comparing": [1.0, 1.0, 1]}
    assert phases.merge(into, None) is into
    assert phases.from_json(phases.as_json(into)) == into


def test_profile_prints_where_a_runs_time_went(tmp_path, capsys):
    """Workers' phases come back with their rows; the CLI's own phases join them; the CPU in the table
    is that of every process (the workers, not reaped twice by the CLI's loop)."""
    t0, c0 = time.perf_counter(), phases.cpu_s()
    code = main(["--target", "torch.adamw.forloop", "--optimizer", "adamw", "--case", "adamw/fp32/wd0.1/*",
                 "--scenario", "none", "--jobs", "1", "--profile", "--quiet", "--report-dir", str(tmp_path)])
    wall, cpu = time.perf_counter() - t0, phases.cpu_s() - c0
    assert code == 0
    err = capsys.readouterr().err
    table = err[err.index("where the time went"):].splitlines()
    rows = {name.strip(): numbers for name, *numbers in (line.rsplit(maxsplit=4) for line in table[2:])}
    for name in ("plan: targets, availability, cases", "worker start-up (imports)", "matrix case: checkpoint round trips",
                 "target step", "oracle and error model", "reading state back", "comparing",
                 "report: judging, writing, rendering", "parent: handing out jobs, collecting rows"):
        assert name in rows, (name, table)
    assert int(rows["target step"][0]) == int(rows["matrix case"][0]) * 20  # 20 checked steps per case
    total_cpu = float(table[0].split("(")[1].split()[0])
    assert total_cpu <= cpu + 0.5  # nothing counted twice (this process and its reaped worker)
    assert total_cpu >= 0.5 * float(rows["worker start-up (imports)"][2]) and wall > 0


def test_a_job_in_its_own_process_is_itemised_once():
    """A target that runs each job in a forked child (Target.own_process): the child's phases come
    back with its row; the wait for it counts none of its CPU (counted once, itemised)."""
    from dataclasses import replace

    from oracle.compare.registry import find
    from oracle.compare.running.driver import run_job
    target = replace(find("torch.adamw.forloop", "adamw"), own_process="a test: each job in a child of its own")
    run_job(target, "adamw/fp32/wd0.1/single/normal", 0, 20, "cpu")  # first use, untimed
    phases.take()
    c0 = phases.cpu_s()
    row = run_job(target, "adamw/fp32/wd0.1/single/normal", 0, 20, "cpu")
    spent = phases.cpu_s() - c0
    got = phases.take()
    assert row.status == "pass"
    assert got["target step"][2] == 20 and got["own process: fork, hand back the row"][2] == 1
    assert sum(v[1] for v in got.values()) <= spent + 0.05  # the child's CPU not counted twice
