"""pytest plugin (entry point `pytest11`, loaded wherever optimizer-oracle is installed): the oracle
in a library's own test suite.

    def test_my_adamw_matches_the_oracle(oracle_matches):
        oracle_matches(MyAdamW, optimizer="adamw", dtypes=["float32"])

    @pytest.mark.oracle(optimizer="adamw", dtypes=["float32", "bfloat16"])
    def test_my_adamw(oracle_case):            # one test per case of the matrix
        oracle_case.check(MyAdamW)

`oracle_matches` is oracle.testing.assert_optimizer_matches; `@pytest.mark.oracle(optimizer, dtypes=,
cases=, scenarios=, steps=, seeds=, device=)` parametrizes a test's `oracle_case` argument over
oracle.testing.oracle_cases(...), ids = the case names. A failure's message is the failure line of
`python -m oracle.compare` (check, tensor, index, expected, got, error and bound in ULPs) with its
repro command. Loading the plugin imports neither torch nor the comparison engine.
"""
from __future__ import annotations

import pytest

MARKER = ("oracle(optimizer, dtypes=None, cases=None, scenarios=None, steps=20, seeds=(0,), device='cpu'): "
          "parametrize the test's `oracle_case` argument over the oracle's cases (oracle.testing.oracle_cases)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", MARKER)


@pytest.fixture
def oracle_matches():
    """oracle.testing.assert_optimizer_matches(factory, optimizer=..., dtypes=..., cases=...)."""
    from oracle.testing import assert_optimizer_matches
    return assert_optimizer_matches


def pytest_generate_tests(metafunc) -> None:
    if "oracle_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("oracle")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} takes `oracle_case` but has no "
                                f"@pytest.mark.oracle(optimizer=...) saying which cases")
    from oracle.testing import oracle_cases
    params = oracle_cases(*marker.args, **marker.kwargs)
    metafunc.parametrize("oracle_case", params, ids=[p.id for p in params])
