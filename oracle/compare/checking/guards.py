"""Guarded tensors: every param and grad the suite creates lives inside a larger buffer with guard
values before it, after it and (for strided views) in its gaps; a write outside the view changes a
guard and fails the `bounds` check, naming the tensor and the offsets written.

    view, guard = allocate(values, "bfloat16", "cpu", "param 0", layout="strided")
    ... opt.step() ...
    guard.check(result, step)          # every guard element bitwise unchanged
    guard.check_view(result, step, before)   # the view itself bitwise unchanged (inputs: grads)

Offsets are in elements relative to the view's first element (its storage offset), so -1 is the
element just before the tensor and numel*stride the one just past a strided view.
"""
from __future__ import annotations

from ..lazy_torch import torch

from ..measuring.checks import CheckResult, Finding, bit_words
from ..measuring.readback import element, to_tensor

PAD = 4            # guard elements before and after every view
SENTINEL = -31.0   # exact in every format; what a guard holds (compared bitwise, not by value)
LAYOUTS = ("contiguous", "strided", "transposed")


def _bits(t: torch.Tensor) -> torch.Tensor:
    """One row of integer words per element (a complex element's two components in one row)."""
    return bit_words(t).reshape(t.numel(), -1)


class Guard:
    """One guarded buffer: the view's element offsets and the guards' bits at allocation."""

    def __init__(self, name: str, buffer: torch.Tensor, view: torch.Tensor, layout: "_Layout"):
        self.name, self.buffer, self.view = name, buffer, view
        self.outside, self.offsets, self.count = layout.outside, layout.offsets, layout.count
        self.start = view.storage_offset()
        self.reference = layout.reference(buffer)

    def changed(self) -> list[int]:
        """Offsets (relative to the view's start) of guard elements whose bits changed."""
        now = _bits(self.buffer)[self.outside]
        if torch.equal(now, self.reference):  # the usual answer, in one comparison
            return []
        where = self.offsets[(now != self.reference).any(-1)]
        return [int(i) - self.start for i in where]

    def check(self, res: CheckResult, step, label: str = "") -> None:
        res.compared += self.count
        bad = self.changed()
        if bad:
            shown = ", ".join(map(str, bad[:8])) + (" ..." if len(bad) > 8 else "")
            res.fail(Finding(res.check, step, f"{label}{self.name}", (bad[0],), "guard unchanged", "written",
                             detail=f"wrote outside the tensor's view: {len(bad)} guard element(s) at offsets "
                                    f"{shown} (relative to the view's first element; view of {self.view.numel()} "
                                    f"element(s), strides {tuple(self.view.stride())})"))

    def check_view(self, res: CheckResult, step, before: torch.Tensor, label: str = "", what: str = "grad") -> None:
        """The view's own elements are bitwise what they were (an input the optimizer must not write)."""
        res.compared += self.view.numel()
        if self.view.numel() and not torch.equal(_bits(self.view), _bits(before)):
            diff = (_bits(self.view) != _bits(before)).any(-1)
            first = int(torch.nonzero(diff)[0])
            res.fail(Finding(res.check, step, f"{label}{self.name}", (first,), element(before, first),
                             element(self.view, first),
                             detail=f"{what} modified by step(): {int(diff.sum())} of {self.view.numel()} element(s)"
                                    f" (strides {tuple(self.view.stride())})"))


def allocate(values, dtype: torch.dtype, device, name: str, layout: str = "contiguous") -> tuple:
    """(view, Guard): a tensor holding `values` inside a guarded buffer. "strided" leaves a guarded
    gap after every element (stride 2 in the last dimension); "transposed" is a transposed view of a
    contiguous block."""
    x = to_tensor(values, dtype)
    shape = tuple(x.shape)
    if layout == "transposed" and len(shape) == 2:
        strides = (1, shape[0])  # the transpose of a contiguous (cols, rows) block
    else:
        strides = _contiguous_strides(shape)
        if layout == "strided":
            strides = tuple(2 * s for s in strides)
    span = (1 + sum((n - 1) * s for n, s in zip(shape, strides))) if x.numel() else 0
    buffer = torch.full((PAD + span + PAD + (1 if layout == "strided" else 0),), SENTINEL, dtype=dtype, device=device)
    view = torch.as_strided(buffer, shape, strides, PAD)
    with torch.no_grad():
        view.copy_(x)
    return view, Guard(name, buffer, view, _layout(buffer.numel(), shape, strides))


def _contiguous_strides(shape: tuple) -> tuple:
    """torch's strides of a contiguous tensor of `shape` (a size-1 dimension's stride as torch sets it)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class _Layout:
    """Where a view lies in its guarded buffer: which buffer elements are guards (a mask), their
    offsets in the buffer, and how many. The same for every buffer of one size, shape and strides,
    so made once for them (a case allocates its grads again at every step)."""

    def __init__(self, numel: int, shape: tuple, strides: tuple):
        inside = torch.zeros(numel, dtype=torch.bool)
        inside[torch.as_strided(torch.arange(numel), shape, strides, PAD).reshape(-1)] = True
        self.outside = ~inside
        self.offsets = torch.nonzero(self.outside).reshape(-1)
        self.count = int(self.offsets.numel())
        self._references: dict = {}

    def reference(self, buffer: torch.Tensor) -> torch.Tensor:
        """The guards' bits of a buffer of this layout just filled (every guard SENTINEL): the same for
        every buffer of one dtype and device, so read from the first one and shared (only read)."""
        key = (buffer.dtype, buffer.device)
        bits = self._references.get(key)
        if bits is None:
            bits = self._references[key] = _bits(buffer)[self.outside].clone()
        return bits


_LAYOUTS: dict = {}
LAYOUTS_KEPT = 1024


def _layout(numel: int, shape: tuple, strides: tuple) -> _Layout:
    key = (numel, shape, strides)
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) >= LAYOUTS_KEPT:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = _Layout(numel, shape, strides)
    return layout


__all__ = ["Guard", "LAYOUTS", "PAD", "SENTINEL", "allocate"]
