"""The oracle conventions the fused optimizers implement, by name.

The defaults of each class; a flag changes the convention as noted:
FusedAdam(bias_correction=False) -> bias_correction=False; FusedLAMB(use_nvlamb=True)
-> trust="always", FusedLAMB(adam_w_mode=False) -> decay="l2". FusedSGD's
flags (nesterov, dampening, maximize) are hyperparameters, not conventions;
FusedSGD and FusedLion keep a group counter where torch's SGD and the
reference Lion keep none (neither update reads it). `convention_of`
returns the convention of a configured optimizer's group.
"""
from __future__ import annotations

import dataclasses

from oracle.adagrad import AdagradConvention
from oracle.adam import AdamConvention
from oracle.lamb import LambConvention
from oracle.lion import LionConvention
from oracle.sgd import SGDConvention

CONVENTIONS = {
    "adam": AdamConvention(decay="l2", eps_mode="outside", counter="group"),
    "adamw": AdamConvention(decay="decoupled", eps_mode="outside", counter="group"),
    "adagrad": AdagradConvention(decay="l2", counter="group"),
    "adagrad_w": AdagradConvention(decay="decoupled", counter="group"),
    "lamb": LambConvention(),  # apex FusedLAMB
    "sgd": SGDConvention(decay="l2", first_step="copy", counter="group"),  # torch SGD's math
    "lion": LionConvention(sign_zero="zero", counter="group"),  # the reference Lion's math
}


def convention_of(optimizer, group: int = 0):
    """(oracle optimizer name, convention) for one group of a fused optimizer."""
    from .adagrad import FusedAdagrad
    from .adam import FusedAdam
    from .lamb import FusedLAMB
    from .lion import FusedLion
    from .sgd import FusedSGD

    g = optimizer.param_groups[group]
    if isinstance(optimizer, FusedAdam):
        name = "adamw" if g["adam_w_mode"] else "adam"
        return name, dataclasses.replace(CONVENTIONS[name], bias_correction=bool(g["bias_correction"]))
    if isinstance(optimizer, FusedAdagrad):
        return "adagrad", CONVENTIONS["adagrad_w" if g["adagrad_w_mode"] else "adagrad"]
    if isinstance(optimizer, FusedLAMB):
        conv = dataclasses.replace(CONVENTIONS["lamb"], decay="decoupled_update" if g["adam_w_mode"] else "l2",
                                   trust="always" if g["use_nvlamb"] else "decay_only",
                                   bias_correction="moments" if g["bias_correction"] else "none")
        return "lamb", conv
    if isinstance(optimizer, FusedSGD):
        return "sgd", CONVENTIONS["sgd"]
    if isinstance(optimizer, FusedLion):
        return "lion", CONVENTIONS["lion"]
    raise TypeError(f"not a fused optimizer: {type(optimizer).__name__}")
