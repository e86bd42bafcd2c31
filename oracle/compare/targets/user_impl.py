"""A user's optimizer as a target: `--impl package.module:Name`.

Which optimizer it implements comes from `--optimizer` or the class attribute
ORACLE_OPTIMIZER, never from the class name (NAdamW is not AdamW, AdamP is not
Adam). Its conventions default to the spec's for that optimizer; class
attributes declare others: ORACLE_CONVENTION, ORACLE_COMPUTE ("float32" or
"storage"), ORACLE_MASTERS, ORACLE_STATE_DTYPE, ORACLE_DTYPES, ORACLE_DEVICES,
ORACLE_OPTIONS, ORACLE_SCALING (step() takes inv_scale= and found_inf=), ORACLE_STATE_NAMES
(state key -> canonical name, else found by value: oracle.compare.checking.statenames), ORACLE_QUANTIZED
(canonical name -> its quantized format and keys: declared_quantized) and ORACLE_DEVIATIONS
(option -> reason: a deviation from the named algorithm meant on purpose, oracle.compare.checking.deviation) and
ORACLE_ROUNDING ("stochastic": low-precision params rounded at random, oracle.compare.measuring.stochastic). A float32
step counter is part of the convention (counter_format="float32": it stops at 2**24).
Whatever it does not declare is inferred (oracle.compare.inference.infer) unless --no-infer.
"""
from __future__ import annotations

import importlib
import inspect
import os
import signal
import subprocess
import sys

import oracle

from ..isolation.processes import run_child
from .base import Target, scaled_step_kwargs


def resolve(spec: str):
    """The object named by 'package.module:Name'; ValueError saying why not."""
    if ":" not in spec:
        raise ValueError(f"--impl expects 'package.module:Name', got {spec!r}")
    mod_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--impl {spec}: cannot import: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a module failing on import is the user's input, not our crash
        raise ValueError(f"--impl {spec}: importing {mod_name} raised {type(exc).__name__}: {exc}") from exc
    except SystemExit as exc:
        raise ValueError(f"--impl {spec}: importing {mod_name} called sys.exit({exc.code!r})") from exc


# Run in a fresh interpreter by probe_import: import the module, look the name up, say what happened
# on the last line of stderr, and leave with os._exit (no atexit handler of the module runs).
_PROBE = r"""
import importlib, os, sys, traceback
from oracle.compare.isolation.processes import behind_shield, die_with_launcher
die_with_launcher()
behind_shield()
def say(kind, text, code):
    sys.stdout.flush()
    sys.stderr.write("\n@@probe@@ %s %s\n" % (kind, text.replace("\n", " ")))
    sys.stderr.flush()
    os._exit(code)
try:
    module = importlib.import_module(sys.argv[1])
except SystemExit as exc:
    say("exit", repr(exc.code), 3)
except BaseException as exc:
    say("raise", traceback.format_exception_only(type(exc), exc)[-1].strip(), 3)
if not hasattr(module, sys.argv[2]):
    say("attr", "module %s has no attribute %r" % (sys.argv[1], sys.argv[2]), 3)
say("ok", "", 0)
"""


def probe_import(spec: str, timeout: float) -> str | None:
    """Import an --impl module in a separate interpreter first, with a time limit: None if it
    imports and has the name, else what went wrong (a segfault names its signal, a hang the limit,
    an exception its last line, sys.exit its code). The CLI's own process never sees a module that
    would crash, hang or exit on import."""
    if ":" not in spec:
        return f"--impl expects 'package.module:Name', got {spec!r}"
    mod_name, _, attr = spec.partition(":")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([p or os.getcwd() for p in sys.path])}
    try:
        proc = run_child([sys.executable, "-c", _PROBE, mod_name, attr], timeout, env)
    except subprocess.TimeoutExpired:
        return f"--impl {spec}: importing {mod_name} did not finish within {timeout:g} s (killed)"
    err = proc.stderr
    said = [line for line in err.splitlines() if line.startswith("@@probe@@ ")]
    if proc.returncode == 0 and said and said[-1].split()[1] == "ok":
        return None
    if proc.returncode < 0:
        return (f"--impl {spec}: importing {mod_name} killed the interpreter with signal "
                f"{signal.Signals(-proc.returncode).name}")
    if not said:
        tail = " ".join(err.strip().splitlines()[-1:])
        return f"--impl {spec}: importing {mod_name} ended the interpreter with status {proc.returncode}" \
               + (f": {tail}" if tail else "")
    kind, _, text = said[-1][len("@@probe@@ "):].partition(" ")
    if kind == "exit":
        return f"--impl {spec}: importing {mod_name} called sys.exit({text})"
    if kind == "attr":
        return f"--impl {spec}: cannot import: {text}"
    if text.startswith(("ModuleNotFoundError", "ImportError")):
        return f"--impl {spec}: cannot import: {text.split(': ', 1)[-1]}"
    return f"--impl {spec}: importing {mod_name} raised {text}"


def which_optimizer(spec: str, obj, optimizer: str | None) -> str:
    declared = getattr(obj, "ORACLE_OPTIMIZER", None)
    if declared is not None and optimizer is not None and declared != optimizer:
        raise ValueError(f"--impl {spec} declares ORACLE_OPTIMIZER = {declared!r} but --optimizer {optimizer} "
                         f"was given; drop one")
    name = declared or optimizer
    if name is None:
        raise ValueError(f"--impl {spec}: which optimizer does it implement? Pass --optimizer NAME (one of "
                         f"{', '.join(oracle.SPECS)}) or set ORACLE_OPTIMIZER = 'NAME' on the class")
    if name not in oracle.SPECS:
        raise ValueError(f"--impl {spec}: unknown optimizer {name!r}; expected one of {', '.join(oracle.SPECS)}")
    return name


# class attribute -> the inference axis it fixes (oracle.compare.inference.infer)
DECLARED_AXES = {"ORACLE_CONVENTION": "convention", "ORACLE_COMPUTE": "compute", "ORACLE_STATE_DTYPE": "state_dtype",
                 "ORACLE_MASTERS": "masters"}


def declared_axes(obj) -> dict:
    """The conventions the class declares itself: inference leaves them as declared."""
    return {axis: getattr(obj, attr) for attr, axis in DECLARED_AXES.items() if getattr(obj, attr, None) is not None}


def declared_deviations(spec: str, obj, optimizer: str) -> tuple:
    """ORACLE_DEVIATIONS = {option: reason}: the convention options whose deviation from the named
    algorithm (oracle.forms) the class means, each with a reason; ValueError for anything else."""
    declared = getattr(obj, "ORACLE_DEVIATIONS", None)
    if declared is None:
        return ()
    options = oracle.SPECS[optimizer].forms
    if not isinstance(declared, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                                   for k, v in declared.items()):
        raise ValueError(f"--impl {spec}: ORACLE_DEVIATIONS must be a dict of option name -> reason (a non-empty "
                         f"string), got {declared!r}")
    unknown = sorted(set(declared) - set(options))
    if unknown:
        raise ValueError(f"--impl {spec}: ORACLE_DEVIATIONS names {', '.join(unknown)}, not options of "
                         f"{optimizer}'s convention ({', '.join(options)})")
    return tuple(sorted(declared.items()))


def declared_state_names(spec: str, obj, optimizer: str) -> tuple:
    """ORACLE_STATE_NAMES = {implementation key: canonical name}: state the class keeps under its own
    keys (bitsandbytes' "state1" for exp_avg); ValueError for a name the optimizer's spec lacks."""
    declared = getattr(obj, "ORACLE_STATE_NAMES", None)
    if declared is None:
        return ()
    s = oracle.SPECS[optimizer]
    canonical = {*s.state_keys, *s.optional_state, "master_param"}
    if not isinstance(declared, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in declared.items()):
        raise ValueError(f"--impl {spec}: ORACLE_STATE_NAMES must be a dict of state key -> canonical name, "
                         f"got {declared!r}")
    unknown = sorted(set(declared.values()) - canonical)
    if unknown:
        raise ValueError(f"--impl {spec}: ORACLE_STATE_NAMES maps to {', '.join(unknown)}, not state of {optimizer} "
                         f"({', '.join(sorted(canonical))})")
    return tuple(sorted(declared.items()))


def declared_quantized(spec: str, obj, optimizer: str) -> tuple:
    """ORACLE_QUANTIZED = {canonical name: format or (format, codes key, scale key, code book key)}:
    state kept quantized (oracle.quantized.FORMATS names the formats). A format alone: the entry is a
    tensor subclass with `codes` and `scale` (torchao's layout); with keys: uint8 codes, float32 block
    scales and the code book under those state keys (bitsandbytes' layout). ValueError for an unknown
    format or a name the optimizer's spec lacks."""
    from oracle.quantized import FORMATS

    from ..measuring.quantized_state import bnb_entry, torchao_entry
    declared = getattr(obj, "ORACLE_QUANTIZED", None)
    if declared is None:
        return ()
    s = oracle.SPECS[optimizer]
    if not isinstance(declared, dict):
        raise ValueError(f"--impl {spec}: ORACLE_QUANTIZED must be a dict of canonical name -> format, got {declared!r}")
    out = []
    for name, how in declared.items():
        fmt, keys = (how, ()) if isinstance(how, str) else (how[0], tuple(how[1:]))
        if name not in {*s.state_keys, *s.optional_state}:
            raise ValueError(f"--impl {spec}: ORACLE_QUANTIZED names {name!r}, not state of {optimizer}")
        if fmt not in FORMATS or len(keys) not in (0, 3):
            raise ValueError(f"--impl {spec}: ORACLE_QUANTIZED[{name!r}] must be a format ({', '.join(FORMATS)}) "
                             f"or (format, codes key, scale key, code book key), got {how!r}")
        out.append(bnb_entry(name, fmt, *keys) if keys else torchao_entry(name, fmt))
    return tuple(out)


def declared_rounding(spec: str, obj) -> str:
    """ORACLE_ROUNDING: how low-precision params are stored, "nearest" (the default) or "stochastic"."""
    how = getattr(obj, "ORACLE_ROUNDING", "nearest")
    if how not in ("nearest", "stochastic"):
        raise ValueError(f"--impl {spec}: ORACLE_ROUNDING must be 'nearest' or 'stochastic', got {how!r}")
    return how


def hparams_not_taken(obj, optimizer: str) -> frozenset:
    """The spec's hyperparameters the constructor has no parameter for (none when it takes **kwargs,
    or its signature cannot be read): never passed to it; a case setting one is a skip (run.run_case)."""
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return frozenset()
    return frozenset(k for k in oracle.SPECS[optimizer].defaults if k not in params)


def fully_declared(obj) -> bool:
    return set(declared_axes(obj)) >= {"convention", "compute", "state_dtype", "masters"}


def load_impl(spec: str, optimizer: str | None = None, convention=None, inferred: bool = True) -> Target:
    """Build a target from 'package.module:Name' (an Optimizer subclass taking
    torch's constructor signature, or a factory returning one).

    The counter location is detected from state_dict() after the first step
    (oracle.compare.measuring.readback); the remaining conventions are the class's declared
    ones (ORACLE_*), then those inferred for it in this run (oracle.compare.inference.infer,
    passed to worker processes), then the spec's for that optimizer.
    """
    return from_object(resolve(spec), spec, optimizer, convention, inferred)


def from_object(obj, spec: str, optimizer: str | None = None, convention=None, inferred: bool = True) -> Target:
    """load_impl for an object in hand (oracle.testing): `spec` names it ('module:Name' where it is
    importable, so the repro command works)."""
    opt = which_optimizer(spec, obj, optimizer)
    conv = convention or getattr(obj, "ORACLE_CONVENTION", None) or oracle.SPECS[opt].convention
    options = getattr(obj, "ORACLE_OPTIONS", None)
    if options is None:
        params = inspect.signature(obj).parameters if callable(obj) else {}
        options = {o for o in oracle.SPECS[opt].options if o in params}
    absent = hparams_not_taken(obj, opt)
    from .declare import with_inferred
    target = Target(name=f"impl:{spec}", optimizer=opt, absent=absent,
                    make=lambda groups, defaults: obj(groups, **{k: v for k, v in defaults.items() if k not in absent}),
                    deviations=declared_deviations(spec, obj, opt),
                    state_names=declared_state_names(spec, obj, opt),
                    quantized=declared_quantized(spec, obj, opt),
                    convention=conv, devices=tuple(getattr(obj, "ORACLE_DEVICES", ("cpu", "cuda"))),
                    dtypes=tuple(getattr(obj, "ORACLE_DTYPES", ("float32", "bfloat16", "float16"))),
                    compute=getattr(obj, "ORACLE_COMPUTE", "float32"),
                    masters=getattr(obj, "ORACLE_MASTERS", False), options=frozenset(options),
                    state_dtype=getattr(obj, "ORACLE_STATE_DTYPE", "param"),
                    scaling=scaled_step_kwargs if getattr(obj, "ORACLE_SCALING", False) else None,
                    rounding=declared_rounding(spec, obj),
                    infer=convention is None and not fully_declared(obj), notes=f"user optimizer {spec}")
    return with_inferred(target) if inferred else target


__all__ = ["declared_axes", "from_object", "fully_declared", "load_impl", "probe_import", "resolve", "which_optimizer"]
