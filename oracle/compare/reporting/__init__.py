"""Reporting: what a run writes and prints, and the subcommands that read reports back.

report      report.json + report.md + report.html, published as one unit
html        report.html
junit       --junit-xml
console     what `python -m oracle.compare` prints
schema      report.json's JSON Schema (report.schema.json), validation and upgrade
publish     a report folder written as one unit, under a lock
render      `python -m oracle.compare render DIR`
diff        `python -m oracle.compare diff OLD NEW`
"""
