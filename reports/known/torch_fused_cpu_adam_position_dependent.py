"""Known finding torch-fused-cpu-adam-position-dependent (reports/known.toml); no upstream issue found.

CPU fused Adam/AdamW (torch._fused_adam_ / _fused_adamw_) compute an element's exp_avg_sq with
different arithmetic depending on where the element sits in its tensor (the vectorized body of the
kernel or its scalar tail), so the same element, with the same inputs, can end one ULP apart when the
tensor is split differently. FSDP2 splits every param into per-rank shards of ceil(rows / world) rows:
a checkpoint continued at another world size (or the same training run at another world size) is not
bitwise reproducible with fused=True, while forloop and foreach are. Both results are within the
oracle's error bound; what breaks is the bit-for-bit equality a reshard should keep.

No process group needed: 64 float32 elements stepped 3 times as one tensor and as 22 tensors of at
most 3 elements (what a 4-way shard of a small param looks like), same values, same grads.
Exit 0 (reproduces): for Adam and AdamW, fused=True state differs between the two splits while
fused=False (forloop) is identical; 1 otherwise.
"""
import sys

import torch

N = 64


def run(make, chunk: int) -> list:
    start = (torch.arange(N, dtype=torch.float32) - 31.5) / 16
    params = [torch.nn.Parameter(c.clone()) for c in start.split(chunk)]
    opt = make(params)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        grads = torch.randint(-64, 65, (N,), generator=gen).float() / 256  # exact binary fractions
        for p, g in zip(params, grads.split(chunk)):
            p.grad = g.clone()
        opt.step()
    return [torch.cat([p.detach() for p in params])] + [torch.cat([opt.state[p][k] for p in params])
                                                        for k in ("exp_avg", "exp_avg_sq")]


def differing(make) -> int:
    whole, split = run(make, N), run(make, 3)
    return sum(int((a != b).sum()) for a, b in zip(whole, split))


def main() -> int:
    reproduced = True
    for name, cls in (("Adam", torch.optim.Adam), ("AdamW", torch.optim.AdamW)):
        fused = differing(lambda ps: cls(ps, lr=0.01, weight_decay=0.1, fused=True))
        forloop = differing(lambda ps: cls(ps, lr=0.01, weight_decay=0.1, foreach=False))
        print(f"{name}: elements differing between the splits: fused {fused}, forloop {forloop}")
        reproduced &= fused > 0 and forloop == 0
    return 0 if reproduced else 1


if __name__ == "__main__":
    sys.exit(main())
