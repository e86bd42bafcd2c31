"""report.json's JSON Schema (report.schema.json beside this module), validation, and the upgrade
of older reports.

    errors = validate(doc)            # [] when doc is a valid "optimizer-oracle-report/2" document
    doc = upgrade(old_doc)            # a /1 document as /2 (hyperparameters parsed into objects)

Validation uses the `jsonschema` package (in the test extra); upgrade needs nothing.
"""
from __future__ import annotations

import ast
import copy
import json
import math
import re
from pathlib import Path

SCHEMA_FILE = Path(__file__).with_name("report.schema.json")
V1 = "optimizer-oracle-report/1"


def schema() -> dict:
    return json.loads(SCHEMA_FILE.read_text())


def validate(doc: dict) -> list[str]:
    """Every way `doc` departs from the schema, one line each (path: message)."""
    import jsonschema
    validator = jsonschema.Draft202012Validator(schema())
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in err.absolute_path) or "(top)"
        out.append(f"{where}: {err.message[:300]}")
    return out


def _literal(text: str):
    """A Python repr of a hyperparameter group ("{'lr': 0.001, 'betas': (0.9, 0.999)}") as data;
    inf and nan become the report's strings."""
    fixed = re.sub(r"(?<![\w'\"])(-?)(inf|nan)(?![\w'\"])", lambda m: repr(m.group(1) + m.group(2)), text)
    value = ast.literal_eval(fixed)
    return _jsonable(value)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def upgrade(doc: dict) -> dict:
    """A report document in the current schema: /1 documents get their hyperparameter groups (Python
    repr strings) parsed into objects, the failing rows' empty `reason` filled from their findings,
    and the summary recomputed; anything else is returned unchanged."""
    from .explain import reason
    from .report import SCHEMA, _num, summarize
    if doc.get("schema") != V1:
        return doc
    new = copy.deepcopy(doc)
    new["schema"], new["upgraded_from"] = SCHEMA, V1
    for r in new["results"]:
        r["hparams"] = [_literal(h) if isinstance(h, str) else _jsonable(h) for h in r.get("hparams", [])]
        for c in r.get("checks", {}).values():
            for f in c.get("findings", []):
                if isinstance(f.get("index"), str):  # "(6, 11)"
                    try:
                        f["index"] = list(ast.literal_eval(f["index"]))
                    except (ValueError, SyntaxError):
                        f["index"] = None
        if r["status"] == "fail" and not r.get("reason"):
            r["reason"] = reason(r)
    new["summary"] = [_num(row) for row in summarize(new["results"])]
    return new


__all__ = ["SCHEMA_FILE", "schema", "upgrade", "validate"]
