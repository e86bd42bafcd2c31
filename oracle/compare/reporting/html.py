"""report.html: one self-contained file (inline CSS, JS and SVG; nothing fetched) rendered from a
report.json document.

- a summary grid: target x dtype x check (matrix checks under each dtype, one column per scenario),
  one table per dtype and one for the scenarios, so that it wraps to the window (every column visible
  at 1280 px) instead of scrolling sideways; targets with a failing cell first; each cell coloured by
  the worst error/bound ratio of the rows it covers, marked N (a new failure), K (a known defect) or F
  (a known entry that no longer reproduces);
- per failing case (grouped by target; new failures first, the first OPEN_CASES of them open, known
  ones closed; the most severe first): the failure line, the repro command with a copy button, and
  what its *failing* checks show: error and bound versus step and a histogram of the per-element error
  in ULPs at the worst step where they recorded a series (inline SVG, oracle.compare.reporting.plots; the first
  PLOT_CASES failing cases), where and when otherwise (a non-finite value, a write outside a view: the first finding);
  then the findings table;
- known findings (the entries this run exercised first, the rest in one closed line), hazards, the
  summary table, notes and tracebacks, each in its own section.

`render(doc)` is a pure function of the document, so `python -m oracle.compare html DIR` can rebuild
the file from a report.json (an older report without per-step data gets no plots).
"""
from __future__ import annotations

import html
import math
from collections import defaultdict
from ..measuring.checks import FAILING
from ..checking.known import any_glob
from .plots import histogram_plot, series_plot

PLOT_CASES = 60          # failing cases that get plots (the rest: findings, repro; data in report.json)
MATRIX_CHECKS = ("lockstep", "finite", "bounds", "trajectory", "counters", "schema", "roundtrip")
DTYPES = ("float32", "bfloat16", "float16", "complex64", "complex128")
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

COLOURS = {"exact": "#1a9850", "low": "#66bd63", "near": "#d9ef8b", "over": "#f46d43", "far": "#d73027",
           "skip": "#d9d9d9", "error": "#7b3294"}


def esc(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _float(x):
    if isinstance(x, bool) or x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def scenario_name(case: str) -> str:
    return case.split(":", 1)[1].split("/")[0]


def column(row: dict, check: str) -> tuple[str, str]:
    """The grid column (group, name) of a row's check: (dtype, check) for matrix cases,
    ("scenarios", scenario name) for scenario rows."""
    if row["case"].startswith("scenario:"):
        return "scenarios", scenario_name(row["case"])
    return row.get("dtype") or "-", check


# --- the grid ----------------------------------------------------------------------------------

class Cell:
    def __init__(self):
        self.ratio = None        # worst measured error/bound ratio
        self.failed = 0          # failing checks
        self.passed = 0          # passing checks
        self.skipped = 0
        self.errors = 0
        self.marks = set()       # N, K, F
        self.first = None        # anchor of the first failing case

    def colour(self) -> str:
        if self.errors:
            return COLOURS["error"]
        if self.failed:
            return COLOURS["far"] if self.ratio is None or self.ratio > 2 else COLOURS["over"]
        if not self.passed:
            return COLOURS["skip"]
        if self.ratio is None or self.ratio == 0:
            return COLOURS["exact"]
        return COLOURS["low"] if self.ratio <= 0.5 else COLOURS["near"]

    def state(self) -> str:
        return ("error" if self.errors else "fail" if self.failed else "pass" if self.passed else "skip")

    def text(self) -> str:
        if self.errors:
            return "err"
        if self.ratio is not None and (self.passed or self.failed) and self.ratio > 0:
            return format(self.ratio, ".2g") if math.isfinite(self.ratio) else "inf"
        return {"fail": "\u2717", "pass": "\u2713", "skip": "-"}[self.state()]


def failure_marks(doc: dict) -> dict:
    """(target, case, seed, check) -> "N" or "K" from the known section; empty when not judged."""
    known = doc.get("known")
    if not known:
        return {}
    marks = {}
    for f in known.get("new", []):
        marks[(f["target"], f["case"], f["seed"], f["check"])] = "N"
    for e in known.get("entries", []):
        for f in e.get("matched", []):
            marks[(f["target"], f["case"], f["seed"], f["check"])] = "K"
    return marks


def grid(doc: dict, anchors: dict) -> tuple[list, dict]:
    """(columns [(group, name)], {target: {column: Cell}}) over the rows that ran or were skipped."""
    cells = defaultdict(lambda: defaultdict(Cell))
    cols = set()
    marks = failure_marks(doc)  # empty when the run was not judged against known findings: no marks
    for r in doc["results"]:
        if r["case"] == "(all cases)":
            continue
        checks = r.get("checks") or {}
        if r["status"] == "skip" or not checks:
            names = MATRIX_CHECKS if not r["case"].startswith("scenario:") else ("-",)
            for n in names:
                col = column(r, n)
                cols.add(col)
                c = cells[r["target"]][col]
                if r["status"] == "error":
                    c.errors += 1
                    c.first = c.first or anchors.get(id(r))
                else:
                    c.skipped += 1
            continue
        for n, chk in checks.items():
            col = column(r, n)
            cols.add(col)
            c = cells[r["target"]][col]
            if n == "error":
                c.errors += 1
                c.first = c.first or anchors.get(id(r))
                c.marks.add(marks.get((r["target"], r["case"], r["seed"], n), ""))
                continue
            ratio = _float(chk.get("worst_ratio"))
            if ratio is not None and chk.get("compared") and _float(chk.get("worst_bound_ulps")):
                c.ratio = ratio if c.ratio is None else max(c.ratio, ratio)
            if chk.get("passed", True):
                c.passed += 1
            else:
                c.failed += 1
                c.first = c.first or anchors.get(id(r))
                c.marks.add(marks.get((r["target"], r["case"], r["seed"], n), ""))
    known = doc.get("known") or {}
    for e in known.get("entries", []):
        if e["status"] != "fixed":
            continue
        for r in doc["results"]:
            if any_glob(r["target"], e["target"]) and any_glob(r["case"], e["case"]):
                for n in r.get("checks") or {}:
                    if any_glob(n, e["check"]):
                        cells[r["target"]][column(r, n)].marks.add("F")
    for target in cells:
        for c in cells[target].values():
            c.marks.discard("")

    def order(col):
        group, name = col
        g = DTYPES.index(group) if group in DTYPES else len(DTYPES) + (group == "scenarios")
        n = MATRIX_CHECKS.index(name) if name in MATRIX_CHECKS else len(MATRIX_CHECKS)
        return (g, n, name)
    return sorted(cols, key=order), cells


def grid_html(doc: dict, anchors: dict) -> str:
    """The grid, one table per column group (fp32, bf16, fp16 checks; scenarios) so that it wraps
    to the window instead of scrolling sideways; targets with a failing cell first."""
    cols, cells = grid(doc, anchors)
    if not cols:
        return "<p>No case ran.</p>"
    optimizer = {r["target"]: r["optimizer"] for r in doc["results"]}
    failing = {t for t, row in cells.items() if any(c.state() in ("fail", "error") for c in row.values())}
    targets = sorted(cells, key=lambda t: (t not in failing, optimizer.get(t, ""), t))
    groups = defaultdict(list)
    for col in cols:
        groups[col[0]].append(col)
    out = ['<div id="summary-grid">']
    for group, gcols in groups.items():
        out.append(grid_table(group, gcols, [t for t in targets if any(c in cells[t] for c in gcols)], cells,
                              optimizer))
    out.append("</div>")
    legend = [("exact", "equal / exact check passed"), ("low", "worst error \u2264 0.5 bound"),
              ("near", "0.5 \u2013 1 bound"), ("over", "1 \u2013 2 bound: fails"), ("far", "> 2 bound or exact check failed"),
              ("error", "target raised or crashed"), ("skip", "skipped")]
    out.append('<p class="legend">' + " ".join(f'<span class="swatch" style="background:{COLOURS[k]}"></span>{esc(v)}'
                                               for k, v in legend)
               + ' &nbsp; marks: <b>N</b> new failure, <b>K</b> known defect, <b>F</b> known entry no longer '
                 'reproduces. Numbers: the worst error/bound ratio.</p>')
    return "".join(out)


def grid_table(group: str, cols: list, targets: list, cells: dict, optimizer: dict) -> str:
    out = [f'<table class="grid"><thead><tr><th rowspan="2">target</th>'
           f'<th colspan="{len(cols)}" class="group">{esc(SHORT.get(group, group))}</th></tr><tr>']
    out += [f'<th class="check"><span>{esc(name)}</span></th>' for _, name in cols]
    out.append("</tr></thead><tbody>")
    for target in targets:
        out.append(f'<tr><th class="target">{esc(target)} <small>{esc(optimizer.get(target, ""))}</small></th>')
        out += [grid_cell(target, col, cells[target].get(col)) for col in cols]
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def grid_cell(target: str, col: tuple, c) -> str:
    if c is None:
        return '<td class="none"></td>'
    marks = "".join(sorted(c.marks))
    title = (f"{target} {col[0]} {col[1]}: {c.state()}; passed {c.passed}, failed {c.failed}, "
             f"errors {c.errors}, skipped {c.skipped}"
             + (f"; worst error/bound {c.ratio:.3g}" if c.ratio is not None else "")
             + {"N": "; new failure", "K": "; known defect", "F": "; a known entry no longer reproduces"}
             .get(marks[:1], "") + (f" ({marks})" if len(marks) > 1 else ""))
    body = esc(c.text()) + (f'<sup class="mark">{esc(marks)}</sup>' if marks else "")
    if c.first:
        body = f'<a href="#{c.first}">{body}</a>'
    return (f'<td class="cell {c.state()}" data-state="{c.state()}" data-marks="{esc(marks)}" '
            f'style="background:{c.colour()}" title="{esc(title)}">{body}</td>')


# --- plots -------------------------------------------------------------------------------------

def _positive(values):
    out = []
    for v in values:
        f = _float(v)
        out.append(f if f is not None and math.isfinite(f) and f > 0 else float("nan"))
    return out


def plotted_checks(row: dict) -> list:
    """(name, check) whose data a failing row's plots show: its failing checks; a passing check's
    healthy curve beside a failure would show the wrong thing."""
    failing = [(n, c) for n, c in row["checks"].items() if not c.get("passed", True)]
    return failing or list(row["checks"].items())


def series_svg(row: dict) -> str | None:
    """Error and bound (ULPs) versus step, for the failing checks that recorded a per-step series."""
    series = [(n, c["series"]) for n, c in plotted_checks(row) if c.get("series")]
    if not series:
        return None
    return series_plot([(name, s["step"], _positive(s["error_ulps"]), _positive(s["bound_ulps"]))
                        for name, s in series])


def where_html(row: dict) -> str:
    """Where and when each failing check without a per-step series went wrong (non-finite values,
    writes outside a view, counters, schema): its first finding, instead of a plot."""
    from ..checking.explain import finding_text
    out = [f"<li><b>{esc(n)}</b>: {esc(finding_text(c['findings'][0]))}</li>"
           for n, c in row["checks"].items() if not c.get("passed", True) and not c.get("series") and c.get("findings")]
    return f"<ul class='where'>{''.join(out)}</ul>" if out else ""


def _pow2(x: float) -> str:
    k = round(math.log2(x))
    return f"{2 ** k}" if 0 <= k <= 10 else f"2^{k}" if k > 10 else f"1/{2 ** -k}"


def _bin_label(low, high) -> str:
    """A bin of checks.HIST_EDGES by its lower edge: "0" (exact), "<1/256", "1/4", "2", ">=2^24"."""
    if high == 0:
        return "0"
    if low == 0:
        return f"<{_pow2(high)}"
    return f"\u2265{_pow2(low)}" if high is None else _pow2(low)


def histogram_svg(row: dict) -> str | None:
    """Per-element error in ULPs at the worst step of the most severe failing check with a histogram."""
    from ..measuring.checks import severity
    checks = sorted(plotted_checks(row), key=lambda kv: (kv[1].get("passed", True), severity(kv[0])))
    name, hist = next(((n, c["histogram"]) for n, c in checks if c.get("histogram")), (None, None))
    if hist is None:
        return None
    labels = [_bin_label(low, high) for low, high, _ in hist["bins"]]
    counts = [n for _, _, n in hist["bins"]]
    bound = None
    s = row["checks"][name].get("series")
    if s and hist["step"] in s["step"]:
        bound = _float(s["bound_ulps"][s["step"].index(hist["step"])])
    return histogram_plot(labels, counts, [f"{name}, step {hist['step']}: error per element (ULPs)"]
                          + ([f"bound at the worst element: {bound:.3g} ULPs"] if bound else []))


# --- sections ----------------------------------------------------------------------------------

def findings_table(row: dict) -> str:
    from ..checking.explain import by_severity, index_text, ulps, value
    rows = []
    for name, c in by_severity(row["checks"].items()):  # the failure line's finding first
        for f in c.get("findings", []):
            rows.append(f"<tr><td>{esc(name)}</td><td>{esc(f.get('step'))}</td><td>{esc(f.get('tensor'))}</td>"
                        f"<td>{esc(index_text(f.get('index')))}</td><td class='num'>{esc(value(f.get('expected')))}</td>"
                        f"<td class='num'>{esc(value(f.get('got')))}</td><td class='num'>{esc(ulps(f.get('error_ulps')))}</td>"
                        f"<td class='num'>{esc(ulps(f.get('bound_ulps')))}</td><td>{esc(f.get('detail'))}</td></tr>")
    if not rows:
        return ""
    return ("<table class='findings'><thead><tr><th>check</th><th>step</th><th>tensor</th><th>index</th>"
            "<th>expected</th><th>got</th><th>error (ULP)</th><th>bound (ULP)</th><th>detail</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def checks_table(row: dict) -> str:
    from ..checking.explain import ulps
    from ..checking.summary import measure
    out = ["<table class='checks'><thead><tr><th>check</th><th>passed</th><th>compared</th><th>unbounded</th>"
           "<th>worst error / bound (ULP)</th><th>ratio</th><th>note</th></tr></thead><tbody>"]
    for name, c in row["checks"].items():
        note = c.get("note") or ""
        note_html = (f"<details><summary>{esc(note.strip().splitlines()[-1][:120])}</summary><pre>{esc(note)}</pre>"
                     "</details>") if "\n" in note.strip() else esc(note)
        out.append(f"<tr class='{'ok' if c.get('passed', True) else 'bad'}'><td>{esc(name)}</td>"
                   f"<td>{'yes' if c.get('passed', True) else '<b>no</b>'}</td><td class='num'>{esc(c.get('compared'))}</td>"
                   f"<td class='num'>{esc(c.get('unbounded'))}</td>"
                   + (f"<td class='num'>{esc(ulps(c.get('worst_error_ulps')))} / {esc(ulps(c.get('worst_bound_ulps')))}</td>"
                      f"<td class='num'>{esc(ulps(c.get('worst_ratio')))}</td>" if measure(c) else
                      "<td class='muted'>exact (bound 0)</td><td></td>")
                   + f"<td>{note_html}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def copyable(command: str) -> str:
    return (f"<div class='repro'><code>{esc(command)}</code><button type='button' class='copy' "
            f"data-copy='{esc(command)}'>Copy</button></div>")


def case_html(row: dict, anchor: str, mark: str, plots: bool, show: bool = False) -> str:
    from ..checking.explain import describe, failure_line
    line = failure_line(row)
    parts = [f"<details class='case {esc(row['status'])}' id='{anchor}' data-mark='{esc(mark)}'"
             f"{' open' if show else ''}>",
             f"<summary><span class='badge {esc(row['status'])}'>{esc(row['status'].upper())}</span>"
             + (f"<span class='badge mark-{esc(mark)}'>{esc({'N': 'NEW', 'K': 'KNOWN'}.get(mark, mark))}</span>" if mark else "")
             + f" <b>{esc(row['case'])}</b> seed {esc(row['seed'])} <span class='why'>{esc(describe(row))}</span>"
             "</summary>",
             f"<p class='line'>{esc(line)}</p>", copyable(row.get("repro", ""))]
    if plots:
        figs = [svg for svg in (series_svg(row), histogram_svg(row)) if svg]
        parts.append(where_html(row))
        if figs:
            parts.append("<div class='plots'>" + "".join(f"<figure>{svg}</figure>" for svg in figs) + "</div>")
    elif plots is False:
        parts.append(where_html(row))
        parts.append(f"<p class='muted'>Plots are drawn for the first {PLOT_CASES} failing cases; this case's "
                     "per-step data is in report.json.</p>")
    parts += [findings_table(row), checks_table(row)]
    if row.get("hparams"):
        import json
        parts.append(f"<p class='muted'>hyperparameters per group: <code>{esc(json.dumps(row['hparams']))}</code></p>")
    parts.append("</details>")
    return "".join(parts)


OPEN_CASES = 10  # failing cases shown open: the first new ones (the rest one click away, "Expand all")


def failures_html(doc: dict, anchors: dict) -> str:
    """Failing rows, new ones first (open), then known ones (closed); within each, targets by their most
    severe row and rows most severe first."""
    from ..checking.explain import most_severe_first
    from ..checking.summary import new_failure_rows
    bad = most_severe_first(r for r in doc["results"] if r["status"] in FAILING)
    if not bad:
        return "<p>No failures.</p>"
    new = {id(r) for r in new_failure_rows(doc)}
    judged = bool(doc.get("known"))
    by_target = defaultdict(list)
    for r in [r for r in bad if id(r) in new] + [r for r in bad if id(r) not in new]:
        by_target[(id(r) not in new, r["target"])].append(r)
    out, plotted, opened = [], 0, 0
    for (is_known, target), rows in by_target.items():
        label = f"{len(rows)} {'known' if is_known else 'new' if judged else 'failing'} case(s)"
        cases, first_open = [], opened
        for r in rows:
            mark = ("K" if is_known else "N") if judged else ""
            plots = plotted < PLOT_CASES
            plotted += plots
            show = not is_known and opened < OPEN_CASES
            opened += show
            cases.append(case_html(r, anchors[id(r)], mark, plots, show))
        out.append(f"<details class='target'{' open' if opened > first_open else ''}>"
                   f"<summary><b>{esc(target)}</b> <span class='muted'>{esc(label)}</span></summary>")
        out += cases
        out.append("</details>")
    return "".join(out)


def known_html(doc: dict) -> str:
    known = doc.get("known")
    if not known:
        return "<p>Not judged against known findings: every failure counts.</p>" if "known" in doc else \
            "<p>No known-findings section in this report.</p>"
    from ..checking.summary import run_counts
    rows = run_counts(doc)  # failing rows, as the verdict line counts them
    c = {k: esc(v) for k, v in known["counts"].items()}  # counts are data too: escaped like every string
    out = [f"<p>File <code>{esc(known['file'])}</code>, device {esc(known['device'])}. Failing rows: "
           f"<b>{rows['new']} new</b>, {rows['known']} known. Known entries: {c['known_entries']} reproduce, "
           f"<b>{c['fixed']} fixed</b> (no longer reproduce), {c['not_run']} not run, "
           f"{c['not_applicable']} not applicable.</p>"]
    entries = known.get("entries") or []
    # the entries this run exercised (they reproduce, or no longer do) first; the rest in one closed line
    here = [e for e in entries if e["status"] in ("known", "fixed")]
    rest = [e for e in entries if e["status"] not in ("known", "fixed")]
    if here:
        out.append(entries_table(here))
    if rest:
        out.append(f"<details class='other-entries'><summary>{len(rest)} other entries: "
                   f"{c['not_run']} not exercised by this run, {c['not_applicable']} not applicable here"
                   f"</summary>{entries_table(rest)}</details>")
    return "".join(out)


def entries_table(entries: list) -> str:
    out = ["<table><thead><tr><th>id</th><th>status</th><th>applies to</th><th>summary</th><th>detail</th>"
           "<th>reference</th></tr></thead><tbody>"]
    for e in entries:
        ref = e.get("reference") or ""
        ref_html = f"<a href='{esc(ref)}'>{esc(ref)}</a>" if ref.startswith("http") else esc(ref)
        out.append(f"<tr class='entry {esc(e['status'].replace(' ', '-'))}'><td>{esc(e['id'])}</td>"
                   f"<td>{esc(e['status'])}</td><td>{esc(e['library'])} {esc(e['versions'])} "
                   f"(installed {esc(e.get('installed') or '-')})</td><td>{esc(e['summary'])}</td>"
                   f"<td>{esc(e['reason'])}</td><td>{ref_html}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def summary_table_html(doc: dict) -> str:
    from ..checking.explain import ulps
    rows = doc.get("summary") or []
    out = ["<div class='scroll'><table class='summary'><thead><tr><th>target</th><th>optimizer</th><th>dtype</th>"
           "<th>pass</th><th>fail</th><th>error</th><th>skip</th><th>worst err / bound (ULP)</th>"
           "<th>detection power</th><th>failed checks</th><th>skipped: why</th></tr></thead><tbody>"]
    for r in rows:
        power = _float(r.get("median_power"))
        out.append(f"<tr><td>{esc(r['target'])}</td><td>{esc(r['optimizer'])}</td><td>{esc(r['dtype'])}</td>"
                   f"<td class='num'>{esc(r['pass'])}</td><td class='num'>{esc(r['fail'])}</td>"
                   f"<td class='num'>{esc(r['error'])}</td><td class='num'>{esc(r['skip'])}</td><td class='num'>"
                   + (f"{esc(ulps(r.get('worst_error_ulps')))} / {esc(ulps(r.get('worst_bound_ulps')))}"
                      if r.get("worst_ratio") is not None else "")
                   + f"</td><td class='num'>{'' if power is None else f'{power:.1e}'}</td>"
                   f"<td>{esc(', '.join(r.get('failed_checks', [])))}</td><td>{esc(r.get('skip_reason', ''))}</td></tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def inferred_html(doc: dict) -> str:
    """The conventions inferred for undeclared --impl optimizers, each with its declaration."""
    if not doc.get("inferred"):
        return ""
    from ..inference.infer import lines
    return ("<section id='inferred'><h2>Inferred conventions</h2>"
            + "".join(f"<pre>{esc(chr(10).join(lines(found)))}</pre>" for found in doc["inferred"]) + "</section>")


def notes_html(doc: dict) -> str:
    noted = [r for r in doc["results"] if r["status"] == "pass" and r.get("reason")]
    if not noted:
        return "<p>None.</p>"
    return "<ul>" + "".join(f"<li><b>{esc(r['target'])}</b> <code>{esc(r['case'])}</code>: {esc(r['reason'])}</li>"
                            for r in noted) + "</ul>"


def errors_html(doc: dict, anchors: dict) -> str:
    errors = [r for r in doc["results"] if r["status"] == "error"]
    if not errors:
        return "<p>None.</p>"
    out = []
    for r in errors:
        note = (r.get("checks", {}).get("error") or {}).get("note") or r.get("reason", "")
        out.append(f"<details class='traceback'><summary><a href='#{anchors[id(r)]}'>{esc(r['target'])} "
                   f"{esc(r['case'])}</a>: {esc(r.get('reason', ''))}</summary><pre>{esc(note)}</pre></details>")
    return "".join(out)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;padding:0 1.2em 4em;color:#222}
h1{margin:.6em 0 .2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}pre{white-space:pre-wrap;background:#f6f8fa;padding:.6em}
.verdict{font-size:1.15em;padding:.4em .7em;border-radius:4px;display:inline-block}.verdict.pass{background:#e6f4ea}.verdict.fail{background:#fde7e9}
nav{position:sticky;top:0;background:#fff;padding:.4em 0;border-bottom:1px solid #eee;z-index:2}nav a{margin-right:1em}
nav button{margin-left:.4em}input#filter{margin-left:1em;width:18em}
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:.4em 0}th,td{border:1px solid #ddd;padding:2px 6px;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
table.grid td.cell{text-align:center;min-width:2.6em;font-size:12px}table.grid td.cell a{color:#000;text-decoration:none;display:block}
table.grid th.check{height:7.5em;white-space:nowrap;vertical-align:bottom;font-weight:normal;font-size:12px}
table.grid th.check span{writing-mode:vertical-rl;transform:rotate(180deg)}table.grid th.target{text-align:left;white-space:nowrap;font-weight:normal}
table.grid td.none{background:#fff}#summary-grid{display:flex;flex-wrap:wrap;gap:.2em 1.2em;align-items:flex-start}sup.mark{font-weight:bold;margin-left:1px}
.legend{font-size:12px;color:#444}.swatch{display:inline-block;width:1em;height:1em;vertical-align:middle;margin:0 .3em 0 .8em;border:1px solid #aaa}
details.target{margin:.4em 0;border:1px solid #ddd;border-radius:4px;padding:.2em .6em}
details.case{margin:.4em 0 .4em 1em;border-left:3px solid #d73027;padding-left:.6em}details.case.error{border-left-color:#7b3294}
summary{cursor:pointer}.badge{font-size:11px;font-weight:bold;padding:1px 5px;border-radius:3px;margin-right:.3em;color:#fff;background:#d73027}
.badge.error{background:#7b3294}.badge.mark-N{background:#b2182b}.badge.mark-K{background:#4d4d4d}
.line{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#fff8e6;padding:.4em;word-break:break-word}
.repro{display:flex;gap:.5em;align-items:center}.repro code{background:#f6f8fa;padding:.3em;word-break:break-all}
.plots{display:flex;flex-wrap:wrap;gap:1em}.plots figure{margin:0}.plots svg{max-width:100%;height:auto}
.muted{color:#666}summary .why{color:#555;font-size:12px;margin-left:.6em}details[open]>summary .why{display:none}tr.bad td{background:#fff0f0}.hidden{display:none}
"""

JS = r"""
(function(){
  function copyText(btn){
    var text = btn.getAttribute('data-copy'), code = btn.parentNode.querySelector('code'), ok = false;
    try { var r = document.createRange(); r.selectNodeContents(code); var s = window.getSelection();
          s.removeAllRanges(); s.addRange(r); ok = document.execCommand('copy'); } catch (e) {}
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function(){ btn.textContent = 'Copied'; }, function(){});
    }
    btn.textContent = ok ? 'Copied' : 'Press Ctrl-C';
    btn.setAttribute('data-clicked', '1');
  }
  document.querySelectorAll('button.copy').forEach(function(b){ b.addEventListener('click', function(){ copyText(b); }); });
  function setAll(open){ document.querySelectorAll('details').forEach(function(d){ d.open = open; }); }
  var ex = document.getElementById('expand-all'), co = document.getElementById('collapse-all');
  if (ex) ex.addEventListener('click', function(){ setAll(true); });
  if (co) co.addEventListener('click', function(){ setAll(false); });
  var f = document.getElementById('filter');
  if (f) f.addEventListener('input', function(){
    var q = f.value.toLowerCase();
    document.querySelectorAll('details.case').forEach(function(d){
      d.classList.toggle('hidden', q && d.textContent.toLowerCase().indexOf(q) < 0); });
  });
  // a grid cell's link opens the case it points at (and the target section holding it)
  document.querySelectorAll('table.grid a').forEach(function(a){ a.addEventListener('click', function(){
    var d = document.getElementById(a.getAttribute('href').slice(1));
    while (d) { if (d.tagName === 'DETAILS') d.open = true; d = d.parentElement; } }); });
  document.documentElement.setAttribute('data-ready', '1');
  if (location.hash === '#selftest') {   // used by tests/test_report_html.py in headless Chromium
    setAll(true);
    var b = document.querySelector('button.copy'); if (b) b.click();
    var rect = function(el){ if (!el) return null; var r = el.getBoundingClientRect(); return [r.width, r.height]; };
    var cells = document.querySelectorAll('#summary-grid td.cell');
    var out = {
      cells: cells.length,
      failing_cells: document.querySelectorAll('#summary-grid td.cell.fail, #summary-grid td.cell.error').length,
      grid_size: rect(document.getElementById('summary-grid')),
      svgs: document.querySelectorAll('.plots svg').length,
      svg_size: rect(document.querySelector('.plots svg')),
      open_cases: document.querySelectorAll('details.case[open]').length,
      copy_button: b ? b.textContent : null,
      selection: window.getSelection().toString(),
      grid_right: Math.max.apply(null, Array.prototype.map.call(cells, function(c){
                    return c.getBoundingClientRect().right; }).concat([0])),
      page_width: document.documentElement.scrollWidth,
      window_width: window.innerWidth,
      first_fail_colour: (function(){ var c = document.querySelector('#summary-grid td.cell.fail');
                                     return c ? getComputedStyle(c).backgroundColor : null; })()
    };
    var pre = document.createElement('pre'); pre.id = 'selftest-result'; pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
})();
"""


def precision_hazards_html(doc: dict) -> str:
    """report.json's `hazards` section as a table: what rounds away, in which arithmetic, with what effect."""
    from ..checking.hazards import entries as precision_hazards, group_line, grouped, line
    rows = precision_hazards(doc)
    if not rows:
        return "<p>None.</p>"
    return ("<p class='muted'>Hyperparameters and derived constants the target's compute arithmetic cannot hold; "
            "the measured effect is the fraction of the float64 oracle's weight decay or update the target "
            "applied over the case. One line for every target and dtype holding a constant the same way; "
            "per target below.</p><ul>" + "".join(f"<li>{esc(group_line(g))}</li>" for g in grouped(rows))
            + f"</ul><details><summary>Per target and dtype ({len(rows)})</summary><ul>"
            + "".join(f"<li>{esc(line(h))}</li>" for h in rows) + "</ul></details>")


def render(doc: dict) -> str:
    from ..checking.summary import hazards, skipped_line, verdict_text
    anchors = {id(r): f"case-{i}" for i, r in enumerate(doc["results"])}
    n_bad = sum(r["status"] in FAILING for r in doc["results"])
    verdict = verdict_text(doc).replace("**", "")
    ok = verdict.startswith("PASS")
    skipped = skipped_line(doc.get("summary") or [])
    body = [
        "<header><h1>Optimizer oracle report</h1>",
        f"<p class='verdict {'pass' if ok else 'fail'}'>{esc(verdict)}</p>",
        f"<p class='muted'>created {esc(doc.get('created'))}; complete: {esc(doc.get('complete'))}; "
        f"{esc(', '.join(f'{k} {v}' for k, v in doc.get('versions', {}).items()))}</p>",
        f"<p>command: <code>{esc(' '.join(doc.get('argv', [])))}</code></p></header>",
        "<nav><a href='#grid'>Summary grid</a><a href='#failures'>Failures (" + str(n_bad) + ")</a>"
        "<a href='#known'>Known findings</a><a href='#hazards'>Hazards</a>"
        "<a href='#precision-hazards'>Precision hazards</a><a href='#summary'>Summary table</a>"
        "<a href='#notes'>Notes</a><a href='#errors'>Errors</a>"
        "<button type='button' id='expand-all'>Expand all</button><button type='button' id='collapse-all'>Collapse all"
        "</button><input id='filter' type='search' placeholder='filter cases (target, case, check, tensor)'></nav>",
        "<section id='grid'><h2>Summary grid</h2>", grid_html(doc, anchors),
        f"<p>{esc(skipped)}</p>" if skipped else "", "</section>",
        "<section id='failures'><h2>Failures</h2>",
        "<p class='muted'>Errors are in ULPs of the storage dtype at the operand magnitude; the bound is derived per "
        "element (README, \"How tolerances are derived\").</p>", failures_html(doc, anchors), "</section>",
        inferred_html(doc),  # below the grid: the grid stays the first thing on the page
        "<section id='known'><h2>Known findings</h2>", known_html(doc), "</section>",
        "<section id='hazards'><h2>Hazards</h2><ul>" + "".join(f"<li>{esc(h)}</li>" for h in hazards(doc))
        + "</ul></section>",
        "<section id='precision-hazards'><h2>Precision hazards</h2>", precision_hazards_html(doc), "</section>",
        "<section id='summary'><h2>Summary table</h2>", summary_table_html(doc), "</section>",
        "<section id='notes'><h2>Notes (declared deviations, known defects on passing rows)</h2>", notes_html(doc),
        "</section>",
        "<section id='errors'><h2>Errors (tracebacks)</h2>", errors_html(doc, anchors), "</section>",
    ]
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>Optimizer oracle report: {esc(verdict)}</title><style>{CSS}</style></head>"
            f"<body data-schema='{esc(doc.get('schema'))}'>" + "".join(body) + f"<script>{JS}</script></body></html>\n")


__all__ = ["render", "PLOT_CASES"]
