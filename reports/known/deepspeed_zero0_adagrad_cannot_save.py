"""Known finding deepspeed-zero0-adagrad-cannot-save (reports/known.toml).

torch.optim.Adagrad creates its state ("step", "sum") eagerly in __init__, keyed by the params it is
given: with a bf16 model, the model params. ZeRO stage 0 (FP16_UnfusedOptimizer) swaps fp32 masters
into the client's param_groups but leaves that state behind, keyed by params no group holds any more.
engine.save_checkpoint calls the client's Optimizer.state_dict(), which maps every state key to a
param index and raises KeyError on the stale bf16 keys: no checkpoint can be written at all
(runtime/fp16/unfused_optimizer.py __init__ / initialize_optimizer_states; torch/optim/optimizer.py
state_dict).

World size 1 over gloo in this process; bf16 model of two params, two groups, torch Adagrad client,
one training step, then engine.save_checkpoint into a temporary folder.
Exit 0 (reproduces): save_checkpoint raises KeyError; 1 otherwise. DS_ACCELERATOR defaults to cpu.
"""
import os
import socket
import sys
import tempfile


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

deepspeed.init_distributed(dist_backend="gloo")
module = torch.nn.Module()
module.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.full((40,), 0.5)),
                                    torch.nn.Parameter(torch.full((8,), 0.25))])
module.forward = lambda consts: sum((p * c).sum() for p, c in zip(module.ps, consts))
client = torch.optim.Adagrad([{"params": [module.ps[0]], "lr": 0.01, "weight_decay": 0.1},
                              {"params": [module.ps[1]], "lr": 0.02, "weight_decay": 0.0}])
cfg = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
       "zero_optimization": {"stage": 0}, "bf16": {"enabled": True}, "zero_allow_untested_optimizer": True,
       "steps_per_print": 10 ** 9}
engine, wrapper, _, _ = deepspeed.initialize(model=module, optimizer=client, config=cfg)
grouped = {id(p) for g in wrapper.optimizer.param_groups for p in g["params"]}
stale = [tuple(p.shape) for p in wrapper.optimizer.state if id(p) not in grouped]
print(f"ZeRO 0, bf16, torch Adagrad client ({type(wrapper).__name__}): {len(stale)} state entries keyed by "
      f"params that no param group holds (shapes {stale}, dtypes "
      f"{sorted({str(p.dtype) for p in wrapper.optimizer.state if id(p) not in grouped})})")
loss = engine([torch.full((40,), 0.125, dtype=torch.bfloat16), torch.full((8,), -0.125, dtype=torch.bfloat16)])
engine.backward(loss)
engine.step()
reproduced = False
with tempfile.TemporaryDirectory() as tmp:
    try:
        engine.save_checkpoint(tmp, tag="step1")
        print("engine.save_checkpoint succeeded")
    except KeyError as exc:
        reproduced = True
        print(f"engine.save_checkpoint raised KeyError: {exc!r}")
print(f"deepspeed {deepspeed.__version__}: " + ("the defect reproduces (no checkpoint can be written)" if reproduced
                                                else "the defect does NOT reproduce"))
sys.exit(0 if reproduced else 1)
