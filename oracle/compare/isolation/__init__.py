"""Isolation: keeping the judge apart from what it judges (no module here imports the rest of the engine).

processes   process hygiene: workers and ranks die with their parent, own process groups, private TMPDIR
ranks       the one rank launcher (torch.distributed over gloo, one process group per rank)
tamper      what a target's code may not change in the process that judges it
untrusted   reading files whose content and kind we do not control

The pool of warm worker processes that runs the jobs is oracle.compare.running.workers.
"""
