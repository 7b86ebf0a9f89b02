"""Execute notebooks headless the way the tests do (shared by record_notebook / run_course)."""
from __future__ import annotations

import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNEL = "mindspore-course"
CHECK_TAG = "nbval-check-output"   # nbval reads cell tags; learners never see them


def execute(path: Path, timeout: int = 1800) -> tuple[nbformat.NotebookNode, float]:
    """Run every cell in the notebook's own folder; return the executed notebook and seconds."""
    nb = nbformat.read(path, as_version=4)
    # The current interpreter's kernel, like pytest --nbval-current-env.
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - start


def keep_checked_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Outputs are stored only for cells that nbval checks: everything else would be
    machine-dependent noise (timings, losses, pictures) in the repository."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        # nbval refuses a checked cell with outputs but no execution count; counts are
        # deterministic anyway (cells run top to bottom), so checked cells keep theirs.
        if CHECK_TAG not in cell.metadata.get("tags", []):
            cell.execution_count = None
            cell.outputs = []
        cell.metadata.pop("execution", None)
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "MindSpore 课程 (Python 3.11)",
                                 "language": "python"}
    return nb
