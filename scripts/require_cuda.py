"""Refuse, quickly and plainly, to run the GPU pipeline where there is no usable CUDA device.

    python scripts/require_cuda.py --driver-only   # before installing anything: is there an NVIDIA GPU?
    python scripts/require_cuda.py                 # after installing torch: can torch use it?

Exit status: 0 usable; 3 no usable CUDA device (the message says why and what to do).
The driver check needs nothing but the standard library, so `tox -e gpu` runs it before it
downloads the CUDA build of torch; each probe has a time limit, so a wedged driver cannot hang it.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

NO_CUDA = 3
HINT = ("The GPU pipeline (tox -e gpu, scripts/gpu_check.sh) needs a machine with an NVIDIA GPU and driver; "
        "the CPU test suite is `bash .ci/run` or `tox -e cpu`. See docs/gpu.md.")


def driver_problem(timeout_s: float = 20.0) -> str | None:
    """None when an NVIDIA driver and at least one GPU are visible, else why not."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        if glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/proc/driver/nvidia/version"):
            return None  # a driver without its tools (some containers): let torch decide
        return "no NVIDIA driver found (no nvidia-smi on PATH, no /dev/nvidia*, no /proc/driver/nvidia)"
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"nvidia-smi -L did not answer within {timeout_s:.0f} s (driver hung?)"
    if out.returncode != 0 or "GPU" not in out.stdout:
        detail = (out.stderr or out.stdout).strip().splitlines()
        return f"nvidia-smi -L lists no GPU (exit {out.returncode}: {detail[0] if detail else 'no output'})"
    return None


def torch_problem(torch) -> str | None:
    """None when this torch is a CUDA build that sees a device, else why not."""
    if torch.version.cuda is None:
        return (f"torch {torch.__version__} is a CPU-only build; install a CUDA build "
                "(TORCH_INDEX_URL, see docs/gpu.md)")
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no usable CUDA device "
                "(driver too old for this CUDA build, or no GPU visible)")
    if torch.cuda.device_count() < 1:
        return "torch.cuda.device_count() is 0"
    return None


def describe(torch) -> dict:
    """What the reports should record about the device they were made on."""
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "device": props.name,
            "capability": f"{props.major}.{props.minor}", "device_count": torch.cuda.device_count(),
            "memory_total_bytes": total, "memory_free_bytes": free}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--driver-only", action="store_true",
                    help="check for an NVIDIA driver and GPU without importing torch")
    ap.add_argument("--json", metavar="PATH", help="write the device description here (torch check only)")
    args = ap.parse_args(argv)

    problem = driver_problem()
    if problem is None and not args.driver_only:
        try:
            import torch
        except ImportError as exc:
            problem = f"torch is not importable ({exc})"
        else:
            problem = torch_problem(torch)
    if problem is not None:
        print(f"require_cuda: REFUSED: {problem}.\n{HINT}", file=sys.stderr)
        return NO_CUDA
    if args.driver_only:
        print("require_cuda: NVIDIA driver and GPU present")
        return 0
    info = describe(torch)
    print("require_cuda: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(info, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
