"""FusedLAMB with apex FusedLAMB semantics (oracle/lamb.py APEX_LAMB), in the
oracle's stages so that a mismatch can be pinned to one:

  1. clip     G = ||all grads of all groups * inv_scale||; every grad is divided by
              G/max_grad_norm when G > max_grad_norm (max_grad_norm: the constructor's;
              0 turns clipping off, and G is then not computed)
  2-3. moments and update, one kernel per dtype and group:
              g <- g + wd*p (adam_w_mode=False);  m <- b1*m + b3*g, b3 = 1-b1 with
              grad_averaging else 1;  v <- b2*v + (1-b2)*g^2
              u <- (m/bc1)/(sqrt(v/bc2) + eps) (+ wd*p when adam_w_mode)
  4. norms    ||p|| and ||u|| per tensor; ratio ||p||/||u||, 1 when either is 0,
              used only when wd != 0 unless use_nvlamb
  5. apply    p <- p - lr * ratio * u

The kernels run this in three passes over memory: the global grad norm (reads
g; skipped when max_grad_norm is 0), then stage 1 = 2-4 (reads g, p, m, v; writes
m, v, u; sums p^2 and u^2 per tensor on the way), then stage 2 = 5 (reads u, p;
writes p). u lives in an fp32 buffer (on the CPU, a tensor of at most 256Ki
elements keeps its u in a per-thread scratch instead, still in cache for stage 2);
the caller's grads are only read.
The kernels divide by bc1, sqrt(bc2) and the clip divisor through reciprocals
rounded once from double (csrc/optim_math.h make_lamb_scalars).
"""
from __future__ import annotations

import torch

from .base import Bucket, FusedOptimizer, Scaling, call_kernel, stream_arg


class FusedLAMB(FusedOptimizer):
    SPEC = "lamb"  # its hyperparameters have the roles oracle.lamb declares (validation shared)
    MOMENTS = ("exp_avg", "exp_avg_sq")
    NONNEGATIVE = ("exp_avg_sq",)

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 amsgrad=False, adam_w_mode=True, grad_averaging=True, max_grad_norm=1.0, use_nvlamb=False, *,
                 master_weights=True, moment_dtype=torch.float32):
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, adam_w_mode=adam_w_mode, grad_averaging=grad_averaging,
                        max_grad_norm=max_grad_norm, use_nvlamb=use_nvlamb, master_weights=master_weights,
                        moment_dtype=moment_dtype)
        super().__init__(params, defaults)

    def _init_moments(self, group: dict, p: torch.Tensor, state: dict) -> None:
        for key in ("exp_avg", "exp_avg_sq"):
            state[key] = torch.zeros_like(p, dtype=group["moment_dtype"], memory_format=torch.contiguous_format)

    def _step_groups(self, scaling: Scaling, lives: list) -> None:
        scaling = scaling.for_group(on_device=False)
        if float(self.defaults["max_grad_norm"]) > 0:
            grad_sumsq = self._grad_sumsq([p.grad for live in lives for _, p in live], scaling.inv_scale)
        else:  # no clipping: the divisor is 1 whatever the norm, so the pass over every grad is skipped
            grad_sumsq = torch.zeros((), dtype=torch.float64)
        for group, live in zip(self.param_groups, lives):
            self._advance_counter(group, scaling)
            for bucket in self._buckets(group, live):
                self._update_bucket(group, bucket, grad_sumsq, scaling.inv_scale)

    def _grad_sumsq(self, grads: list, inv_scale: float) -> torch.Tensor | None:
        """Stage 1: sum of squares of all unscaled grads, a float64 scalar tensor."""
        if not grads:
            return None
        by_kind: dict = {}
        for g in grads:
            by_kind.setdefault((g.device, g.dtype), []).append(g.contiguous())
        device = grads[0].device
        total = torch.zeros((), dtype=torch.float64, device=device)
        for (dev, _), tensors in by_kind.items():
            total += sumsq(dev, tensors, inv_scale).sum().to(device)
        return total

    def _update_bucket(self, group: dict, b: Bucket, grad_sumsq: torch.Tensor, inv_scale: float) -> None:
        device = b.params[0].device
        updates = self._update_buffers(device, b.params)
        beta1, beta2 = group["betas"]
        moments = [s["exp_avg"] for s in b.states], [s["exp_avg_sq"] for s in b.states]
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        flags = bool(group["grad_averaging"]), bool(group["bias_correction"]), bool(group["adam_w_mode"])
        max_norm = float(self.defaults["max_grad_norm"])
        if device.type == "cpu":  # both stages in one call: one wake-up of the CPU threads
            call_kernel(device, "lamb", b.grads, b.params, *moments, updates, b.models, grad_sumsq, max_norm, lr,
                        float(beta1), float(beta2), float(group["eps"]), wd, *flags, bool(group["use_nvlamb"]),
                        int(group["step"]), float(inv_scale))
            return
        p_sumsq, u_sumsq = call_kernel(device, "lamb_update", b.grads, b.params, *moments, updates,
                                       grad_sumsq.to(device), max_norm, float(beta1), float(beta2),
                                       float(group["eps"]), wd, *flags, int(group["step"]), float(inv_scale),
                                       b.kinds["master"], *stream_arg(device))
        call_kernel(device, "lamb_apply", updates, b.params, b.models, p_sumsq, u_sumsq, lr, wd,
                    bool(group["use_nvlamb"]), *stream_arg(device))

    def _update_buffers(self, device: torch.device, params: list) -> list:
        """An fp32 u per param. On the CPU: views into one buffer kept across
        steps (not state: never saved), because the CPU allocator hands a large
        block back to the OS when it is freed, and a fresh one costs a page
        fault per 4 KiB on its first write, as much time as a pass over it.
        Views start on 64-byte boundaries, so the kernel's vector stores align.
        On CUDA the caching allocator already reuses memory, in stream order."""
        if device.type != "cpu":
            return [torch.empty_like(p, dtype=torch.float32) for p in params]
        shapes = tuple(p.shape for p in params)
        cache = self.__dict__.setdefault("_u_views", {})  # (device, shapes) -> (buffer, its views)
        scratch = self.__dict__.setdefault("_u_scratch", {})
        hit = cache.get((device, shapes))
        if hit is not None and hit[0] is scratch.get(device):  # the same views as last step: 100 views cost 0.3 ms
            return hit[1]
        starts, total = [], 0
        for p in params:
            starts.append(total)
            total += -(-p.numel() // U_ALIGN) * U_ALIGN
        buf = scratch.get(device)
        if buf is None or buf.numel() < total:
            buf = scratch[device] = torch.empty(total, dtype=torch.float32, device=device)
            cache.clear()
        views = [buf[s:s + p.numel()].view(p.shape) for s, p in zip(starts, params)]
        cache[(device, shapes)] = (buf, views)
        return views


U_ALIGN = 16  # floats per 64 bytes


def sumsq(device: torch.device, tensors: list, scale: float) -> torch.Tensor:
    """Per-tensor sums of squares of tensors * scale (one dtype), float64."""
    return call_kernel(device, "sumsq", tensors, float(scale), *stream_arg(device))
