"""The engine fits an implementation's constructor and state, whatever they look like: a hyperparameter
the constructor does not take is never passed (a case setting it is a skip saying so), a value the
constructor refuses is a skip with the refusal's message and never stops inference, state under other
keys is named by value (or declared with ORACLE_STATE_NAMES), scalar state is read back, and an
expected eager value is the one the state's storage can hold. Each optimizer here is correct, so each
must pass with no declarations."""
import pytest
import torch

import oracle
from oracle.compare.checking import cases as C
from oracle.compare.inference import infer as I
from oracle.compare.checking import statenames
from oracle.compare.checking.case_run import run_case
from oracle.compare.targets.declare import apply
from oracle.compare.targets.user_impl import from_object, load_impl
from oracle.testing import check_optimizer

from tests.plumbing_optimizers import EagerAdagrad, PaperLamb, StrictLion


def case(optimizer, name):
    return next(c for c in C.cases(optimizer, ("float32", "bfloat16"), 4) if c.name == name)


def target(obj, spec, optimizer):
    return from_object(obj, spec, optimizer=optimizer, inferred=False)


def test_state_found_by_value():
    """A tensor holding the oracle's exp_avg is exp_avg whatever its key; understood keys are left alone."""
    lamb = target(PaperLamb, "tests.plumbing_optimizers:PaperLamb", "lamb")
    assert dict(statenames.found(lamb, I.probe_cases(lamb, ("float32",)), seed=0)) == {"m": "exp_avg",
                                                                                      "v": "exp_avg_sq"}
    lion = target(StrictLion, "tests.plumbing_optimizers:StrictLion", "lion")
    assert dict(statenames.found(lion, I.probe_cases(lion, ("float32",)), seed=0)) == {"momentum": "exp_avg"}
    adamw = target(torch.optim.AdamW, "torch.optim:AdamW", "adamw")
    assert statenames.found(adamw, I.probe_cases(adamw, ("float32",)), seed=0) == ()


def test_state_swapped_by_name_is_not_named_by_its_key():
    """Matching is by value: a class keeping m under "v" and v under "m" gets them named the right way round."""
    class Swapped(PaperLamb):
        def step(self):
            for st in self.state.values():  # keep the names the update reads
                if "m" in st:
                    st["m"], st["v"] = st.pop("v"), st.pop("m")
            super().step()
            for st in self.state.values():
                st["m"], st["v"] = st.pop("v"), st.pop("m")
    t = target(Swapped, "x:Swapped", "lamb")
    assert dict(statenames.found(t, I.probe_cases(t, ("float32",)), seed=0)) == {"m": "exp_avg_sq", "v": "exp_avg"}


def test_declared_state_names_are_validated():
    class Declared(StrictLion):
        ORACLE_STATE_NAMES = {"momentum": "exp_avg"}
    assert target(Declared, "x:Declared", "lion").state_names == (("momentum", "exp_avg"),)

    class Wrong(StrictLion):
        ORACLE_STATE_NAMES = {"momentum": "velocity"}
    with pytest.raises(ValueError, match="velocity, not state of lion"):
        target(Wrong, "x:Wrong", "lion")


def test_refused_hyperparameters_are_a_skip_with_the_refusal():
    """lr = 0 refused by the constructor: a skip naming the value and the message, not an error row."""
    t = target(StrictLion, "tests.plumbing_optimizers:StrictLion", "lion")
    res = run_case(t, case("lion", "lion/fp32/wd0.1/scalar/lr0"), 0)
    assert res.status == "skip"
    assert "refuses lr=0.0" in res.reason and "lr must be positive" in res.reason
    assert "weight_decay" not in res.reason  # only the value it refuses is named


def test_a_constructor_refusing_its_own_defaults_is_an_error():
    """Refusing the spec's defaults too is no refusal of one value: the row is an error, as before."""
    class Broken(StrictLion):
        def __init__(self, params, **kw):
            raise RuntimeError("cannot construct")
    res = run_case(target(Broken, "x:Broken", "lion"), case("lion", "lion/fp32/wd0.1/scalar/lr0"), 0)
    assert res.status == "error" and "cannot construct" in res.reason


def test_hyperparameters_the_constructor_lacks():
    """Never passed; a case that sets one is a skip saying which; the rest run."""
    t = target(PaperLamb, "tests.plumbing_optimizers:PaperLamb", "lamb")
    assert {"max_grad_norm", "grad_averaging", "min_coeff", "max_coeff"} <= t.absent
    assert "lr" not in t.absent and "weight_decay" not in t.absent
    res = run_case(t, case("lamb", "lamb/fp32/clip/empty_group/large_decay"), 0)
    assert res.status == "skip" and "takes no max_grad_norm" in res.reason
    # **kwargs takes everything
    class Open(PaperLamb):
        def __init__(self, params, **kw):
            super().__init__(params, **{k: v for k, v in kw.items() if k in ("lr", "betas", "eps", "weight_decay")})
    assert target(Open, "x:Open", "lamb").absent == frozenset()


def test_probes_the_constructor_refuses_do_not_stop_inference():
    inf = I.infer(target(StrictLion, "tests.plumbing_optimizers:StrictLion", "lion"))
    assert inf.chosen is not None, inf.lines()
    assert inf.chosen.state_names == (("momentum", "exp_avg"),)
    assert "ORACLE_STATE_NAMES = {'momentum': 'exp_avg'}" in "\n".join(inf.lines())


def test_every_probe_refused_is_no_evidence():
    """A constructor that refuses every probe explains nothing: no candidate passes on no evidence."""
    class Picky(StrictLion):
        def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
            if weight_decay != 0.0 or lr != 1e-4:
                raise ValueError("only the defaults")
            super().__init__(params, lr, betas, weight_decay)
    t = target(Picky, "x:Picky", "lion")
    probes = [c for c in I.probe_cases(t, ("float32",))
              if (c.base_hparams().get("lr", 1e-4), c.base_hparams().get("weight_decay", 0.0)) != (1e-4, 0.0)]
    assert probes
    failed = I.explains(t, probes, 0, "cpu")
    assert failed and failed[0].finding.startswith("no probe ran")


def test_eager_accumulator_as_its_storage_holds_it():
    """An Adagrad creating `sum` in __init__ in the param's dtype holds 0.1 as bfloat16 does."""
    results = check_optimizer(EagerAdagrad, optimizer="adagrad", scenarios=["construction"])
    assert results and all(r.status == "pass" for r in results), [(r.case, r.reason) for r in results]


def test_nadam_scalar_state_is_read_back():
    """torch.optim.NAdam's mu_product (a 0-d tensor) is compared with the oracle's product, step by step."""
    t = apply(load_impl("torch.optim:NAdam", optimizer="adam", inferred=False),
              I.Candidate("torch.nadam", oracle.adam.TORCH_NADAM, "storage", "param"))
    res = run_case(t, case("adam", "adam/fp32/wd0.1/single/normal"), 0)
    assert res.status == "pass", res.reason
    assert res.checks["lockstep"].compared > 0

    class ForgetsProduct(torch.optim.NAdam):  # restarts the product every step: mu_product must be flagged
        def step(self, closure=None):
            super().step(closure)
            for st in self.state.values():
                st["mu_product"].fill_(1.0)
    broken = apply(from_object(ForgetsProduct, "x:ForgetsProduct", optimizer="adam", inferred=False),
                   I.Candidate("torch.nadam", oracle.adam.TORCH_NADAM, "storage", "param"))
    res = run_case(broken, case("adam", "adam/fp32/wd0.1/single/normal"), 0)
    assert res.status == "fail"
    assert any(f.tensor.endswith("mu_product") for f in res.checks["lockstep"].findings), res.reason


OUTSIDE = [  # (class, optimizer, the preset it must be inferred as)
    (PaperLamb, "lamb", "paper.lamb"),
    (StrictLion, "lion", "reference.lion"),
    (torch.optim.NAdam, "adam", "torch.nadam"),
]


@pytest.mark.parametrize("obj,optimizer,preset", OUTSIDE, ids=lambda x: getattr(x, "__name__", str(x)))
def test_correct_outside_optimizers_pass_undeclared(obj, optimizer, preset):
    """Inferred as the legitimate form they implement, then every fp32 case passes or is a skip saying why."""
    inf = I.infer(target(obj, f"{obj.__module__}:{obj.__name__}", optimizer))
    assert inf.chosen is not None and inf.chosen.preset == preset, inf.lines()
    results = check_optimizer(obj, optimizer=optimizer, dtypes=["float32"], steps=6)
    bad = [(r.case, r.reason) for r in results if r.status not in ("pass", "skip")]
    assert results and not bad, bad
    assert any(r.status == "pass" for r in results)


def test_lamb_without_bias_correction_is_found():
    """LAMB v3 of the paper, without bias correction: a variant that inference must find, not a preset."""
    class NoBiasCorrectionLamb(PaperLamb):
        BIAS_CORRECTION = False
    inf = I.infer(target(NoBiasCorrectionLamb, "x:NoBiasCorrectionLamb", "lamb"))
    assert inf.chosen is not None, inf.lines()
    from oracle import forms
    spec = oracle.SPECS["lamb"]
    assert inf.chosen.convention.bias_correction != spec.reference.bias_correction
    assert forms.kind(spec, inf.chosen.convention) != forms.DEVIATION


@pytest.mark.parametrize("spec,optimizer", [("lion_pytorch:Lion", "lion"), ("bitsandbytes.optim:Lion32bit", "lion")])
def test_outside_libraries_pass_undeclared(spec, optimizer):
    """lion-pytorch's Lion (refuses lr = 0) and bitsandbytes' Lion32bit (momentum in state1)."""
    pytest.importorskip(spec.split(":")[0].split(".")[0])
    inf = I.infer(load_impl(spec, optimizer=optimizer, inferred=False))
    assert inf.chosen is not None and inf.chosen.preset == "reference.lion", inf.lines()
    judged = apply(load_impl(spec, optimizer=optimizer, inferred=False), inf.chosen)
    for c in C.cases(optimizer, ("float32", "bfloat16"), 6):
        res = run_case(judged, c, 0)
        assert res.status in ("pass", "skip"), (c.name, res.reason)
