"""Known finding torch-dcp-state-dict-fake-step (reports/known.toml); pytorch/pytorch#164929.

torch.distributed.checkpoint.state_dict.get_optimizer_state_dict (and set_optimizer_state_dict) on an
optimizer that has not stepped yet materializes its state with a real step() on zero grads at lr 0
(_init_optim_state). The params stay put, but the counter is left at 1, and with coupled weight decay
(Adam, SGD with momentum) the grad of that step is wd * p, so the moments hold values. The first real
step then runs as step 2 (AdamW's bias corrections for t = 2: the update is 1 - 0.9 = 0.1 / (1 - 0.81)
~ 0.53 of the step-1 update). What FSDP2 users hit when they checkpoint at step 0 or take the state dict
(e.g. for a checkpoint manager) before training.

No process group needed: a plain module in this process. For torch AdamW, Adam, SGD(momentum), Adamax,
Adadelta, ASGD, NAdam, RAdam and RMSprop (each with coupled or decoupled decay 0.1):
the same first real step with and without a get_optimizer_state_dict call before it.
Exit 0 (reproduces): for every optimizer, the call leaves a counter at 1 or a moment with values, and
the first real step's params differ from the run without the call; 1 otherwise.
"""
import sys

import torch
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

MAKERS = {
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, foreach=False),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1, foreach=False),
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, weight_decay=0.1, foreach=False),
    "Adamax": lambda ps: torch.optim.Adamax(ps, lr=0.01, weight_decay=0.1, foreach=False),
    "Adadelta": lambda ps: torch.optim.Adadelta(ps, lr=0.5, weight_decay=0.1, foreach=False),
    "ASGD": lambda ps: torch.optim.ASGD(ps, lr=0.01, weight_decay=0.1, foreach=False),
    "NAdam": lambda ps: torch.optim.NAdam(ps, lr=0.01, weight_decay=0.1, foreach=False),
    "RAdam": lambda ps: torch.optim.RAdam(ps, lr=0.01, weight_decay=0.1, foreach=False),
    "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01, weight_decay=0.1, foreach=False),
}


def first_step(make, take_state_dict: bool):
    model = torch.nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.5, -0.25, 1.0], [0.75, 0.125, -0.5]]))
    opt = make(model.parameters())
    changed = ""
    if take_state_dict:
        get_optimizer_state_dict(model, opt)
        st = opt.state[model.weight]
        if "step" in st and float(st["step"]) != 0:
            changed = f"counter {float(st['step'])} before any step"
        elif any(isinstance(v, torch.Tensor) and v.is_floating_point() and bool(v.any())
                 for k, v in st.items() if k != "step"):
            changed = "moments hold values before any step"
    model.weight.grad = torch.tensor([[0.25, 0.5, -0.125], [1.0, -0.75, 0.0625]])
    opt.step()
    return model.weight.detach().clone(), changed


def main() -> int:
    reproduced = True
    for name, make in MAKERS.items():
        plain, _ = first_step(make, False)
        after, changed = first_step(make, True)
        diff = float((plain - after).abs().max())
        print(f"{name}: {changed or 'state unchanged'}; first step differs by {diff:.3g}")
        reproduced &= bool(changed) and diff > 0
    return 0 if reproduced else 1


if __name__ == "__main__":
    sys.exit(main())
