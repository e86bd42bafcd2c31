"""State names found by value: a tensor that holds the oracle's `exp_avg` is `exp_avg`, whatever its key.

An implementation may keep Lion's momentum as `state["state1"]` (bitsandbytes) or Adam's second
moment as `state["v"]`. Before inference (oracle.compare.inference.infer) the target takes two steps on a
probe case without weight decay, the oracle takes the same two in float64, and each state key the
readback does not understand (oracle.compare.measuring.readback) is matched to the canonical key the
oracle has and the target lacks, by relative distance: a key is named only when one canonical key
is within MATCH of it on every param, no other is, and no two keys take the same name. A class can
declare the names instead (ORACLE_STATE_NAMES = {"state1": "exp_avg"}, oracle.compare.targets.user_impl).
"""
from __future__ import annotations

import numpy as np

# The relative distance below which a state tensor is that canonical state. Conventions move a
# moment by far less than this after two steps without decay (eps placement, bias-correction
# precision, counters); different states (m against v, a grad against its square) differ by O(1).
MATCH = 0.1


def probe_case(target, cases):
    """The first probe case whose every hyperparameter leaves the state convention-free: no decay."""
    for case in cases:
        if all(hp.get("weight_decay", 0.0) == 0.0 for hp in case.group_hparams()):
            return case
    return None


def relative(a: np.ndarray, b: np.ndarray) -> float:
    scale = max(float(np.linalg.norm(b)), 1e-30)
    return float(np.linalg.norm(np.asarray(a, np.float64) - b)) / scale


def found(target, cases, seed: int, device: str = "cpu", steps: int = 2) -> tuple:
    """(implementation key, canonical name) pairs for the target's unnamed state; () when nothing
    needs a name, none can be matched, or the probe cannot run."""
    import oracle
    import torch
    from oracle.common import OptState

    from . import cases as C
    from ..measuring.readback import aliases
    from .case_run import build, make_params, set_grads
    case = probe_case(target, cases)
    if case is None:
        return ()
    spec = oracle.SPECS[target.optimizer]
    try:
        params = make_params(case, seed, device)
        opt = build(target, case, params)
        exp_params, exp_state = C.initial_params(case, seed), OptState.empty(params)
        hps = spec.validate(case.group_hparams())
        for k in range(1, steps + 1):
            grads = C.grads_at(case, seed, k)
            set_grads(params, grads)
            opt.step()
            exp_params, exp_state = spec.step(exp_params, grads, exp_state, hps, target.convention)
    except Exception:  # noqa: BLE001 - a target that cannot take the probe is judged (and reported) later
        return ()
    known = {alias for names in aliases().values() for alias in names} | {"step"} | {k for k, _ in target.state_names}
    votes: dict = {}
    for g, group in enumerate(params):
        for i, p in enumerate(group):
            raw = opt.state.get(p, {})
            missing = {k: np.asarray(v, np.float64) for k, v in exp_state.params[g][i].items()
                       if k != "step" and k not in raw and np.shape(v) == tuple(p.shape)}
            for key, val in raw.items():
                if key in known or not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(p.shape):
                    continue
                got = val.detach().to("cpu", torch.float64).numpy()
                close = [name for name, ev in missing.items() if relative(got, ev) < MATCH]
                votes.setdefault(key, []).append(close[0] if len(close) == 1 else None)
    names = {key: v[0] for key, v in votes.items() if v[0] is not None and all(x == v[0] for x in v)}
    if len(set(names.values())) != len(names):
        return ()
    return tuple(sorted(names.items()))


__all__ = ["MATCH", "found", "probe_case", "relative"]
