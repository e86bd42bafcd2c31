"""Deliberately broken AdamW variants for harness tests (each wrong in one way)."""
import torch


class _AdamWBase(torch.optim.Optimizer):
    """A plain per-param-counter AdamW (torch semantics) with hooks to break it."""

    step_offset = 0
    eps_inside = False
    l2_decay = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, **_):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

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
                t = st["step"].item() + self.step_offset
                g = p.grad.float()
                pf = p.float()
                if self.l2_decay:
                    g = g + group["weight_decay"] * pf
                else:
                    pf = pf * (1 - group["lr"] * group["weight_decay"])
                m = st["exp_avg"].float().lerp_(g, 1 - b1)
                v = st["exp_avg_sq"].float().mul_(b2).addcmul_(g, g, value=1 - b2)
                bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
                if self.eps_inside:
                    denom = (v / bc2 + group["eps"]).sqrt()
                else:
                    denom = v.sqrt() / bc2 ** 0.5 + group["eps"]
                pf = pf - group["lr"] / bc1 * m / denom
                p.copy_(pf)
                st["exp_avg"].copy_(m)
                st["exp_avg_sq"].copy_(v)


class CorrectAdamW(_AdamWBase):
    pass


class EpsInsideAdamW(_AdamWBase):
    eps_inside = True


class OffByOneAdamW(_AdamWBase):
    step_offset = 1


class L2AdamW(_AdamWBase):
    l2_decay = True


class OutOfViewOffByOneAdamW(OffByOneAdamW):
    """Off by one, and each step also writes the element just past every param's view (a kernel
    sizing its writes by the storage, not the view): two failing checks, bounds the more severe."""

    @torch.no_grad()
    def step(self, closure=None):
        super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                end = p.storage_offset() + p.numel()
                if p.numel() and p.untyped_storage().nbytes() > end * p.element_size():  # room past the view
                    torch.as_strided(p, (1,), (1,), end).fill_(0.0)
