"""Step time of our fused kernels against a baseline, side by side, at the memory limit.

    python benchmarks/bench_fused.py                      # CPU, 16M params, every suite
    python benchmarks/bench_fused.py --suite adagrad --suite lamb
    python benchmarks/bench_fused.py --quick              # a small configuration (seconds)
    python benchmarks/bench_fused.py --device cuda --out result.json   # CUDA, 64M params

Suites (each row: one configuration, both implementations built on their own copy of the same params):
  adamw    FusedAdam(adam_w_mode=True) vs torch.optim.AdamW(fused=True); fp32, and bf16 params with
           fp32 or bf16 moments (ours keeps an fp32 master); 1 or 4 tensors
  adagrad  FusedAdagrad vs torch.optim.Adagrad(fused=True); fp32; 1 or 100 tensors
  lamb     FusedLAMB vs our FusedAdam (the same kernel family: what LAMB's extra passes cost); fp32;
           1 or 100 tensors
  lamb_noclip  the same with max_grad_norm=0: no global clipping, so no grad-norm pass
  prefetch our AdamW (1 tensor) and Adagrad (100 tensors), fp32, with the CPU kernels' software
           prefetch off (A) and on (B), on the same machine: which default suits it (CPU only;
           FUSED_CPU_PREFETCH=0|1 sets it for a process, csrc/cpu_kernels.cpp)

In each row the two implementations and a copy (dst.copy_(src), numel floats) are timed in turn, round
after round (interleaved, so that drift on a shared machine hits all three); a round times `iters`
steps. Times are medians over the rounds; the ratio B/A is the median of the per-round ratios.

Effective GB/s = the bytes an implementation must move per step (each array read or written once, the
model below) / time. %copy = that over the copy's GB/s (bytes read + written) measured in the same
rounds: 100% means the step moves its bytes as fast as a plain copy moves its own.

Bytes moved per param, per step (r: read, w: written; 4 bytes per fp32, 2 per bf16):
  AdamW fp32, ours and torch    r p g m v, w p m v                            7 x 4 = 28
        bf16, torch             p, m, v in bf16: the same 7 arrays            7 x 2 = 14
        bf16, ours (master)     r g (2) master m v (12), w master m v (12), p (2)      28
                                with moment_dtype=bf16: m, v 2 bytes each              20
  Adagrad fp32, ours and torch  r p g sum, w p sum                            5 x 4 = 20
  LAMB fp32, ours               grad norm: r g                                          4
                                stage 1 (moments, u, ||p||^2, ||u||^2): r g p m v,
                                  w m v u                                     7 x 4 = 28
                                stage 2 (trust ratio, apply): r u p, w p      3 x 4 = 12
                                                                              total     44
                                (1.57x AdamW's 28: the least LAMB's three passes can move)
                tensors <= 256Ki elements: grad norm 4; stage 1 and 2 back to back,
                                  r g p m v, w m v p (u and p stay in cache)  total     32
                max_grad_norm=0 (lamb_noclip): no grad norm, 40 (28 for small tensors)

What the CPU kernels do to run at the memory limit (16M fp32, 2 cores):
- Every element loop works in 256-element pieces and asks for the lines 2 KiB ahead of each piece
  in each of its arrays: the hardware prefetchers alone keep fewer reads in flight than memory can
  serve. An Adagrad loop: 5.8 -> 5.15 ms; our Adagrad step went from 0.93-0.96x torch fused's speed
  to 1.0-1.04x, our AdamW fp32 from 0.95-0.98x of torch's time to 0.88-0.94x.
- Adagrad and Adam leave the L2 term out at weight_decay 0, as torch does (oracle zero_decay="skip").

What differs between machines, AMD (2026-12-07, a 2-vCPU AMD EPYC guest, Zen 4: family 25 model 17,
AVX-512, 32 MiB L3, THP madvise). Ours had fallen behind torch's fused steps here (AdamW fp32
0.85x and 0.81x, Adagrad 0.94x and 0.95x of torch's time, earlier runs). The cause is the software
prefetch. Minimal AdamW loops compiled alone (ctypes, one core, the same tensors for every variant,
medians of 9): plain 11.3 ms; the kernels' scheme, 2 KiB ahead of each 256-element piece with
write hints for p, m, v: 15.0 ms; read hints only: 14.5 ms; non-temporal hints: 14.5 ms; 8 KiB
ahead: 16.8 ms; prefetching the grad alone: 11.7 ms; torch's fused step on the same tensors:
11.4 ms. Vector width (zmm or ymm loops) and piece size changed nothing beyond noise. Huge pages
(madvise on the tensors) made both torch and ours 6-12% faster and did not change the order. So the
kernels now prefetch on other vendors only (the measurement there is the Intel one below), and
without prefetches a chunk is one loop, not 256-element pieces. The same tensors stepped by ours
with prefetch off, on, and torch (2 threads, 11 rounds): prefetch off/on 0.63-0.87x of the time;
ours ahead of torch 1.06-1.18x. `bench_fused.py --rounds 7` afterwards: AdamW fp32 1.54x and 1.04x
(1, 4 tensors; the 1.54x is torch's tensors landing badly, such spread between rows is layout),
bf16 params 1.18-1.28x, Adagrad 1.34x and 1.10x; LAMB 1.83x and 1.68x our (now faster) AdamW.

What differs between machines, Intel (2026-12-05, a 2-vCPU KVM guest reporting avx512fp16; shared, so the
figures below are interleaved ratios, several runs each; no kernel change came of it):
- Vector width: torch dispatches AVX512 here (zmm); GCC's -march=native (rocketlake) prefers 256-bit,
  so ours is ymm. -mprefer-vector-width=512: AdamW +1%, Adagrad +-0 in idle windows. Not the cause.
- Huge pages: THP is madvise here, so every tensor has 4 KiB pages and page walks cost (what our
  prefetches partly hide). With torch's allocator on huge pages (THP_MEM_ALLOC_ENABLE=1) torch's
  CPU time per step fell 14% and ours 8%: AdamW 1.00-1.03x, Adagrad 0.92-0.97x wall (loaded machine).
  A machine with THP=always is likely the kind where ours was measured behind. Our own moments alone
  on huge pages (mmap + madvise) gained 1-2.5%: not taken.
- Prefetch: none, 1-8 KiB ahead, prefetcht1: within noise (+-4%) for Adagrad; 3 KiB ahead with
  512-bit vectors gave AdamW +2-3% in 12 idle-window runs, Adagrad nothing: left as a lead.
- Idle here, `bench_fused.py --suite adamw --suite adagrad --suite lamb --rounds 7`: AdamW fp32 1.05x
  and 1.11x (1, 4 tensors), Adagrad 1.04x and 1.06x (1, 100); LAMB 1.66x and 1.41x our AdamW.

Where LAMB's time goes (one 16M tensor; each pass timed inside a loop of steps, with a timing build
that is not committed). Earlier machine: grad norm 2.2 ms, stage 1 9.5-10 ms, stage 2 3.9 ms, against
10.1-10.3 ms for our AdamW step; 1.58-1.69x over runs. The machine of 2026-12-01 (slower memory): grad
norm 2.3-2.9 ms, stage 1 12.1-13.7 ms, stage 2 5.1-5.7 ms, against 11.75-12.3 ms for AdamW in the same
runs; 1.70-1.77x over runs.
- One 16M tensor must move 44 bytes per param to AdamW's 28: 1.57x if every pass ran at AdamW's
  rate. A tensor's norms need all of it before stage 2 can start, so stage 2 reads u and p back from
  memory (three 64 MiB arrays do not stay in the caches between the stages).
- Not every pass can run at AdamW's rate. The grad norm only reads, and a read-only pass is bound by
  the reads a core keeps in flight: on the machine of 2026-12-01 a standalone read of 64 MiB from
  memory (2 threads, 1-8 streams, with and without prefetch) ran at 20-25 GB/s, where AdamW moves
  38 GB/s of reads and writes. So the 1.6x asked for is not reached with one 16M tensor.
- Without global clipping (max_grad_norm=0, suite lamb_noclip) there is no grad-norm pass
  (fused/lamb.py skips it): 40 bytes, 1.43x AdamW's at equal rates, the traffic of stages 1 and 2
  alone. One run of 15 rounds (2026-12-01): 1.50x with one 16M tensor and 1.22x with 100, where the
  default LAMB took 1.80x and 1.49x in the same run. Clipping cost 3.6 ms a step, more than the
  pass alone (2.4 ms): the grads it reads push out of the cache what stage 1 would have found there.
- A thread done with its share of chunks takes the far end of the other's (csrc/work_shares.h): one
  thread had run stage 1 in 15.5 ms and the other in 13.2 ms (averaged over 51 steps), and a pass
  ends with its slower thread. Both now end together (12.7 ms). Side by side with the commit before
  (two alternating runs of 7 rounds each, 2026-12-01), against torch's fused step: AdamW fp32
  1.07x -> 1.13x, Adagrad 1.05-1.06x -> 1.13x (1 tensor) and 1.03-1.06x -> 1.07-1.12x (100).
  LAMB's ratio to AdamW hardly moved: AdamW gained as much.
- Stage 1 divides by the per-step constants (bc1, bc2 under the root, the clip divisor) through
  reciprocals rounded once from double, as AdamW folds lr/bc1: that has the error of a quotient by a
  rounded divisor (the tolerance is unchanged) and leaves one division and one root per element, as
  in AdamW. Four divisions had kept stage 1 bound by the divider (step 20.7 -> 19.2 ms).
- The grad norm is a read-only pass, bound by the reads one core keeps in flight: it reads four
  chunks side by side (3.4 -> 2.2 ms); stage 2 reads two chunks side by side (4.3 -> 3.9 ms).
- Tensors of <= 256Ki elements go whole to one thread, stage 2 straight after stage 1, with u in a
  per-thread scratch that stays in L2: u never goes to memory, and p is read from memory once. 100
  tensors of 168Ki: 2.1x AdamW two sessions ago, 1.33-1.5x now.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fused import FusedAdagrad, FusedAdam, FusedLAMB, _ext  # noqa: E402

SUITES = ("adamw", "adagrad", "lamb", "lamb_noclip", "prefetch")
CPU_ONLY_SUITES = ("prefetch",)
# Tensors of at most this many elements take the CPU LAMB kernel's one-thread path (kWholeMax in
# csrc/cpu_kernels.cpp), which moves 32 bytes per param instead of 44.
LAMB_WHOLE_MAX = 2 ** 18


@dataclass
class Impl:
    """One side of a row: a name, its step function, and the bytes it moves per param."""

    name: str
    make: Callable  # params -> step function
    bytes_per_param: int


@dataclass
class Config:
    suite: str
    dtype: torch.dtype
    moment_dtype: torch.dtype
    tensors: int
    ours: Impl
    baseline: Impl


def adamw_ours(moment_dtype):
    return lambda ps: FusedAdam(ps, lr=1e-4, weight_decay=0.01, adam_w_mode=True, moment_dtype=moment_dtype).step


def adamw_torch(ps):
    return torch.optim.AdamW(ps, lr=1e-4, weight_decay=0.01, fused=True).step


def adagrad_ours(ps):
    return FusedAdagrad(ps, lr=1e-2).step


def adagrad_torch(ps):
    return torch.optim.Adagrad(ps, lr=1e-2, fused=True).step


def lamb_ours(ps):
    return FusedLAMB(ps, lr=1e-3, weight_decay=0.01).step


def lamb_noclip_ours(ps):
    return FusedLAMB(ps, lr=1e-3, weight_decay=0.01, max_grad_norm=0.0).step


def prefetch_set(on: bool, make):
    """`make`'s step, with the CPU kernels' software prefetch set on or off before each step (a
    process-wide switch; main restores the default afterwards)."""
    def build(ps):
        step = make(ps)

        def run():
            _ext.cpu().prefetch(int(on))
            step()
        return run
    return build


def configs(suites, numel, adamw_tensors=(1, 4), many=100) -> list[Config]:
    out = []
    f32, bf16 = torch.float32, torch.bfloat16
    if "adamw" in suites:
        adamw_bytes = {(f32, f32): (28, 28), (bf16, f32): (28, 14), (bf16, bf16): (20, 14)}
        for (dtype, moments), (ours_b, torch_b) in adamw_bytes.items():
            for n in adamw_tensors:
                out.append(Config("adamw", dtype, moments, n, Impl("ours", adamw_ours(moments), ours_b),
                                  Impl("torch", adamw_torch, torch_b)))
    if "adagrad" in suites:
        for n in (1, many):
            out.append(Config("adagrad", f32, f32, n, Impl("ours", adagrad_ours, 20),
                              Impl("torch", adagrad_torch, 20)))
    if "lamb" in suites:
        for n in (1, many):
            lamb_bytes = 32 if numel // n <= LAMB_WHOLE_MAX else 44
            out.append(Config("lamb", f32, f32, n, Impl("ours lamb", lamb_ours, lamb_bytes),
                              Impl("ours adamw", adamw_ours(f32), 28)))
    if "lamb_noclip" in suites:  # no grad-norm pass: 4 bytes less
        for n in (1, many):
            lamb_bytes = 28 if numel // n <= LAMB_WHOLE_MAX else 40
            out.append(Config("lamb_noclip", f32, f32, n, Impl("lamb mgn=0", lamb_noclip_ours, lamb_bytes),
                              Impl("ours adamw", adamw_ours(f32), 28)))
    if "prefetch" in suites:
        for name, make, n, b in (("adamw", adamw_ours(f32), 1, 28), ("adagrad", adagrad_ours, many, 20)):
            out.append(Config("prefetch", f32, f32, n, Impl(f"{name} off", prefetch_set(False, make), b),
                              Impl(f"{name} on", prefetch_set(True, make), b)))
    return out


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def batch_ms(fn, device, iters) -> float:
    """Milliseconds per call of fn, over `iters` calls."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / iters * 1e3


def make_params(numel, pieces, dtype, device):
    """`pieces` params of numel/pieces elements, with grads; drawn on the device (64M draws on the host
    would take longer than the timing)."""
    gen = torch.Generator(device=device).manual_seed(0)
    sizes = [numel // pieces] * pieces
    params = [torch.randn(n, generator=gen, device=device).to(dtype).requires_grad_() for n in sizes]
    for p in params:
        p.grad = (torch.randn(p.shape, generator=gen, device=device) * 1e-3).to(dtype)
    return params


def measure(cfg: Config, device, numel, iters, rounds) -> dict:
    """One row: ours, baseline and a copy, timed in turn for `rounds` rounds."""
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    steps = {"ours": cfg.ours.make(make_params(numel, cfg.tensors, cfg.dtype, device)),
             "baseline": cfg.baseline.make(make_params(numel, cfg.tensors, cfg.dtype, device)),
             "copy": lambda: dst.copy_(src)}
    for fn in steps.values():  # first steps create state (and build the kernels)
        fn()
    samples = {k: [] for k in steps}
    for _ in range(rounds):
        for k, fn in steps.items():
            samples[k].append(batch_ms(fn, device, iters))
    ms = {k: statistics.median(v) for k, v in samples.items()}
    copy_gbs = 2 * 4 * numel / ms["copy"] / 1e6
    row = dict(suite=cfg.suite, dtype=short(cfg.dtype), moments=short(cfg.moment_dtype), tensors=cfg.tensors,
               copy_ms=ms["copy"], copy_gbs=copy_gbs, rounds=rounds, iters=iters,
               ratio=statistics.median(b / a for a, b in zip(samples["ours"], samples["baseline"])))
    for key, impl in (("ours", cfg.ours), ("baseline", cfg.baseline)):  # flat: the GPU summary tabulates rows
        gbs = impl.bytes_per_param * numel / ms[key] / 1e6
        row.update({f"{key}_name": impl.name, f"{key}_ms": ms[key], f"{key}_bytes_per_param": impl.bytes_per_param,
                    f"{key}_gbs": gbs, f"{key}_copy_fraction": gbs / copy_gbs})
    return row


def short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def table(rows) -> str:
    head = (f"{'suite':11} {'dtype':8} {'moments':8} {'tensors':>7} | {'A':10} {'ms':>8} {'B/p':>4} {'GB/s':>6} "
            f"{'%copy':>6} | {'B':10} {'ms':>8} {'B/p':>4} {'GB/s':>6} {'%copy':>6} | {'B/A time':>8} "
            f"{'copy GB/s':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        sides = " | ".join(f"{r[k + '_name']:10} {r[k + '_ms']:8.2f} {r[k + '_bytes_per_param']:4d} "
                           f"{r[k + '_gbs']:6.1f} {100 * r[k + '_copy_fraction']:5.0f}%" for k in ("ours", "baseline"))
        lines.append(f"{r['suite']:11} {r['dtype']:8} {r['moments']:8} {r['tensors']:7d} | {sides} | "
                     f"{r['ratio']:7.3f}x {r['copy_gbs']:9.1f}")
    lines.append("B/A time: the baseline's step time over ours (median of per-round ratios); for lamb and "
                 "lamb_noclip, A is LAMB and B our AdamW, so 1/(B/A) is LAMB's cost in AdamW steps; for prefetch, "
                 "A is ours with software prefetch off and B on, so B/A > 1 means off is faster here. B/p: bytes "
                 "moved per param.")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--suite", action="append", choices=SUITES, help="repeatable; default: all")
    ap.add_argument("--numel", type=int, default=None, help="params per configuration (16M CPU, 64M CUDA)")
    ap.add_argument("--iters", type=int, default=None, help="steps per timed batch")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds per row (median)")
    ap.add_argument("--quick", action="store_true", help="a small configuration: 64Ki params, 2 iters, 3 rounds")
    ap.add_argument("--out", type=Path, default=None, help="write results (.json, or markdown otherwise)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    big = 16 * 2**20 if device.type == "cpu" else 64 * 2**20
    numel = args.numel or (2**16 if args.quick else big)
    iters = args.iters or (2 if args.quick else 5 if device.type == "cpu" else 20)
    rounds = args.rounds or (3 if args.quick else 7 if device.type == "cpu" else 5)
    suites = args.suite or [s for s in SUITES if device.type == "cpu" or s not in CPU_ONLY_SUITES]
    if device.type != "cpu" and set(suites) & set(CPU_ONLY_SUITES):
        ap.error(f"suites {', '.join(CPU_ONLY_SUITES)} run on the CPU only")
    default_prefetch = _ext.cpu().prefetch() if device.type == "cpu" else None
    try:
        rows = [measure(cfg, device, numel, iters, rounds) for cfg in configs(suites, numel)]
    finally:
        if default_prefetch is not None:
            _ext.cpu().prefetch(int(default_prefetch))
    threads = torch.get_num_threads()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {threads} threads"
    text = (f"fused optimizer step, {numel / 2**20:g}M params, {where}; torch {torch.__version__}; "
            f"medians of {rounds} interleaved rounds of {iters} steps\n" + table(rows))
    print(text)
    if args.out:
        if args.out.suffix == ".json":
            args.out.write_text(json.dumps(dict(device=where, numel=numel, torch=torch.__version__, iters=iters,
                                                rounds=rounds, rows=rows), indent=2))
        else:
            args.out.write_text("```\n" + text + "\n```\n")
    return rows


if __name__ == "__main__":
    main()
