"""The order tests/conftest.py gives the items for pytest-xdist's loadgroup: grouped tests first, the
largest group first; tests that load DeepSpeed's ops (CI builds them in the background) last, a group
made of them only after every ungrouped test, and within a mixed group after the rest of it."""
import pytest

from tests.conftest import _scheduling_order


class Item:
    def __init__(self, name, group=None, deepspeed=False):
        self.name, self.marks = name, []
        if group:
            self.marks.append(pytest.mark.xdist_group(group).mark)
        if deepspeed:
            self.marks.append(pytest.mark.deepspeed_ops.mark)

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)

    def get_closest_marker(self, name):
        return next(self.iter_markers(name), None)

    def __repr__(self):
        return self.name


def test_deepspeed_only_groups_run_after_the_ungrouped_tests():
    items = [Item("plain"), Item("ds_repro_1", "repro_ds", True), Item("big_1", "big"), Item("ds_plain", None, True),
             Item("mixed_ds", "mixed", True), Item("mixed_1", "mixed"), Item("big_2", "big"), Item("big_3", "big"),
             Item("ds_repro_2", "repro_ds", True), Item("plain_2")]
    order = _scheduling_order(items)
    names = [i.name for i in sorted(items, key=order.__getitem__)]
    assert names == ["big_1", "big_2", "big_3", "mixed_1", "mixed_ds", "plain", "plain_2",
                     "ds_repro_1", "ds_repro_2", "ds_plain"]


def test_xdist_keeps_this_order_rather_than_sorting_units_by_size():
    """pytest-xdist's own size sort would start the 25-test DeepSpeed group before the single tests."""
    from types import SimpleNamespace

    from tests.conftest import pytest_configure
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True))
    pytest_configure(config)
    assert config.option.loadscopereorder is False
    pytest_configure(SimpleNamespace(option=SimpleNamespace()))  # without pytest-xdist: nothing to turn off

