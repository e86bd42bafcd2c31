"""Loading an optimizer checkpoint from disk, all or nothing."""
from __future__ import annotations

import os

import torch


def load_checkpoint(opt: torch.optim.Optimizer, path: str | os.PathLike, map_location=None, key: str | None = None) -> None:
    """Reads `path` (written by torch.save) and loads it into `opt`.

    The file holds an optimizer state_dict, or a dict holding one under `key`.
    A file that cannot be read (truncated, corrupt, missing, not a
    checkpoint) raises RuntimeError naming the path, before `opt` is touched;
    the fused optimizers' load_state_dict then validates the whole state_dict
    before changing anything, so on any error `opt` is exactly as it was.
    Loads with weights_only=True: a checkpoint is data, not code.
    """
    try:
        saved = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises RuntimeError, EOFError, UnpicklingError, ... by failure
        raise RuntimeError(f"checkpoint {os.fspath(path)!r} cannot be read: {type(e).__name__}: {e}") from e
    if key is not None:
        if not isinstance(saved, dict) or key not in saved:
            raise ValueError(f"checkpoint {os.fspath(path)!r} has no entry {key!r}")
        saved = saved[key]
    opt.load_state_dict(saved)
