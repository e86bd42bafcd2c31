"""What every fused optimizer shares: checks, lazy state, counters, grad
scaling, dtype buckets, and a load_state_dict that keeps fp32 state fp32.

State schema (canonical, the oracle's names):
    group["step"]            the counter, per GROUP: a Python int, or a 0-dim
                             int64 tensor on the params' device when capturable.
                             It advances on every step() for every group, empty
                             groups and groups without grads included, and not
                             at all when found_inf is set.
    state[p]["master_param"] fp32 copy of an fp16/bf16 param (master_weights);
                             the param is then the master rounded after each step.
    state[p][<moments>]      exp_avg, exp_avg_sq (Adam, LAMB), sum (Adagrad) or
                             momentum_buffer (SGD, only while momentum != 0),
                             in `moment_dtype` (float32 or bfloat16).
State is created on a param's first step with a grad; construction and
state_dict() before a step create nothing.
"""
from __future__ import annotations

import functools
import inspect
import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch

from oracle import hparams
from oracle.hparams import check_flag, is_real, short

from . import _ext

PARAM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MOMENT_DTYPES = (torch.float32, torch.bfloat16)
LOW_PRECISION = (torch.float16, torch.bfloat16)
KERNEL_DEVICES = ("cpu", "cuda")
# The largest counter: the kernels form the bias corrections from double(step),
# exact up to 2**53. A counter at or above it could not be advanced exactly.
MAX_STEP = 2 ** 53
# Switches FusedOptimizer refuses when set (and drops from the defaults).
UNSUPPORTED = ("maximize", "amsgrad", "differentiable", "foreach")
# Keys torch.optim.Optimizer itself adds to `defaults` (its __setstate__, on
# every load_state_dict and unpickling); not hyperparameters of ours.
TORCH_DEFAULT_KEYS = ("differentiable",)


def check_range(group: int, name: str, value, low=0.0, high=None, high_open=False, low_open=False) -> None:
    """oracle.hparams.check_range, also taking a 1-element real tensor (capturable lr). A device tensor
    is not read: that would synchronize."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"group {group}: {name} must be a number or a 1-element tensor")
        if value.dtype == torch.bool or value.is_complex():
            raise ValueError(f"group {group}: {name} must be a real number, got a {value.dtype} tensor")
        if value.device.type != "cpu":
            return
        value = value.item()
    hparams.check_range(group, name, value, low=low, high=high, high_open=high_open, low_open=low_open)


def check_roles(group: int, hp: dict, optimizer: str) -> None:
    """Every hyperparameter of this group that the oracle's `optimizer` declares a role for, held to it
    as the oracle's validate holds it (oracle.hparams; switches are checked by flag_names)."""
    import oracle
    hparams.check_roles(group, hp, oracle.SPECS[optimizer].roles, oracle.SPECS[optimizer].defaults,
                        check=check_range, flags=False)


def host_value(x):
    """A Python number from a number or a 1-element tensor."""
    return x.item() if isinstance(x, torch.Tensor) else x


def _wrapper_subclass(p: torch.Tensor) -> bool:
    """A tensor subclass that dispatches its ops itself (FSDP2's DTensor, a quantized tensor): its data
    is not the storage behind data_ptr(). Plain tensors, parameters and buffers dispatch as torch.Tensor."""
    return type(p).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__


@dataclass
class Scaling:
    """Grad scaling for one step: grads are multiplied by inv_scale, and
    found_inf skips the step. Device tensors only in capturable CUDA groups."""

    inv_scale: float | torch.Tensor = 1.0
    found_inf: bool | torch.Tensor = False

    def for_group(self, on_device: bool) -> "Scaling":
        if on_device:
            return self
        return Scaling(float(host_value(self.inv_scale)), bool(host_value(self.found_inf)))


@dataclass
class Bucket:
    """The live params of one group that share a dtype, as kernel lists."""

    grads: list
    params: list  # what the math updates: fp32 masters, or the params themselves
    models: list  # the fp16/bf16 params rewritten from masters; empty without masters
    states: list
    kinds: dict


class FusedOptimizer(torch.optim.Optimizer):
    """Base class; subclasses define `_check_hparams`, `_init_moments` and `_update`."""

    # torch flags the subclass implements (maximize for FusedSGD); the others
    # are refused when True, and dropped from the defaults when False
    FLAGS: frozenset = frozenset()
    # state keys that can never be negative (a checkpoint holding a negative one is corrupt)
    NONNEGATIVE: tuple = ()

    def __init__(self, params, defaults: dict):
        for key in UNSUPPORTED:
            if key not in self.FLAGS and defaults.pop(key, False):
                raise ValueError(f"{type(self).__name__} does not support {key}=True")
        if isinstance(params, (dict, str, bytes)) or params is None:
            raise TypeError(f"{type(self).__name__}: params must be an iterable of tensors or of param group dicts, "
                            f"got {type(params).__name__}" + (" (wrap a single group in a list)"
                                                              if isinstance(params, dict) else ""))
        if not isinstance(params, torch.Tensor):  # torch's own message for a lone tensor is clear
            try:
                params = list(params)
            except TypeError:
                raise TypeError(f"{type(self).__name__}: params must be an iterable of tensors or of param group "
                                f"dicts, got {type(params).__name__}") from None
        super().__init__(params, defaults)

    def __setstate__(self, state: dict) -> None:
        """torch's, which also runs inside load_state_dict, without the keys it
        adds to `defaults` (`differentiable`): they would be required from the
        next checkpoint, and add_param_group would copy them into new groups."""
        super().__setstate__(state)
        for key in TORCH_DEFAULT_KEYS:
            self.defaults.pop(key, None)

    def _hparam_keys(self) -> set:
        """The keys every group carries: this optimizer's hyperparameters."""
        return set(self.defaults) - set(TORCH_DEFAULT_KEYS)

    # ------------------------------------------------------------ checks

    def add_param_group(self, param_group: dict) -> None:
        """torch's, plus checks that name the group and param. A group that
        fails them is not added: the optimizer stays as it was."""
        index = len(self.param_groups)
        if not isinstance(param_group, dict):
            raise TypeError(f"group {index}: a param group must be a dict, got {type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError(f"group {index}: a param group needs a 'params' entry "
                             f"(keys: {sorted(map(str, param_group))})")
        self._check_duplicates(index, param_group)
        super().add_param_group(param_group)
        group = self.param_groups[index]
        try:
            self._check_params(index, group)
            self._check_common(index, group)
        except Exception:
            self.param_groups.pop()
            raise
        group.setdefault("step", 0)

    def _check_duplicates(self, gi: int, param_group: dict) -> None:
        """A param may appear once in the whole optimizer: twice, it would be
        stepped twice per step (and raced on by the kernels). torch only warns
        about duplicates within a group, and does not say which."""
        params = param_group["params"]
        if isinstance(params, torch.Tensor):
            params = [params]
        elif isinstance(params, set):
            return  # torch refuses sets (unordered)
        else:
            params = param_group["params"] = list(params)  # a generator is read once
        seen = {id(p): (g, i) for g, group in enumerate(self.param_groups) for i, p in enumerate(group["params"])}
        for i, p in enumerate(params):
            p = p[1] if isinstance(p, tuple) and len(p) == 2 else p  # (name, param)
            if not isinstance(p, torch.Tensor):
                nested = " (a nested list? params must be a flat list of tensors, or one dict per group)" \
                    if isinstance(p, (list, tuple)) else ""
                raise TypeError(f"group {gi} param {i}: expected a tensor, got {type(p).__name__}{nested}")
            if id(p) in seen:
                g, j = seen[id(p)]
                raise ValueError(f"group {gi} param {i}: the same tensor as group {g} param {j}; "
                                 "a param may appear only once in an optimizer")
            seen[id(p)] = (gi, i)

    def _check_params(self, gi: int, group: dict) -> None:
        devices = {p.device for p in group["params"]}
        if len(devices) > 1:
            raise ValueError(f"group {gi}: params on several devices {sorted(map(str, devices))}; "
                             "use one group per device")
        for i, p in enumerate(group["params"]):
            if p.is_complex():
                raise ValueError(f"group {gi} param {i}: complex params are not supported")
            if p.dtype not in PARAM_DTYPES:
                raise ValueError(f"group {gi} param {i}: dtype {p.dtype} is not supported "
                                 f"(float32, float16, bfloat16)")
            if p.is_sparse:
                raise ValueError(f"group {gi} param {i}: sparse params are not supported")
            if _wrapper_subclass(p):
                # a wrapper subclass (FSDP2's DTensor) has no storage of its own behind data_ptr(): the
                # kernels would read and write through a null or foreign pointer (it segfaulted)
                raise TypeError(f"group {gi} param {i}: {type(p).__name__} params are not supported: the kernels "
                                f"read the tensor's own storage (for FSDP2, step the local shards)")

    def _check_common(self, gi: int, group: dict) -> None:
        for key in ("maximize", "amsgrad"):
            if key not in self.FLAGS and group.get(key, False):
                raise ValueError(f"group {gi}: {type(self).__name__} does not support {key}=True")
        if not isinstance(group["moment_dtype"], torch.dtype) or group["moment_dtype"] not in MOMENT_DTYPES:
            raise ValueError(f"group {gi}: moment_dtype must be torch.float32 or torch.bfloat16, "
                             f"got {group['moment_dtype']!r}")
        for name in flag_names(type(self)):
            if name in group:
                check_flag(gi, name, group[name])
        self._check_hparams(gi, group)

    def _check_hparams(self, gi: int, group: dict) -> None:
        """The group's hyperparameters held to the roles the oracle's spec declares (SPEC)."""
        check_roles(gi, group, self.SPEC)

    def _live_params(self, gi: int, group: dict) -> list[tuple[int, torch.Tensor]]:
        """(index, param) of the params with a grad, after checking them. Each step runs this for every
        param: the checks a valid param passes come first, in one expression; any param that fails
        one goes through _explain_param, which raises the message."""
        live = []
        device = None
        for i, p in enumerate(group["params"]):
            g = p.grad if isinstance(p, torch.Tensor) else _NOT_A_TENSOR
            if g is None:
                continue
            dev = p.device if g is not _NOT_A_TENSOR else None
            if not (g is not _NOT_A_TENSOR and not g.is_sparse and g.dtype == p.dtype and p.dtype in PARAM_DTYPES
                    and g.shape == p.shape and p.is_contiguous() and g.device == dev
                    and (device is None or dev == device) and dev.type in KERNEL_DEVICES):
                _explain_param(f"group {gi} param {i}", p, device)
            device = device or dev
            entry = self.state.get(p)
            if entry:
                self._check_entry(f"group {gi} param {i}", group, p, entry, loaded=True)
            live.append((i, p))
        return live

    def _validate_step(self) -> list[list[tuple[int, torch.Tensor]]]:
        """Checks every group (hyperparameters, params, grads, existing state)
        before anything changes, so a step that raises changes nothing; returns
        each group's live params."""
        lives = []
        for gi, group in enumerate(self.param_groups):
            self._check_common(gi, group)
            # the counter this step advances: checked here, not half-way through the step
            check_counter(f"group {gi}: step", group.get("step", 0), read_device=False)
            lives.append(self._live_params(gi, group))
        return lives

    # ------------------------------------------------------------ state schema

    MOMENTS: tuple = ()  # the state keys of the moments, in moment_dtype
    SPEC: str = ""  # the oracle optimizer whose hyperparameter roles this class's hyperparameters have
    OPTIONS: tuple = ()  # the oracle options (oracle.spec OptimizerSpec.options) this class implements
    # moments a stepped param may lack (checked when present): SGD's buffer
    # exists only while momentum != 0, and torch keeps it when momentum drops to 0
    OPTIONAL_MOMENTS: tuple = ()

    def _state_spec(self, group: dict, p: torch.Tensor) -> dict:
        """key -> dtype of a param's state once it has stepped."""
        spec = {key: group["moment_dtype"] for key in (*self.MOMENTS, *self.OPTIONAL_MOMENTS)}
        if self._uses_master(group, p):
            spec["master_param"] = torch.float32
        return spec

    def _check_entry(self, where: str, group: dict, p: torch.Tensor, entry, loaded: bool = False) -> None:
        """A param's state entry against the schema: empty (not stepped yet),
        or exactly the spec's keys, each a dense tensor of the param's shape
        and the spec's dtype; `loaded` (live state): also on the param's
        device and contiguous, as the kernels need."""
        if not isinstance(entry, dict):
            raise TypeError(f"{where}: state must be a dict, got {type(entry).__name__}")
        if not entry:
            return
        spec = self._state_spec(group, p)
        if loaded and _loaded_entry_ok(spec, p, entry):
            return
        missing = sorted(set(spec) - set(entry) - set(self.OPTIONAL_MOMENTS))
        extra = sorted(set(entry) - set(spec), key=str)
        if missing:
            raise ValueError(f"{where}: state is missing {missing} (expected {sorted(spec)})")
        if extra:
            raise ValueError(f"{where}: unknown state keys {extra} (expected {sorted(spec)})")
        for key, dtype in spec.items():
            if key not in entry:  # an optional moment
                continue
            v = entry[key]
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"{where}: state {key!r} must be a tensor, got {type(v).__name__}")
            if v.layout != torch.strided:
                raise ValueError(f"{where}: state {key!r} has layout {v.layout}; only dense (strided) tensors")
            if v.dtype != dtype:
                why = "fp32 master" if key == "master_param" else "the group's moment_dtype"
                raise ValueError(f"{where}: state {key!r} dtype {v.dtype} != {dtype} ({why})")
            if v.shape != p.shape:
                raise ValueError(f"{where}: state {key!r} shape {tuple(v.shape)} != param shape {tuple(p.shape)}")
            if loaded and (v.device != p.device or not v.is_contiguous()):
                raise RuntimeError(f"{where}: state {key!r} must be contiguous on {p.device} "
                                   f"(is on {v.device}, contiguous={v.is_contiguous()})")

    # ------------------------------------------------------------ state

    def _uses_master(self, group: dict, p: torch.Tensor) -> bool:
        return group["master_weights"] and p.dtype in LOW_PRECISION

    def _state_of(self, group: dict, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            if self._uses_master(group, p):
                state["master_param"] = p.detach().to(torch.float32, copy=True)
            self._init_moments(group, p, state)
        return state

    def _init_moments(self, group: dict, p: torch.Tensor, state: dict) -> None:
        raise NotImplementedError

    def _buckets(self, group: dict, live) -> list[Bucket]:
        by_dtype: dict[torch.dtype, Bucket] = {}
        for _, p in live:
            master = self._uses_master(group, p)
            b = by_dtype.setdefault(p.dtype, Bucket([], [], [], [], {"master": master}))
            state = self._state_of(group, p)
            b.grads.append(p.grad.contiguous())
            b.params.append(state["master_param"] if master else p)
            if master:
                b.models.append(p)
            b.states.append(state)
        return list(by_dtype.values())

    # ------------------------------------------------------------ counters

    def _counter_device(self, group: dict, scaling: Scaling) -> torch.device:
        if group["params"]:
            return group["params"][0].device
        if isinstance(scaling.found_inf, torch.Tensor):
            return scaling.found_inf.device
        return torch.device("cpu")

    def _advance_counter(self, group: dict, scaling: Scaling) -> None:
        """+1, or on the device +(not found_inf) when capturable."""
        if group.get("capturable", False):
            device = self._counter_device(group, scaling)
            step = group["step"]
            if not isinstance(step, torch.Tensor) or step.device != device:
                step = group["step"] = torch.as_tensor(host_value(step), dtype=torch.int64, device=device)
            if isinstance(scaling.found_inf, torch.Tensor):
                step.add_((scaling.found_inf == 0).to(torch.int64))
            else:
                step.add_(1)
        else:
            group["step"] = int(host_value(group["step"])) + 1

    def _normalize_counter(self, group: dict) -> None:
        step = group.get("step", 0)
        if group.get("capturable", False) and group["params"]:
            group["step"] = torch.as_tensor(host_value(step), dtype=torch.int64,
                                            device=group["params"][0].device).clone()
        else:
            group["step"] = int(host_value(step))

    # ------------------------------------------------------------ step

    def _scaling(self, inv_scale, found_inf) -> Scaling:
        return Scaling(1.0 if inv_scale is None else inv_scale, False if found_inf is None else found_inf)

    def _on_device(self, group: dict, scaling: Scaling) -> bool:
        """Whether this group's counter and scalars live on a CUDA device."""
        return bool(group.get("capturable", False)) and self._counter_device(group, scaling).type == "cuda"

    def _device_scaling(self, scaling: Scaling) -> bool:
        """Whether found_inf stays a device tensor (read inside the kernels)."""
        return (isinstance(scaling.found_inf, torch.Tensor) and scaling.found_inf.device.type == "cuda"
                and any(self._on_device(g, scaling) for g in self.param_groups))

    @torch.no_grad()
    def step(self, closure=None, *, inv_scale=None, found_inf=None):
        """One step for every group.

        inv_scale (float or tensor) multiplies every grad inside the kernels
        (the caller's grads are not modified); found_inf (bool or tensor), when
        set, skips the step entirely: params, masters, moments and counters
        stay as they were. In capturable CUDA groups both may be device
        tensors and are read on the device.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        lives = self._validate_step()  # bad input raises even on a skipped step
        check_scaling(inv_scale, found_inf)
        scaling = self._scaling(inv_scale, found_inf)
        if not self._device_scaling(scaling):
            scaling = scaling.for_group(on_device=False)
            if scaling.found_inf:
                return loss
        self._step_groups(scaling, lives)
        return loss

    def _step_groups(self, scaling: Scaling, lives: list) -> None:
        for group, live in zip(self.param_groups, lives):
            on_device = self._on_device(group, scaling)
            group_scaling = scaling.for_group(on_device)
            if not on_device and group_scaling.found_inf:
                continue
            self._advance_counter(group, group_scaling)
            if not live:
                continue
            args = StepArgs.of(group, live[0][1].device, group_scaling, on_device)
            for bucket in self._buckets(group, live):
                self._update(group, bucket, args)

    def _update(self, group: dict, bucket: Bucket, args: "StepArgs") -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ checkpoint

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's load, validated first and atomic, and keeping state dtypes.

        The whole checkpoint is checked against this optimizer before anything
        changes (`_check_checkpoint`); on any error the optimizer is exactly as
        it was. torch.optim.Optimizer casts floating state to the param's
        dtype, which would round fp32 masters and moments of bf16/fp16 params;
        here state is only copied to the param's device (contiguous).
        Hyperparameters come from the checkpoint, as in torch; counters are
        restored exactly; `capturable` stays this optimizer's setting (it
        describes how this process steps, not the checkpoint).
        """
        state = self._check_checkpoint(state_dict)
        capturable = [g.get("capturable", False) for g in self.param_groups]
        super().load_state_dict({**state_dict, "state": {}})
        for p, entry in state.items():
            self.state[p] = entry
        for group, cap in zip(self.param_groups, capturable):
            group["capturable"] = cap
            self._normalize_counter(group)

    def _check_checkpoint(self, sd) -> dict:
        """Raises (TypeError or ValueError, naming the group, param and key)
        unless `sd` is a complete state_dict of an optimizer shaped like this
        one; returns the new state, {param: entry}, as copies on the params'
        devices, so that loading cannot fail half-way."""
        if not isinstance(sd, dict):
            raise TypeError(f"checkpoint: expected a dict with 'state' and 'param_groups', got {type(sd).__name__}")
        missing, extra = {"state", "param_groups"} - set(sd), set(sd) - {"state", "param_groups"}
        if missing or extra:
            raise ValueError(f"checkpoint: keys {sorted(map(str, sd))}, expected ['param_groups', 'state']")
        saved_groups, saved_state = sd["param_groups"], sd["state"]
        if not isinstance(saved_groups, (list, tuple)) or not isinstance(saved_state, dict):
            raise TypeError("checkpoint: 'param_groups' must be a list and 'state' a dict")
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"checkpoint has {len(saved_groups)} param groups, this optimizer "
                             f"{len(self.param_groups)}")
        required = (self._hparam_keys() | {"params", "step"}) - {"capturable"}
        where_id: dict = {}
        for gi, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            if not isinstance(saved, dict):
                raise TypeError(f"checkpoint group {gi}: expected a dict, got {type(saved).__name__}")
            lacking = sorted(required - set(saved))
            if lacking:
                raise ValueError(f"checkpoint group {gi}: missing keys {lacking}")
            ids = saved["params"]
            if not isinstance(ids, (list, tuple)) or len(ids) != len(group["params"]):
                count = len(ids) if isinstance(ids, (list, tuple)) else type(ids).__name__
                raise ValueError(f"checkpoint group {gi}: {count} params, this optimizer's group {gi} has "
                                 f"{len(group['params'])}")
            check_counter(f"checkpoint group {gi}: step", saved["step"], read_device=True)
            merged = {**saved, "params": group["params"], "capturable": group.get("capturable", False)}
            try:
                self._check_common(gi, merged)
            except (TypeError, ValueError) as e:
                raise type(e)(f"checkpoint {e}") from e
            for i, (pid, p) in enumerate(zip(ids, group["params"])):
                try:
                    hash(pid)
                except TypeError:
                    raise TypeError(f"checkpoint group {gi} param {i}: param id {pid!r} is not hashable "
                                    "(state_dict() saves ints)") from None
                if pid in where_id:
                    raise ValueError(f"checkpoint group {gi} param {i}: id {pid!r} also names group "
                                     f"{where_id[pid][0]} param {where_id[pid][1]}")
                where_id[pid] = (gi, i, p, merged)
        new_state = {}
        for pid, entry in saved_state.items():
            if pid not in where_id:
                raise ValueError(f"checkpoint: state for param id {pid!r}, which no param group lists")
            gi, i, p, merged = where_id[pid]
            where = f"checkpoint group {gi} param {i}"
            self._check_entry(where, merged, p, entry)
            for key, v in entry.items():
                self._check_values(where, key, v)
            if entry:
                new_state[p] = {k: v.detach().to(device=p.device, memory_format=torch.contiguous_format, copy=True)
                                for k, v in entry.items()}
        return new_state

    def _check_values(self, where: str, key: str, v: torch.Tensor) -> None:
        """A checkpoint's state tensor holds values a run can produce: data
        (not a meta tensor), no NaN in a moment, nothing negative where the
        rule cannot make it so (exp_avg_sq, sum). Reads the tensor (a sync on
        CUDA), once, at load. NaN params, and so NaN masters, are data."""
        if v.device.type == "meta":
            raise ValueError(f"{where}: state {key!r} is a meta tensor (it holds no values)")
        if key == "master_param" or v.numel() == 0:
            return
        if bool(torch.isnan(v).any()):
            n = int(torch.isnan(v).sum())
            raise ValueError(f"{where}: state {key!r} holds {n} NaN value(s); a moment is never NaN in a "
                             "checkpoint worth resuming from")
        if key in self.NONNEGATIVE and bool((v < 0).any()):
            raise ValueError(f"{where}: state {key!r} holds negative values (min {float(v.min())!r}); "
                             f"{key} is a sum of squares and cannot be negative")


def check_counter(where: str, step, read_device: bool = True) -> None:
    """A group counter: an int in [0, MAX_STEP), or a 0-dim integer tensor (a
    capturable optimizer's); bools, floats and other shapes are refused. A
    counter tensor on a device is read only when `read_device` (loading may
    synchronize, step() must not)."""
    if isinstance(step, torch.Tensor):
        if step.dim() != 0 or step.dtype.is_floating_point or step.dtype.is_complex or step.dtype == torch.bool:
            raise TypeError(f"{where} must be an int or a 0-dim integer tensor, got a {step.dtype} tensor "
                            f"of shape {tuple(step.shape)}")
        if step.device.type == "meta":
            raise ValueError(f"{where} is a meta tensor (it holds no value)")
        if step.device.type != "cpu" and not read_device:
            return
        value = int(step)
    elif isinstance(step, numbers.Integral) and not isinstance(step, bool):
        value = int(step)
    else:
        raise TypeError(f"{where} must be an int or a 0-dim integer tensor, got {type(step).__name__} {short(step)}")
    if value < 0:
        raise ValueError(f"{where}={value} must be >= 0")
    if value >= MAX_STEP:
        raise ValueError(f"{where}={short(value)} must be < 2**53: the next step could not advance it exactly "
                         "(the bias corrections are formed from it in double)")


def check_scaling(inv_scale, found_inf) -> None:
    """step()'s grad scaling: inv_scale a finite number > 0 and found_inf a
    bool, or 1-element tensors (not read when on a device: that would
    synchronize). A NaN, Inf, zero or negative inv_scale would turn every
    update into NaN or reverse it silently; a string found_inf is truthy."""
    if inv_scale is not None:
        if isinstance(inv_scale, torch.Tensor):
            if inv_scale.numel() != 1 or inv_scale.dtype == torch.bool or inv_scale.is_complex():
                raise ValueError(f"step(): inv_scale must be a number or a 1-element real tensor, got a "
                                 f"{inv_scale.dtype} tensor of shape {tuple(inv_scale.shape)}")
            value = inv_scale.item() if inv_scale.device.type == "cpu" else None
        else:
            value = inv_scale
        if value is not None:
            if not is_real(value):
                raise ValueError(f"step(): inv_scale={short(value)} must be a real number "
                                 f"({type(value).__name__} given)")
            try:
                x = float(value)
            except OverflowError:
                x = math.inf
            if not (math.isfinite(x) and x > 0):
                raise ValueError(f"step(): inv_scale={short(value)} must be finite and > 0 (1/loss scale)")
    if found_inf is not None:
        if isinstance(found_inf, torch.Tensor):
            if found_inf.numel() != 1 or found_inf.is_complex():
                raise ValueError(f"step(): found_inf must be a bool or a 1-element tensor, got a {found_inf.dtype} "
                                 f"tensor of shape {tuple(found_inf.shape)}")
            value = found_inf.item() if found_inf.device.type == "cpu" else False
        else:
            value = found_inf
        if not isinstance(value, (bool, np.bool_)) and not is_real(value):
            raise ValueError(f"step(): found_inf={short(value)} must be a bool ({type(value).__name__} given)")
        if not isinstance(value, (bool, np.bool_)) and math.isnan(float(value)):
            raise ValueError("step(): found_inf is NaN; expected a bool or 0/1")


@functools.lru_cache(maxsize=None)
def flag_names(cls) -> tuple:
    """The switches of an optimizer class: its constructor's arguments with a
    bool default, less the unsupported ones (refused when truthy)."""
    return tuple(name for name, prm in inspect.signature(cls.__init__).parameters.items()
                 if isinstance(prm.default, bool) and (name not in UNSUPPORTED or name in cls.FLAGS))


@dataclass
class StepArgs:
    """Per-step inputs of one kernel call. On the host path everything is a
    Python number; in capturable CUDA groups step, lr, inv_scale and found_inf
    are device tensors read by the kernels, so nothing synchronizes."""

    step: int | torch.Tensor
    lr: float | torch.Tensor
    inv_scale: float | torch.Tensor
    found_inf: bool | torch.Tensor
    on_device: bool
    device: torch.device

    @classmethod
    def of(cls, group: dict, device: torch.device, scaling: Scaling, on_device: bool) -> "StepArgs":
        if on_device:
            return cls(group["step"], group["lr"], scaling.inv_scale, scaling.found_inf, True, device)
        return cls(int(host_value(group["step"])), float(host_value(group["lr"])), float(scaling.inv_scale),
                   bool(scaling.found_inf), False, device)

    def host(self) -> tuple:
        """(step, lr, inv_scale) as numbers (placeholders when on the device)."""
        if self.on_device:
            number = lambda x, default: default if isinstance(x, torch.Tensor) else float(x)  # noqa: E731
            return 0, number(self.lr, 0.0), number(self.inv_scale, 1.0)
        return self.step, self.lr, self.inv_scale

    def cuda_tail(self) -> tuple:
        """The CUDA bindings' trailing arguments: device scalars and the stream."""
        stream = torch.cuda.current_stream(self.device).cuda_stream
        if not self.on_device:
            return None, None, None, None, stream
        as_dev = lambda x, dt: None if x is None else torch.as_tensor(x, dtype=dt, device=self.device)  # noqa: E731
        lr = as_dev(self.lr, torch.float64) if isinstance(self.lr, torch.Tensor) else None
        inv = as_dev(self.inv_scale, torch.float32) if isinstance(self.inv_scale, torch.Tensor) else None
        found = as_dev(self.found_inf, torch.float32) if isinstance(self.found_inf, torch.Tensor) else None
        return self.step, lr, inv, found, stream

    def call(self, kernel_name: str, *args) -> None:
        """Calls the kernel of this device's extension with `args`, plus the
        CUDA tail on CUDA."""
        tail = self.cuda_tail() if self.device.type == "cuda" else ()
        call_kernel(self.device, kernel_name, *args, *tail)


def call_kernel(device: torch.device, kernel_name: str, *args):
    """Calls `kernel_name` of the extension for `device`; on CUDA with that
    device current (the bindings launch on the current device and the stream
    passed as the last argument)."""
    ext = _ext.for_device(device)
    if device.type == "cuda":
        with torch.cuda.device(device):
            return getattr(ext, kernel_name)(*args)
    return getattr(ext, kernel_name)(*args)


def stream_arg(device: torch.device) -> tuple:
    """() on the CPU; (the current stream's handle,) on CUDA."""
    return (torch.cuda.current_stream(device).cuda_stream,) if device.type == "cuda" else ()


_NOT_A_TENSOR = object()  # the grad _live_params reads for a "param" that is not a tensor


def _explain_param(where: str, p, device) -> None:
    """Raises the error of a param (or its grad) the fused kernels cannot step, in the order the checks
    are listed; `device`: the group's, from the params before this one (None for the first)."""
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"{where}: expected a tensor, got {type(p).__name__}")
    g = p.grad
    if g.is_sparse:
        raise RuntimeError(f"{where}: sparse gradients are not supported")
    if p.is_complex() or g.is_complex():
        raise RuntimeError(f"{where}: complex params are not supported")
    if g.shape != p.shape:
        raise RuntimeError(f"{where}: grad shape {tuple(g.shape)} != param shape {tuple(p.shape)}")
    if g.dtype != p.dtype:  # no implicit cast: it would round (fp32 -> bf16) or hide a bug
        raise RuntimeError(f"{where}: grad dtype {g.dtype} != param dtype {p.dtype}")
    if not p.is_contiguous():
        raise RuntimeError(f"{where}: non-contiguous params are not supported")
    if p.dtype not in PARAM_DTYPES:  # changed since construction (p.data = ...)
        raise ValueError(f"{where}: dtype {p.dtype} is not supported (float32, float16, bfloat16)")
    device = device or p.device
    if p.device != device or g.device != device:
        raise RuntimeError(f"{where}: on {p.device} (grad {g.device}) while the group is on {device}")
    if p.device.type not in KERNEL_DEVICES:
        raise ValueError(f"{where}: on {p.device}; the fused kernels run on {' and '.join(KERNEL_DEVICES)} "
                         "only (materialize meta params before stepping)")
    raise AssertionError(f"{where}: passed every check _live_params failed")  # the two lists disagree


def _loaded_entry_ok(spec: dict, p: torch.Tensor, entry: dict) -> bool:
    """The every-step check of a live state entry, for the common case that passes: exactly the spec's
    keys, each a plain dense tensor of the spec's dtype and the param's shape, contiguous on its device.
    True only where FusedOptimizer._check_entry's full checks would pass too; anything else (including a
    valid entry this does not recognise, such as a tensor subclass) goes through those checks, which
    raise the message. It runs once per param per step: 100 params cost 0.5 ms of Python before."""
    if entry.keys() != spec.keys():
        return False
    for key, dtype in spec.items():
        v = entry[key]
        if not (type(v) is torch.Tensor and v.layout == torch.strided and v.dtype == dtype  # noqa: E721
                and v.shape == p.shape and v.device == p.device and v.is_contiguous()):
            return False
    return True
