"""report.html's plots (oracle.compare.reporting.plots): well-formed SVG that draws the data it is
given where a log axis puts it, and nothing it cannot place."""
import math
import xml.etree.ElementTree as ET

from oracle.compare.reporting.plots import histogram_plot, series_plot

NS = "{http://www.w3.org/2000/svg}"


def _parse(svg: str):
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg" and float(root.get("width")) > 250 and float(root.get("height")) > 150
    return root


def _texts(root) -> list[str]:
    return [t.text for t in root.iter(f"{NS}text")]


def _points(line) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in line.get("points").split()]


def test_series_plot_draws_each_curve_on_a_log_axis():
    steps = [1, 2, 3, 4]
    root = _parse(series_plot([("lockstep", steps, [1.0, 10.0, 100.0, 1000.0], [2.0, 2.0, 2.0, 2.0])]))
    error, bound = root.iter(f"{NS}polyline")
    pts = _points(error)
    assert len(pts) == 4 and len(list(root.iter(f"{NS}circle"))) == 4  # markers up to 8 steps
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    assert xs == sorted(xs) and ys == sorted(ys, reverse=True)  # later steps right, larger errors higher
    gaps = [ys[k] - ys[k + 1] for k in range(3)]
    assert max(gaps) - min(gaps) < 0.2  # one decade per step: equal spacing on a log axis
    assert all(y == _points(bound)[0][1] for _, y in _points(bound))  # a constant bound is flat
    assert {"1", "10", "100", "1000", "lockstep error", "lockstep bound", "step", "ULPs"} <= set(_texts(root))


def test_a_value_the_log_axis_cannot_show_breaks_the_line():
    root = _parse(series_plot([("trajectory", [1, 2, 3, 4, 5], [1.0, 2.0, math.nan, 4.0, 8.0], [1.0] * 5)]))
    error = list(root.iter(f"{NS}polyline"))[:2]
    assert [len(_points(p)) for p in error] == [2, 2]


def test_histogram_plot_draws_a_bar_per_nonempty_bin():
    root = _parse(histogram_plot(["0", "1/4", "2", "\u22652^24"], [5, 0, 1, 40], ["lockstep, step 3", "bound 2 ULPs"]))
    bars = list(root.iter(f"{NS}rect"))[1:]  # the first rect is the frame
    assert [b.find(f"{NS}title").text for b in bars] == ["0: 5", "2: 1", "\u22652^24: 40"]
    heights = [float(b.get("height")) for b in bars]
    assert 0 < heights[1] < heights[0] < heights[2]  # a count of 1 is still visible
    assert {"lockstep, step 3", "bound 2 ULPs", "\u22652^24"} <= set(_texts(root))


def test_plots_are_deterministic():
    args = [("lockstep", [1, 2], [3.0, 4.0], [5.0, 6.0])]
    assert series_plot(args) == series_plot(args)
