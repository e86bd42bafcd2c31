"""torch's distributed wrappers (oracle.compare.dist_wrappers) through the wrapped
scenario: real gloo ranks, each wrapper a parameter of the same scenario."""
import numpy as np
import pytest
import torch

from oracle.compare import scenarios as S
from oracle.compare.dist_wrappers import WRAPPERS, Holder
from oracle.compare.registry import find, load_impl
from oracle.compare.scenarios import wrapped_worker as W


def test_each_wrapper_is_a_scenario_of_the_one_runner():
    for name in WRAPPERS:
        sc = S.SCENARIOS[name]
        assert sc.doc and not sc.engine and sc.run.__name__ == f"run_{name}"


@pytest.mark.parametrize("world", (1, 2, 4))
def test_the_data_parallel_mean_is_exact_in_float32_and_world_independent(world):
    # what DDP computes: each rank's local mean, pre-divided by the world size, summed in float32
    for k in (1, 2):
        want = W.global_grads(0, k)
        for g, ss in enumerate(W.SHAPES):
            for i in range(len(ss)):
                local = [torch.tensor(W.local_data(0, k, r, world)[g][i], dtype=torch.float32) for r in range(world)]
                total = torch.zeros_like(local[0])
                for x in local:
                    total += x / world
                assert np.array_equal(total.double().numpy(), want[g][i])


def test_holder_grad_is_the_data():
    params = [[torch.tensor([1.0, -2.0]), torch.tensor([3.0])]]
    model = Holder(params)
    data = [[torch.tensor([0.25, -0.5]), torch.tensor([0.125])]]
    model(data).backward()
    got = [p.grad for p in model.param_groups()[0]]
    assert torch.equal(got[0], data[0][0]) and torch.equal(got[1], data[0][1])


def _failed(r):
    return {n: c.findings[:2] for n, c in r.checks.items() if not c.passed}


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")  # real gloo processes on local ports: one at a time
def test_ddp_bucket_views_with_torch_fused():
    r = S.SCENARIOS["ddp_bucket_view"].run(find("torch.adamw.fused"), "cpu", 0, worlds=(1, 2))
    assert r.status == "pass", (r.reason, _failed(r))
    note = r.checks["lockstep"].note
    assert "at a nonzero offset" in note and "0 at a nonzero offset" not in note  # grads really are bucket views
    assert r.checks["allreduce"].compared > 0 and r.checks["sync"].compared > 0


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")
def test_zero_redundancy_reshards_and_leaves_a_group_empty():
    r = S.SCENARIOS["zero_redundancy"].run(find("torch.adagrad.forloop"), "cpu", 0, worlds=(1, 2, 4))
    assert r.status == "pass", (r.reason, _failed(r))
    assert "[1, 0]" in r.checks["lockstep"].note  # some rank steps no param of group 1
    assert r.checks["reshard"].compared > 0  # 4->2, 4->1 and 1->4 continuations, bit for bit


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")
def test_zero_redundancy_catches_an_empty_group_without_counter():
    """TransformerEngine #1986's defect under ZeRO-1: the group a rank holds no param of never counts."""
    r = S.SCENARIOS["zero_redundancy"].run(load_impl("tests.broken.scenario_mutants:EmptyGroupNoCounter"),
                                           "cpu", 0, worlds=(2,))
    assert r.status == "fail"
    assert any("group 1 step" in f.tensor for f in r.checks["counters"].findings)
