"""Execute notebooks headless the way the tests do (shared by record_notebook / run_course),
and the record format the committed notebooks use (checked by tests/test_notebook_records.py)."""
from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from traitlets.config import Config

KERNEL = "mindspore-course"
RECORD_KEY = "course"               # cell.metadata[RECORD_KEY]["source_sha1"], nb-level "scale"
# Other keys under RECORD_KEY (the "exercise" marks of tools/mark_exercises.py) are kept.
# Outputs a static page cannot show (live widgets): the headless run already draws a picture.
DROP_MIMES = ("application/vnd.jupyter.widget-view+json",)


def source_sha1(source: str) -> str:
    """The staleness stamp of a code cell: its source, as recorded."""
    return hashlib.sha1(source.encode("utf-8")).hexdigest()[:16]


def execute(path: Path, timeout: int = 1800, scale: str | None = None
            ) -> tuple[nbformat.NotebookNode, float]:
    """Run every cell in the notebook's own folder (at ``COURSE_SCALE=scale`` when given);
    return the executed notebook and seconds."""
    nb = nbformat.read(path, as_version=4)
    if scale:
        os.environ["COURSE_SCALE"] = scale      # the kernel inherits this process's environment
    # The current interpreter's kernel, like pytest --nbval-current-env. It talks to this
    # process over IPC (Unix sockets in a private temporary folder), not TCP: the kernel is
    # local, and over TCP ipykernel warns at every start that the traffic is unencrypted
    # ("... susceptible to eavesdropping"), once per notebook of `make course`. The socket
    # path is absolute because the kernel runs in the notebook's folder, not in ours.
    with tempfile.TemporaryDirectory(prefix="nbexec-") as sockets:
        config = Config()
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = os.path.join(sockets, "kernel")
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", config=config,
                                resources={"metadata": {"path": str(path.parent)}})
        start = time.perf_counter()
        client.execute()
        return nb, time.perf_counter() - start


def _clean_outputs(outputs: list) -> list:
    """Drop the MIME types the book does not keep; join consecutive chunks of one stream
    (a print whose text and newline reached the kernel apart is one output, as JupyterLab
    shows it, not a stray empty line)."""
    kept = []
    for out in outputs:
        data = out.get("data")
        if data:
            for mime in DROP_MIMES:
                data.pop(mime, None)
            if not data:
                continue
        if (out.get("output_type") == "stream" and kept and kept[-1].get("output_type") == "stream"
                and kept[-1].get("name") == out.get("name")):
            kept[-1]["text"] = _text(kept[-1]["text"]) + _text(out["text"])
            continue
        kept.append(out)
    return kept


def _text(text) -> str:
    return "".join(text) if isinstance(text, list) else text


def stamp_record(nb: nbformat.NotebookNode, scale: str) -> nbformat.NotebookNode:
    """Keep every output of the run (pictures, tables, listings, generated text) so the book
    reads without running; stamp each code cell with the hash of the source that produced it."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = _clean_outputs(cell.outputs)
        cell.metadata.pop("execution", None)
        cell.metadata.setdefault(RECORD_KEY, {})["source_sha1"] = source_sha1(cell.source)
    nb.metadata.pop("widgets", None)
    nb.metadata.setdefault(RECORD_KEY, {})["scale"] = scale
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "MindSpore 课程 (Python 3.11)",
                                 "language": "python"}
    return nb
