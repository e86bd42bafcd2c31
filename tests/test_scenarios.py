"""Scenarios (oracle.compare.scenarios): torch's paths pass (or fail only on the
genuine torch defects listed in reports/known.toml), and each scenario FAILS on
a deliberately broken implementation of exactly its defect, with a finding
naming the check, the step and the tensor."""
import json
from dataclasses import replace

import pytest

from oracle.compare.reporting import report
from oracle.compare import scenarios as S
from oracle.compare.registry import builtin_targets, load_impl, torch_targets
from tests.broken import scenario_mutants as M

TORCH = {t.name: t for t in torch_targets()}
SINGLE_PROCESS = ("construction", "checkpoint", "grad_scaling", "irregular", "long_horizon", "inputs_unchanged",
                  "lr_schedule")


def mutant(name):
    t = load_impl(f"tests.broken.scenario_mutants:{name}")
    return replace(t, scaling=lambda opt, inv_scale, found_inf: opt.step(inv_scale=inv_scale, found_inf=found_inf))


def findings(result, check):
    return result.checks[check].findings


def expected_failures(target_name, scenario):
    """Genuine torch 2.13 defects (reports/known.toml): these checks fail on torch."""
    out = set()
    if scenario == "irregular" and target_name.endswith(".fused"):
        out |= {"noncontiguous", "bounds"}  # bounds: the strided param's gaps written (known entry)
    if scenario == "construction" and target_name.startswith("torch.adagrad."):
        out.add("eager_init")
    if scenario == "irregular" and target_name.startswith("torch.adafactor."):
        out.add("zero_numel")  # step() raises on an empty param (torch-adafactor-zero-numel-irregular)
        out.add("mixed_dtypes_format_eps")  # one eps1 for every dtype (torch-adafactor-eps1-first-param-dtype)
    if scenario == "checkpoint" and target_name.startswith(("torch.asgd.", "torch.nadam.")):
        # bf16 float32 scalars cast to the param dtype on load: ASGD's eta/mu (torch-asgd-eta-mu-downcast),
        # NAdam's mu_product (torch-nadam-mu-product-downcast-checkpoint)
        out.add("roundtrip")
    if target_name == "torch.sgd.fused":  # fused SGD: bf16 left unchanged, late first grad, skipped first step
        out |= {"construction": {"first_step"}, "grad_scaling": {"found_inf"},
                "irregular": {"grad_none"},
                "long_horizon": {f"lockstep@{n}/{d}" for n in (256, 2048) for d in ("bf16", "fp16")}}.get(scenario, set())
    return out


def test_api():
    assert list(S.SCENARIOS) == ["rank_skew", "construction", "checkpoint", "grad_scaling", "irregular",
                                 "long_horizon", "inputs_unchanged", "lr_schedule", "ddp_bucket_view", "zero_redundancy",
                                 "fsdp2", "fsdp2_layers", "fsdp2_bf16", "dcp_reshard",
                                 "engine_construction", "engine_roundtrip"]
    # the multi-process wrappers run when named (minutes per target), the rest in every default sweep
    assert [n for n, sc in S.SCENARIOS.items() if not sc.in_default] == [
        "ddp_bucket_view", "zero_redundancy", "fsdp2", "fsdp2_layers", "fsdp2_bf16", "dcp_reshard"]
    for name, sc in S.SCENARIOS.items():
        assert sc.name == name and sc.doc and callable(sc.run)
    # engine scenarios apply to training-engine targets only, the others to optimizers only
    optimizer_target = TORCH["torch.adamw.forloop"]
    assert [n for n, sc in S.SCENARIOS.items() if sc.applies(optimizer_target)] == [
        n for n in S.SCENARIOS if not n.startswith("engine_")]


@pytest.mark.parametrize("scenario", SINGLE_PROCESS)
@pytest.mark.parametrize("target", sorted(TORCH))
def test_torch_paths(target, scenario):
    r = S.SCENARIOS[scenario].run(TORCH[target], "cpu", 0)
    assert r.case.startswith(f"scenario:{scenario}/") and r.target == target
    failed = {n for n, c in r.checks.items() if not c.passed}
    want = expected_failures(target, scenario)
    if target == "torch.sgd.fused" and scenario == "checkpoint":
        # intermittent (reports/known.toml): its bf16 path reads uninitialized memory, so a
        # reload may or may not change the continuation on a given run
        failed.discard("roundtrip")
        r.status = "fail" if failed else "pass"
    if scenario == "grad_scaling" and not target.endswith(".fused"):
        assert r.status == "skip" and "scaling" in r.reason
        return
    assert r.status == ("fail" if want else "pass"), (r.status, r.reason, {n: c.findings[:2] for n, c in r.checks.items()})
    assert failed == want
    for check in want:  # a genuine finding is labelled as known, with the reason
        assert "known torch" in r.reason and check in r.reason


def test_declared_torch_deviations_are_visible():
    r = S.run_checkpoint(TORCH["torch.adamw.fused"], "cpu", 0, dtypes=("float32",))
    assert r.status == "pass" and "flags: declared deviation" in r.reason
    assert "fused" in r.checks["flags"].note and "declared deviation" in r.checks["flags"].note
    assert "forloop" in r.checks["cross"].note  # the continuation is checked as the path that actually runs
    r = S.run_long_horizon(TORCH["torch.adam.forloop"], "cpu", 0)
    # torch's float32 counter is its convention (counter_format), not a deviation
    assert r.status == "pass" and "declared" not in r.reason
    assert TORCH["torch.adam.forloop"].convention.counter_format == "float32"


def test_a_float32_counter_declared_as_a_property_needs_no_deviation():
    """counter_format="float32" on the convention: the oracle's counter saturates at 2**24
    as torch's does, so long_horizon passes with no declared deviation; the same target
    with an exact counter and nothing declared fails there (the check has its power)."""
    torch_adam = TORCH["torch.adam.forloop"]
    as_property = replace(torch_adam, declared=())
    r = S.run_long_horizon(as_property, "cpu", 0)
    assert r.status == "pass" and "declared" not in r.reason, (r.reason, r.checks["counters@16777216"].findings[:2])
    r = S.run_long_horizon(replace(torch_adam, declared=(), convention=replace(torch_adam.convention,
                                                                                counter_format="exact")), "cpu", 0)
    assert r.status == "fail" and {n for n, c in r.checks.items() if not c.passed} == {"counters@16777216"}


def test_correct_mutant_base_passes_everything():
    base = mutant("GroupAdamW")
    for name in SINGLE_PROCESS:
        r = S.SCENARIOS[name].run(base, "cpu", 0)
        assert r.status == "pass", (name, r.reason, {n: c.findings[:2] for n, c in r.checks.items()})


# --- each scenario catches its defect ------------------------------------------

@pytest.mark.slow
@pytest.mark.xdist_group("ranks")  # real gloo processes on local ports: one at a time
def test_rank_skew_passes_on_both_counter_conventions():
    for target in (TORCH["torch.adamw.fused"], TORCH["torch.adagrad.forloop"], mutant("GroupAdamW")):
        r = S.run_rank_skew(target, "cpu", 0)
        assert r.status == "pass", (target.name, r.reason, {n: c.findings[:2] for n, c in r.checks.items()})
        assert "world 4" in r.checks["checkpoint"].note


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")  # real gloo processes on local ports: one at a time
def test_rank_skew_catches_empty_group_without_counter():
    """TransformerEngine #1986: the empty no-decay group never gets a counter."""
    r = S.run_rank_skew(mutant("EmptyGroupNoCounter"), "cpu", 0)
    assert r.status == "fail"
    saved = findings(r, "checkpoint")
    assert any(f.tensor == "world 2 rank 1 group 1 step (empty)" and f.got is None and f.expected == 3 for f in saved)
    assert any(f.tensor.startswith("world 4 rank 3 group 1 step") for f in saved)
    # rank 0 loaded rank 1's shard: its populated group 1 restarted counting at 1
    counters = findings(r, "counters")
    assert any(f.tensor == "world 2 rank 0 (resumed) group 1 step" and f.step == 4 and (f.expected, f.got) == (4, 1)
               for f in counters)
    resumed = findings(r, "resume")
    assert any(f.tensor == "world 2 rank 0 group 1 param 0 param" for f in resumed)
    assert any("group 1 param 0 param" in f.tensor and f.step == 4 for f in findings(r, "lockstep"))


@pytest.mark.slow
@pytest.mark.xdist_group("ranks")  # real gloo processes on local ports: one at a time
def test_rank_skew_spawned_workers_find_the_target_by_name():
    """The CUDA path (fresh interpreters; the target is looked up by name)."""
    r = S.run_rank_skew(mutant("EmptyGroupNoCounter"), "cpu", 0, worlds=(2,), spawn=True)
    assert r.status == "fail" and findings(r, "checkpoint")


def test_rank_skew_spawned_workers_find_third_party_targets():
    """A process with a default process group (a warm worker that ran a DeepSpeed engine job) spawns
    its ranks instead of forking them; they must find any registry target by name, not only torch's
    and ours (deepspeed.cpu_lion is an optimizer record's own target, bnb.* a third-party one)."""
    from oracle.compare.registry import every_target
    from oracle.compare.scenarios.rank_skew import target_spec
    from oracle.compare.scenarios.rank_worker import find_target
    for name in ("deepspeed.cpu_lion", "bnb.adam32bit", "torch.adamw.forloop"):
        target = next(t for t in every_target() if t.name == name)
        assert target_spec(target) == name
        assert find_target(name, target.optimizer, target.convention).name == name


def test_construction_catches_zero_grad_step_wrapper():
    """DeepSpeed #8910: the wrapper's constructor steps with zero grads (AdamW decay, counter 1)."""
    r = S.run_construction(TORCH["torch.adamw.forloop"], "cpu", 0, wrapper=M.ZeroGradStepWrapper)
    assert r.status == "fail"
    wrapper = findings(r, "wrapper")
    assert any(f.step == 0 and f.tensor == "[wrapped bfloat16] group 0 param 0 master" for f in wrapper)
    counters = findings(r, "counters")
    assert any(f.step == 1 and (f.expected, f.got) == (1, 2) for f in counters)
    assert not r.checks["construction"].findings  # the bare optimizer is fine


def test_construction_catches_wrapper_leaving_eager_state_low_precision():
    r = S.run_construction(TORCH["torch.adagrad.forloop"], "cpu", 0, wrapper=M.NoStateMigrationWrapper)
    assert r.status == "fail"
    f = next(f for f in findings(r, "eager_state") if f.tensor.endswith("sum"))
    assert f.expected == "torch.float32 on cpu" and f.got == "torch.bfloat16 on cpu"


def test_construction_wrapper_moves_adagrad_state_to_masters():
    r = S.run_construction(TORCH["torch.adagrad.foreach"], "cpu", 0)
    assert r.checks["eager_state"].passed and r.checks["eager_state"].compared >= 6
    assert r.checks["wrapper"].passed and r.checks["first_step"].passed


def test_checkpoint_catches_state_cast_to_param_dtype():
    r = S.run_checkpoint(mutant("CastStateOnLoad"), "cpu", 0)
    assert r.status == "fail"
    f = next(f for f in findings(r, "roundtrip") if "exp_avg" in f.tensor)
    assert f.step == 20 and f.tensor.startswith("[bfloat16]")
    assert (f.expected, f.got) == ("torch.float32 on cpu", "torch.bfloat16 on cpu")


def test_grad_scaling_catches_ignored_found_inf():
    r = S.run_grad_scaling(mutant("IgnoresFoundInf"), "cpu", 0)
    assert r.status == "fail"
    f = findings(r, "found_inf")[0]
    assert f.step == 1 and f.tensor.startswith("group 0 param 0")


def test_grad_scaling_skips_without_interface():
    r = S.run_grad_scaling(load_impl("tests.broken.scenario_mutants:GroupAdamW"), "cpu", 0)
    assert r.status == "skip" and "target.scaling is None" in r.reason


def test_irregular_catches_update_into_contiguous_copy():
    r = S.run_irregular(mutant("UpdatesContiguousCopy"), "cpu", 0)
    assert r.status == "fail" and {n for n, c in r.checks.items() if not c.passed} == {"noncontiguous"}
    f = findings(r, "noncontiguous")[0]
    assert f.step == 1 and f.tensor == "[noncontiguous] group 0 param 0 param" and f.error_ulps > f.bound_ulps


def test_long_horizon_catches_float32_counter():
    r = S.run_long_horizon(mutant("Float32Counter"), "cpu", 0)
    assert r.status == "fail" and {n for n, c in r.checks.items() if not c.passed} == {"counters@16777216"}
    f = findings(r, "counters@16777216")[0]
    assert (f.step, f.expected, f.got) == (2 ** 24 + 1, 2 ** 24 + 1, 2 ** 24) and f.tensor.endswith("group 0 step")


def test_inputs_unchanged_catches_grad_used_as_workspace():
    r = S.run_inputs_unchanged(mutant("GradAsWorkspace"), "cpu", 0)
    assert r.status == "fail"
    f = findings(r, "inputs_unchanged")[0]
    assert f.step == 1 and f.tensor == "[float32 wd] group 0 param 0 grad" and "modified" in f.detail


def test_fused_package_targets_when_available():
    fused = [t for t in builtin_targets() if t.name.startswith("fused.") and t.unavailable("cpu") is None]
    if not fused:
        pytest.skip("fused package does not load")
    for target in fused:
        for name in SINGLE_PROCESS:
            r = S.SCENARIOS[name].run(target, "cpu", 0)
            assert r.status in ("pass", "skip"), (target.name, name, r.reason,
                                                  {n: c.findings[:2] for n, c in r.checks.items()})


def test_results_go_into_the_report(tmp_path):
    results = [S.run_long_horizon(mutant("Float32Counter"), "cpu", 0),
               S.run_grad_scaling(load_impl("tests.broken.scenario_mutants:GroupAdamW"), "cpu", 0),
               S.run_irregular(TORCH["torch.adam.forloop"], "cpu", 0)]
    report.write(str(tmp_path), results, ["test"], True, "cpu")
    doc = json.loads((tmp_path / "report.json").read_text())
    assert [r["status"] for r in doc["results"]] == ["fail", "skip", "pass"]
    assert "scenario:long_horizon/" in (tmp_path / "report.md").read_text()


def test_unavailable_target_is_skipped():
    gone = replace(TORCH["torch.adamw.forloop"], name="gone", requires=lambda device: "not here")
    for sc in (sc for sc in S.SCENARIOS.values() if sc.applies(gone)):
        r = sc.run(gone, "cpu", 0)
        assert r.status == "skip" and r.reason == "not here"


def test_long_horizon_catches_a_counter_kept_in_the_param_dtype():
    """A counter stored in the param's dtype looks like torch's float32 counter on fp32 params (both
    stop at 2**24); on bf16 / fp16 params it stops at 256 / 2048, and the low-precision horizons say so,
    so an undeclared optimizer with that defect cannot be inferred as a float32 counter."""
    from oracle.mutants import target_for
    from oracle.mutants.catalog import ZenFlow8496Bf16Counter
    r = S.run_long_horizon(target_for(ZenFlow8496Bf16Counter), "cpu", 0)
    failing = {n for n, c in r.checks.items() if not c.passed}
    assert {"counters@256/bf16", "counters@2048/fp16"} <= failing
    f = r.checks["counters@256/bf16"].findings[0]
    assert f.got == 256 and f.expected == 257


@pytest.mark.parametrize("seed", [2, 3])
def test_long_horizon_on_fp16_params_raises_eps_as_the_matrix_does(seed):
    """eps = 1e-8 is 0 in fp16: the scenario's fp16 horizons once drove a param to -inf at seed 2 for
    every optimizer with an eps; they now take the fp16 policy's eps, as the matrix's fp16 rows do."""
    for name in ("torch.adamw.forloop", "torch.adagrad.forloop"):
        r = S.run_long_horizon(TORCH[name], "cpu", seed)
        assert r.status == "pass", (name, r.reason)
        assert any(k.endswith("/fp16") for k in r.checks), sorted(r.checks)


def test_every_rank_of_a_compiling_target_gets_its_start_time(monkeypatch):
    """A target whose fresh processes compile before stepping (Target.start_s: torchao's) has that
    time added to the limit of every rank the rank and wrapper scenarios start: four torchao ranks
    compiling on 2 cores ran past the plain 120 s."""
    from dataclasses import replace

    from oracle.compare.registry import find
    from oracle.compare.scenarios import rank_skew as R
    from oracle.compare.scenarios import wrapped as WR
    seen = []

    def ranks(spec, target, device, seed, world, timeout, spawn=False):
        seen.append(("rank_skew", timeout))
        return [], "stopped by the test"

    def launch(target, spec, checks, tmp, world, extra, seed, hp, timeout, label=None):
        seen.append(("wrapped", timeout))
        return "stopped by the test"

    monkeypatch.setattr(R, "launch_ranks", ranks)
    monkeypatch.setattr(WR, "_launch", launch)
    slow = replace(find("torch.adamw.forloop"), start_s=250.0)
    for target, want in ((slow, 370.0), (find("torch.adamw.forloop"), 120.0)):
        seen.clear()
        assert R.run_rank_skew(target).status == "error"
        WR.run_wrapped(target, wrapper="ddp_bucket_view")
        assert seen == [("rank_skew", want), ("wrapped", want)], seen
