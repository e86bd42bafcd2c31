"""Measuring: what comparing a target's values with the oracle's is made of (below the targets, which
read their state and declare their quantized entries with it).

readback         an optimizer's state read back in canonical float64 form
quantized_state  quantized optimizer state: read back dequantized, stored and judged by the `quantized` check
errmodel         running error analysis: each element's derived tolerance (Bounded)
checks           comparisons against the oracle and what a failure looks like (CheckResult, Finding)
phases           where a run's time goes: wall and CPU seconds per phase, over every process (--profile)
"""
