"""Known finding torch-fsdp2-inplace-placement (reports/known.toml).

torch.optim.Adafactor, Rprop and Muon cannot step params sharded by FSDP2 (fully_shard: the params
are DTensors with Shard(0) placement). Each step applies an in-place op whose DTensor sharding rule
would need another placement, which DTensor refuses ("in-place operations that require placement
changes are not supported"):
- Adafactor (torch/optim/_adafactor.py _single_tensor_adafactor): the column mean,
  torch.norm(grad, dim=-2, keepdim=True).square_(), squares a partial (_NormPartial) norm in place;
- Rprop (torch/optim/rprop.py _single_tensor_rprop): sign[sign.gt(0)] = etaplus, an index_put_ on a
  sharded tensor;
- Muon (torch/optim/_muon.py _single_tensor_muon): param.add_(update), where the Newton-Schulz
  update comes back replicated in bfloat16 and the param is sharded; it shows where a matrix has
  fewer rows than ranks, so that a rank's shard is empty (a (3, 2) matrix at world 4; at world 2
  the same matrix steps).
Rprop's foreach path fails earlier: torch._foreach_copy_ has no DTensor sharding strategy
(known.toml torch-fsdp2-rprop-foreach-copy-no-strategy, this script too).
Every other torch.optim optimizer the suite judges steps under the same wrapper. An FSDP2 user of
these three optimizers gets the RuntimeError at the first step.

Four processes (gloo, CPU), each param a (3, 2) matrix in a module of its own, fully_shard per module;
one step of each optimizer, and of torch.optim.AdamW as the control. Exit 0 (reproduces): the three
raise that RuntimeError, Rprop's foreach path the NotImplementedError, and AdamW steps; 1 otherwise.
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MESSAGE = "in-place operations that require placement changes are not supported"
NO_STRATEGY = "aten._foreach_copy_.default does not have a sharding strategy registered"
MAKERS = {
    "Adafactor": lambda ps: torch.optim.Adafactor(ps, lr=0.01, foreach=False),
    "Rprop": lambda ps: torch.optim.Rprop(ps, lr=0.01, foreach=False),
    "Muon": lambda ps: torch.optim.Muon(ps, lr=0.01),
    "Rprop foreach": lambda ps: torch.optim.Rprop(ps, lr=0.01, foreach=True),
    "AdamW (control)": lambda ps: torch.optim.AdamW(ps, lr=0.01),
}
EXPECTED = {"Adafactor": "placement", "Rprop": "placement", "Muon": "placement",
            "Rprop foreach": "no sharding strategy", "AdamW (control)": "stepped"}


class Leaf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 6).reshape(3, 2))

    def forward(self, x):
        return (self.w * x).sum()


def outcome(make) -> str:
    from torch.distributed.fsdp import fully_shard
    model = torch.nn.Sequential(Leaf(), Leaf())
    for leaf in model:
        fully_shard(leaf)
    fully_shard(model)
    opt = make(list(model.parameters()))
    x = torch.linspace(0.5, -0.5, 6).reshape(3, 2)
    sum(leaf(x) for leaf in model).backward()
    try:
        opt.step()
    except (RuntimeError, NotImplementedError) as exc:
        if MESSAGE in str(exc):
            return "placement"
        return "no sharding strategy" if NO_STRATEGY in str(exc) else f"other error: {str(exc)[:200]}"
    return "stepped"


def rank_main(rank: int, world: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    results = {name: outcome(make) for name, make in MAKERS.items()}
    if rank == 0:
        torch.save(results, out)
    dist.destroy_process_group()


def main() -> int:
    folder = tempfile.mkdtemp()
    out = os.path.join(folder, "results.pt")
    mp.spawn(rank_main, args=(4, os.path.join(folder, "store"), out), nprocs=4, join=True)
    results = torch.load(out)
    for name, what in results.items():
        print(f"{name}: {what}")
    reproduced = results == EXPECTED
    print(f"torch {torch.__version__}: " + ("the defect reproduces" if reproduced else "the defect does NOT reproduce"))
    return 0 if reproduced else 1


if __name__ == "__main__":
    sys.exit(main())
