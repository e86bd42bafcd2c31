"""Fails on purpose: what a failing oracle test shows in pytest's own output."""
from mylib.optim import SloppyAdamW


def test_sloppy_adamw_matches_the_oracle(oracle_matches):
    oracle_matches(SloppyAdamW, optimizer="adamw", dtypes=["float32"], cases="adamw/fp32/wd0.1/single/normal")
