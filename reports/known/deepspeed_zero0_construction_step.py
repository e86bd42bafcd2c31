"""Known finding deepspeed-zero0-construction-step (reports/known.toml); seed 002, DeepSpeed #8910.

With a bf16 (or fp16) model and ZeRO stage 0, deepspeed.initialize wraps the client optimizer in
FP16_UnfusedOptimizer / FP16_Optimizer, whose initialize_optimizer_states() fills every fp32 master's
grad with zeros and calls optimizer.step() (runtime/fp16/unfused_optimizer.py,
runtime/fp16/fused_optimizer.py). Before any training step the optimizer has taken one: counters are
1, moments exist (Adagrad's sum is (wd*p)^2) and decay has been applied to the fp32 masters
(AdamW: 0.5 -> 0.4995), so every later step's counter is one too high.

World size 1 over gloo in this process; a bf16 model of two params (0.5 and 0.25, two groups: lr 0.01 /
wd 0.1 and lr 0.02 / wd 0); clients torch AdamW, torch Adagrad and DeepSpeedCPUAdam(adamw_mode=True);
then an fp16 model with torch AdamW (only where the CPU accelerator accepts fp16).
Exit 0 (reproduces): for every client, right after deepspeed.initialize some counter is 1 or a master
differs from its initial value; 1 otherwise. DS_ACCELERATOR defaults to cpu; DeepSpeedCPUAdam needs the
cpu_adam op ($TORCH_EXTENSIONS_DIR).
"""
import os
import socket
import sys


def free_port() -> int:
    """A port nobody holds now (a port derived from the pid can collide with a live store)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# a world of one in this process: inherited rendezvous settings (a live store's port) must not leak in
os.environ.setdefault("DS_ACCELERATOR", "cpu")
for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(free_port())), ("RANK", "0"),
             ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
    os.environ[k] = v
# LOCAL_SIZE unset: with it, DeepSpeed's CPU shm allreduce (unused here) leaves a 67 MB buffer in /dev/shm
os.environ.pop("LOCAL_SIZE", None)

import torch  # noqa: E402
import deepspeed  # noqa: E402
from deepspeed.accelerator import get_accelerator  # noqa: E402
from deepspeed.ops.adam import DeepSpeedCPUAdam  # noqa: E402

deepspeed.init_distributed(dist_backend="gloo")
CLIENTS = {"torch.optim.AdamW": torch.optim.AdamW, "torch.optim.Adagrad": torch.optim.Adagrad,
           "DeepSpeedCPUAdam": lambda groups: DeepSpeedCPUAdam(groups, adamw_mode=True)}


def construct(client, dtype):
    module = torch.nn.Module()
    module.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.full((40,), 0.5)),
                                        torch.nn.Parameter(torch.full((8,), 0.25))])
    groups = [{"params": [module.ps[0]], "lr": 0.01, "weight_decay": 0.1},
              {"params": [module.ps[1]], "lr": 0.02, "weight_decay": 0.0}]
    cfg = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": 0}, "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9}
    cfg["bf16" if dtype == "bf16" else "fp16"] = {"enabled": True} if dtype == "bf16" else {"enabled": True,
                                                                                         "loss_scale": 1.0}
    opt = CLIENTS[client](groups)
    engine, wrapper, _, _ = deepspeed.initialize(model=module, optimizer=opt, config=cfg)
    inner = wrapper.optimizer
    masters = [m for g in wrapper.fp32_groups for m in (g if isinstance(g, list) else [g])]
    counters = [inner.state.get(m, {}).get("step") for m in masters]
    counters = [None if c is None else int(c) for c in counters]
    moved = [float((m.detach() - init).abs().max()) for m, init in zip(masters, (0.5, 0.25))]
    keys = sorted({k for m in masters for k in inner.state.get(m, {})})
    return type(wrapper).__name__, counters, moved, keys


runs = [(c, "bf16") for c in CLIENTS]
if get_accelerator().is_fp16_supported():
    runs.append(("torch.optim.AdamW", "fp16"))
else:
    print("fp16: skipped, the CPU accelerator refuses fp16 here")
reproduced = True
for client, dtype in runs:
    wrapper, counters, moved, keys = construct(client, dtype)
    stepped = any(c == 1 for c in counters) or any(d > 0 for d in moved)
    reproduced &= stepped
    print(f"ZeRO 0, {dtype} model, client {client} ({wrapper}), before any training step: counters {counters}, "
          f"state keys {keys}, max |master - initial| per param {['%.3g' % d for d in moved]}"
          f" -> {'a step was taken' if stepped else 'clean'}")
print(f"deepspeed {deepspeed.__version__}: " + ("the defect reproduces (construction runs a zero-grad step)"
                                                if reproduced else "the defect does NOT reproduce everywhere"))
sys.exit(0 if reproduced else 1)
