"""The documentation's examples run, and no document points outside the repository."""
import doctest
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "reports" / "README.md", *(ROOT / "docs").glob("*.md")])


def test_oracle_md_examples_run():
    result = doctest.testfile(str(ROOT / "docs" / "oracle.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted >= 10 and result.failed == 0, result


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_no_document_points_outside_the_repository(doc):
    text = doc.read_text()
    assert not re.search(r"(?<![\w.])\.\./shared|shared/reference|/work/", text), doc
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):  # markdown links
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name} links outside the repository: {target}"
        assert path.exists(), f"{doc.name} links to a missing file: {target}"
