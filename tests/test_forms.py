"""Every value of every convention option is classified, and the class is what float64 says it is.

An "equivalent" value runs the standard problem (oracle.forms) to the same params as the reference
form, to roundoff; a "variant" or a "deviation" is observable there, by far more than roundoff (a
check that cannot fail would be a defect of the table). Each variant names where it is documented.
"""
from __future__ import annotations

import math
import re
from dataclasses import fields, replace

import numpy as np
import pytest

import oracle
from oracle import forms as F

OBSERVABLE = 1e-6    # a form that is not the same update moves some tensor by more than this (relative)


def allowed_values(conv, option):
    """The values an option admits: both for a flag, those its ValueError lists for a string."""
    value = getattr(conv, option)
    if isinstance(value, bool):
        return [True, False]
    if not isinstance(value, str):
        return None  # continuous: classified by the table's OTHER entry
    try:
        replace(conv, **{option: "\x00not-a-value"})
    except ValueError as exc:
        return re.findall(r"'([^']+)'", str(exc).split("one of", 1)[1].split("got", 1)[0])
    raise AssertionError(f"{option} accepts any string")


def classified():
    for name, spec in oracle.SPECS.items():
        for option, table in spec.forms.items():
            for value, form in table.items():
                yield pytest.param(name, option, value, form, id=f"{name}-{option}-{value}")


def relative_gap(spec, option, value, form):
    value = form.needs.get(option, value) if value == F.OTHER else value
    conv = replace(spec.reference, **{**form.needs, option: value})
    base = replace(spec.reference, **{k: v for k, v in form.needs.items() if k != option})
    hp = F.standard_hparams(spec, form.probe)
    try:
        got = F.trajectory(spec, conv, form.steps, hp)
    except (TypeError, ValueError):
        return math.inf  # the form cannot even run the reference's problem: observable
    want = F.trajectory(spec, base, form.steps, hp)
    cuts = np.cumsum([int(np.prod(s)) for s in F.SHAPES])[:-1]
    return max(float(np.linalg.norm(x - y) / np.linalg.norm(y))
               for a, b in zip(got[1:], want[1:]) for x, y in zip(np.split(a, cuts), np.split(b, cuts)))


@pytest.mark.parametrize("name", list(oracle.SPECS))
def test_every_option_value_is_classified(name):
    spec = oracle.SPECS[name]
    assert {f.name for f in fields(spec.reference)} == set(spec.forms), "an option without a table"
    for option, table in spec.forms.items():
        values = allowed_values(spec.reference, option)
        if values is None:
            assert F.OTHER in table and getattr(spec.reference, option) in table, option
        else:
            assert set(values) == set(table), (option, values, list(table))
        reference = getattr(spec.reference, option)
        assert table[reference].kind == F.EQUIVALENT, f"{option}: the reference value must be the reference"


@pytest.mark.parametrize("name,option,value,form", list(classified()))
def test_class_is_what_float64_says(name, option, value, form):
    spec = oracle.SPECS[name]
    if value == getattr(spec.reference, option):
        return  # the reference itself (its row in the table is checked above)
    gap = relative_gap(spec, option, value, form)
    if form.kind == F.EQUIVALENT:
        assert gap < form.roundoff, f"{name} {option}={value!r} is classified equivalent but moves the params {gap:.3g}"
    else:
        assert gap > OBSERVABLE, f"{name} {option}={value!r} ({form.kind}) is not observable: {gap:.3g}"
        assert len(form.cite) > 20, "a variant or deviation says what it is and where it is documented"


def test_every_catalog_preset_is_classifiable():
    from oracle.compare.targets.conventions import catalog
    for preset, (name, conv) in catalog().items():
        assert F.kind(oracle.SPECS[name], conv) in F.KINDS, preset


def test_a_deviation_is_sized_against_the_reference():
    """pytorch-optimizer's LAMB step size: 1/(1 - beta1) = 10 times the reference's at step 1."""
    from oracle.lamb import PYTORCH_OPTIMIZER_LAMB
    spec = oracle.SPECS["lamb"]
    size = F.measure("lamb", PYTORCH_OPTIMIZER_LAMB, F.probe_of(spec, PYTORCH_OPTIMIZER_LAMB))
    assert size.step1 == pytest.approx(10.0, rel=0.02)
    assert 1.0 < size.step20 < size.step1
    assert size.dist100 > 1e-3
    assert "x10 at step 1" in F.describe(spec, PYTORCH_OPTIMIZER_LAMB)


def test_adam_with_decoupled_decay_is_a_deviation_and_adamw_the_same_update_form_is_not():
    from oracle.adam import APEX_ADAMW, TORCH_ADAM, AdamConvention
    adam, adamw = oracle.SPECS["adam"], oracle.SPECS["adamw"]
    assert F.kind(adam, replace(TORCH_ADAM, decay="decoupled")) == F.DEVIATION
    assert F.kind(adamw, APEX_ADAMW) == F.VARIANT  # per-group counter; its decay form is equivalent
    assert F.form_of(adamw, "decay", "decoupled_update").kind == F.EQUIVALENT
    assert F.kind(adamw, AdamConvention(decay="decoupled", eps_mode="outside_corrected")) == F.EQUIVALENT
