"""Bitwise state comparison (oracle.compare.checking.bitwise): every pair of values it can meet gives a verdict,
never an exception. A multi-element tensor against a plain value once raised "Boolean value of Tensor
with more than one value is ambiguous" in the wrapped scenarios' reshard check (bitsandbytes state)."""
import numpy as np
import pytest
import torch

from oracle.compare.checking.bitwise import compare_bits
from oracle.compare.measuring.checks import CheckResult


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("expected,got,same", [
    (torch.tensor([1.0, 2.0]), 5, False),
    (7, torch.tensor([1.0, 2.0]), False),
    (torch.tensor([1.0, 2.0]), [1.0, 2.0], False),
    (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]), True),
    (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0]), False),
    (float("nan"), float("nan"), True),
    (3, 3, True),
    ((torch.tensor([1.0, 2.0]), 0.9), (torch.tensor([1.0, 2.0]), 0.9), True),  # a group value holding tensors
    ((torch.tensor([1.0, 2.0]), 0.9), (torch.tensor([1.0, 2.5]), 0.9), False),
    ({"a": [torch.tensor([1.0, 2.0])]}, {"a": [torch.tensor([1.0, 2.0])]}, True),
    (np.array([1.0, 2.0]), np.array([1.0, 2.0]), True),  # == is elementwise: compared bit for bit
    (np.array([1.0, 2.0]), np.array([1.0, 2.5]), False),
])
@pytest.mark.parametrize("name", ["group 0 param 0 state1", "group 0 param 0 step"])
def test_any_two_values_get_a_verdict(expected, got, same, strict, name):
    res = CheckResult("reshard")
    compare_bits(res, 1, {name: expected}, {name: got}, "reload", strict=strict)
    assert res.passed is same, [f.__dict__ for f in res.findings]
    if not same:
        assert res.findings and res.findings[0].tensor == name


@pytest.mark.parametrize("strict", [False, True])
def test_a_one_element_counter_against_a_tensor_of_several(strict):
    """The case that raised: a counter tensor of one element (compared as a number in strict mode)
    against a tensor of several under the same name."""
    res = CheckResult("reshard")
    compare_bits(res, 1, {"group 0 param 0 step": torch.tensor(3.0)},
                 {"group 0 param 0 step": torch.tensor([3.0, 3.0])}, "reload", strict=strict)
    assert not res.passed and "(2,)" in str(res.findings[0].got)
