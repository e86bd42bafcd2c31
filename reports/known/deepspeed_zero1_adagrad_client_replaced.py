"""Known finding deepspeed-zero1-adagrad-client-replaced (reports/known.toml).

ZeRO stage 1/2 (DeepSpeedZeroOptimizer) replaces a torch.optim.Adagrad client with
torch.optim.Adagrad(self.single_partition_of_fp32_groups, **self.optimizer.defaults)
(runtime/zero/stage_1_and_2.py:944-947): the replacement has ONE param group built from the
constructor defaults, so each client group's own lr / weight_decay is dropped, the client object is no
longer the one stepped, and with two client groups the first engine.backward raises IndexError in
_get_flat_partition_unpadded (self.optimizer.param_groups[param_group_idx], stage_1_and_2.py:2848).

World size 1 over gloo in this process; bf16 model of two params in two groups (lr 0.01 / wd 0.1 and
lr 0.02 / wd 0); torch Adagrad client constructed with lr 0.01 and no weight decay as its defaults.
Exit 0 (reproduces): the inner optimizer is not the client and has lost a group's hyperparameters, and
the first backward raises IndexError; 1 otherwise. DS_ACCELERATOR defaults to cpu.
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

deepspeed.init_distributed(dist_backend="gloo")
module = torch.nn.Module()
module.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.full((40,), 0.5)),
                                    torch.nn.Parameter(torch.full((8,), 0.25))])
module.forward = lambda consts: sum((p * c).sum() for p, c in zip(module.ps, consts))
client = torch.optim.Adagrad([{"params": [module.ps[0]], "lr": 0.01, "weight_decay": 0.1},
                              {"params": [module.ps[1]], "lr": 0.02, "weight_decay": 0.0}], lr=0.01)
cfg = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
       "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}, "zero_allow_untested_optimizer": True,
       "steps_per_print": 10 ** 9}
engine, wrapper, _, _ = deepspeed.initialize(model=module, optimizer=client, config=cfg)
inner = wrapper.optimizer
groups = [{"lr": g["lr"], "weight_decay": g["weight_decay"]} for g in inner.param_groups]
replaced = inner is not client and groups != [{"lr": 0.01, "weight_decay": 0.1}, {"lr": 0.02, "weight_decay": 0.0}]
print(f"ZeRO 1, bf16, torch Adagrad client with groups [lr 0.01 wd 0.1, lr 0.02 wd 0]: inner optimizer "
      f"({type(wrapper).__name__}.optimizer) is {'the client' if inner is client else 'a new ' + type(inner).__name__}"
      f" with {len(groups)} group(s) {groups}")
crashed = False
try:
    loss = engine([torch.full((40,), 0.125, dtype=torch.bfloat16), torch.full((8,), -0.125, dtype=torch.bfloat16)])
    engine.backward(loss)
    engine.step()
    print("first training step ran")
except IndexError as exc:
    crashed = True
    print(f"first training step raised IndexError: {exc}")
reproduced = replaced and crashed
print(f"deepspeed {deepspeed.__version__}: " + ("the defect reproduces (client replaced, groups lost, cannot train)"
                                                if reproduced else "the defect does NOT reproduce"))
sys.exit(0 if reproduced else 1)
