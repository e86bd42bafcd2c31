"""report.json's JSON Schema (report.schema.json beside this module), validation, and the upgrade
of older reports.

    errors = validate(doc)            # [] when doc is a valid "optimizer-oracle-report/2" document
    doc = upgrade(old_doc)            # a /1 document as /2 (hyperparameters parsed into objects)
    doc = load(path)                  # a report.json read back: every reader's one way in

Every subcommand that reads a report (render, diff, merge, --inferred-from) reads it with `load`:
a file that is not one of ours, in any part, is one DataFileError naming the file and the first
place it departs from the schema (the CLI's exit 2), before anything of it is used. Validation uses
the `jsonschema` package.
"""
from __future__ import annotations

import ast
import copy
import functools
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
    out = []
    for err in sorted(_validator().iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
        where = "/".join(str(p) for p in err.absolute_path) or "(top)"
        out.append(f"{where}: {err.message[:300]}")
    return out


REPORT_LIMIT = 512 << 20  # bytes of one report.json read back (today's largest sweep writes a few MB)
SHOWN_ERRORS = 2


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema
    return jsonschema.Draft202012Validator(schema())


def load(path: str, what: str = "report") -> dict:
    """The report document at `path`, upgraded to the current schema and valid against it; otherwise
    DataFileError saying where it departs (a size, a type, a missing key: never a traceback later)."""
    return checked(read(path, what), path, what)


def read(path: str, what: str = "report") -> dict:
    """The document at `path` as written: a JSON object in one of our schemas (not yet validated)."""
    from .report import SCHEMA
    from ..isolation.untrusted import DataFileError, read_json
    doc = read_json(path, REPORT_LIMIT, what)
    if not isinstance(doc, dict):
        raise DataFileError(f"{path}: the {what} is not a report of ours (a JSON object with \"schema\": {SCHEMA!r})")
    if doc.get("schema") not in (SCHEMA, V1):
        raise DataFileError(f"{path}: the {what} is not a report of ours: schema {doc.get('schema')!r}, "
                            f"expected {SCHEMA!r} (or {V1!r}, upgraded when read)")
    return doc


def checked(doc: dict, path: str, what: str = "report") -> dict:
    """`read`'s document upgraded to the current schema and validated against it."""
    from ..isolation.untrusted import DataFileError
    if doc["schema"] == V1:
        try:
            doc = upgrade(doc)
        except (KeyError, TypeError, ValueError, AttributeError, SyntaxError, RecursionError) as exc:
            raise DataFileError(f"{path}: the {what} is a {V1} report that cannot be upgraded "
                                f"({type(exc).__name__}: {exc})") from None
    errors = validate(doc)
    if errors:
        more = f" (and {len(errors) - SHOWN_ERRORS} more)" if len(errors) > SHOWN_ERRORS else ""
        raise DataFileError(f"{path}: the {what} is not a report of ours: {'; '.join(errors[:SHOWN_ERRORS])}{more}")
    return doc


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
    from ..checking.explain import reason
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


__all__ = ["REPORT_LIMIT", "SCHEMA_FILE", "checked", "load", "read", "schema", "upgrade", "validate"]
