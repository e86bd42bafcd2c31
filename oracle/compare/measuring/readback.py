"""Read an optimizer's state back in canonical float64 form.

Works on any torch.optim.Optimizer: per-param state entries are found under
torch's names or common aliases, counters under state[p]["step"] (per param)
or param_group["step"] (per group). Nothing here writes to the optimizer.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from ..lazy_torch import torch

# Every state key some optimizer's spec defines reads under its own name;
# master weights under the names libraries give them.
MASTER_ALIASES = ("master_param", "master", "fp32_param", "master_weight")


@functools.cache
def aliases() -> dict:
    """canonical name -> the names implementations use for it."""
    import oracle
    from oracle.common import SCALAR_STATE
    keys = {k for s in oracle.SPECS.values() for k in (*s.state_keys, *s.optional_state)} | set(SCALAR_STATE)
    return {**{k: (k,) for k in sorted(keys)}, "master_param": MASTER_ALIASES}


def to_numpy(t) -> np.ndarray:
    """Exact float64 copy of a tensor (bf16/fp16/fp32 widen exactly); a complex tensor's as its
    (re, im) pairs in a last dimension of 2 (torch.view_as_real), the form the oracle computes on."""
    t = t.detach().cpu()
    return (torch.view_as_real(t) if t.is_complex() else t).to(torch.float64).numpy().copy()


def to_tensor(values, dtype: torch.dtype, device=None) -> torch.Tensor:
    """A tensor of `dtype` holding float64 `values` (the inverse of to_numpy): for a complex dtype
    `values` are (re, im) pairs, each rounded to the component dtype."""
    x = torch.as_tensor(np.asarray(values, dtype=np.float64))
    if dtype.is_complex:
        real = x.to(dtype.to_real())
        x = torch.complex(real[..., 0], real[..., 1])
    return x.to(dtype=dtype, device=device)


def element(t, flat: int):
    """Element `flat` of a tensor as a Python number (a complex one as its text: reports are JSON)."""
    v = t.detach().reshape(-1)[flat].item()
    return str(v) if isinstance(v, complex) else float(v)


def dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def counter_value(v):
    """A counter as an exact int, or the raw value if it is not integral (a
    float counter that lost integrality is itself a finding)."""
    if v is None:
        return None
    if isinstance(v, torch.Tensor):
        v = v.item()
    return int(v) if float(v).is_integer() else v


@dataclass
class Snapshot:
    params: list           # [g][i] float64 arrays of the model params
    state: list            # [g][i] {canonical name: float64 array}
    dtypes: list           # [g][i] {"param" or canonical name: dtype name}
    devices: list          # [g][i] {"param", "step" or canonical name: device string}
    param_steps: list      # [g][i] per-param counter (None when absent)
    step_types: list       # [g][i] type of the per-param counter, e.g. "tensor(float32)", "int"
    group_steps: list      # [g] per-group counter (None when absent)
    group_has_step: list   # [g] whether the group dict has a "step" key at all
    extra_keys: list       # [g][i] state keys not understood (reported by the schema check)
    quant: list = field(default_factory=list)  # [g][i] {canonical name: QuantRead} of quantized entries


def _type_name(v) -> str:
    return f"tensor({dtype_name(v)})" if isinstance(v, torch.Tensor) else type(v).__name__


def read(opt: torch.optim.Optimizer, rename=(), quantized=()) -> Snapshot:
    """`rename`: (implementation key, canonical name) pairs for names that
    mean something else elsewhere (DeepSpeed's Adagrad keeps `sum` as "exp_avg_sq").
    `quantized`: QuantEntry per entry a target may keep quantized; such an entry reads back as the
    values the target dequantizes, its dtype "q:<format>", its codes in `quant`."""
    snap = Snapshot([], [], [], [], [], [], [], [], [])
    reverse = {alias: canon for canon, names in aliases().items() for alias in names} | dict(rename)
    for group in opt.param_groups:
        row = [[] for _ in range(7)]
        snap_quant: list = []
        for p in group["params"]:
            st = opt.state.get(p, {})
            canon, dtypes, devices, extra = {}, {"param": dtype_name(p)}, {"param": str(p.device)}, []
            quant, consumed = _read_quantized(st, quantized, canon, dtypes, devices)
            for key, val in st.items():
                if key in consumed:
                    continue
                if key == "step":
                    devices["step"] = str(val.device) if isinstance(val, torch.Tensor) else "host"
                elif key in reverse and isinstance(val, torch.Tensor):
                    canon[reverse[key]] = to_numpy(val)
                    dtypes[reverse[key]] = dtype_name(val)
                    devices[reverse[key]] = str(val.device)
                elif key in reverse and isinstance(val, float):  # a scalar state kept on the host
                    canon[reverse[key]] = np.float64(val)
                    dtypes[reverse[key]], devices[reverse[key]] = "float64", "host"
                else:
                    extra.append(key)
            snap_quant.append(quant)
            for r, v in zip(row, (to_numpy(p), canon, dtypes, devices, counter_value(st.get("step")),
                                  _type_name(st["step"]) if "step" in st else None, extra)):
                r.append(v)
        for lst, r in zip((snap.params, snap.state, snap.dtypes, snap.devices, snap.param_steps,
                           snap.step_types, snap.extra_keys), row):
            lst.append(r)
        snap.quant.append(snap_quant)
        snap.group_steps.append(counter_value(group.get("step")))
        snap.group_has_step.append("step" in group)
    return snap


def _read_quantized(st: dict, entries, canon: dict, dtypes: dict, devices: dict) -> tuple[dict, set]:
    """The quantized entries of one param's state, read into canon/dtypes/devices; returns
    ({name: QuantRead}, the state keys they consumed)."""
    quant, consumed = {}, set()
    for entry in entries:
        got = entry.read(st)
        if got is None:
            continue
        quant[entry.name] = got
        consumed.update(got.keys)
        canon[entry.name] = got.values()
        dtypes[entry.name] = f"q:{got.fmt}"
        devices[entry.name] = str(st[got.keys[0]].device)
    return quant, consumed


def math_params(snap: Snapshot) -> list:
    """What the update math runs on: the FP32 master where one is kept."""
    return [[st.get("master_param", p) for p, st in zip(ps, sts)]
            for ps, sts in zip(snap.params, snap.state)]


def counter_location(opt: torch.optim.Optimizer) -> str | None:
    """Where the counters live, from state_dict(): 'group', 'param' or None (none yet)."""
    sd = opt.state_dict()
    if any("step" in g for g in sd["param_groups"]):
        return "group"
    if any("step" in s for s in sd["state"].values()):
        return "param"
    return None
