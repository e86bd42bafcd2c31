"""`python -m oracle.compare render DIR [DIR ...]`: rebuild report.md and report.html from
DIR/report.json (upgrading an older schema's document first), published as one unit with its
manifest (oracle.compare.reporting.publish), under the folder's lock. Exit 0, or 2 when a folder holds no
readable report."""
from __future__ import annotations

import argparse
import os
import sys


def render_folder(folder: str, wait: bool = False) -> str:
    from .publish import ReportLock, publish, recover
    from .report import SCHEMA, render
    from .schema import checked, read
    path = os.path.join(folder, "report.json")
    with ReportLock(folder, ["python", "-m", "oracle.compare", "render", folder], wait=wait):
        recover(folder)  # a journal left there is checked (and completed) before anything is read
        doc = read(path)
        was = doc["schema"]
        doc = checked(doc, path)  # upgraded from an older schema, and valid against the current one
        publish(folder, render(doc), meta={"report_schema": SCHEMA})
    return f"{folder}: report.md, report.html" + (f" (report.json upgraded from {was})" if was != doc["schema"] else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m oracle.compare render",
                                description="Rebuild report.md and report.html from report.json.")
    p.add_argument("folders", nargs="+", metavar="DIR")
    p.add_argument("--wait", action="store_true", help="wait for a run writing into a folder instead of refusing")
    args = p.parse_args(argv)
    from .publish import ReportDirError
    from ..isolation.untrusted import DataFileError
    code = 0
    for folder in args.folders:
        try:
            print(render_folder(folder, args.wait))
        except DataFileError as exc:  # it names the file
            print(f"error: {exc}", file=sys.stderr)
            code = 2
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, ReportDirError) as exc:
            print(f"error: {folder}: {exc}", file=sys.stderr)
            code = 2
    return code


__all__ = ["main", "render_folder"]
