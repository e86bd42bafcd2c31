"""Checking: what judges a target against the oracle, and how a judgement reads (the measures it
uses, tolerances, comparisons and state readback, are oracle.compare.measuring).

cases       the case matrix: named, seeded inputs (from the optimizers' comparison records)
case_run    one case against one target: lockstep, trajectory, counters, schema, round-trip
lockstep    the one lockstep engine: an optimizer and the float64 oracle, step by step
bitwise     the one bit-for-bit diff of everything an optimizer holds
finite      the `finite` check; guards: guarded tensors (the `bounds` check)
hazards     representability hazards of hyperparameters and derived constants
statenames  state keys named by value
deviation   rows judged under a deviation (status "deviation", "unexplained")
explain     the one failure line, the same everywhere
summary     the summary of a run (target x optimizer x dtype) and its verdict text
known       known findings (reports/known.toml), judged with strict-xfail semantics
runinfo     a row's repro command and the versions of what ran

explain, summary, known and runinfo are read by the reports too, but they sit here because this
layer and the scenarios below the reports use them (a deviation's reason, a hazard's entries, a
scenario row's known-defect note): see the layers contract in pyproject.toml.
"""
