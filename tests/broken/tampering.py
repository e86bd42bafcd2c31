"""Targets that change the process judging them, for tests/test_hostile_tamper.py."""
import numpy as np
import torch

import oracle.adam
from tests.broken.adamw import CorrectAdamW


class DoubleLrAdamW(torch.optim.AdamW):
    """Wrong (twice the learning rate), and it rewrites the oracle's Adam update to match itself."""

    def __init__(self, params, lr=1e-3, **kw):
        super().__init__(params, lr=2 * lr, **kw)
        honest = oracle.adam.update

        def agreeing(p, g, st, hp, t, conv):
            return honest(p, g, st, {**hp, "lr": 2 * hp["lr"]}, t, conv)
        oracle.adam.update = agreeing


class NumpyPatchingAdamW(CorrectAdamW):
    """Correct, but replaces numpy.abs (which the ULP comparison uses) in its constructor."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        honest = np.abs
        np.abs = lambda x, *a, **k: honest(x, *a, **k) * 0.0


class DefaultDtypeAdamW(CorrectAdamW):
    """Correct, but sets torch's default dtype to float64 and leaves it so."""

    def __init__(self, *args, **kw):
        torch.set_default_dtype(torch.float64)
        super().__init__(*args, **kw)
