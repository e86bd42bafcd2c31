"""torch's distributed wrappers (oracle.compare.scenarios.torch_wrappers) through the wrapped
scenario: real gloo ranks, each wrapper a parameter of the same scenario."""
import numpy as np
import pytest
import torch

from oracle.compare import scenarios as S
from oracle.compare.scenarios.torch_modules import Holder
from oracle.compare.scenarios.torch_wrappers import WRAPPERS, Gathered
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


def test_gathered_view_of_a_plain_optimizer_is_the_optimizer():
    # without DTensors, full() is the identity: the view reads the same tensors and state
    model = Holder([[torch.tensor([1.0, -2.0])], [torch.tensor([3.0])]])
    opt = torch.optim.Adam([{"params": ps} for ps in model.param_groups()], lr=0.1)
    model([[torch.tensor([0.5, 0.25])], [torch.tensor([1.0])]]).backward()
    opt.step()
    view = Gathered(opt)
    groups = view.param_groups
    assert [len(g["params"]) for g in groups] == [1, 1]
    p = groups[0]["params"][0]
    assert torch.equal(p, model.param_groups()[0][0].detach())
    st = view.state[p]
    assert float(st["step"]) == 1.0 and torch.equal(st["exp_avg"], opt.state[model.param_groups()[0][0]]["exp_avg"])
    assert len(view.state) == 2
    with pytest.raises(KeyError):
        view.state[torch.zeros(2)]  # only the params of the last param_groups read are keys


def test_fsdp2_wrappers_shard_a_param_with_fewer_rows_than_ranks():
    # at world 4, dim-0 sharding leaves ranks without rows: (3, 2), (2, 2) and (3,) at least
    rows = [s[0] for ss in W.SHAPES for s in ss]
    assert any(r < 4 for r in rows) and any(r % 4 for r in rows)
    assert {"fsdp2", "fsdp2_layers", "fsdp2_bf16", "dcp_reshard"} <= set(WRAPPERS)


def _fails_only(r, known):
    """Every check passed but `known` (a defect with a known.toml entry), which failed."""
    bad = {n for n, c in r.checks.items() if not c.passed}
    assert bad == set(known), (r.reason, _failed(r))


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")
def test_fsdp2_per_layer_uneven_shards_reshard_and_the_fake_step():
    r = S.SCENARIOS["fsdp2_layers"].run(find("torch.adamw.forloop"), "cpu", 0, worlds=(2, 4))
    # get_optimizer_state_dict before any step leaves counters at 1 (pytorch#164929)
    _fails_only(r, {"checkpoint_init"})
    assert any("step" in f.tensor and f.got == 1.0 for f in r.checks["checkpoint_init"].findings)
    assert "[3, 0, 0, 0, 0, 0]" in r.checks["lockstep"].note  # rank 3 of 4 holds no row of five params
    assert r.checks["counters"].compared > 0 and r.checks["lockstep"].compared > 0
    assert r.checks["reshard"].compared > 0  # the 4 -> 2 continuation, bit for bit


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")
def test_fsdp2_bf16_compute_steps_the_fp32_masters_on_fp32_grads():
    r = S.SCENARIOS["fsdp2_bf16"].run(find("torch.adam.foreach"), "cpu", 0, worlds=(2,))
    _fails_only(r, {"checkpoint_init"})
    assert r.checks["allreduce"].compared > 0  # the reduced grads equal the exact mean


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")
def test_dcp_sharded_checkpoint_reshards_both_ways():
    r = S.SCENARIOS["dcp_reshard"].run(find("torch.sgd.forloop"), "cpu", 0, worlds=(2, 4))
    _fails_only(r, {"checkpoint_init"})  # SGD: the fake step leaves wd * p in the momentum buffers
    assert r.checks["reshard"].compared > 0 and r.checks["reshard"].passed  # 4 -> 2 and 2 -> 4


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")
def test_fsdp2_catches_a_group_skipped_where_its_shards_are_empty():
    """A group whose params have no rows on a rank never counts there: only world 4 shows it."""
    r = S.SCENARIOS["fsdp2"].run(load_impl("tests.broken.scenario_mutants:EmptyShardGroupNoCounter"),
                                 "cpu", 0, worlds=(4,))
    assert r.status == "fail"
    assert any("rank 3 group 1 step" in f.tensor for f in r.checks["counters"].findings)
    assert not any("rank 0 " in f.tensor for f in r.checks["counters"].findings)  # rank 0 holds rows of all


_INHERITED = """
import os, sys, torch.distributed as dist
from oracle.compare.isolation.ranks import free_port
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
dist.init_process_group("gloo", rank=0, world_size=1)  # as DeepSpeed's single-process setup leaves it
from oracle.compare import scenarios as S
from oracle.compare.registry import load_impl
r = S.SCENARIOS["zero_redundancy"].run(load_impl("tests.broken.scenario_mutants:EmptyGroupNoCounter"), "cpu", 0,
                                       worlds=(2,))
print(r.status, r.reason, [f.tensor for f in r.checks["counters"].findings][:3] if "counters" in r.checks else "")
"""


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")
def test_a_process_with_its_own_default_group_spawns_the_ranks():
    """CI ran these scenarios in a pytest worker where a DeepSpeed test had left a default
    process group; forked ranks inherited it and every wrapped row errored."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _INHERITED], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    status, _, rest = out.stdout.strip().splitlines()[-1].partition(" ")
    assert status == "fail" and "group 1 step" in rest, out.stdout[-3000:]


@pytest.mark.parametrize("wrapper", sorted(w for w, spec in WRAPPERS.items() if spec.dtensor))
def test_a_target_that_cannot_take_dtensors_is_skipped_by_the_dtensor_wrappers_naming_why(wrapper):
    """FSDP2 hands the optimizer DTensor params; our fused kernels (and DeepSpeed's, bitsandbytes') read
    raw storage: they are skipped there, with the target's own reason, before any rank starts."""
    r = S.SCENARIOS[wrapper].run(find("fused.adamw"), "cpu", 0, worlds=(1,))
    assert r.status == "skip", (r.status, r.reason)
    assert f"{wrapper} hands the optimizer DTensor params, and fused.adamw cannot take them" in r.reason
    assert r.seconds < 5  # no rank was launched


def test_the_wrappers_that_hand_out_plain_tensors_still_run_every_target():
    assert {w for w, spec in WRAPPERS.items() if not spec.dtensor} == {"ddp_bucket_view", "zero_redundancy"}


def test_torch_fused_paths_without_a_dtensor_rule_say_so():
    """torch 2.13 has DTensor rules for _fused_adam(w)_ but none for _fused_adagrad_ or _fused_sgd_: the
    records say which (the error it raised is in the reason), the other torch paths take DTensors."""
    from oracle.compare.registry import every_target
    refusing = {t.name for t in every_target() if t.name.startswith("torch.") and t.no_dtensor}
    assert refusing == {"torch.adagrad.fused", "torch.sgd.fused"}
    assert "aten._fused_sgd_" in find("torch.sgd.fused").no_dtensor


def test_the_dtensor_rules_torch_registers_are_the_ones_the_records_assume():
    """The records' statement checked against torch itself (its DTensor op registry): the fused Adam
    ops have a sharding rule, the fused Adagrad and SGD ops have none."""
    import torch.distributed.tensor._ops  # noqa: F401 - registers the rules
    from torch.distributed.tensor import DTensor
    prop = DTensor._op_dispatcher.sharding_propagator
    ruled = {str(op) for attr in ("op_strategy_funcs", "op_to_rules", "op_single_dim_strategy_funcs")
             for op in getattr(prop, attr, {})}
    assert "aten._fused_adam_.default" in ruled and "aten._fused_adamw_.default" in ruled
    assert "aten._fused_adagrad_.default" not in ruled and "aten._fused_sgd_.default" not in ruled


def test_an_optimizer_of_matrices_gets_the_wrapped_params_as_matrices():
    """Muon takes 2-D params only (its spec's param_ranks): the wrapped scenario gives it each of
    SHAPES as a matrix of as many elements (its bias-like vectors included), and its data and
    initial values in those shapes; every other optimizer gets SHAPES unchanged."""
    muon, adamw = find("torch.muon.forloop"), find("torch.adamw.forloop")
    shapes = W.shapes_of(muon)
    assert all(len(s) == 2 for ss in shapes for s in ss)
    assert [[int(np.prod(s)) for s in ss] for ss in shapes] == [[int(np.prod(s)) for s in ss] for ss in W.SHAPES]
    assert W.shapes_of(adamw) == [list(ss) for ss in W.SHAPES]
    start = W.initial(0, "cpu", shapes)
    assert [[tuple(t.shape) for t in ts] for ts in start] == [[tuple(s) for s in ss] for ss in shapes]
    assert [[x.shape for x in xs] for xs in W.local_data(0, 1, 0, 2, shapes)] == [[tuple(s) for s in ss] for ss in shapes]
