"""The committed notebooks are the book: they carry the outputs of one full-scale run
(``make record``), every code cell stamped with the hash of the source that produced its
outputs. A cell edited without re-recording fails here, naming the command to run."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from nbexec import RECORD_KEY, source_sha1, stamp_record  # noqa: E402
import nbformat  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_TOTAL_MB = 15
MIN_FIGURES = 25


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))


def _source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_recorded_at_full_scale_and_not_stale(path):
    nb = _cells(path)
    assert nb["metadata"].get(RECORD_KEY, {}).get("scale") == "full", \
        f"{path.name} was not recorded at full scale: make record NB=notebooks/{path.name}"
    stale = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and c["metadata"].get(RECORD_KEY, {}).get("source_sha1") != source_sha1(_source(c))]
    assert not stale, (f"{path.name}: cells {stale} changed since their outputs were recorded: "
                       f"make record NB=notebooks/{path.name}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_code_cell_ran_and_listings_show(path):
    """Every code cell ran in the recording (no skipped cell); a source listing is not empty."""
    for i, cell in enumerate(_cells(path)["cells"]):
        if cell["cell_type"] != "code" or not _source(cell).strip():
            continue
        assert cell.get("execution_count"), f"{path.name} cell {i} was not executed"
        assert not any(o.get("output_type") == "error" for o in cell["outputs"]), \
            f"{path.name} cell {i} recorded an error"
        if "print(inspect.getsource(" in _source(cell):      # a listing shown to the learner
            text = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                           for o in cell["outputs"])
            assert "def " in text or "class " in text, f"{path.name} cell {i}: empty source listing"


def test_the_book_has_pictures_and_stays_small():
    figures = sum(1 for p in NOTEBOOKS for c in _cells(p)["cells"] if c["cell_type"] == "code"
                  for o in c["outputs"] if "image/png" in o.get("data", {}))
    total_mb = sum(p.stat().st_size for p in NOTEBOOKS) / 1e6
    assert figures >= MIN_FIGURES, f"only {figures} stored figures"
    assert total_mb <= MAX_TOTAL_MB, f"notebooks take {total_mb:.1f} MB"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_one_output_per_stream_run(path):
    """A stream is stored as one output until something else comes between: no stray chunk
    (such as a lone newline) stored as an output of its own."""
    split = [i for i, c in enumerate(_cells(path)["cells"]) if c["cell_type"] == "code"
             and any(a["output_type"] == b["output_type"] == "stream" and a["name"] == b["name"]
                     for a, b in zip(c["outputs"], c["outputs"][1:]))]
    assert not split, f"{path.name}: cells {split} store one stream in pieces: make record"


def test_recording_joins_the_chunks_of_a_stream():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('a')", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="hint"),
        nbformat.v4.new_output("stream", name="stdout", text="\n"),
        nbformat.v4.new_output("stream", name="stderr", text="bar\n"),
        nbformat.v4.new_output("stream", name="stdout", text="next\n")])])
    outputs = stamp_record(nb, "full").cells[0].outputs
    assert [(o.name, o.text) for o in outputs] == [("stdout", "hint\n"), ("stderr", "bar\n"),
                                                   ("stdout", "next\n")]


def test_a_changed_cell_is_caught():
    """The stamp is the hash of the exact source: one changed character is stale."""
    assert source_sha1("print(1)") != source_sha1("print(2)")
    assert source_sha1("x = 1") == source_sha1("x = 1")


def _stale_listing_lines(cell, library: set) -> list:
    """The lines of a stored ``inspect.getsource`` listing of course_lib code that the library
    no longer has (a listing of other code, e.g. MindSpore's, is not checked: most of its
    lines are not in the library)."""
    if "print(inspect.getsource(" not in _source(cell):
        return []
    lines = [l for o in cell["outputs"] if o.get("output_type") == "stream"
             for l in "".join(o.get("text", "")).splitlines() if l.strip()]
    missing = [l for l in lines if l not in library]
    return missing if lines and len(missing) <= 0.2 * len(lines) else []


def test_source_listings_show_the_library_as_it_is():
    """A listing printed with ``inspect.getsource`` shows the course_lib code of today: a
    docstring or line edited since the recording makes it stale (re-record the notebook).
    A planted edit of one listed line is caught."""
    library = {l for p in (ROOT / "course_lib").rglob("*.py") for l in p.read_text().splitlines()}
    stale = {f"{p.name} cell {i}": _stale_listing_lines(c, library)
             for p in NOTEBOOKS for i, c in enumerate(_cells(p)["cells"]) if c["cell_type"] == "code"}
    stale = {k: v for k, v in stale.items() if v}
    assert not stale, f"source listings older than course_lib (make record NB=...): {stale}"
    cell = next(c for c in _cells(NOTEBOOKS[6])["cells"] if c["cell_type"] == "code"
                and "print(inspect.getsource(" in _source(c))
    text = "".join(cell["outputs"][0]["text"])
    line = next(l for l in text.splitlines() if l.strip().startswith("return"))
    cell["outputs"][0]["text"] = text.replace(line, line + "  # edited")
    assert _stale_listing_lines(cell, library) == [line + "  # edited"]
