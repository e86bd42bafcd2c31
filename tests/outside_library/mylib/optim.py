"""A hand-written AdamW (torch semantics) and a sloppy one whose bias correction runs a step ahead."""
import torch


class MyAdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    bias_offset = 0

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.tensor(0.0)
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                t = st["step"].item() + self.bias_offset
                g = p.grad.float()
                pf = p.float() * (1 - group["lr"] * group["weight_decay"])
                m = st["exp_avg"].float().lerp_(g, 1 - b1)
                v = st["exp_avg_sq"].float().mul_(b2).addcmul_(g, g, value=1 - b2)
                bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
                denom = v.sqrt() / bc2 ** 0.5 + group["eps"]
                pf = pf - group["lr"] / bc1 * m / denom
                p.copy_(pf)
                st["exp_avg"].copy_(m)
                st["exp_avg_sq"].copy_(v)


class SloppyAdamW(MyAdamW):
    bias_offset = 1
