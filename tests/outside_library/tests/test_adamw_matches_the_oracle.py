"""Our optimizers against the float64 oracle (the `oracle_matches` fixture and `@pytest.mark.oracle`
come from optimizer-oracle's pytest plugin: nothing to import or register)."""
import pytest

from mylib.optim import MyAdamW, SloppyAdamW


def test_my_adamw_matches_the_oracle(oracle_matches):
    oracle_matches(MyAdamW, optimizer="adamw", dtypes=["float32"], cases="*/wd0.1/single/*")


@pytest.mark.oracle(optimizer="adamw", dtypes=["float32", "bfloat16"], cases="*/wd0.1/*")
def test_my_adamw_case_by_case(oracle_case):
    oracle_case.check(MyAdamW)


def test_the_oracle_catches_a_bias_correction_a_step_ahead(oracle_matches):
    with pytest.raises(AssertionError, match=r"lockstep step 1 .* ULP > bound .* ULP"):
        oracle_matches(SloppyAdamW, optimizer="adamw", dtypes=["float32"], cases="*/wd0.1/single/*")
