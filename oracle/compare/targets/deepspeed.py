"""DeepSpeed's CPU optimizers and engine wrappers as harness targets.

Nothing here imports deepspeed at module import time: `deepspeed_targets()`
returns Target objects whose `requires` says why they are unusable (never
raises) and whose `make` imports deepspeed on first use.

The CPU ops (cpu_adam, cpu_adagrad, fused_adam, cpu_lion, and shm_comm, the shared-memory
allreduce every deepspeed.init_distributed loads) are C++ extensions that
DeepSpeed JIT-compiles through torch.utils.cpp_extension the first time they
are loaded (~40-115 s each on 2 cores). torch puts the build under
$TORCH_EXTENSIONS_DIR/<op>/ and reuses it when the sources and flags are
unchanged; `configure_env()` points that variable at a shared cache
(`default_extensions_dir()`) unless the caller already set it, and
scripts/build_deepspeed_ops.sh prebuilds into it. The ops are compiled with
-march=native, so the default cache directory is keyed by the SIMD level of
this CPU as well as the python/torch/deepspeed versions and torch's build (its git
revision), never by where they are installed: a fresh venv of the same versions
(every CI clone) reuses the ops. Each build says on stderr what it builds and why (build_reason). A build
stamped for this key is imported from its .so as it is (load_op): a DeepSpeed
install edited in place, at the same version, is not noticed; remove the
cache folder after such an edit.

Conventions (DeepSpeed 0.19.8; paths relative to site-packages/deepspeed):

DeepSpeedCPUAdam (ops/adam/cpu_adam.py, ops/csrc/includes/cpu_adam.h,
ops/csrc/adam/cpu_adam_impl.cpp)
  counter   state[p]["step"], a Python int, created lazily and advanced only
            for params with a grad (cpu_adam.py:145-167)            -> counter="param"
  decay     adamw_mode is constructor-wide (create_adam, cpu_adam.py:97);
            True:  p += (-lr*wd)*p after m, v and the ratio are formed,
                   before the update (cpu_adam.h:201-205; scalar tail
                   cpu_adam_impl.cpp:73-74)                         -> decay="decoupled"
            False: g = p*wd + g before the moments (cpu_adam.h:188-190) -> decay="l2"
            both only when wd > 0.
  eps       denom = sqrt(v) * (1/sqrt(1-b2^t)) + eps (cpu_adam.h:104,197-198)
                                                                    -> eps_mode="outside"
  bias corr per-group flag bias_correction (default True); bc1 = 1-b1^t,
            bc2 = 1/sqrt(1-b2^t), step_size = -lr/bc1, all float32. b^t is a
            float32 RUNNING PRODUCT when the counter advances by one
            (IncrementStep, cpu_adam.h:71-93), std::pow otherwise; the running
            product is shared by every param of the optimizer. The oracle uses
            an exact power, so the deviation is a legitimate float32 rounding
            difference (<= ~t*2^-25/(1-b2^t) relative in 1/sqrt(bc2)), not a
            convention the oracle can express yet.
  hparams   lr, betas, eps, weight_decay pass through pybind as float
            (cpu_adam.h:256-267)                                    -> fp32_hparams=True
  dtypes    params fp32, bf16, fp16 (invokers, cpu_adam_impl.cpp:200-206);
            not float64 (raises). Math in fp32; bf16/fp16 params are rounded
            once on store (round-to-nearest-even, includes/simd.h:60-96).
            Moments fp32 unless fp32_optimizer_states=False (then param dtype).
  options   none: amsgrad=True raises in add_param_group (cpu_adam.py:106-108);
            no maximize.
  caveat    ds_adam_step works on params.contiguous(): a non-contiguous param
            (or state) is updated in a temporary copy and the update is
            silently lost while state["step"] advances (cpu_adam_impl.cpp:
            ds_adam_step; confirmed by experiment).

DeepSpeedCPUAdagrad (ops/adagrad/cpu_adagrad.py, includes/cpu_adagrad.h,
ops/csrc/adagrad/cpu_adagrad.cpp)
  counter   state[p]["step"] int, lazy, grad-None params skipped (cpu_adagrad.py:69-89)
  state     "exp_avg_sq" (the accumulator torch calls "sum"), fp32 by default
  update    g' = g + wd*p; v += g'^2; p -= lr * g'/(sqrt(v)+eps)
            (cpu_adagrad.h:103-110, scalar tail cpu_adagrad.cpp:41-47): the
            numerator uses the DECAYED grad, i.e. torch's L2 form  -> decay="l2"
            (contradicts "numerator uses the raw g" in the shared conventions
            table, which oracle.adagrad keeps as decay="accumulator"; confirmed by experiment)
  eps       sqrt(v) + eps                                           -> eps_mode="outside"
  options   none: no lr_decay, initial_accumulator_value or maximize.
  caveat    the scalar tail (elements after the last full SIMD block) writes
            the update term -lr*g'/denom into p.grad (cpu_adagrad.cpp:49-50).

FusedAdam on the CPU accelerator (ops/adam/fused_adam.py,
ops/op_builder/cpu/fused_adam.py, ops/csrc/cpu/adam/fused_adam.cpp)
  builds on CPU and calls the same ds_adam_step as DeepSpeedCPUAdam, so the
  math is DeepSpeedCPUAdam's (eps "outside", decay "decoupled"/"l2"), NOT the
  CUDA kernel's (outside_corrected / decoupled_update). Counter: each param
  gets state["step"], but step() increments only the state of the LAST param
  with a grad in the group and uses it for all (fused_adam.py:177-193): other
  params' counters stay 0, and a group mixing dtypes advances it once per
  dtype per step (confirmed: [0, 3] after 3 steps; [0, 6] for bf16+fp32).
  The target declares the intended per-param convention so the harness
  reports this.

Engine wrappers: see engine_construction_probe / EngineRun below.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import platform
import re
import sys
import time

from oracle.adagrad import DEEPSPEED_ADAGRAD
from oracle.adam import AdamConvention

from ..isolation.ranks import free_port, shm_buffer_path
from .base import EngineSpec, Target
from .bitsandbytes_torchao import translate

DEEPSPEED_VERSIONS = ">=0.19,<0.20"

DS_CPU_ADAMW = AdamConvention(decay="decoupled", eps_mode="outside", bias_correction=True, counter="param",
                              fp32_hparams=True)
DS_CPU_ADAM = AdamConvention(decay="l2", eps_mode="outside", bias_correction=True, counter="param",
                             fp32_hparams=True)
DS_CPU_ADAGRAD = DEEPSPEED_ADAGRAD
# this library's named conventions (targets.conventions.catalog): preset -> (optimizer, convention)
PRESETS = {"deepspeed.cpu_adam.adamw": ("adamw", DS_CPU_ADAMW), "deepspeed.cpu_adam.adam": ("adam", DS_CPU_ADAM)}

# shm_comm: the shared-memory allreduce every deepspeed.init_distributed on the CPU accelerator loads.
OPS = ("cpu_adam", "cpu_adagrad", "fused_adam", "cpu_lion", "shm_comm")
_BUILDERS = {"cpu_adam": "CPUAdamBuilder", "cpu_adagrad": "CPUAdagradBuilder", "fused_adam": "FusedAdamBuilder",
             "cpu_lion": "CPULionBuilder", "shm_comm": "ShareMemCommBuilder"}
# The op's folder and library name under TORCH_EXTENSIONS_DIR (its builder's NAME) where it differs.
_FOLDERS = {"shm_comm": "deepspeed_shm_comm"}


# --- environment and op cache -------------------------------------------------

def _simd_tag() -> str:
    """SIMD level the ops get compiled for (-march=native): part of the cache key."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    words = set(flags.split())
    if "avx512f" in words:
        return "avx512" + ("fp16" if "avx512_fp16" in words else "")
    if "avx2" in words:
        return "avx2"
    return platform.machine() or "generic"


@functools.lru_cache(maxsize=None)
def _dist_version(name: str) -> str:
    """Read from the package metadata once per process (the targets are listed at every job)."""
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001 - metadata missing means "unknown"
        return "none"


@functools.lru_cache(maxsize=None)
def _torch_build() -> str:
    """torch's git revision, read from torch/version.py without importing torch: two installs of one
    wheel share it, and a build from other sources at the same version string does not."""
    try:
        spec = importlib.util.find_spec("torch")
        folder = list(spec.submodule_search_locations or [])[0]
        with open(os.path.join(folder, "version.py")) as fh:
            text = fh.read()
    except (ImportError, ValueError, IndexError, TypeError, AttributeError, OSError):
        return "none"
    found = re.search(r"^git_version\s*=\s*['\"]([^'\"]*)['\"]", text, re.MULTILINE)
    return found.group(1) if found else "unknown"


def cache_key() -> dict:
    """What a build of the ops depends on beyond their sources: the versions, torch's build (git
    revision: its headers and libraries) and the SIMD level (-march=native). Not where torch and
    deepspeed are installed: a built op names torch's libraries by soname only (no rpath), and a
    stamped build is imported from its .so without torch's JIT step (load_op), whose build file holds
    absolute paths. So every venv of the same versions (each fresh CI clone) shares one build."""
    return {"python": f"{sys.version_info.major}.{sys.version_info.minor}", "torch": _dist_version("torch"),
            "torch_build": _torch_build(), "deepspeed": _dist_version("deepspeed"), "simd": _simd_tag()}


def cache_key_name(key: dict | None = None) -> str:
    """The cache folder's name: py311-torch2.13.0_cpu-ds0.19.8-avx512-cf30153c (last: torch's git revision)."""
    key = key or cache_key()
    return (f"py{key['python'].replace('.', '')}-torch{key['torch']}-ds{key['deepspeed']}-{key['simd']}-"
            f"{key['torch_build'][:8]}").replace("+", "_")


def default_extensions_dir() -> str:
    """$OPTIMIZER_ORACLE_EXT_CACHE or ~/.cache/optimizer-oracle/torch_extensions, plus a folder
    named by cache_key_name(). CI (.ci/run), the main job and the tests all use this one folder."""
    root = os.environ.get("OPTIMIZER_ORACLE_EXT_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "optimizer-oracle", "torch_extensions")
    return os.path.join(root, cache_key_name())


STAMP = ".oracle-build.json"  # in <extensions dir>/<op>/: the cache_key() the op was last loaded with


def build_reason(op: str, extensions_dir: str, key: dict | None = None) -> str | None:
    """None when a build of `op` for this setup is cached in `extensions_dir`; else why it gets built."""
    key = key or cache_key()
    name = _FOLDERS.get(op, op)
    folder = os.path.join(extensions_dir, name)
    if not os.path.exists(os.path.join(folder, f"{name}.so")):
        return f"no build of it in {folder} yet"
    try:
        with open(os.path.join(folder, STAMP)) as fh:
            old = json.load(fh)
    except (OSError, ValueError):
        return (f"the build in {folder} carries no record of what it was built for "
                "(torch rebuilds it if its sources, flags or paths changed)")
    diff = [f"{k} {old.get(k)!r} -> {v!r}" for k, v in key.items() if old.get(k) != v]
    if diff:
        return f"the build in {folder} was made for another setup ({'; '.join(diff)})"
    return None


def _stamp(op: str, extensions_dir: str, key: dict) -> None:
    try:
        with open(os.path.join(extensions_dir, _FOLDERS.get(op, op), STAMP), "w") as fh:
            json.dump(key, fh, indent=1)
    except OSError:
        pass


def configure_env(extensions_dir: str | None = None) -> str:
    """Set DS_ACCELERATOR=cpu and TORCH_EXTENSIONS_DIR (unless already set) before
    deepspeed is imported; returns the extensions dir in effect."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if extensions_dir:
        os.environ["TORCH_EXTENSIONS_DIR"] = extensions_dir
    else:
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", default_extensions_dir())
    return os.environ["TORCH_EXTENSIONS_DIR"]


@functools.lru_cache(maxsize=None)
def deepspeed_unavailable() -> str | None:
    """None if deepspeed imports on the CPU accelerator, else the reason. Never raises."""
    if importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed (pip install --no-build-isolation 'deepspeed>=0.19,<0.20')"
    configure_env()
    if os.environ.get("DS_ACCELERATOR") != "cpu":
        return f"DS_ACCELERATOR={os.environ.get('DS_ACCELERATOR')!r}; these targets need the cpu accelerator"
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return f"deepspeed failed to import: {type(exc).__name__}: {exc}"
    if get_accelerator().device_name() != "cpu":
        return f"deepspeed accelerator is {get_accelerator().device_name()!r}, not cpu"
    major_minor = tuple(int(x) for x in deepspeed.__version__.split(".")[:2])
    if major_minor != (0, 19):
        return f"deepspeed {deepspeed.__version__}: conventions were read from 0.19.x"
    return None


@functools.lru_cache(maxsize=None)
def op_unavailable(op: str) -> str | None:
    """None if the op can be built here (compatible compiler/CPU), else why."""
    reason = deepspeed_unavailable()
    if reason:
        return reason
    try:
        from deepspeed.ops import op_builder
        builder = getattr(op_builder, _BUILDERS[op])()
        if not builder.is_compatible(verbose=False):
            return f"deepspeed op {op} is not compatible with this system"
    except Exception as exc:  # noqa: BLE001
        return f"deepspeed op {op}: {type(exc).__name__}: {exc}"
    return None


def load_op(op: str, announce: bool = False):
    """Build (first time, into TORCH_EXTENSIONS_DIR) or load a CPU op. A build says on stderr what it
    builds, where and why (announce: a cached load says so too). Once loaded, an op is kept for the
    process, as DeepSpeed's own builders keep it.

    A build cached for this setup (build_reason None) is imported straight from its .so: torch's JIT
    load would run ninja first, which recompiles every object whose headers are newer than it, and a
    fresh venv at the same path (CI's) has every torch header newer: 30 s per op, 140 s for the five,
    spent recompiling what was already there."""
    if op in _LOADED and not announce:
        return _LOADED[op]
    where = configure_env()
    from deepspeed.ops import op_builder
    key = cache_key()
    from fused import build_lock
    builder = getattr(op_builder, _BUILDERS[op])()
    # DeepSpeed JIT-builds into TORCH_EXTENSIONS_DIR/<name>. Whether to build is decided under the lock:
    # a process that waited for another's build (CI builds in the background) then loads it, not again.
    with build_lock(os.path.join(where, builder.name)):
        reason = build_reason(op, where, key)
        if reason:
            print(f"DeepSpeed op {op}: building into {where} because {reason} (~1-2 min on 2 cores)",
                  file=sys.stderr, flush=True)
        elif announce:
            print(f"DeepSpeed op {op}: cached in {where} for this setup (key {cache_key_name(key)})",
                  file=sys.stderr, flush=True)
        module = None if reason else _import_built(builder, where)
        if module is None:
            module = builder.load(verbose=False)
            _stamp(op, where, key)
    _LOADED[op] = module
    return module


def preload_ops() -> dict:
    """load_op for every op usable here, so that DeepSpeed code run next in this process (a repro
    script, say) finds each one loaded instead of JIT-loading it itself; {op: None or why not}."""
    out = {}
    for op in OPS:
        out[op] = op_unavailable(op)
        if out[op] is None:
            load_op(op)
    return out


def _import_built(builder, where: str):
    """The op's module from its cached .so, registered where DeepSpeed's own builders look first (so
    DeepSpeed's later loads of it, inside its optimizers, find it); None if the import fails."""
    from fused import import_library
    path = os.path.join(where, builder.name, f"{builder.name}.so")
    try:
        module = import_library(builder.name, path)
    except (ImportError, OSError) as exc:
        print(f"DeepSpeed op {builder.name}: the cached {path} does not import ({exc}); rebuilding",
              file=sys.stderr, flush=True)
        return None
    type(builder)._loaded_ops[builder.name] = module
    return module


_LOADED: dict = {}


def build_ops(extensions_dir: str | None = None, ops=OPS) -> dict:
    """Build the ops into the cache once; returns {op: seconds or error string}."""
    where = configure_env(extensions_dir)
    out = {"TORCH_EXTENSIONS_DIR": where}
    for op in ops:
        t0 = time.perf_counter()
        try:
            load_op(op, announce=True)
            out[op] = round(time.perf_counter() - t0, 1)
        except Exception as exc:  # noqa: BLE001 - report, keep building the others
            out[op] = f"failed: {type(exc).__name__}: {exc}"
    return out


# --- targets -------------------------------------------------------------------

# What DeepSpeed's CPU optimizers take; torch-style keys at their neutral value are
# dropped, others refused (extra.translate).
_ACCEPTED = {"adam": {"lr", "betas", "eps", "weight_decay", "bias_correction"},
             "adagrad": {"lr", "eps", "weight_decay"}}


def _memoize_cpu_info() -> None:
    """DeepSpeedCPUAdam.__init__ calls cpuinfo.get_cpu_info(), which runs a
    subprocess (~1.3 s here) to print a warning about the CPU vendor. The
    answer cannot change within a process, so ask once; the optimizer's math
    is untouched."""
    import functools

    import cpuinfo
    if not hasattr(cpuinfo.get_cpu_info, "cache_info"):
        cpuinfo.get_cpu_info = functools.lru_cache(maxsize=1)(cpuinfo.get_cpu_info)
    for mod in ("deepspeed.ops.adam.cpu_adam", "deepspeed.ops.adagrad.cpu_adagrad"):
        module = importlib.import_module(mod)
        if hasattr(module, "get_cpu_info"):
            module.get_cpu_info = cpuinfo.get_cpu_info


def _make(cls_path: str, kind: str, op: str, **flags):
    def make(groups, defaults):
        mod, _, name = cls_path.rpartition(".")
        # Load the op under fused.build_lock before the constructor asks DeepSpeed for it (then
        # cached in-process): torch's own `lock` file, left behind by a process killed mid-load,
        # would make every later load wait forever.
        load_op(op)
        _memoize_cpu_info()
        cls = getattr(importlib.import_module(mod), name)
        lib = f"DeepSpeed CPU {kind}"
        gs = [translate(g, _ACCEPTED[kind], lib, f"param group {i}") for i, g in enumerate(groups)]
        return cls(gs, **translate(dict(defaults), _ACCEPTED[kind], lib, "defaults"), **flags)
    return make


def _requires(op):
    def requires(device: str) -> str | None:
        if device != "cpu":
            return f"DeepSpeed CPU op {op} runs on cpu only"
        return op_unavailable(op)
    return requires


def deepspeed_targets() -> list[Target]:
    """DeepSpeedCPUAdam (adamw_mode True/False), DeepSpeedCPUAdagrad and FusedAdam
    as built for the CPU accelerator. Cheap: imports nothing from deepspeed."""
    ver = f"deepspeed {_dist_version('deepspeed')} (conventions read from 0.19.8)"
    adam_notes = ("; counter state[p]['step'] int per param (cpu_adam.py:145-167); eps outside "
                  "sqrt(v)*(1/sqrt(bc2))+eps (cpu_adam.h:104,197-198); hparams float32 via pybind "
                  "(cpu_adam.h:256-267); bias corrections float32 from a running product of float32 betas "
                  "(cpu_adam.h:71-106), not an exact power; math fp32, bf16/fp16 params rounded once "
                  "on store (RNE, simd.h); moments fp32; float64 params unsupported; amsgrad raises "
                  "(cpu_adam.py:106-108); non-contiguous params are silently not updated (ds_adam_step "
                  "uses .contiguous() copies)")
    common = dict(devices=("cpu",), dtypes=("float32", "bfloat16", "float16"), compute="float32",
                  masters=False, options=frozenset(), state_dtype="float32",
                  no_dtensor="DeepSpeed's CPU ops read each param's raw storage (a DTensor param crashed the rank "
                             "with SIGSEGV)")
    return [
        Target(name="deepspeed.cpu_adam.adamw", optimizer="adamw", convention=DS_CPU_ADAMW,
               make=_make("deepspeed.ops.adam.DeepSpeedCPUAdam", "adam", "cpu_adam", adamw_mode=True),
               requires=_requires("cpu_adam"), **common,
               notes=f"{ver} DeepSpeedCPUAdam(adamw_mode=True): decoupled p += -lr*wd*p "
                     f"(cpu_adam.h:201-205)" + adam_notes),
        Target(name="deepspeed.cpu_adam.adam", optimizer="adam", convention=DS_CPU_ADAM,
               make=_make("deepspeed.ops.adam.DeepSpeedCPUAdam", "adam", "cpu_adam", adamw_mode=False),
               requires=_requires("cpu_adam"), **common,
               notes=f"{ver} DeepSpeedCPUAdam(adamw_mode=False): L2 g = p*wd + g (cpu_adam.h:188-190)"
                     + adam_notes),
        Target(name="deepspeed.cpu_adagrad", optimizer="adagrad", convention=DS_CPU_ADAGRAD,
               make=_make("deepspeed.ops.adagrad.DeepSpeedCPUAdagrad", "adagrad", "cpu_adagrad"),
               requires=_requires("cpu_adagrad"), state_names=(("exp_avg_sq", "sum"),), **common,
               notes=f"{ver} DeepSpeedCPUAdagrad: g' = g + wd*p used in the accumulator AND the "
                     "numerator (cpu_adagrad.h:103-110, cpu_adagrad.cpp:41-47) = torch L2; eps outside; "
                     "counter state[p]['step'] int; accumulator stored as 'exp_avg_sq' (fp32); no lr_decay, "
                     "initial_accumulator_value or maximize; the scalar tail overwrites p.grad with the "
                     "update term (cpu_adagrad.cpp:49-50)"),
        Target(name="deepspeed.fused_adam.cpu.adamw", optimizer="adamw", convention=DS_CPU_ADAMW,
               make=_make("deepspeed.ops.adam.FusedAdam", "adam", "fused_adam", adam_w_mode=True),
               requires=_requires("fused_adam"), own_process=FUSED_ADAM_CPU_STATIC, **common,
               notes=f"{ver} FusedAdam on the CPU accelerator: csrc/cpu/adam/fused_adam.cpp calls "
                     "ds_adam_step, so the math is DeepSpeedCPUAdam's; declared per-param counter, but "
                     "step() advances only the last param's state['step'] (fused_adam.py:177-193)"),
        Target(name="deepspeed.fused_adam.cpu.adam", optimizer="adam", convention=DS_CPU_ADAM,
               make=_make("deepspeed.ops.adam.FusedAdam", "adam", "fused_adam", adam_w_mode=False),
               requires=_requires("fused_adam"), own_process=FUSED_ADAM_CPU_STATIC, **common,
               notes=f"{ver} FusedAdam(adam_w_mode=False) on the CPU accelerator; see the adamw target"),
    ] + engine_targets()


# csrc/cpu/adam/fused_adam.cpp creates one Adam_Optimizer per mode per process (a function-level
# static, optimizer_id = mode) and every FusedAdam instance and group steps through it: its running
# beta products (IncrementStep continues them when step == last step + 1, else takes std::pow) carry
# over from whatever ran before in the process, so a reloaded optimizer's bias correction depends on
# the jobs a worker ran earlier (seen: a DDP reshard row failing by 1 ULP in one sweep, passing alone).
FUSED_ADAM_CPU_STATIC = ("DeepSpeed's CPU FusedAdam steps every instance through one process-wide "
                         "Adam_Optimizer per mode (csrc/cpu/adam/fused_adam.cpp), whose running beta "
                         "products carry one job's history into the next")


# --- engine wrappers -----------------------------------------------------------

# client optimizer -> (the oracle optimizer it implements, what it is)
ENGINE_CLIENTS = {"adamw": ("adamw", "torch.optim.AdamW"), "adagrad": ("adagrad", "torch.optim.Adagrad"),
                  "cpu_adamw": ("adamw", "deepspeed.ops.adam.DeepSpeedCPUAdam(adamw_mode=True)")}
ENGINE_SHORT = {"bfloat16": "bf16", "float16": "fp16"}


def engine_targets() -> list[Target]:
    """deepspeed.initialize over gloo with a bf16 model, ZeRO 0 and 1, each client
    optimizer, world sizes 1 and 2; fp16 with torch AdamW at world size 1. Run
    by the engine scenarios only (oracle.compare.scenarios.deepspeed_engine), and only
    when named (--target 'deepspeed.engine.*'): each costs real processes."""
    out = []
    for dtype, clients, worlds in (("bfloat16", tuple(ENGINE_CLIENTS), (1, 2)), ("float16", ("adamw",), (1,))):
        for zero in (0, 1):
            for client in clients:
                optimizer, doc = ENGINE_CLIENTS[client]
                op = {"cpu_adamw": "cpu_adam"}.get(client)
                out.append(Target(
                    name=f"deepspeed.engine.zero{zero}.{ENGINE_SHORT[dtype]}.{client}", optimizer=optimizer,
                    make=None, convention=None, devices=("cpu",), dtypes=(dtype,), in_default=False,
                    engine=EngineSpec(zero, client, dtype, worlds),
                    requires=_requires(op) if op else (lambda device: deepspeed_unavailable()),
                    notes=f"DeepSpeed engine, ZeRO {zero}, {dtype} model, client {doc}"))
    return out

ENGINE_OPTIMIZERS = ("adamw", "adam", "adagrad", "cpu_adam", "cpu_adamw", "cpu_adagrad")
ENGINE_DTYPES = ("bfloat16", "float16", "float32")


def init_single_process(port: int | None = None) -> None:
    """torch.distributed with gloo, world size 1, in this process (idempotent)."""
    configure_env()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port or free_port()))  # never pid-derived: it can collide
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("LOCAL_SIZE", "1")):
        os.environ.setdefault(k, v)
    init_distributed()


def init_distributed(**kwargs) -> None:
    """deepspeed.init_distributed over gloo (idempotent; kwargs passed on), leaving no shared memory behind.

    With LOCAL_SIZE equal to the world size, DeepSpeed's CPU shm comm op creates one 67 MB
    /dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank> per rank and never unlinks it
    (ops/csrc/cpu/comm/shm.cpp, 0.19.8): /dev/shm is memory, and a day of test runs left 296 of them,
    20 GB of a 24 GB machine, which then crawled. Every rank maps every other rank's buffer before
    init_distributed returns, so after a barrier each rank unlinks its own name; the memory is freed
    when the last process mapping it exits, killed or not."""
    import torch.distributed as tdist
    if tdist.is_initialized():
        return
    if op_unavailable("shm_comm") is None:
        load_op("shm_comm")  # under fused.build_lock; DeepSpeed then finds it loaded
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo", **kwargs)
    if tdist.get_world_size() > 1:
        tdist.barrier()
    try:
        os.unlink(shm_buffer_path(tdist.get_rank()))
    except FileNotFoundError:  # no shm allreduce here (LOCAL_SIZE unset or different, or not Linux)
        pass


def _client_optimizer(name: str, groups: list, defaults: dict):
    import torch
    if name == "adamw":
        return torch.optim.AdamW(groups, **defaults)
    if name == "adam":
        return torch.optim.Adam(groups, **defaults)
    if name == "adagrad":
        return torch.optim.Adagrad(groups, **defaults)
    if name in ("cpu_adam", "cpu_adamw"):
        load_op("cpu_adam")  # under fused.build_lock, see _make
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        return DeepSpeedCPUAdam(groups, adamw_mode=(name == "cpu_adamw"), **defaults)
    if name == "cpu_adagrad":
        load_op("cpu_adagrad")
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
        return DeepSpeedCPUAdagrad(groups, **defaults)
    raise ValueError(f"unknown engine optimizer {name!r}; expected one of {ENGINE_OPTIMIZERS}")


def _engine_config(dtype: str, zero_stage: int, grad_accum_dtype: str | None) -> dict:
    cfg = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "gradient_clipping": 0.0, "zero_optimization": {"stage": zero_stage},
           "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}
    if dtype == "bfloat16":
        cfg["bf16"] = {"enabled": True}
    elif dtype == "float16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 1.0}  # static scale 1: grads reach the optimizer exactly
    elif dtype != "float32":
        raise ValueError(f"dtype must be one of {ENGINE_DTYPES}, got {dtype!r}")
    if grad_accum_dtype:
        cfg["data_types"] = {"grad_accum_dtype": {"float32": "fp32", "bfloat16": "bf16",
                                                  "float16": "fp16"}[grad_accum_dtype]}
    return cfg


DEFAULT_PARAMS = ([[0.5] * 40], [[0.25] * 8])  # exact in bf16 and fp16; 40 = 32 SIMD + 8 tail elements
DEFAULT_HPARAMS = ({"lr": 0.01, "weight_decay": 0.1}, {"lr": 0.02, "weight_decay": 0.0})


class EngineRun:
    """A DeepSpeed engine over a toy model whose params are given as groups of
    float64 arrays; `step(grads)` makes loss = sum(p * g) so that each param's
    gradient is exactly g (g rounded to the model dtype: use representable values).
    """

    def __init__(self, optimizer: str, zero_stage: int, dtype: str, params=None, hparams=None,
                 grad_accum_dtype: str | None = None, world_size: int = 1):
        """world_size > 1: the caller has joined the process group (one rank per process)."""
        import numpy as np
        import torch
        if world_size == 1:
            init_single_process()
        if optimizer.startswith("cpu_"):
            _memoize_cpu_info()
        import deepspeed
        params = [[np.asarray(p, dtype=np.float64) for p in g] for g in (params or
                  [[np.array(v) for v in grp] for grp in DEFAULT_PARAMS])]
        self.initial = params
        hparams = [dict(h) for h in (hparams or DEFAULT_HPARAMS)]
        self.optimizer_name, self.zero_stage, self.dtype = optimizer, zero_stage, dtype
        self.hparams = hparams
        self.torch_dtype = getattr(torch, dtype)
        flat = [torch.nn.Parameter(torch.tensor(p, dtype=torch.float32)) for g in params for p in g]
        self.module = torch.nn.Module()
        self.module.ps = torch.nn.ParameterList(flat)
        self.module.forward = lambda consts: sum((p * c).sum() for p, c in zip(self.module.ps, consts))
        it = iter(flat)
        self.params = [[next(it) for _ in g] for g in params]  # model params, [g][i]
        groups = [{"params": ps, **hp} for ps, hp in zip(self.params, hparams)]
        self.client = _client_optimizer(optimizer, groups, {})
        cfg = _engine_config(dtype, zero_stage, grad_accum_dtype)
        cfg["train_batch_size"] = world_size  # one micro-batch per rank
        self.engine, self.wrapper, _, _ = deepspeed.initialize(model=self.module, optimizer=self.client,
                                                               config=cfg)
        self.inner = getattr(self.wrapper, "optimizer", self.wrapper)

    # -- reading -------------------------------------------------------------
    def _master_and_state(self, g: int, i: int):
        """(fp32 master tensor view or None, optimizer state dict, flat counter owner)."""
        import torch
        w, p = self.wrapper, self.params[g][i]
        if hasattr(w, "fp32_groups") and hasattr(w, "fp16_groups"):  # FP16_(Unfused)Optimizer, stage 0
            groups32 = w.fp32_groups
            if isinstance(groups32[g], torch.Tensor):  # fused FP16_Optimizer: one flat master per group
                off = sum(q.numel() for q in w.fp16_groups[g][:i])
                master = groups32[g].view(-1)[off:off + p.numel()].view(p.shape)
                st = self.inner.state.get(groups32[g], {})
                return master, {k: (v.view(-1)[off:off + p.numel()].view(p.shape)
                                    if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in st.items()}
            master = groups32[g][i]
            return master, dict(self.inner.state.get(master, {}))
        if hasattr(w, "single_partition_of_fp32_groups"):  # ZeRO 1/2, world size 1: partition = whole group
            flat32 = w.single_partition_of_fp32_groups[g]
            flat16 = w.bit16_groups_flat[g]
            off = (p.data_ptr() - flat16.data_ptr()) // p.element_size()
            sl = lambda t: t.view(-1)[off:off + p.numel()].view(p.shape)  # noqa: E731
            st = self.inner.state.get(flat32, {})
            return sl(flat32), {k: (sl(v) if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in st.items()}
        from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state
        master = safe_get_full_fp32_param(p)
        st = {}
        for key in ("exp_avg", "exp_avg_sq", "sum"):
            try:
                v = safe_get_full_optimizer_state(p, key)
            except Exception:  # noqa: BLE001 - state not linked yet
                v = None
            if v is not None:
                st[key] = v
        return master, st

    def read(self) -> dict:
        from ..measuring.readback import counter_value, to_numpy
        masters, counters, keys, states = [], [], [], []
        for g, ps in enumerate(self.params):
            mrow, crow, krow, srow = [], [], [], []
            for i, _ in enumerate(ps):
                m, st = self._master_and_state(g, i)
                mrow.append(None if m is None else to_numpy(m))
                crow.append(counter_value(st.get("step")))
                krow.append(sorted(st))
                srow.append({k: to_numpy(v) for k, v in st.items() if k != "step" and hasattr(v, "dim")})
            masters.append(mrow); counters.append(crow); keys.append(krow); states.append(srow)
        inner_groups = [{k: v for k, v in grp.items() if k != "params"} for grp in self.inner.param_groups]
        return {"params": [[to_numpy(p) for p in ps] for ps in self.params], "masters": masters,
                "counters": counters, "state_keys": keys, "state": states,
                "group_steps": [counter_value(grp.get("step")) for grp in self.inner.param_groups],
                "inner_groups": inner_groups}

    # -- stepping ------------------------------------------------------------
    def step(self, grads) -> list:
        """One engine step whose param grads are `grads` ([g][i] arrays, rounded to
        the model dtype); returns the grads actually used, as float64."""
        import numpy as np
        import torch
        consts, used = [], []
        for g, ps in enumerate(self.params):
            row = []
            for i, p in enumerate(ps):
                c = torch.tensor(np.asarray(grads[g][i], dtype=np.float64), dtype=self.torch_dtype).view(p.shape)
                consts.append(c)
                row.append(c.to(torch.float64).numpy().copy())
            used.append(row)
        loss = self.engine(consts)
        self.engine.backward(loss)
        self.engine.step()
        return used

    def close(self) -> None:
        destroy = getattr(self.engine, "destroy", None)
        if callable(destroy):
            try:
                destroy()
            except Exception:  # noqa: BLE001
                pass


def engine_construction_probe(optimizer_name: str, zero_stage: int, dtype: str, params=None, hparams=None,
                              grad_accum_dtype: str | None = None) -> dict:
    """Build an engine around a client optimizer and report what construction did.

    Returns {params_before, params_after_init, masters, counters, state_keys,
    hparams_before, inner_groups, wrapper, inner, inner_is_client, changes}:
    params_before are the initial values rounded to the model dtype (what the
    masters must equal), masters the fp32 masters after deepspeed.initialize
    (before any step), counters the per-param optimizer counters (None = no
    state), and `changes` a list of human-readable violations of "construction
    changes nothing" (empty when construction is clean).
    """
    import numpy as np
    from oracle.storage import round_to
    run = EngineRun(optimizer_name, zero_stage, dtype, params, hparams, grad_accum_dtype)
    try:
        snap = run.read()
    finally:
        run.close()
    src = params or [[np.array(v) for v in grp] for grp in DEFAULT_PARAMS]
    before = [[round_to(np.asarray(p, dtype=np.float64), dtype) for p in g] for g in src]
    hp_before = [dict(h) for h in (hparams or DEFAULT_HPARAMS)]
    changes = []
    for g, row in enumerate(before):
        for i, b in enumerate(row):
            m = snap["masters"][g][i]
            if m is not None and not np.array_equal(m, b):
                changes.append(f"group {g} param {i}: master changed by construction "
                               f"(max |delta| {np.max(np.abs(m - b)):.3g})")
            if not np.array_equal(snap["params"][g][i], b):
                changes.append(f"group {g} param {i}: model param changed by construction")
            c = snap["counters"][g][i]
            if c not in (None, 0):
                changes.append(f"group {g} param {i}: counter is {c} before any step")
            for k, v in snap["state"][g][i].items():
                if np.any(v != 0) and k != "sum":
                    changes.append(f"group {g} param {i}: state {k!r} nonzero before any step")
                if k == "sum" and np.any(v != hp_before[min(g, len(hp_before) - 1)].get(
                        "initial_accumulator_value", 0.0)):
                    changes.append(f"group {g} param {i}: accumulator 'sum' changed by construction")
    if len(snap["inner_groups"]) != len(hp_before):
        changes.append(f"inner optimizer has {len(snap['inner_groups'])} param groups, client had {len(hp_before)}")
    for g, hp in enumerate(hp_before):
        got = snap["inner_groups"][g] if g < len(snap["inner_groups"]) else {}
        for k, v in hp.items():
            if got.get(k) != v:
                changes.append(f"group {g}: hyperparameter {k}={got.get(k)!r}, client set {v!r}")
    return {"params_before": before, "params_after_init": snap["params"], "masters": snap["masters"],
            "counters": snap["counters"], "state_keys": snap["state_keys"], "state": snap["state"],
            "hparams_before": hp_before, "inner_groups": snap["inner_groups"],
            "wrapper": type(run.wrapper).__name__, "inner": type(run.inner).__name__,
            "inner_is_client": run.inner is run.client, "changes": changes}


__all__ = ["DS_CPU_ADAGRAD", "DS_CPU_ADAM", "DS_CPU_ADAMW", "EngineRun", "build_ops", "configure_env",
           "deepspeed_targets", "deepspeed_unavailable", "default_extensions_dir", "engine_construction_probe",
           "init_distributed", "init_single_process", "load_op", "op_unavailable", "shm_buffer_path"]


if __name__ == "__main__":  # python -m oracle.compare.targets.deepspeed --build [DIR]
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", nargs="?", const="", metavar="DIR",
                    help="prebuild the CPU ops into DIR (default: default_extensions_dir())")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--print-dir", action="store_true", help="print the default cache dir and exit")
    ap.add_argument("--print-key", action="store_true", help="print what the cache is keyed by and exit")
    a = ap.parse_args()
    if a.print_dir:
        print(os.environ.get("TORCH_EXTENSIONS_DIR") or default_extensions_dir())
        sys.exit(0)
    if a.print_key:
        print(json.dumps({"name": cache_key_name(), **cache_key()}, indent=1))
        sys.exit(0)
    reason = deepspeed_unavailable()
    if reason:
        print(reason, file=sys.stderr)
        sys.exit(2)
    res = build_ops(a.build or None, tuple(o for o in a.ops.split(",") if o))
    print(json.dumps(res, indent=1))
    sys.exit(1 if any(isinstance(v, str) and v.startswith("failed") for k, v in res.items()
                      if k != "TORCH_EXTENSIONS_DIR") else 0)
