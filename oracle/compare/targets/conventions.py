"""Every named convention preset, by library: the finite set of conventions
real implementations are known to follow (what inference chooses among, and
what a report can name). Each preset is defined where its evidence is: the
specification's own presets in oracle/<optimizer>.py, a library's in its
target module here.

A preset names a library that follows it. An oracle option that no current
library uses (SGD's dampened first step, mlx #440 before its fix; Lion's
copysign on its own, which only DeepSpeed's CPU Lion uses, with its per-param
counter) stays declarable but is not a preset: inference would otherwise
explain the very defect that option describes (the mutation gate, run with
--undeclared, checks that it does not).
"""
from __future__ import annotations


def catalog() -> dict[str, tuple[str, object]]:
    """preset name -> (oracle optimizer, convention)."""
    from oracle import adagrad, adam, lamb, lion, sgd

    from . import deepspeed, extra, gpu
    return {
        "torch.adam": ("adam", adam.TORCH_ADAM),
        "torch.adamw": ("adamw", adam.TORCH_ADAMW),
        "torch.nadam": ("adam", adam.TORCH_NADAM),
        "torch.nadamw": ("adamw", adam.TORCH_NADAMW),
        "optax.adam": ("adam", adam.OPTAX_ADAM),
        "optax.adamw": ("adamw", adam.OPTAX_ADAMW),
        "optax.amsgrad": ("adam", adam.OPTAX_AMSGRAD),
        "optax.amsgrad.nu_uncorrected": ("adam", adam.OPTAX_AMSGRAD_NU_UNCORRECTED),
        "optax.nadam": ("adam", adam.OPTAX_NADAM),
        "optax.nadamw": ("adamw", adam.OPTAX_NADAMW),
        "keras.adamw": ("adamw", adam.KERAS_ADAMW),
        "transformers.adamw": ("adamw", adam.TRANSFORMERS_ADAMW),
        "apex.adamw": ("adamw", adam.APEX_ADAMW),
        "apex.adam": ("adam", gpu.APEX_ADAM),
        "deepspeed.cpu_adam.adamw": ("adamw", deepspeed.DS_CPU_ADAMW),
        "deepspeed.cpu_adam.adam": ("adam", deepspeed.DS_CPU_ADAM),
        "deepspeed.cuda.adamw": ("adamw", gpu.DS_CUDA_ADAMW),
        "deepspeed.cuda.adam": ("adam", gpu.DS_CUDA_ADAM),
        "bitsandbytes.adam": ("adam", extra.BNB_ADAM),
        "torchao.adamw": ("adamw", extra.TORCHAO_ADAMW),
        "torch.adagrad": ("adagrad", adagrad.TORCH_ADAGRAD),
        "optax.adagrad": ("adagrad", adagrad.OPTAX_ADAGRAD),
        "deepspeed.cpu_adagrad": ("adagrad", adagrad.DEEPSPEED_ADAGRAD),
        "apex.adagrad": ("adagrad", gpu.APEX_ADAGRAD),
        "apex.adagrad_w": ("adagrad", gpu.APEX_ADAGRAD_W),
        "bitsandbytes.adagrad": ("adagrad", extra.BNB_ADAGRAD),
        "apex.lamb": ("lamb", lamb.APEX_LAMB),
        "nvlamb": ("lamb", lamb.NVLAMB),
        "paper.lamb": ("lamb", lamb.PAPER_LAMB),
        "deepspeed.lamb": ("lamb", lamb.DEEPSPEED_LAMB),
        "pytorch_optimizer.lamb": ("lamb", lamb.PYTORCH_OPTIMIZER_LAMB),
        "optax.lamb": ("lamb", lamb.OPTAX_LAMB),
        "torch.sgd": ("sgd", sgd.TORCH_SGD),
        "decoupled.sgd": ("sgd", sgd.DECOUPLED_SGD),
        "reference.lion": ("lion", lion.REFERENCE_LION),
        "deepspeed.cpu_lion": ("lion", lion.DEEPSPEED_LION),
    }


def named(optimizer: str, convention) -> str | None:
    """The preset's name for a convention, if it is one."""
    return next((name for name, (opt, conv) in catalog().items() if opt == optimizer and conv == convention), None)


__all__ = ["catalog", "named"]
