"""How oracle.SPECS finds the optimizers: every module of the package that assigns SPECS at module
level, in any spelling, and no module that merely mentions it."""
import pkgutil

import pytest

import oracle
from oracle.spec import _declares_specs

SOURCES = {
    "plain": ("SPECS = ()\n", True),
    "annotated": ("SPECS: tuple = ()\n", True),
    "augmented": ("SPECS = ()\nSPECS += ()\n", True),
    "first_line": ("SPECS = (1,)", True),
    "docstring_only": ('"""SPECS = (...) is what a spec module ends with."""\n', False),
    "nested": ("def f():\n    SPECS = ()\n", False),
    "attribute": ("import types\nx = types.SimpleNamespace()\nx.SPECS = ()\n", False),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_module_declares_specs_by_a_module_level_assignment(tmp_path, name):
    text, declares = SOURCES[name]
    (tmp_path / f"{name}.py").write_text(text)
    [info] = [i for i in pkgutil.iter_modules([str(tmp_path)]) if i.name == name]
    assert _declares_specs(info) is declares


def test_every_spec_module_of_the_package_is_registered():
    """Importing every module of the package (pytest is here, so the entry points import too) finds
    exactly the specs the registry found without importing the entry points."""
    import importlib
    expected = set()
    for info in pkgutil.iter_modules(oracle.__path__):
        if not info.ispkg:
            expected |= {s.name for s in getattr(importlib.import_module(f"oracle.{info.name}"), "SPECS", ())}
    assert expected == set(oracle.SPECS) and len(expected) >= 6
