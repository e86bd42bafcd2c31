"""A correct blockwise 8-bit AdamW (the control) and the defects quantized optimizers have shipped.

The control is torch.optim.AdamW's update in float32 (decoupled decay, eps outside the root,
per-param counter) with both moments stored as bitsandbytes lays them out (state1/state2 uint8
codes, absmax1/absmax2 per 256-element block, qmap1/qmap2 the signed and unsigned dynamic maps),
quantized to the nearest code as oracle.quantized specifies (the "bnb.dynamic8" formats), for params
of >= 4096 elements; smaller params keep float32 state1/state2. The param update reads the float32
moments before they are quantized, as bitsandbytes and torchao do. Its stochastic-rounding form
(Blockwise8bitAdamWSR, bf16 params only) rounds the param as torchao's bf16_stochastic_round does; its
mutants are judged by the `rounding` check (oracle.compare.measuring.stochastic).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from oracle import quantized as Q
from oracle.adam import TORCH_ADAMW

from ..base import _Base
from ..catalog import Mutant

SIGNED, UNSIGNED = Q.FORMATS["bnb.dynamic8"], Q.FORMATS["bnb.dynamic8u"]


class Blockwise8bitAdamW(_Base):
    """torch.optim.AdamW semantics, fp32 math, moments in blockwise 8-bit dynamic codes
    (bitsandbytes' layout, nearest code, ties down)."""

    ORACLE_OPTIMIZER = "adamw"
    ORACLE_CONVENTION = TORCH_ADAMW
    ORACLE_STATE_DTYPE = "float32"
    ORACLE_DEVICES = ("cpu",)
    ORACLE_STATE_NAMES = {"state1": "exp_avg", "state2": "exp_avg_sq"}
    ORACLE_QUANTIZED = {"exp_avg": ("bnb.dynamic8", "state1", "absmax1", "qmap1"),
                        "exp_avg_sq": ("bnb.dynamic8u", "state2", "absmax2", "qmap2")}
    BLOCK = 256

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    # --- the format (overridden by the mutants)
    def _code_book(self, signed: bool) -> torch.Tensor:
        return torch.from_numpy((SIGNED if signed else UNSIGNED).codes.copy())

    def _scales(self, x: torch.Tensor) -> torch.Tensor:
        """The absmax of each block of the flattened x."""
        flat = x.reshape(-1)
        pad = (-flat.numel()) % self.BLOCK
        return torch.cat([flat, flat.new_zeros(pad)]).abs().reshape(-1, self.BLOCK).amax(dim=1)

    def _block_of(self, numel: int) -> torch.Tensor:
        return torch.arange(numel) // self.BLOCK

    def _quantize(self, x, code, codes_out, scale_out) -> None:
        s = self._scales(x)
        n = (x.reshape(-1) / s[self._block_of(x.numel())]).nan_to_num(0.0)
        k = (torch.searchsorted(code, n, right=True) - 1).clamp(0, code.numel() - 1)
        up = (k + 1).clamp(max=code.numel() - 1)
        nearer_up = (n - code[up]).abs() < (n - code[k]).abs()
        codes_out.copy_(torch.where(nearer_up, up, k).to(torch.uint8).reshape(codes_out.shape))
        scale_out.copy_(s)

    def _dequantize(self, codes, code, scale) -> torch.Tensor:
        flat = code[codes.reshape(-1).long()] * scale[self._block_of(codes.numel())]
        return flat.reshape(codes.shape)

    # --- state and update
    def _init_state(self, p, group):
        st = self.state[p]
        if st:
            return
        st["step"] = 0
        if p.numel() < SIGNED.min_numel:
            st["state1"] = torch.zeros_like(p, dtype=torch.float32)
            st["state2"] = torch.zeros_like(p, dtype=torch.float32)
            return
        blocks = math.ceil(p.numel() / self.BLOCK)
        for k, signed in (("1", True), ("2", False)):
            st[f"state{k}"] = torch.zeros_like(p, dtype=torch.uint8)
            st[f"absmax{k}"] = torch.zeros(blocks, dtype=torch.float32)
            st[f"qmap{k}"] = self._code_book(signed)

    def _moments(self, st):
        if st["state1"].dtype == torch.float32:
            return st["state1"].clone(), st["state2"].clone()
        return (self._dequantize(st["state1"], st["qmap1"], st["absmax1"]),
                self._dequantize(st["state2"], st["qmap2"], st["absmax2"]))

    def _store_moments(self, st, m, v) -> None:
        if st["state1"].dtype == torch.float32:
            st["state1"].copy_(m)
            st["state2"].copy_(v)
            return
        self._quantize(m, st["qmap1"], st["state1"], st["absmax1"])
        self._quantize(v, st["qmap2"], st["state2"], st["absmax2"])

    def _decay(self, pf, g, group):
        pf.mul_(1 - group["lr"] * group["weight_decay"])
        return g

    def _update(self, p, st, group):
        st["step"] += 1
        t = st["step"]
        b1, b2 = group["betas"]
        g = self._grad(p, group)
        pf = self._master(p, st)
        g = self._decay(pf, g, group)
        m, v = self._moments(st)
        m = m.mul(b1).add(g, alpha=1 - b1)
        v = v.mul(b2).addcmul(g, g, value=1 - b2)
        denom = (v.sqrt() / math.sqrt(1 - b2 ** t)).add(group["eps"])
        pf.addcdiv_(m, denom, value=-group["lr"] / (1 - b1 ** t))
        self._store(p, st, pf)
        self._store_moments(st, m, v)


class BNB227DynamicMapLoopIndent(Mutant, Blockwise8bitAdamW):
    PROVENANCE = ("modelled on bitsandbytes #227 (0.36.0-0.41.0: create_dynamic_map's additional-items block "
                  "indented into the exponent loop; fixed by PR #262 in 0.41.1; transformers PR #25575 warns)")
    DESCRIPTION = ("the unsigned dynamic map built with its additional-items block run once per exponent "
                   "instead of once, its 256 codes then the smallest of them")
    EXPECT = ("quantized", "exp_avg_sq code book", 1, "blocks")

    def _code_book(self, signed):
        if signed:
            return super()._code_book(signed)
        return torch.from_numpy(_indented_unsigned_map())


class AbsmaxFromNextBlock(Mutant, Blockwise8bitAdamW):
    PROVENANCE = "a defect class this project's issue 33 names (no shipped instance known to us)"
    DESCRIPTION = "dequantization multiplies each block's codes by the next block's absmax"
    EXPECT = ("lockstep", "param", 2, "blocks")  # step 2: the first step to read a stored moment

    def _dequantize(self, codes, code, scale):
        shifted = torch.cat([scale[1:], scale[-1:]])
        return super()._dequantize(codes, code, shifted)


class BlockSizeOffByOne(Mutant, Blockwise8bitAdamW):
    PROVENANCE = "a defect class this project's issue 33 names (no shipped instance known to us)"
    DESCRIPTION = "quantized in blocks of 255 elements while the format's blocks are 256"
    EXPECT = ("quantized", "codes", 1, "blocks")

    def _block_of(self, numel):
        return torch.clamp(torch.arange(numel) // (self.BLOCK - 1), max=math.ceil(numel / self.BLOCK) - 1)

    def _scales(self, x):
        idx = self._block_of(x.numel())
        out = torch.zeros(math.ceil(x.numel() / self.BLOCK), dtype=torch.float32)
        return out.scatter_reduce(0, idx, x.reshape(-1).abs(), reduce="amax", include_self=True)


class BNB1992CoupledDecay8bit(Mutant, Blockwise8bitAdamW):
    PROVENANCE = ("the defect of bitsandbytes #1992 (fixed by PR #1993: its 8-bit Lion decayed one way, the "
                  "32-bit paths the other), here in AdamW")
    DESCRIPTION = "params with 8-bit state take L2 decay g + wd*p; params with float32 state decoupled"
    EXPECT = ("lockstep", "param", 1, "blocks")

    def _decay(self, pf, g, group):
        if pf.numel() < SIGNED.min_numel:
            return super()._decay(pf, g, group)
        return g.add(pf, alpha=group["weight_decay"])


class FourBitMapWith8bitCodes(Mutant, Blockwise8bitAdamW):
    PROVENANCE = "a defect class this project's issue 33 names (no shipped instance known to us)"
    DESCRIPTION = "the first moment's 8-bit codes index a 4-bit dynamic map padded to 256 entries"
    EXPECT = ("quantized", "exp_avg code book", 1, "blocks")

    def _code_book(self, signed):
        if not signed:
            return super()._code_book(signed)
        four = Q.dynamic_map(True, 3, 4)
        return torch.from_numpy(np.sort(np.concatenate([four, np.zeros(256 - four.size, dtype=np.float32)])))


class Blockwise8bitAdamWSR(Blockwise8bitAdamW):
    """Blockwise8bitAdamW on bf16 params rounded stochastically on store (torchao's bf16_stochastic_round):
    the float32 result's upper 16 bits, plus one bf16 ULP away from zero when a uniform 16-bit integer
    is below its low 16 bits."""

    ORACLE_DTYPES = ("bfloat16",)
    ORACLE_ROUNDING = "stochastic"

    def _store(self, p, st, pf):
        p.copy_(self._round_stochastic(pf) if p.dtype == torch.bfloat16 else pf)

    def _round_stochastic(self, x: torch.Tensor) -> torch.Tensor:
        bits = x.contiguous().view(torch.int32)
        low, toward = bits & 0xFFFF, bits & -0x10000   # -0x10000: 0xFFFF0000 as an int32
        r = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32)
        out = torch.where(self._away(r, low), toward + 0x10000, toward)
        return out.view(torch.float32).to(torch.bfloat16)   # exact: the low 16 bits are zero

    def _away(self, r: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
        """Round away from zero: with probability low / 2^16."""
        return r < low


class OneTrainer994RoundedTwice(Mutant, Blockwise8bitAdamWSR):
    PROVENANCE = ("the defect of OneTrainer #994 (its Adafactor's stochastically rounded param overwritten by the "
                  "p.copy_ that follows, two ifs where an elif was meant; fixed by PR #995), here in 8-bit AdamW")
    DESCRIPTION = "the stochastically rounded param overwritten by a plain copy_: round to nearest after all"
    EXPECT = ("rounding", "stochastic rounding", None, "blocks")

    def _store(self, p, st, pf):
        super()._store(p, st, pf)
        p.copy_(pf)


class SR15BitProbability(Mutant, Blockwise8bitAdamWSR):
    PROVENANCE = ("a synthetic variant (no shipped instance known to us) of the biased stochastic roundings "
                  "graphcore-research/gfloat PR #36 compares, for this project's issue 33")
    DESCRIPTION = ("stochastic rounding whose probability is read from the low 15 of the 16 dropped bits: "
                   "P(away) = 2p mod 1, a neighbour always, biased in distribution")
    EXPECT = ("rounding", "stochastic rounding", None, "blocks")

    def _away(self, r, low):
        return (r & 0x7FFF) < (low & 0x7FFF)


def _indented_unsigned_map() -> np.ndarray:
    """The unsigned map with the additional-items block run once per exponent (7 times instead of
    once), under the parameterization that makes it non-empty for an unsigned 8-bit map (all 8 bits
    for magnitude: 2**(8-7) - 1 = 1 additional item per run); sorted, the first 256 kept."""
    data = []
    for i in range(7):
        b = Q.linspace_f32(0.1, 1.0, 2 ** (i + 1) + 1)
        data += list(np.float32(10.0 ** (-6 + i)) * ((b[:-1] + b[1:]) / np.float32(2.0)))
        extra = Q.linspace_f32(0.1, 1.0, 2)
        data += list(np.float32(10.0 ** (-6 + i)) * ((extra[:-1] + extra[1:]) / np.float32(2.0)))
    data += [np.float32(0.0), np.float32(1.0)]
    return np.sort(np.array(data, dtype=np.float32))[:256]


CONTROLS = [Blockwise8bitAdamW, Blockwise8bitAdamWSR]
MUTANTS = [BNB227DynamicMapLoopIndent, AbsmaxFromNextBlock, BlockSizeOffByOne, BNB1992CoupledDecay8bit,
           FourBitMapWith8bitCodes, OneTrainer994RoundedTwice, SR15BitProbability]
