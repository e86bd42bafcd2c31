"""AdamW step time: our fused kernel vs torch's fused AdamW, side by side.

    python benchmarks/bench_fused.py                      # CPU, 16M params
    python benchmarks/bench_fused.py --device cuda --out result.json   # CUDA, 64M params

Each configuration (dtype; the params as 1 tensor or as 4) is timed for both
implementations in the same run, interleaved, median of several repeats.
Effective GB/s counts the bytes each implementation must move per step
(read and written once each) and is set against a large tensor copy measured
in the same run (read + write bytes / time).

Bytes per param:
  fp32:  ours and torch read p, g, m, v and write p, m, v: 7 x 4 = 28
  bf16:  torch keeps p, m, v in bf16: 7 x 2 = 14
         ours keeps an fp32 master and fp32 moments: read g (2), master, m, v (12),
         write master, m, v (12), p (2) = 28; with moment_dtype=bf16: 20
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fused import FusedAdam  # noqa: E402

BYTES_PER_PARAM = {
    ("ours", torch.float32, torch.float32): 28,
    ("torch", torch.float32, None): 28,
    ("ours", torch.bfloat16, torch.float32): 28,
    ("ours", torch.bfloat16, torch.bfloat16): 20,
    ("torch", torch.bfloat16, None): 14,
}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn, device, iters, repeats=5):
    fn()
    sync(device)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync(device)
        samples.append((time.perf_counter() - t0) / iters * 1e3)
    return statistics.median(samples)


def copy_bandwidth(device, numel, iters):
    """GB/s of dst.copy_(src), counting bytes read plus bytes written."""
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, iters)
    return 2 * numel * 4 / (ms * 1e-3) / 1e9


def make_params(numel, pieces, dtype, device):
    gen = torch.Generator().manual_seed(0)
    sizes = [numel // pieces] * pieces
    params = [torch.randn(n, generator=gen).to(dtype).to(device).requires_grad_() for n in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(dtype).to(device) * 1e-3
    return params


def make_step(impl, params, moment_dtype):
    if impl == "ours":
        opt = FusedAdam(params, lr=1e-4, weight_decay=0.01, adam_w_mode=True, moment_dtype=moment_dtype)
    else:
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True)
    return opt.step


def run(device, numel, iters):
    rows = []
    configs = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.bfloat16, torch.bfloat16)]
    for dtype, moment_dtype in configs:
        for pieces in (1, 4):
            steps = {"ours": make_step("ours", make_params(numel, pieces, dtype, device), moment_dtype),
                     "torch": make_step("torch", make_params(numel, pieces, dtype, device), None)}
            times = {k: [] for k in steps}
            for _ in range(3):  # interleave, so drift on a shared machine hits both
                for k, fn in steps.items():
                    times[k].append(time_ms(fn, device, iters, repeats=2))
            ours, theirs = min(times["ours"]), min(times["torch"])
            rows.append(dict(dtype=str(dtype).replace("torch.", ""), moments=str(moment_dtype).replace("torch.", ""),
                             tensors=pieces, ours_ms=ours, torch_ms=theirs, speedup=theirs / ours,
                             ours_gbs=BYTES_PER_PARAM[("ours", dtype, moment_dtype)] * numel / ours / 1e6,
                             torch_gbs=BYTES_PER_PARAM[("torch", dtype, None)] * numel / theirs / 1e6))
            del steps
    return rows


def table(rows, copy_gbs):
    head = (f"{'dtype':8} {'moments':8} {'tensors':>7} {'ours ms':>8} {'torch ms':>8} {'torch/ours':>10} "
            f"{'ours GB/s':>9} {'torch GB/s':>10} {'ours %copy':>10} {'torch %copy':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['dtype']:8} {r['moments']:8} {r['tensors']:7d} {r['ours_ms']:8.2f} {r['torch_ms']:8.2f} "
                     f"{r['speedup']:9.2f}x {r['ours_gbs']:9.1f} {r['torch_gbs']:10.1f} "
                     f"{100 * r['ours_gbs'] / copy_gbs:9.0f}% {100 * r['torch_gbs'] / copy_gbs:10.0f}%")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--numel", type=int, default=None, help="params per configuration (16M CPU, 64M CUDA)")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None, help="write results (.json, or markdown otherwise)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    numel = args.numel or (16 * 2**20 if device.type == "cpu" else 64 * 2**20)
    iters = args.iters or (10 if device.type == "cpu" else 50)
    copy_gbs = copy_bandwidth(device, max(numel, 64 * 2**20), iters)
    rows = run(device, numel, iters)
    threads = torch.get_num_threads()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {threads} threads"
    text = (f"AdamW step, {numel / 2**20:.0f}M params, {where}; torch {torch.__version__}\n"
            f"copy bandwidth {copy_gbs:.1f} GB/s (read + write)\n" + table(rows, copy_gbs))
    print(text)
    if args.out:
        if args.out.suffix == ".json":
            args.out.write_text(json.dumps(dict(device=where, numel=numel, torch=torch.__version__,
                                                copy_gbs=copy_gbs, rows=rows), indent=2))
        else:
            args.out.write_text("```\n" + text + "\n```\n")


if __name__ == "__main__":
    main()
