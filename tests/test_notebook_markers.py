"""nbval markers live in cell tags, not in the code learners read."""
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
KNOWN_TAGS = {"nbval-check-output", "nbval-ignore-output", "nbval-skip", "raises-exception",
              "nbval-raises-exception"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_nbval_comments_and_known_tags(path):
    nb = nbformat.read(path, as_version=4)
    checked = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert "NBVAL_" not in cell.source, f"{path.name} cell {i}: use a cell tag, not a comment"
        tags = set(cell.metadata.get("tags", []))
        nbval_tags = {t for t in tags if t.startswith("nbval") or t == "raises-exception"}
        assert nbval_tags <= KNOWN_TAGS, f"{path.name} cell {i}: unknown tag {nbval_tags - KNOWN_TAGS}"
        checked += "nbval-check-output" in tags
    assert checked >= 1, f"{path.name} checks no cell's output"
